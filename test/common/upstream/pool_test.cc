#include "source/common/upstream/pool.h"

#include <chrono>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "test/common/network/loopback.h"

namespace sluice {
namespace upstream {
namespace {

using network::Connection;
using network::ConnectionPtr;
using std::chrono::milliseconds;
using test::runFor;
using test::runUntil;

// One upstream connection as the pool sees it, plus the origin's end as a raw socket.
struct Upstream {
  ConnectionPtr conn;
  int origin_fd = -1;
};

class PoolTest : public testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    blocks_at_start_ = buffer::BlockPool::outstanding();
    ASSERT_TRUE(listener_a_.ok());
    ASSERT_TRUE(listener_b_.ok());
  }
  void TearDown() override {
    pool_.reset();
    runFor(dispatcher_, milliseconds(1));  // deferred deletes
    for (int fd : origin_fds_) ::close(fd);
    EXPECT_EQ(blocks_at_start_, buffer::BlockPool::outstanding());
  }

  void makePool(uint32_t max_idle, milliseconds idle_timeout = milliseconds(60000)) {
    pool_ = std::make_unique<Pool>(dispatcher_, max_idle, idle_timeout);
  }

  // A connected upstream to the listener's address (from `source`, if given); its callbacks are
  // the test's until released.
  Upstream connect(test::LoopbackListener& listener, const network::Address* source = nullptr) {
    Upstream u;
    u.conn = Connection::connectTo(dispatcher_, listener.address(), 1 << 30, source);
    EXPECT_NE(nullptr, u.conn);
    if (u.conn == nullptr) return u;
    u.conn->setCallbacks(&cb_);
    u.origin_fd = listener.accept();
    EXPECT_GE(u.origin_fd, 0);
    fcntl(u.origin_fd, F_SETFL, O_NONBLOCK);
    origin_fds_.push_back(u.origin_fd);
    Connection* c = u.conn.get();
    EXPECT_TRUE(runUntil(dispatcher_, [c] { return !c->connecting(); }));
    EXPECT_TRUE(u.conn->open());
    return u;
  }

  // True once the origin's socket reads EOF (the pool closed the connection).
  bool originSawClose(int fd) {
    char byte;
    ssize_t rc = ::read(fd, &byte, 1);
    return rc == 0 || (rc < 0 && errno == ECONNRESET);
  }
  bool waitOriginClosed(int fd) {
    return runUntil(dispatcher_, [&] { return originSawClose(fd); });
  }

  int64_t blocks_at_start_ = 0;
  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_a_;
  test::LoopbackListener listener_b_;
  test::RecordingCallbacks cb_;
  std::vector<int> origin_fds_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(PoolTest, EmptyPoolHasNothing) {
  makePool(4);
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  EXPECT_EQ(0u, pool_->idleCount());
}

TEST_F(PoolTest, ReleaseThenAcquireReturnsTheSameConnection) {
  makePool(4);
  Upstream u = connect(listener_a_);
  Connection* raw = u.conn.get();
  pool_->release(std::move(u.conn));
  EXPECT_EQ(1u, pool_->idleCount());
  EXPECT_EQ(nullptr, pool_->acquire(listener_b_.address()));  // another destination
  ConnectionPtr again = pool_->acquire(listener_a_.address());
  ASSERT_EQ(raw, again.get());
  EXPECT_EQ(0u, pool_->idleCount());
  EXPECT_EQ(nullptr, again->callbacks());  // the pool let go of it
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));

  // It still works: bytes reach the origin.
  again->setCallbacks(&cb_);
  buffer::Buffer b;
  b.add("GET");
  again->write(b);
  char buf[8];
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return ::read(u.origin_fd, buf, sizeof(buf)) == 3; }));
  again->close(network::CloseType::NoFlush);
}

TEST_F(PoolTest, ConnectionsFromOneSourceAreNeverHandedToAnother) {
  makePool(4);
  const network::Address two = *network::Address::parseIp("127.0.0.2", 0);
  const network::Address three = *network::Address::parseIp("127.0.0.3", 0);
  Upstream from_two = connect(listener_a_, &two);
  Upstream from_default = connect(listener_a_);
  Connection* raw_two = from_two.conn.get();
  Connection* raw_default = from_default.conn.get();
  pool_->release(std::move(from_two.conn), two);
  pool_->release(std::move(from_default.conn));
  EXPECT_EQ(2u, pool_->idleCount());
  // Same destination, another source: nothing idle for it.
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address(), three));
  EXPECT_EQ(nullptr, pool_->acquire(listener_b_.address(), two));
  ConnectionPtr again_two = pool_->acquire(listener_a_.address(), two);
  EXPECT_EQ(raw_two, again_two.get());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address(), two));
  // The system's choice of source is a key of its own.
  ConnectionPtr again_default = pool_->acquire(listener_a_.address());
  EXPECT_EQ(raw_default, again_default.get());
  EXPECT_EQ(0u, pool_->idleCount());
  again_two->close(network::CloseType::NoFlush);
  again_default->close(network::CloseType::NoFlush);
}

