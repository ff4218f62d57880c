#include "source/common/buffer/buffer.h"

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/memory/idle_cache.h"

namespace sluice {
namespace buffer {
namespace {

// Bytes that differ by position, so a misplaced or dropped block shows up in a comparison.
std::string pattern(size_t n, size_t seed = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + seed) % 26);
  return s;
}

// The whole content, read through linearize (which also exercises the gather path).
std::string contents(Buffer& b) { return std::string(b.linearize(b.length())); }

// The content read block by block through front()/drain(), leaving b empty.
std::string drainAll(Buffer& b) {
  std::string out;
  while (!b.empty()) {
    std::string_view f = b.front();
    EXPECT_FALSE(f.empty());
    if (f.empty()) break;
    out.append(f);
    b.drain(f.size());
  }
  return out;
}

class BufferTest : public testing::Test {
 protected:
  void SetUp() override { start_ = BlockPool::outstanding(); }
  int64_t held() const { return BlockPool::outstanding() - start_; }
  int64_t start_ = 0;
};

TEST_F(BufferTest, EmptyBufferHoldsNothing) {
  Buffer b;
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(0u, b.length());
  EXPECT_TRUE(b.front().empty());
  EXPECT_TRUE(b.linearize(100).empty());
  b.drain(10);  // draining an empty buffer is a no-op
  b.add("", 0);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, AddSmall) {
  Buffer b;
  b.add("hello");
  b.add(std::string_view(" world"));
  EXPECT_EQ(11u, b.length());
  EXPECT_EQ(1, held());
  EXPECT_EQ("hello world", b.front());
  b.drain(6);
  EXPECT_EQ("world", b.front());
  b.drain(5);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, AddAcrossThreeBlocks) {
  const std::string data = pattern(2 * kBlockSize + 100);
  Buffer b;
  b.add(data);
  EXPECT_EQ(data.size(), b.length());
  EXPECT_EQ(3, held());
  EXPECT_EQ(kBlockSize, b.front().size());
  EXPECT_EQ(data, drainAll(b));
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, AddFillsTailBeforeTakingABlock) {
  Buffer b;
  b.add(pattern(kBlockSize - 1));
  EXPECT_EQ(1, held());
  b.add("x");  // exactly fills the first block
  EXPECT_EQ(1, held());
  b.add("y");
  EXPECT_EQ(2, held());
  std::string expected = pattern(kBlockSize - 1) + "xy";
  EXPECT_EQ(expected, contents(b));
}

TEST_F(BufferTest, SizesAroundBlockSize) {
  for (size_t n : {size_t{kBlockSize} - 1, size_t{kBlockSize}, size_t{kBlockSize} + 1,
                   size_t{2 * kBlockSize}, size_t{3 * kBlockSize} + 1}) {
    SCOPED_TRACE(n);
    const std::string data = pattern(n, n);
    Buffer b;
    b.add(data);
    EXPECT_EQ(n, b.length());
    EXPECT_EQ(static_cast<int64_t>((n + kBlockSize - 1) / kBlockSize), held());
    EXPECT_EQ(data, contents(b));
    b.clear();
    EXPECT_EQ(0u, b.length());
    EXPECT_EQ(0, held());
  }
}

TEST_F(BufferTest, DrainAcrossBlocks) {
  const std::string data = pattern(3 * kBlockSize + 10);
  Buffer b;
  b.add(data);
  EXPECT_EQ(4, held());
  b.drain(kBlockSize + 5);  // one whole block and part of the next
  EXPECT_EQ(data.size() - kBlockSize - 5, b.length());
  EXPECT_EQ(3, held());
  EXPECT_EQ(kBlockSize - 5, b.front().size());
  b.drain(kBlockSize - 5);  // exactly to a block boundary: no empty block lingers in front
  EXPECT_EQ(2, held());
  EXPECT_EQ(data.substr(2 * kBlockSize), contents(b));
  b.drain(1000000);  // more than held: drains everything
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, MoveAllRelinksBlocks) {
  const std::string a = pattern(kBlockSize + 3, 1);
  const std::string c = pattern(2 * kBlockSize + 7, 2);
  Buffer dst;
  Buffer src;
  dst.add(a);
  src.add(c);
  const int64_t blocks = held();
  const char* first_src_byte = src.front().data();
  dst.move(src);
  EXPECT_TRUE(src.empty());
  EXPECT_TRUE(src.front().empty());
  EXPECT_EQ(a.size() + c.size(), dst.length());
  EXPECT_EQ(blocks, held());  // no copy, no new block
  dst.drain(a.size());
  EXPECT_EQ(first_src_byte, dst.front().data());  // the very same memory
  EXPECT_EQ(c, contents(dst));

  // The source stays usable after being moved out of.
  src.add("again");
  EXPECT_EQ("again", contents(src));
}

TEST_F(BufferTest, MoveIntoEmptyAndFromEmpty) {
  Buffer dst;
  Buffer src;
  dst.move(src);
  EXPECT_TRUE(dst.empty());
  src.add("abc");
  dst.move(src);
  EXPECT_EQ("abc", contents(dst));
  EXPECT_TRUE(src.empty());
  dst.move(src, 10);
  EXPECT_EQ(3u, dst.length());
  // Appending after a move goes to the moved-in tail.
  dst.add("def");
  EXPECT_EQ("abcdef", contents(dst));
}

TEST_F(BufferTest, MovePartialAcrossBlocks) {
  const std::string data = pattern(3 * kBlockSize + 50, 3);
  Buffer src;
  Buffer dst;
  dst.add("head:");
  src.add(data);
  const size_t n = 2 * kBlockSize + 20;  // two whole blocks relinked, 20 bytes copied
  dst.move(src, n);
  EXPECT_EQ(5 + n, dst.length());
  EXPECT_EQ(data.size() - n, src.length());
  EXPECT_EQ(data.substr(n), contents(src));
  EXPECT_EQ("head:" + data.substr(0, n), contents(dst));
}

TEST_F(BufferTest, MovePartialInsideFirstBlock) {
  Buffer src;
  Buffer dst;
  src.add("0123456789");
  dst.move(src, 4);
  EXPECT_EQ("0123", contents(dst));
  EXPECT_EQ("456789", contents(src));
  dst.move(src, 0);
  EXPECT_EQ(4u, dst.length());
  EXPECT_EQ(6u, src.length());
  dst.move(src, 100);  // more than src holds: all of it
  EXPECT_EQ("0123456789", contents(dst));
  EXPECT_TRUE(src.empty());
}

TEST_F(BufferTest, MovePartialExactlyAtBlockBoundary) {
  const std::string data = pattern(2 * kBlockSize + 1);
  Buffer src;
  Buffer dst;
  src.add(data);
  dst.move(src, kBlockSize);
  EXPECT_EQ(kBlockSize, dst.length());
  EXPECT_EQ(kBlockSize + 1, src.length());
  EXPECT_EQ(3, held());  // relinked, not copied
  EXPECT_EQ(data.substr(0, kBlockSize), contents(dst));
  EXPECT_EQ(data.substr(kBlockSize), contents(src));
}

TEST_F(BufferTest, LinearizeWithinFirstBlockDoesNotCopy) {
  Buffer b;
  b.add(pattern(kBlockSize + 10));
  const char* before = b.front().data();
  std::string_view v = b.linearize(100);
  EXPECT_EQ(before, v.data());
  EXPECT_EQ(100u, v.size());
  EXPECT_EQ(2, held());
}

TEST_F(BufferTest, LinearizeAcrossThreeBlocks) {
  const std::string data = pattern(3 * kBlockSize + 100, 5);
  Buffer b;
  b.add(data);
  b.drain(10);                           // an offset first block
  const size_t n = 2 * kBlockSize + 50;  // larger than one block: an oversized joined block
  std::string_view v = b.linearize(n);
  ASSERT_EQ(n, v.size());
  EXPECT_EQ(data.substr(10, n), v);
  EXPECT_EQ(data.size() - 10, b.length());
  EXPECT_EQ(v.data(), b.front().data());
  EXPECT_EQ(data.substr(10), contents(b));
  // Adding after a linearize appends at the end, not into the joined block.
  b.add("tail");
  EXPECT_EQ(data.substr(10) + "tail", contents(b));
  b.clear();
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, LinearizeEverythingThenAdd) {
  Buffer b;
  b.add(pattern(kBlockSize - 10, 1));
  b.add(pattern(30, 2));  // spills 20 bytes into a second block
  ASSERT_EQ(2, held());
  std::string_view v = b.linearize(b.length());
  EXPECT_EQ(kBlockSize + 20, v.size());
  EXPECT_EQ(1, held());  // the joined block replaces both
  b.add("more");
  EXPECT_EQ(pattern(kBlockSize - 10, 1) + pattern(30, 2) + "more", contents(b));
  b.clear();
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, LinearizeSmallSpanUsesPooledBlock) {
  const std::string p = pattern(kBlockSize - 2, 1);
  Buffer b;
  b.add(p);
  b.add("xyz1");  // "xy" fills the first block, "z1" starts a second
  ASSERT_EQ(2, held());
  b.drain(kBlockSize - 3);  // leaves 3 bytes in the first block
  std::string_view v = b.linearize(5);
  EXPECT_EQ(p.substr(kBlockSize - 3) + "xyz1", v);
  EXPECT_EQ(1, held());  // both emptied blocks went back, one pooled block joined them
  EXPECT_EQ(5u, b.length());
  b.clear();
  EXPECT_EQ(0, held());
}

TEST_F(BufferTest, LinearizeMoreThanLength) {
  Buffer b;
  b.add("abc");
  EXPECT_EQ("abc", b.linearize(1000));
}

TEST_F(BufferTest, EmptiedBufferReturnsEveryBlock) {
  {
    Buffer a;
    Buffer c;
    a.add(pattern(5 * kBlockSize + 3));
    c.move(a, 2 * kBlockSize + 1);
    c.linearize(c.length());
    a.drain(kBlockSize);
    c.move(a);
    EXPECT_GT(held(), 0);
    c.drain(c.length());
    EXPECT_TRUE(c.empty());
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(0, held());
    c.add("x");
    EXPECT_EQ(1, held());
  }  // destructor returns the last block
  EXPECT_EQ(0, held());
}

// Random operations against a std::string model.
TEST_F(BufferTest, ReleaseIdleFreesOnlyBlocksLeftUnusedSinceTheLastRelease) {
  memory::releaseIdleCaches();
  memory::releaseIdleCaches();
  ASSERT_EQ(BlockPool::freeBlocks(), 0u) << "two releases in a row leave nothing idle";
  // A burst: eight blocks in use, then back in the free list.
  {
    Block* blocks[8];
    for (Block*& b : blocks) b = BlockPool::acquire(kBlockSize);
    for (Block* b : blocks) BlockPool::release(b);
  }
  EXPECT_EQ(BlockPool::freeBlocks(), 8u);
  // The first release after the burst: they were in use since the last one, so they stay.
  EXPECT_EQ(memory::releaseIdleCaches(), 0u);
  EXPECT_EQ(BlockPool::freeBlocks(), 8u);
  // Three of them taken and given back meanwhile: the five never touched go.
  {
    Block* blocks[3];
    for (Block*& b : blocks) b = BlockPool::acquire(kBlockSize);
    for (Block* b : blocks) BlockPool::release(b);
  }
  EXPECT_EQ(memory::releaseIdleCaches(), 5u);
  EXPECT_EQ(BlockPool::freeBlocks(), 3u);
  // Nothing taken since: the rest go.
  EXPECT_EQ(memory::releaseIdleCaches(), 3u);
  EXPECT_EQ(BlockPool::freeBlocks(), 0u);
  EXPECT_EQ(held(), 0);
}

TEST_F(BufferTest, RandomizedAgainstStringModel) {
  std::mt19937 rng(20240607);
  auto size = [&](size_t max) { return std::uniform_int_distribution<size_t>(0, max)(rng); };
  // Sizes biased to land on and near block boundaries.
  auto interesting = [&]() -> size_t {
    switch (size(4)) {
      case 0:
        return size(16);
      case 1:
        return kBlockSize - 8 + size(16);
      case 2:
        return 2 * kBlockSize - 8 + size(16);
      default:
        return size(3 * kBlockSize);
    }
  };
  Buffer bufs[2];
  std::string model[2];
  size_t seed = 0;
  for (int step = 0; step < 3000; ++step) {
    const int i = static_cast<int>(size(1));
    const int j = 1 - i;
    switch (size(5)) {
      case 0: {
        std::string data = pattern(interesting(), ++seed);
        bufs[i].add(data);
        model[i] += data;
        break;
      }
      case 1: {
        size_t n = interesting();
        bufs[i].drain(n);
        model[i].erase(0, std::min(n, model[i].size()));
        break;
      }
      case 2: {
        size_t n = interesting();
        bufs[i].move(bufs[j], n);
        n = std::min(n, model[j].size());
        model[i] += model[j].substr(0, n);
        model[j].erase(0, n);
        break;
      }
      case 3: {
        bufs[i].move(bufs[j]);
        model[i] += model[j];
        model[j].clear();
        break;
      }
      case 4: {
        size_t n = interesting();
        std::string_view v = bufs[i].linearize(n);
        ASSERT_EQ(model[i].substr(0, n), v) << "step " << step;
        break;
      }
      default: {
        std::string_view f = bufs[i].front();
        ASSERT_EQ(model[i].empty(), f.empty()) << "step " << step;
        ASSERT_EQ(model[i].substr(0, f.size()), f) << "step " << step;
        break;
      }
    }
    ASSERT_EQ(model[0].size(), bufs[0].length()) << "step " << step;
    ASSERT_EQ(model[1].size(), bufs[1].length()) << "step " << step;
    if (step % 50 == 0) {
      ASSERT_EQ(model[i], contents(bufs[i])) << "step " << step;
    }
  }
  for (int k = 0; k < 2; ++k) EXPECT_EQ(model[k], drainAll(bufs[k]));
  EXPECT_EQ(0, held());
}

class BufferSocketTest : public BufferTest {
 protected:
  void SetUp() override {
    BufferTest::SetUp();
    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds_));
  }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int fds_[2] = {-1, -1};
};

