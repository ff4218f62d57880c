#include "source/common/buffer/buffer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/socket.h>
#include <sys/uio.h>

#include "source/common/memory/idle_cache.h"
#include "source/common/memory/slab.h"

namespace sluice {
namespace buffer {

namespace {

// Small blocks come from the slabs (a burst of request heads in flight leaves no holes in the
// heap between long-lived objects), standard ones from the heap.
void freeBlock(Block* b) {
  if (b->capacity == kSmallBlockSize) {
    memory::slabFree(b, sizeof(Block) + kSmallBlockSize);
  } else {
    free(b);
  }
}

struct FreeList final : memory::IdleCache {
  Block* head = nullptr;
  uint32_t count = 0;
  // The fewest blocks the list held since the last releaseIdle(): that many stayed unused.
  uint32_t low = 0;
  ~FreeList() override {
    while (head != nullptr) {
      Block* next = head->next;
      freeBlock(head);
      head = next;
    }
  }
  Block* pop() {
    Block* b = head;
    head = b->next;
    --count;
    low = std::min(low, count);
    return b;
  }
  size_t releaseIdle() override {
    size_t released = 0;
    for (uint32_t n = low; n > 0 && head != nullptr; --n, ++released) {
      Block* b = head;
      head = b->next;
      --count;
      freeBlock(b);
    }
    low = count;
    return released;
  }
  bool push(Block* b, uint32_t max) {
    if (count >= max) return false;
    b->next = head;
    head = b;
    ++count;
    return true;
  }
};

thread_local FreeList t_free;        // standard blocks
thread_local FreeList t_free_small;  // small blocks
thread_local int64_t t_outstanding = 0;

Block* newBlock(uint32_t capacity) {
  void* mem = capacity == kSmallBlockSize
                  ? memory::slabAllocate(sizeof(Block) + capacity, memory::SlabSet::Passing)
                  : malloc(sizeof(Block) + capacity);
  if (mem == nullptr) throw std::bad_alloc();
  Block* b = static_cast<Block*>(mem);
  b->capacity = capacity;
  return b;
}

// The first n blocks of the free list, left in it (allocated onto it when it holds fewer), so
// that a read can offer them all and take out only those it filled.
void peekFree(Block** out, int n) {
  while (t_free.count < static_cast<uint32_t>(n)) {
    Block* b = newBlock(kBlockSize);
    b->next = t_free.head;
    t_free.head = b;
    ++t_free.count;
  }
  Block* b = t_free.head;
  for (int i = 0; i < n; ++i, b = b->next) out[i] = b;
}

// Takes the first n blocks off the free list (those peekFree() showed, in order).
void takeFree(int n) {
  for (int i = 0; i < n; ++i) {
    Block* b = t_free.head;
    t_free.head = b->next;
    b->next = nullptr;
    b->start = 0;
  }
  t_free.count -= static_cast<uint32_t>(n);
  t_free.low = std::min(t_free.low, t_free.count);
  t_outstanding += n;
}

}  // namespace

Block* BlockPool::acquire(uint32_t min_capacity) {
  Block* b;
  if (min_capacity <= kBlockSize && t_free.head != nullptr) {
    b = t_free.pop();
  } else {
    b = newBlock(std::max(min_capacity, kBlockSize));
  }
  b->next = nullptr;
  b->start = 0;
  b->end = 0;
  ++t_outstanding;
  return b;
}

Block* BlockPool::acquireSmall() {
  Block* b = t_free_small.head != nullptr ? t_free_small.pop() : newBlock(kSmallBlockSize);
  b->next = nullptr;
  b->start = 0;
  b->end = 0;
  ++t_outstanding;
  return b;
}

void BlockPool::release(Block* block) {
  --t_outstanding;
  if (block->capacity == kBlockSize && t_free.push(block, kMaxFree)) return;
  if (block->capacity == kSmallBlockSize && t_free_small.push(block, kMaxFreeSmall)) return;
  freeBlock(block);
}

int64_t BlockPool::outstanding() { return t_outstanding; }

size_t BlockPool::freeBlocks() { return t_free.count + t_free_small.count; }

void Buffer::append(Block* block) {
  block->next = nullptr;
  if (tail_ == nullptr) {
    head_ = tail_ = block;
  } else {
    tail_->next = block;
    tail_ = block;
  }
  length_ += block->readable();
}

void Buffer::dropFront() {
  Block* b = head_;
  head_ = b->next;
  if (head_ == nullptr) tail_ = nullptr;
  BlockPool::release(b);
}

void Buffer::addSlow(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (tail_ == nullptr || tail_->writable() == 0) append(BlockPool::acquire(kBlockSize));
    uint32_t take = static_cast<uint32_t>(std::min<size_t>(n, tail_->writable()));
    memcpy(tail_->data() + tail_->end, p, take);
    tail_->end += take;
    length_ += take;
    p += take;
    n -= take;
  }
}

void Buffer::move(Buffer& other) {
  if (other.head_ == nullptr) return;
  if (tail_ != nullptr && other.length_ <= kCoalesceBytes && tail_->writable() >= other.length_) {
    for (Block* b = other.head_; b != nullptr; b = b->next) {
      memcpy(tail_->data() + tail_->end, b->data() + b->start, b->readable());
      tail_->end += b->readable();
    }
    length_ += other.length_;
    other.clear();
    return;
  }
  if (tail_ == nullptr) {
    head_ = other.head_;
  } else {
    tail_->next = other.head_;
  }
  tail_ = other.tail_;
  length_ += other.length_;
  other.head_ = other.tail_ = nullptr;
  other.length_ = 0;
}

void Buffer::move(Buffer& other, size_t n) {
  n = std::min(n, other.length_);
  if (n == other.length_) {
    move(other);
    return;
  }
  while (n > 0) {
    Block* b = other.head_;
    if (b->readable() <= n) {
      n -= b->readable();
      other.length_ -= b->readable();
      other.head_ = b->next;
      if (other.head_ == nullptr) other.tail_ = nullptr;
      append(b);
    } else {
      add(b->data() + b->start, n);
      other.drain(n);
      n = 0;
    }
  }
}

void Buffer::drain(size_t n) {
  n = std::min(n, length_);
  length_ -= n;
  while (n > 0) {
    uint32_t r = head_->readable();
    if (r <= n) {
      n -= r;
      dropFront();
    } else {
      head_->start += static_cast<uint32_t>(n);
      n = 0;
    }
  }
  // Keep fully-read blocks from lingering at the front.
  while (head_ != nullptr && head_->readable() == 0) dropFront();
}

void Buffer::clear() {
  while (head_ != nullptr) dropFront();
  length_ = 0;
}

std::string_view Buffer::front() const {
  if (head_ == nullptr) return {};
  return {head_->data() + head_->start, head_->readable()};
}

std::string_view Buffer::linearize(size_t n, size_t reserve) {
  n = std::min(n, length_);
  if (n == 0) return {};
  if (head_->readable() >= n) return {head_->data() + head_->start, n};
  // Gather the first n bytes into one block that replaces the blocks they came from.
  Block* joined = BlockPool::acquire(static_cast<uint32_t>(std::max(n, reserve)));
  size_t copied = 0;
  while (copied < n) {
    Block* b = head_;
    uint32_t take = static_cast<uint32_t>(std::min<size_t>(b->readable(), n - copied));
    memcpy(joined->data() + copied, b->data() + b->start, take);
    copied += take;
    b->start += take;
    if (b->readable() == 0) {
      head_ = b->next;
      if (head_ == nullptr) tail_ = nullptr;
      BlockPool::release(b);
    }
  }
  joined->end = static_cast<uint32_t>(n);
  joined->next = head_;
  head_ = joined;
  if (tail_ == nullptr) tail_ = joined;
  return {joined->data(), n};
}

Buffer::Reservation Buffer::reserve() {
  if (tail_ != nullptr && tail_->writable() > 0) {
    return {tail_, tail_->data() + tail_->end, tail_->writable()};
  }
  Block* fresh = BlockPool::acquire(kBlockSize);
  return {fresh, fresh->data(), fresh->capacity};
}

void Buffer::commit(const Reservation& reservation, size_t n) {
  Block* b = reservation.block;
  if (b == tail_) {
    b->end += static_cast<uint32_t>(n);
    length_ += n;
    return;
  }
  if (n == 0) {
    BlockPool::release(b);
    return;
  }
  b->end = static_cast<uint32_t>(n);
  append(b);
}

Buffer::Reservation Buffer::reserveRead(bool small_first) {
  if (tail_ != nullptr && tail_->writable() >= kSmallBlockSize) {
    return {tail_, tail_->data() + tail_->end, tail_->writable()};
  }
  Block* fresh =
      small_first && head_ == nullptr ? BlockPool::acquireSmall() : BlockPool::acquire(kBlockSize);
  return {fresh, fresh->data(), fresh->capacity};
}

unsigned Buffer::slices(iovec* iov, unsigned max, size_t& bytes) const {
  unsigned n = 0;
  bytes = 0;
  for (Block* b = head_; b != nullptr && n < max; b = b->next) {
    if (b->readable() == 0) continue;
    iov[n].iov_base = b->data() + b->start;
    iov[n].iov_len = b->readable();
    bytes += b->readable();
    ++n;
  }
  return n;
}

ssize_t Buffer::readFrom(int fd, size_t max, int& err, size_t& asked, bool small_first,
                         bool one_region) {
  // The tail's free space (or, with small_first and an empty buffer, a small block: a short
  // message held for a while, such as a request head waiting for its destination, keeps 1 KiB,
  // not a standard block), then up to kMaxFreshBlocks fresh blocks: a bulk transfer moves up to
  // 64 KiB per system call. The fresh blocks stay in the free list until the read has filled
  // them: a short read (most of them) takes out one block, not four to give three back.
  constexpr int kMaxFreshBlocks = 4;
  iovec iov[1 + kMaxFreshBlocks];
  Block* fresh[kMaxFreshBlocks];
  int iovcnt = 0;
  int nfresh = 0;
  size_t room = 0;
  Block* small = nullptr;
  const bool use_tail = tail_ != nullptr && tail_->writable() > 0;
  // A tail with little room would only make the one read come up full.
  if (use_tail && tail_->writable() < kSmallBlockSize) one_region = false;
  if (use_tail) {
    iov[0].iov_base = tail_->data() + tail_->end;
    iov[0].iov_len = std::min<size_t>(tail_->writable(), max);
    room = iov[0].iov_len;
    iovcnt = 1;
  } else if (small_first && head_ == nullptr && max > 0) {
    small = BlockPool::acquireSmall();
    iov[0].iov_base = small->data();
    iov[0].iov_len = std::min<size_t>(small->capacity, max);
    room = iov[0].iov_len;
    iovcnt = 1;
  }
  if (room < max && !(one_region && iovcnt == 1)) {
    nfresh = static_cast<int>(
        std::min<size_t>(kMaxFreshBlocks, (max - room + kBlockSize - 1) / kBlockSize));
    if (one_region) nfresh = 1;
    peekFree(fresh, nfresh);
    for (int i = 0; i < nfresh; ++i) {
      iov[iovcnt].iov_base = fresh[i]->data();
      iov[iovcnt].iov_len = std::min<size_t>(kBlockSize, max - room);
      room += iov[iovcnt].iov_len;
      ++iovcnt;
    }
  }
  asked = room;
  ssize_t rc =
      iovcnt == 1 ? ::recv(fd, iov[0].iov_base, iov[0].iov_len, 0) : ::readv(fd, iov, iovcnt);
  if (rc < 0) err = errno;
  size_t got = rc > 0 ? static_cast<size_t>(rc) : 0;
  if (use_tail) {
    size_t in_tail = std::min(got, iov[0].iov_len);
    tail_->end += static_cast<uint32_t>(in_tail);
    length_ += in_tail;
    got -= in_tail;
  } else if (small != nullptr) {
    const size_t in_small = std::min(got, iov[0].iov_len);
    if (in_small > 0) {
      small->end = static_cast<uint32_t>(in_small);
      append(small);
      got -= in_small;
    } else {
      BlockPool::release(small);
    }
  }
  int filled = 0;
  while (filled < nfresh && got > 0) {
    const size_t in_block = std::min<size_t>(got, kBlockSize);
    fresh[filled++]->end = static_cast<uint32_t>(in_block);
    got -= in_block;
  }
  takeFree(filled);
  for (int i = 0; i < filled; ++i) append(fresh[i]);
  return rc;
}

ssize_t Buffer::writeTo(int fd, int& err, size_t& asked) {
  constexpr unsigned kMaxIov = 64;
  iovec iov[kMaxIov];
  const unsigned n = slices(iov, kMaxIov, asked);
  if (n == 0) return 0;
  ssize_t rc = n == 1 ? ::send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL)
                      : ::writev(fd, iov, static_cast<int>(n));
  if (rc < 0) {
    err = errno;
    return rc;
  }
  drain(static_cast<size_t>(rc));
  return rc;
}

}  // namespace buffer
}  // namespace sluice