TEST_F(PoolTest, ConnectionsThroughAParentAreKeptApartAndUnderTheirDestination) {
  makePool(4);
  const network::Address elsewhere = *network::Address::parseHostPort("192.0.2.1:443");
  Upstream direct = connect(listener_a_);
  Upstream via_http = connect(listener_a_);
  Upstream via_socks = connect(listener_a_);
  Connection* raw_direct = direct.conn.get();
  Connection* raw_http = via_http.conn.get();
  Connection* raw_socks = via_socks.conn.get();
  pool_->release(std::move(direct.conn));
  // An HTTP parent's connection: under the parent's address, tagged with the parent.
  pool_->release(std::move(via_http.conn), network::Address(), 7);
  // A SOCKS5 parent's tunnel: under the destination it reaches.
  pool_->release(std::move(via_socks.conn), network::Address(), 8, elsewhere);
  EXPECT_EQ(3u, pool_->idleCount());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address(), network::Address(), 8));
  EXPECT_EQ(nullptr, pool_->acquire(elsewhere, network::Address(), 7));
  EXPECT_EQ(nullptr, pool_->acquire(elsewhere));
  ConnectionPtr got_socks = pool_->acquire(elsewhere, network::Address(), 8);
  EXPECT_EQ(raw_socks, got_socks.get());
  ConnectionPtr got_http = pool_->acquire(listener_a_.address(), network::Address(), 7);
  EXPECT_EQ(raw_http, got_http.get());
  ConnectionPtr got_direct = pool_->acquire(listener_a_.address());
  EXPECT_EQ(raw_direct, got_direct.get());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  for (ConnectionPtr* c : {&got_socks, &got_http, &got_direct}) {
    (*c)->close(network::CloseType::NoFlush);
  }
}

TEST_F(PoolTest, AnIdleConnectionClosedByTheOriginLeavesItsSourcesList) {
  makePool(4);
  const network::Address two = *network::Address::parseIp("127.0.0.2", 0);
  Upstream u = connect(listener_a_, &two);
  pool_->release(std::move(u.conn), two);
  EXPECT_EQ(1u, pool_->idleCount());
  ::shutdown(u.origin_fd, SHUT_WR);
  EXPECT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address(), two));
}

TEST_F(PoolTest, MostRecentlyReleasedComesFirstAndDestinationsAreSeparate) {
  makePool(4);
  Upstream a1 = connect(listener_a_);
  Upstream a2 = connect(listener_a_);
  Upstream b1 = connect(listener_b_);
  Connection* ra1 = a1.conn.get();
  Connection* ra2 = a2.conn.get();
  Connection* rb1 = b1.conn.get();
  pool_->release(std::move(a1.conn));
  pool_->release(std::move(b1.conn));
  pool_->release(std::move(a2.conn));
  EXPECT_EQ(3u, pool_->idleCount());
  ConnectionPtr x = pool_->acquire(listener_a_.address());
  ConnectionPtr y = pool_->acquire(listener_a_.address());
  ConnectionPtr z = pool_->acquire(listener_b_.address());
  EXPECT_EQ(ra2, x.get());
  EXPECT_EQ(ra1, y.get());
  EXPECT_EQ(rb1, z.get());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  EXPECT_EQ(0u, pool_->idleCount());
}

TEST_F(PoolTest, MaxIdlePerDestinationClosesTheExtra) {
  makePool(2);
  Upstream u1 = connect(listener_a_);
  Upstream u2 = connect(listener_a_);
  Upstream u3 = connect(listener_a_);
  Upstream other = connect(listener_b_);
  pool_->release(std::move(u1.conn));
  pool_->release(std::move(u2.conn));
  pool_->release(std::move(u3.conn));     // over the limit: closed
  pool_->release(std::move(other.conn));  // another destination has its own limit
  EXPECT_EQ(3u, pool_->idleCount());
  EXPECT_TRUE(waitOriginClosed(u3.origin_fd));
  runFor(dispatcher_, milliseconds(20));
  EXPECT_FALSE(originSawClose(u1.origin_fd));
  EXPECT_FALSE(originSawClose(u2.origin_fd));
  EXPECT_FALSE(originSawClose(other.origin_fd));
  EXPECT_EQ(3u, pool_->idleCount());
}

TEST_F(PoolTest, ZeroMaxIdleKeepsNothing) {
  makePool(0);
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  EXPECT_EQ(0u, pool_->idleCount());
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
}

TEST_F(PoolTest, UnfinishedConnectionsAreNotPooled) {
  makePool(4);
  // Unconsumed response bytes in the read buffer.
  Upstream dirty = connect(listener_a_);
  cb_.drain = false;
  ASSERT_EQ(5, ::write(dirty.origin_fd, "extra", 5));
  Connection* c = dirty.conn.get();
  ASSERT_TRUE(runUntil(dispatcher_, [c] { return c->readBuffer().length() == 5; }));
  pool_->release(std::move(dirty.conn));
  EXPECT_EQ(0u, pool_->idleCount());
  EXPECT_TRUE(waitOriginClosed(dirty.origin_fd));

  // Already closed.
  Upstream closed = connect(listener_a_);
  closed.conn->close(network::CloseType::NoFlush);
  pool_->release(std::move(closed.conn));
  EXPECT_EQ(0u, pool_->idleCount());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
}