TEST_F(BufferTest, ASmallMoveIsCopiedIntoTheTailAndALargeOneRelinked) {
  Buffer head;
  head.add("HTTP/1.1 200 OK\r\n\r\n");
  Buffer body;
  body.add(pattern(1024));
  EXPECT_EQ(2, held());
  head.move(body);
  EXPECT_TRUE(body.empty());
  EXPECT_EQ(1, held());  // one slice: the body's block went back
  EXPECT_EQ("HTTP/1.1 200 OK\r\n\r\n" + pattern(1024), contents(head));
  Buffer large;
  large.add(pattern(Buffer::kCoalesceBytes + 1, 3));
  head.move(large);
  EXPECT_EQ(2, held());  // relinked, not copied
  // Nor is a small one copied into a tail without room for it.
  Buffer full;
  full.add(pattern(kBlockSize));
  Buffer small;
  small.add("x");
  full.move(small);
  EXPECT_EQ(4, held());
  EXPECT_EQ(pattern(kBlockSize) + "x", contents(full));
}

TEST_F(BufferSocketTest, ReadFromEmptyNonBlockingSocketIsEagain) {
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(-1, b.readFrom(fds_[0], 4096, err, asked));
  EXPECT_TRUE(err == EAGAIN || err == EWOULDBLOCK);
  EXPECT_EQ(4096u, asked);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(0, held());  // the fresh block went back
}