TEST_F(PoolTest, IdleConnectionClosedByPeerIsDropped) {
  makePool(4);
  Upstream u = connect(listener_a_);
  Upstream keep = connect(listener_a_);
  pool_->release(std::move(keep.conn));
  pool_->release(std::move(u.conn));
  EXPECT_EQ(2u, pool_->idleCount());
  ::shutdown(u.origin_fd, SHUT_WR);  // the origin closes its side
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 1; }));
  // The survivor is the other one; the closed one is gone from the pool.
  ConnectionPtr c = pool_->acquire(listener_a_.address());
  ASSERT_NE(nullptr, c);
  EXPECT_TRUE(c->open());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));  // and we closed our side
  c->close(network::CloseType::NoFlush);
}

TEST_F(PoolTest, IdleConnectionResetByPeerIsDropped) {
  makePool(4);
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  linger lg{1, 0};
  setsockopt(u.origin_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::close(u.origin_fd);
  origin_fds_.pop_back();
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
}

TEST_F(PoolTest, IdleConnectionThatReceivesBytesIsDropped) {
  makePool(4);
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  // An unsolicited byte means the next response would be misframed: unusable.
  ASSERT_EQ(1, ::write(u.origin_fd, "x", 1));
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));
}

TEST_F(PoolTest, IdleTimeoutClosesIt) {
  makePool(4, milliseconds(50));
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  runFor(dispatcher_, milliseconds(10));
  EXPECT_EQ(1u, pool_->idleCount());
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
}

TEST_F(PoolTest, AcquiredConnectionOutlivesTheIdleTimeout) {
  makePool(4, milliseconds(30));
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  ConnectionPtr c = pool_->acquire(listener_a_.address());
  ASSERT_NE(nullptr, c);
  runFor(dispatcher_, milliseconds(100));
  EXPECT_TRUE(c->open());
  EXPECT_FALSE(originSawClose(u.origin_fd));
  // Released again, the countdown starts afresh (the recycled wrapper re-arms its timer).
  pool_->release(std::move(c));
  EXPECT_EQ(1u, pool_->idleCount());
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));
}

TEST_F(PoolTest, IdleTimeoutCountsFromTheLastRelease) {
  makePool(4, milliseconds(200));
  Upstream u = connect(listener_a_);
  pool_->release(std::move(u.conn));
  runFor(dispatcher_, milliseconds(120));
  // Taken and given back: the timer armed at the first release fires at 200 ms and finds the
  // connection idle for only 80 ms of them.
  ConnectionPtr c = pool_->acquire(listener_a_.address());
  ASSERT_NE(nullptr, c);
  pool_->release(std::move(c));
  runFor(dispatcher_, milliseconds(120));
  EXPECT_EQ(1u, pool_->idleCount());
  EXPECT_FALSE(originSawClose(u.origin_fd));
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return pool_->idleCount() == 0; }));
  EXPECT_TRUE(waitOriginClosed(u.origin_fd));
}

TEST_F(PoolTest, CloseAllClosesEveryIdleConnection) {
  makePool(4);
  Upstream a = connect(listener_a_);
  Upstream b = connect(listener_b_);
  pool_->release(std::move(a.conn));
  pool_->release(std::move(b.conn));
  ASSERT_EQ(2u, pool_->idleCount());
  pool_->closeAll();
  EXPECT_EQ(0u, pool_->idleCount());
  EXPECT_EQ(nullptr, pool_->acquire(listener_a_.address()));
  EXPECT_EQ(nullptr, pool_->acquire(listener_b_.address()));
  EXPECT_TRUE(waitOriginClosed(a.origin_fd));
  EXPECT_TRUE(waitOriginClosed(b.origin_fd));
  // The pool keeps working after a drain.
  Upstream c = connect(listener_a_);
  pool_->release(std::move(c.conn));
  EXPECT_EQ(1u, pool_->idleCount());
}

TEST_F(PoolTest, DestroyingThePoolClosesIdleConnections) {
  makePool(4);
  Upstream a = connect(listener_a_);
  pool_->release(std::move(a.conn));
  pool_.reset();
  EXPECT_TRUE(waitOriginClosed(a.origin_fd));
}

TEST_F(PoolTest, ManyCyclesReuseOneConnection) {
  makePool(4, milliseconds(1000));
  Upstream u = connect(listener_a_);
  Connection* raw = u.conn.get();
  ConnectionPtr c = std::move(u.conn);
  for (int i = 0; i < 1000; ++i) {
    pool_->release(std::move(c));
    c = pool_->acquire(listener_a_.address());
    ASSERT_EQ(raw, c.get());
  }
  EXPECT_EQ(0u, pool_->idleCount());
  c->close(network::CloseType::NoFlush);
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