TEST_F(BufferSocketTest, ReadFromEofReturnsZero) {
  ASSERT_EQ(3, ::write(fds_[1], "abc", 3));
  ::shutdown(fds_[1], SHUT_WR);
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(3, b.readFrom(fds_[0], 4096, err, asked));
  EXPECT_EQ(4096u, asked);  // a short read: the socket is empty
  EXPECT_EQ("abc", contents(b));
  EXPECT_EQ(0, b.readFrom(fds_[0], 4096, err, asked));
  EXPECT_EQ(3u, b.length());
  EXPECT_EQ(1, held());
}

TEST_F(BufferSocketTest, ReadFromBadFdReportsErrno) {
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(-1, b.readFrom(-1, 100, err, asked));
  EXPECT_EQ(EBADF, err);
  EXPECT_EQ(100u, asked);
  EXPECT_EQ(0, held());
  asked = 99;
  EXPECT_EQ(0, b.writeTo(-1, err, asked));  // nothing to write: 0 without a syscall
  EXPECT_EQ(0u, asked);
  b.add("x");
  err = 0;
  EXPECT_EQ(-1, b.writeTo(-1, err, asked));
  EXPECT_EQ(EBADF, err);
  EXPECT_EQ(1u, asked);
  EXPECT_EQ(1u, b.length());  // nothing drained on error
}

TEST_F(BufferSocketTest, ReadFillsTailThenFreshBlock) {
  Buffer b;
  b.add(pattern(kBlockSize - 10));
  const std::string data = pattern(100, 9);
  ASSERT_EQ(100, ::write(fds_[1], data.data(), data.size()));
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(100, b.readFrom(fds_[0], 1000, err, asked));
  EXPECT_EQ(1000u, asked);  // 10 into the tail, 990 into a fresh block
  EXPECT_EQ(kBlockSize + 90, b.length());
  EXPECT_EQ(2, held());
  EXPECT_EQ(pattern(kBlockSize - 10) + data, contents(b));
}

TEST_F(BufferSocketTest, ReadRespectsMax) {
  const std::string data = pattern(500);
  ASSERT_EQ(500, ::write(fds_[1], data.data(), data.size()));
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(100, b.readFrom(fds_[0], 100, err, asked));
  EXPECT_EQ(100u, asked);  // not short: more may be waiting
  EXPECT_EQ(100u, b.length());
  // The tail has room: a small max is served from it alone.
  EXPECT_EQ(50, b.readFrom(fds_[0], 50, err, asked));
  EXPECT_EQ(50u, asked);
  EXPECT_EQ(1, held());
  // A large max: the tail's free space plus up to four fresh blocks (64 KiB a call).
  EXPECT_EQ(350, b.readFrom(fds_[0], 100000, err, asked));
  EXPECT_EQ(size_t{kBlockSize} - 150 + 4 * kBlockSize, asked);
  EXPECT_EQ(1, held());  // all 350 fitted the tail: the fresh blocks went back
  EXPECT_EQ(data, contents(b));
}

TEST_F(BufferSocketTest, OneRegionReadsIntoOneBlockAndAFullOneIsFollowedByTheRest) {
  const std::string data = pattern(3 * kBlockSize);
  ASSERT_EQ(static_cast<ssize_t>(data.size()), ::write(fds_[1], data.data(), data.size()));
  Buffer b;
  int err = 0;
  size_t asked = 0;
  // One fresh block, not four: the read comes up full, so more may be waiting.
  EXPECT_EQ(static_cast<ssize_t>(kBlockSize),
            b.readFrom(fds_[0], 4 * kBlockSize, err, asked, false, true));
  EXPECT_EQ(size_t{kBlockSize}, asked);
  EXPECT_EQ(1, held());
  // The tail is full: an ordinary read takes the rest into fresh blocks.
  EXPECT_EQ(static_cast<ssize_t>(2 * kBlockSize), b.readFrom(fds_[0], 4 * kBlockSize, err, asked));
  EXPECT_EQ(size_t{4} * kBlockSize, asked);
  EXPECT_EQ(data, contents(b));
}

TEST_F(BufferSocketTest, OneRegionReadsASmallFirstMessageIntoTheSmallBlockOnly) {
  ASSERT_EQ(100, ::write(fds_[1], pattern(100).data(), 100));
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(100, b.readFrom(fds_[0], 4 * kBlockSize, err, asked, true, true));
  EXPECT_EQ(size_t{kSmallBlockSize}, asked);  // short: the socket is empty
  EXPECT_EQ(pattern(100), contents(b));
  // A tail with less than a small block's room reads as usual (tail and fresh blocks).
  Buffer full;
  full.add(pattern(kBlockSize - 10));
  ASSERT_EQ(100, ::write(fds_[1], pattern(100).data(), 100));
  EXPECT_EQ(100, full.readFrom(fds_[0], 4 * kBlockSize, err, asked, false, true));
  EXPECT_EQ(10u + 3 * kBlockSize + (kBlockSize - 10), asked);
}

TEST_F(BufferSocketTest, OneReadFillsSeveralBlocks) {
  const std::string data = pattern(3 * kBlockSize + 10, 2);
  ASSERT_EQ(static_cast<ssize_t>(data.size()), ::write(fds_[1], data.data(), data.size()));
  Buffer b;
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(static_cast<ssize_t>(data.size()), b.readFrom(fds_[0], 1 << 20, err, asked));
  EXPECT_EQ(size_t{4} * kBlockSize, asked);  // short: the socket is empty
  EXPECT_EQ(4, held());                      // the fourth block holds the last 10 bytes
  EXPECT_EQ(data, contents(b));
}

TEST_F(BufferSocketTest, WriteToAndReadFromRoundTripLarge) {
  // Larger than a socket buffer: several writes and reads until all of it crossed.
  const std::string data = pattern(40 * kBlockSize + 123, 4);
  Buffer out;
  Buffer in;
  out.add(data);
  int rounds = 0;
  bool short_write = false;
  while ((!out.empty() || in.length() < data.size()) && rounds < 100000) {
    ++rounds;
    int err = 0;
    size_t asked = 0;
    if (!out.empty()) {
      ssize_t w = out.writeTo(fds_[1], err, asked);
      if (w < 0) {
        ASSERT_TRUE(err == EAGAIN || err == EWOULDBLOCK) << err;
      } else if (static_cast<size_t>(w) < asked) {
        short_write = true;
      }
    }
    ssize_t r = in.readFrom(fds_[0], 4 * kBlockSize, err, asked);
    if (r < 0) {
      ASSERT_TRUE(err == EAGAIN || err == EWOULDBLOCK) << err;
    }
    ASSERT_NE(0, r);  // no EOF: the writer is open
  }
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(data, contents(in));
  // A socketpair buffer is far smaller than 640 KiB: some write must have come up short.
  EXPECT_GT(rounds, 1);
  EXPECT_TRUE(short_write);
  in.clear();
  EXPECT_EQ(0, held());
}

TEST_F(BufferSocketTest, WriteToMoreThan64BlocksTakesSeveralCalls) {
  // Raise the send buffer so one writev could take it all; at most 64 blocks go per call.
  int big = 4 << 20;
  setsockopt(fds_[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  setsockopt(fds_[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  Buffer out;
  // 70 blocks, built by moving buffers too large to be copied into the tail.
  constexpr size_t kEach = Buffer::kCoalesceBytes + 1;
  for (int i = 0; i < 70; ++i) {
    Buffer one;
    one.add(std::string(kEach, static_cast<char>('A' + i % 26)));
    out.move(one);
  }
  EXPECT_EQ(70, held());
  int err = 0;
  size_t asked = 0;
  EXPECT_EQ(static_cast<ssize_t>(64 * kEach), out.writeTo(fds_[1], err, asked));
  // Only the 64 blocks offered count: a full write of them is not a short one.
  EXPECT_EQ(64 * kEach, asked);
  EXPECT_EQ(6 * kEach, out.length());
  EXPECT_EQ(static_cast<ssize_t>(6 * kEach), out.writeTo(fds_[1], err, asked));
  EXPECT_EQ(6 * kEach, asked);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(0, out.writeTo(fds_[1], err, asked));  // nothing left: 0, no syscall
}

TEST_F(BufferSocketTest, WriteToPartialDrainsOnlyWhatWasWritten) {
  int small = 4096;
  setsockopt(fds_[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  const std::string data = pattern(8 * kBlockSize, 6);
  Buffer out;
  out.add(data);
  int err = 0;
  size_t asked = 0;
  ssize_t w = out.writeTo(fds_[1], err, asked);
  ASSERT_GT(w, 0);
  ASSERT_LT(static_cast<size_t>(w), data.size());
  EXPECT_EQ(data.size(), asked);
  EXPECT_EQ(data.size() - static_cast<size_t>(w), out.length());
  EXPECT_EQ(data.substr(static_cast<size_t>(w)), contents(out));
  EXPECT_EQ(-1, out.writeTo(fds_[1], err, asked));
  EXPECT_TRUE(err == EAGAIN || err == EWOULDBLOCK);
}

// A growing head is joined once into a block with room to spare: later bytes land in that
// block, so the next linearize copies nothing.
TEST(BufferLinearizeReserve, LaterBytesLandInTheJoinedBlock) {
  Buffer b;
  std::string first(kBlockSize - 10, 'a');
  b.add(first);
  b.add(std::string(20, 'b'));  // spans two blocks
  std::string_view joined = b.linearize(b.length(), 64 * 1024);
  ASSERT_EQ(joined.size(), kBlockSize + 10);
  const char* start = joined.data();
  b.add(std::string(100, 'c'));
  std::string_view again = b.linearize(b.length(), 64 * 1024);
  EXPECT_EQ(again.data(), start) << "the joined block was copied again";
  EXPECT_EQ(again.size(), kBlockSize + 110);
  EXPECT_EQ(again.substr(kBlockSize + 10), std::string(100, 'c'));
}

// A decoder writes straight into the buffer: the tail's free space first, then a fresh block
// that joins the buffer only if something was written into it.
TEST(BufferReserve, FillsTheTailThenFreshBlocks) {
  const int64_t before = BlockPool::outstanding();
  {
    Buffer b;
    Buffer::Reservation r = b.reserve();
    ASSERT_GE(r.size, 1u);
    b.commit(r, 0);  // nothing written: no block kept
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(BlockPool::outstanding(), before);

    b.add("abc");
    r = b.reserve();
    EXPECT_EQ(r.size, kBlockSize - 3);  // the tail's room
    memcpy(r.data, "def", 3);
    b.commit(r, 3);
    EXPECT_EQ(b.length(), 6u);
    EXPECT_EQ(b.front(), "abcdef");

    b.add(std::string(kBlockSize - 6, 'x'));  // the tail is full now
    r = b.reserve();
    EXPECT_EQ(r.size, kBlockSize);
    memcpy(r.data, "tail", 4);
    b.commit(r, 4);
    EXPECT_EQ(b.length(), kBlockSize + 4);
    b.drain(kBlockSize);
    EXPECT_EQ(b.front(), "tail");
  }
  EXPECT_EQ(BlockPool::outstanding(), before);
}

}  // namespace
}  // namespace buffer
}  // namespace sluice
