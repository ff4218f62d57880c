#include "source/common/network/connection.h"

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/stats/stats.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace network {
namespace {

using std::chrono::milliseconds;
using test::RecordingCallbacks;
using test::runFor;
using test::runUntil;

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('A' + (i * 13) % 57);
  return s;
}

// Each test runs with a system call per read and write, with the loop's batch of sends and
// receives (io_uring), and with reads by completion (the pair's sockets read by receives that
// stand in the batch's ring from their second message on: connectPair() sends two each way).
enum Mode { kOneCallEach, kBatched, kCompletion };

class ConnectionTest : public testing::TestWithParam<int> {
 protected:
  bool batched() const { return GetParam() != kOneCallEach; }
  void SetUp() override {
    dispatcher_.setIoBatching(batched());
    if (GetParam() == kCompletion) dispatcher_.ioBatch()->allowStanding(true);
    // The server ignores SIGPIPE at startup; a test writing to a closed peer must too.
    signal(SIGPIPE, SIG_IGN);
    blocks_at_start_ = buffer::BlockPool::outstanding();
    ASSERT_TRUE(listener_.ok());
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    // Destroying connections with pending deferred deletes is the dispatcher's job.
    runFor(dispatcher_, milliseconds(1));
    EXPECT_EQ(blocks_at_start_, buffer::BlockPool::outstanding());
  }

  // A connected pair: client_ (through connectTo) and server_ (wrapping the accepted socket).
  void connectPair() {
    client_ = Connection::connectTo(dispatcher_, listener_.address());
    ASSERT_NE(nullptr, client_);
    client_->setCallbacks(&client_cb_);
    EXPECT_TRUE(client_->connecting());
    int fd = listener_.accept();
    ASSERT_GE(fd, 0);
    server_ = std::make_unique<Connection>(dispatcher_, fd, listener_.address());
    server_->setCallbacks(&server_cb_);
    ASSERT_TRUE(runUntil(dispatcher_, [&] { return !client_cb_.events.empty(); }));
    ASSERT_EQ(ConnectionEvent::Connected, client_cb_.events[0]);
    ASSERT_TRUE(client_->open());
    ASSERT_FALSE(client_->connecting());
    if (GetParam() == kCompletion) warmUp();
  }

  // A fixed send buffer on `writer`'s socket: the kernel does not grow it as it does once a
  // connection has carried traffic (the warm-up of reads by completion), so a large write finds
  // the socket full while its peer does not read.
  static void fixSendBuffer(Connection& writer) {
    const int size = 64 * 1024;
    ASSERT_EQ(0, setsockopt(writer.fd(), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)));
  }

  // Two messages each way, read one at a time: both sockets are read by completion from then on.
  void warmUp() {
    for (const char* m : {"w1", "w2"}) {
      const std::string want = server_cb_.received + m;
      send(*client_, m);
      ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == want; }));
      const std::string back = client_cb_.received + m;
      send(*server_, m);
      ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.received == back; }));
    }
    runFor(dispatcher_, milliseconds(1));
    if (dispatcher_.ioBatch()->ringAvailable()) {
      ASSERT_EQ(2u, dispatcher_.ioBatch()->standingCount());
    }
    for (RecordingCallbacks* cb : {&client_cb_, &server_cb_}) {
      cb->received.clear();
      cb->data_calls = 0;
    }
  }

  void send(Connection& conn, const std::string& s, bool end_stream = false) {
    buffer::Buffer b;
    b.add(s);
    conn.write(b, end_stream);
    EXPECT_TRUE(b.empty());  // write takes the data
  }

  int64_t blocks_at_start_ = 0;
  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_;
  RecordingCallbacks client_cb_;
  RecordingCallbacks server_cb_;
  ConnectionPtr client_;
  ConnectionPtr server_;
};

TEST_P(ConnectionTest, ConnectToListeningSocketReportsConnected) {
  connectPair();
  EXPECT_EQ(1u, client_cb_.events.size());
  EXPECT_EQ(0, client_->connectError());
  EXPECT_EQ(listener_.address(), client_->peer());
  EXPECT_NE(client_->fd(), server_->fd());
  EXPECT_TRUE(server_->open());
  EXPECT_FALSE(server_->connecting());
}

TEST_P(ConnectionTest, AcceptedSocketIsMadeNonBlocking) {
  connectPair();
  int flags = fcntl(server_->fd(), F_GETFL, 0);
  EXPECT_NE(0, flags & O_NONBLOCK);
  // A blocking socket would hang the loop here on the second read of an edge.
  send(*client_, "ping");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == "ping"; }));
}

TEST_P(ConnectionTest, ConnectToClosedPortIsRefused) {
  auto to = Address::ipv4(INADDR_LOOPBACK, test::closedLoopbackPort());
  ConnectionPtr conn = Connection::connectTo(dispatcher_, to);
  ASSERT_NE(nullptr, conn);
  RecordingCallbacks cb;
  conn->setCallbacks(&cb);
  // Reported from the loop, not from inside connectTo.
  EXPECT_TRUE(cb.events.empty());
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return !cb.events.empty(); }));
  runFor(dispatcher_, milliseconds(20));
  ASSERT_EQ(1u, cb.events.size());
  EXPECT_EQ(ConnectionEvent::RemoteClose, cb.events[0]);
  EXPECT_EQ(ECONNREFUSED, conn->connectError());
  EXPECT_FALSE(conn->open());
  EXPECT_EQ(0, cb.data_calls);
}

TEST_P(ConnectionTest, WritesQueuedWhileConnectingAreSent) {
  client_ = Connection::connectTo(dispatcher_, listener_.address());
  ASSERT_NE(nullptr, client_);
  client_->setCallbacks(&client_cb_);
  send(*client_, "early bytes");
  EXPECT_EQ(11u, client_->writeBufferLength());
  int fd = listener_.accept();
  ASSERT_GE(fd, 0);
  server_ = std::make_unique<Connection>(dispatcher_, fd, listener_.address());
  server_->setCallbacks(&server_cb_);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == "early bytes"; }));
  EXPECT_EQ(0u, client_->writeBufferLength());
}

TEST_P(ConnectionTest, ConnectPrefixGoesFirstOnTheWire) {
  client_ = Connection::connectTo(dispatcher_, listener_.address());
  ASSERT_NE(nullptr, client_);
  client_->setCallbacks(&client_cb_);
  client_->setConnectPrefix("PROXY UNKNOWN\r\n");
  // Written before the connect completes: still behind the prefix.
  send(*client_, "early bytes");
  int fd = listener_.accept();
  ASSERT_GE(fd, 0);
  server_ = std::make_unique<Connection>(dispatcher_, fd, listener_.address());
  server_->setCallbacks(&server_cb_);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received.size() >= 26; }));
  EXPECT_EQ("PROXY UNKNOWN\r\nearly bytes", server_cb_.received);
  ASSERT_FALSE(client_cb_.events.empty());
  EXPECT_EQ(ConnectionEvent::Connected, client_cb_.events[0]);
}

TEST_P(ConnectionTest, DataFlowsBothWays) {
  connectPair();
  send(*client_, "request");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == "request"; }));
  send(*server_, "response");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.received == "response"; }));
  EXPECT_EQ(0, server_cb_.end_stream_calls);
  EXPECT_EQ(0, client_cb_.end_stream_calls);

  // A large transfer crosses many blocks and read events intact.
  const std::string big = pattern(3 * 1024 * 1024 + 17);
  send(*client_, big);
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return server_cb_.received.size() >= 7 + big.size(); },
      std::chrono::seconds(20)));
  EXPECT_TRUE(server_cb_.received == "request" + big);
}

TEST_P(ConnectionTest, UndrainedDataStaysBuffered) {
  connectPair();
  server_cb_.drain = false;
  send(*client_, "abc");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.last_seen == "abc"; }));
  send(*client_, "def");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.last_seen == "abcdef"; }));
  EXPECT_EQ(6u, server_->readBuffer().length());
  // scheduleRead hands the same bytes over again, with no new bytes from the peer.
  const int calls = server_cb_.data_calls;
  server_->scheduleRead();
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.data_calls == calls + 1; }));
  EXPECT_EQ("abcdef", server_cb_.last_seen);
}

TEST_P(ConnectionTest, EndStreamHalfClosesOneDirection) {
  connectPair();
  send(*client_, "last words", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("last words", server_cb_.received);
  EXPECT_TRUE(server_->open());
  EXPECT_TRUE(client_->open());

  // Writes after end_stream are dropped: the write side is shut.
  send(*client_, "too late");
  // The other direction still works.
  send(*server_, "reply after half-close");
  ASSERT_TRUE(
      runUntil(dispatcher_, [&] { return client_cb_.received == "reply after half-close"; }));
  EXPECT_EQ(0, client_cb_.end_stream_calls);
  runFor(dispatcher_, milliseconds(20));
  EXPECT_EQ("last words", server_cb_.received);
  EXPECT_EQ(1, server_cb_.end_stream_calls);

  // Both halves closed: each side has seen EOF, neither saw a close event.
  send(*server_, "", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
  EXPECT_EQ(0, client_cb_.count(ConnectionEvent::RemoteClose));
  EXPECT_EQ(0, server_cb_.count(ConnectionEvent::RemoteClose));
}

TEST_P(ConnectionTest, DataAndEofArrivingTogetherAreBothDelivered) {
  connectPair();
  // Both bytes and FIN are queued before the server's loop looks: one readiness edge for both.
  send(*client_, "request and goodbye", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("request and goodbye", server_cb_.received);
}

TEST_P(ConnectionTest, EofBehindDataAfterOurOwnHalfCloseIsSeen) {
  connectPair();
  send(*client_, "", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  // With our write side already shut, the peer's FIN makes the socket fully closed (EPOLLHUP
  // with EPOLLRDHUP): the bytes before it and the EOF must both come through.
  send(*server_, "final bytes", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("final bytes", client_cb_.received);
}

TEST_P(ConnectionTest, EndStreamWithEmptyBufferShutsDownAtOnce) {
  connectPair();
  send(*client_, "", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("", server_cb_.received);
}

TEST_P(ConnectionTest, ReadDisableHoldsDataUntilReenabled) {
  connectPair();
  server_->readDisable(true);
  server_->readDisable(true);  // nested
  EXPECT_FALSE(server_->readEnabled());
  send(*client_, "held back");
  runFor(dispatcher_, milliseconds(50));
  EXPECT_EQ(0, server_cb_.data_calls);
  EXPECT_EQ("", server_cb_.received);

  server_->readDisable(false);  // one of two: still disabled
  EXPECT_FALSE(server_->readEnabled());
  runFor(dispatcher_, milliseconds(30));
  EXPECT_EQ(0, server_cb_.data_calls);

  server_->readDisable(false);
  EXPECT_TRUE(server_->readEnabled());
  // Edge-triggered: no new readiness comes, yet what arrived meanwhile must be delivered.
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == "held back"; }));

  // An extra enable does not underflow the count.
  server_->readDisable(false);
  server_->readDisable(true);
  EXPECT_FALSE(server_->readEnabled());
  server_->readDisable(false);
  EXPECT_TRUE(server_->readEnabled());
}

TEST_P(ConnectionTest, ReadDisableAlsoHoldsEof) {
  connectPair();
  server_->readDisable(true);
  send(*client_, "bye", /*end_stream=*/true);
  runFor(dispatcher_, milliseconds(50));
  EXPECT_EQ(0, server_cb_.data_calls);
  server_->readDisable(false);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("bye", server_cb_.received);
}

TEST_P(ConnectionTest, APeerEndWhileReadDisabledIsReportedOnceWithoutReading) {
  connectPair();
  server_->readDisable(true);
  send(*client_, "request");
  runFor(dispatcher_, milliseconds(50));
  EXPECT_EQ(0, server_cb_.peer_end_while_disabled);  // bytes alone are not an end
  client_->close(CloseType::NoFlush);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.peer_end_while_disabled == 1; }));
  runFor(dispatcher_, milliseconds(50));
  EXPECT_EQ(1, server_cb_.peer_end_while_disabled);
  EXPECT_EQ(0, server_cb_.data_calls);  // still nothing read
  server_->readDisable(false);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("request", server_cb_.received);
}

TEST_P(ConnectionTest, APeerEndWhileReadingIsOnlyEndStream) {
  connectPair();
  send(*client_, "bye", /*end_stream=*/true);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ(0, server_cb_.peer_end_while_disabled);
}

TEST_P(ConnectionTest, WatermarksFireOncePerCrossing) {
  connectPair();
  client_->setHighWatermark(64 * 1024);
  server_->readDisable(true);  // the peer does not read
  for (int i = 0; i < 128; ++i) send(*client_, pattern(64 * 1024));
  EXPECT_EQ(1, client_cb_.above_high);
  EXPECT_TRUE(client_->aboveHighWatermark());
  EXPECT_GT(client_->writeBufferLength(), 64u * 1024);
  send(*client_, "more");  // still above: no second call
  EXPECT_EQ(1, client_cb_.above_high);
  EXPECT_EQ(0, client_cb_.below_low);

  server_->readDisable(false);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.below_low == 1; }));
  EXPECT_FALSE(client_->aboveHighWatermark());
  EXPECT_LE(client_->writeBufferLength(), 32u * 1024);
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return server_cb_.received.size() == 128 * 64 * 1024 + 4; },
      std::chrono::seconds(10)));
  EXPECT_EQ(1, client_cb_.above_high);
  EXPECT_EQ(1, client_cb_.below_low);
  EXPECT_EQ(0u, client_->writeBufferLength());
}

// An accepted connection is not watched for writability until a write finds its socket full;
// from then on the rest leaves as the peer reads.
TEST_P(ConnectionTest, AnAcceptedConnectionWaitsForWritabilityOnceItsSocketIsFull) {
  connectPair();
  fixSendBuffer(*server_);
  client_->readDisable(true);
  const std::string big = pattern(4 * 1024 * 1024);
  send(*server_, big);
  runFor(dispatcher_, milliseconds(20));
  ASSERT_GT(server_->writeBufferLength(), 0u);
  client_->readDisable(false);
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return client_cb_.received.size() == big.size(); },
      std::chrono::seconds(10)));
  EXPECT_TRUE(client_cb_.received == big);
  EXPECT_EQ(0u, server_->writeBufferLength());
}

TEST_P(ConnectionTest, CloseFlushWriteDeliversBufferedDataFirst) {
  connectPair();
  fixSendBuffer(*client_);
  server_->readDisable(true);
  const std::string big = pattern(4 * 1024 * 1024);
  send(*client_, big);
  ASSERT_GT(client_->writeBufferLength(), 0u);
  client_->close(CloseType::FlushWrite);
  // Still flushing: no close yet, and a second close() changes nothing.
  EXPECT_TRUE(client_->open());
  EXPECT_EQ(1u, client_cb_.events.size());  // only Connected
  client_->close(CloseType::FlushWrite);
  EXPECT_EQ(1u, client_cb_.events.size());

  server_->readDisable(false);
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(big.size(), server_cb_.received.size());
  EXPECT_TRUE(server_cb_.received == big);
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::LocalClose));
  EXPECT_FALSE(client_->open());
  client_->close(CloseType::NoFlush);
  runFor(dispatcher_, milliseconds(20));
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::LocalClose));
}

// A flushed close whose bytes the socket takes at once needs no timer (a new connection per
// request closes so); one whose peer does not read arms it: the limit on how long unsent bytes
// keep a connection open.
TEST_P(ConnectionTest, FlushedCloseArmsNoTimerWhenTheSocketTakesItAll) {
  connectPair();
  const size_t timers = dispatcher_.armedTimers();
  send(*client_, "the last response");
  client_->close(CloseType::FlushWrite);
  EXPECT_EQ(timers, dispatcher_.armedTimers());
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("the last response", server_cb_.received);
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::LocalClose));
  EXPECT_EQ(timers, dispatcher_.armedTimers());
}

TEST_P(ConnectionTest, FlushedCloseArmsItsTimerWhenThePeerDoesNotRead) {
  connectPair();
  const size_t timers = dispatcher_.armedTimers();
  fixSendBuffer(*client_);
  server_->readDisable(true);
  // The socket filled behind the connection's back: its last message finds no room.
  const std::string junk(64 * 1024, 'j');
  while (::send(client_->fd(), junk.data(), junk.size(), MSG_DONTWAIT) > 0) {
  }
  ASSERT_EQ(EAGAIN, errno);
  send(*client_, "the last response");
  client_->close(CloseType::FlushWrite);
  // With the batch, the message waits for the turn's send: no timer yet.
  if (batched()) {
    EXPECT_EQ(timers, dispatcher_.armedTimers());
  }
  // The send finds the socket full, and the close waits for writability with its timer.
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return dispatcher_.armedTimers() == timers + 1; }));
  EXPECT_TRUE(client_->open());
  runFor(dispatcher_, milliseconds(5));
  EXPECT_EQ(timers + 1, dispatcher_.armedTimers());  // armed once
  EXPECT_TRUE(client_->open());
  client_->close(CloseType::NoFlush);
  EXPECT_EQ(timers, dispatcher_.armedTimers());
}

// A flushed close whose peer never reads gives up at its limit: the connection closes with its
// bytes unsent, counted.
TEST_P(ConnectionTest, FlushedCloseGivesUpAtItsLimit) {
  stats::Counter timeouts = stats::Store::get().counter("test.close_flush_timeouts");
  const uint64_t before = stats::Store::get().counterValue("test.close_flush_timeouts");
  Connection::setFlushCloseLimit(milliseconds(50), timeouts);
  connectPair();
  fixSendBuffer(*client_);
  server_->readDisable(true);
  send(*client_, pattern(4 * 1024 * 1024));
  client_->close(CloseType::FlushWrite);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return client_cb_.count(ConnectionEvent::LocalClose) == 1; },
      std::chrono::seconds(5)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(45));
  EXPECT_FALSE(client_->open());
  EXPECT_EQ(before + 1, stats::Store::get().counterValue("test.close_flush_timeouts"));
  Connection::setFlushCloseLimit(std::chrono::seconds(10), stats::Counter{});
}

TEST_P(ConnectionTest, CloseFlushWriteWithNothingBufferedClosesAtOnce) {
  connectPair();
  client_->close(CloseType::FlushWrite);
  EXPECT_FALSE(client_->open());
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::LocalClose));
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
}

TEST_P(ConnectionTest, CloseNoFlushDropsBufferedData) {
  connectPair();
  fixSendBuffer(*client_);
  server_->readDisable(true);
  send(*client_, pattern(4 * 1024 * 1024));
  ASSERT_GT(client_->writeBufferLength(), 0u);
  client_->close(CloseType::NoFlush);
  EXPECT_FALSE(client_->open());
  EXPECT_EQ(-1, client_->fd());
  EXPECT_EQ(0u, client_->writeBufferLength());
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::LocalClose));
  // Writes after close are dropped without a crash.
  send(*client_, "after close");
  EXPECT_EQ(0u, client_->writeBufferLength());
  server_->readDisable(false);
  ASSERT_TRUE(
      runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1 || !server_->open(); }));
  EXPECT_LT(server_cb_.received.size(), 4u * 1024 * 1024);
}

TEST_P(ConnectionTest, PeerResetIsRemoteClose) {
  client_ = Connection::connectTo(dispatcher_, listener_.address());
  client_->setCallbacks(&client_cb_);
  int fd = listener_.accept();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.events.size() == 1; }));
  linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::close(fd);  // RST
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.events.size() == 2; }));
  EXPECT_EQ(ConnectionEvent::RemoteClose, client_cb_.events[1]);
  EXPECT_FALSE(client_->open());
}

TEST_P(ConnectionTest, WritingToAClosedPeerEndsInRemoteClose) {
  connectPair();
  server_->close(CloseType::NoFlush);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
  EXPECT_TRUE(client_->open());
  // The first write draws a RST, a later one fails (EPIPE), with SIGPIPE ignored.
  ASSERT_TRUE(runUntil(dispatcher_, [&] {
    if (client_->open()) send(*client_, "anyone there?");
    return !client_->open();
  }));
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::RemoteClose));
}

TEST_P(ConnectionTest, AWriteNeverClosesUnderItsCaller) {
  connectPair();
  server_->close(CloseType::NoFlush);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
  // Write until the socket fails; each write returns with the connection still open and no
  // event delivered: the failure arrives from the loop.
  bool failed = false;
  for (int i = 0; i < 200 && !failed; ++i) {
    const size_t events = client_cb_.events.size();
    send(*client_, "anyone there?");
    ASSERT_TRUE(client_->open());
    ASSERT_EQ(events, client_cb_.events.size());
    runFor(dispatcher_, milliseconds(2));
    failed = !client_->open();
  }
  ASSERT_TRUE(failed);
  EXPECT_EQ(1, client_cb_.count(ConnectionEvent::RemoteClose));
}

TEST_P(ConnectionTest, DestroyingAnOpenConnectionClosesTheSocket) {
  connectPair();
  client_.reset();
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.end_stream_calls == 1; }));
  EXPECT_EQ(1u, client_cb_.events.size());  // no event from a destructor
}

TEST_P(ConnectionTest, ByteCountersCount) {
  stats::Store& store = stats::Store::get();
  ConnectionByteCounters counters{store.counter("test.conn.rx"), store.counter("test.conn.tx")};
  const uint64_t rx0 = store.counterValue("test.conn.rx");
  const uint64_t tx0 = store.counterValue("test.conn.tx");
  connectPair();
  client_->setByteCounters(counters);
  server_->setByteCounters(counters);
  send(*client_, "12345");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received.size() == 5; }));
  send(*server_, "123");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.received.size() == 3; }));
  EXPECT_EQ(8u, store.counterValue("test.conn.rx") - rx0);
  EXPECT_EQ(8u, store.counterValue("test.conn.tx") - tx0);
}

TEST_P(ConnectionTest, CloseFromInsideOnDataIsSafe) {
  connectPair();
  server_cb_.on_data = [&](buffer::Buffer&, bool) { server_->close(CloseType::NoFlush); };
  send(*client_, pattern(200 * 1024));
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return !server_->open(); }));
  runFor(dispatcher_, milliseconds(20));
  EXPECT_EQ(1, server_cb_.data_calls);
  EXPECT_EQ(1, server_cb_.count(ConnectionEvent::LocalClose));
  EXPECT_EQ(0u, server_->readBuffer().length());
}

TEST_P(ConnectionTest, DeferredDeleteFromOwnCallback) {
  connectPair();
  Connection* raw = server_.get();
  server_cb_.on_event = [&](ConnectionEvent) { dispatcher_.deferredDelete(std::move(server_)); };
  send(*client_, "x");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received == "x"; }));
  raw->close(CloseType::NoFlush);  // LocalClose: the callback hands it to deferred delete
  EXPECT_EQ(nullptr, server_);
  runFor(dispatcher_, milliseconds(10));
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
}

// Several connections' exchanges in one turn of the loop reach the kernel together.
TEST_P(ConnectionTest, ManyConnectionsShareOneEntryIntoTheKernel) {
  if (!batched()) GTEST_SKIP() << "batched only";
  constexpr int kPairs = 8;
  std::vector<ConnectionPtr> clients, servers;
  std::vector<std::unique_ptr<RecordingCallbacks>> cbs;
  for (int i = 0; i < kPairs; ++i) {
    clients.push_back(Connection::connectTo(dispatcher_, listener_.address()));
    cbs.push_back(std::make_unique<RecordingCallbacks>());
    clients.back()->setCallbacks(cbs.back().get());
    int fd = listener_.accept();
    ASSERT_GE(fd, 0);
    servers.push_back(std::make_unique<Connection>(dispatcher_, fd, listener_.address()));
    cbs.push_back(std::make_unique<RecordingCallbacks>());
    servers.back()->setCallbacks(cbs.back().get());
  }
  ASSERT_TRUE(runUntil(dispatcher_, [&] {
    for (auto& c : clients) {
      if (c->connecting()) return false;
    }
    return true;
  }));
  event::IoBatch& batch = *dispatcher_.ioBatch();
  const uint64_t ops0 = batch.operations();
  const uint64_t enters0 = batch.ringEnters();
  for (int i = 0; i < kPairs; ++i) send(*clients[i], "request " + std::to_string(i));
  EXPECT_EQ(ops0, batch.operations());  // queued, not yet sent
  ASSERT_TRUE(runUntil(dispatcher_, [&] {
    for (int i = 0; i < kPairs; ++i) {
      if (cbs[2 * i + 1]->received != "request " + std::to_string(i)) return false;
    }
    return true;
  }));
  // Eight sends and eight receives.
  EXPECT_GE(batch.operations() - ops0, uint64_t{2 * kPairs});
  // The sends go in one entry, the receives in as many as the loop took turns to see them.
  if (batch.ringAvailable()) {
    EXPECT_GE(batch.ringEnters() - enters0, 1u);
    EXPECT_LE(batch.ringEnters() - enters0, 4u);
  }
  for (auto& c : servers) c->close(CloseType::NoFlush);
  for (auto& c : clients) c->close(CloseType::NoFlush);
  runFor(dispatcher_, milliseconds(1));
}

// A worker reads its accepted sockets at once only while that finds bytes often enough: reads
// that find nothing stop them (the socket waits for its readiness, one receive less), one socket
// in 16 is still read at once, and a read that finds bytes brings them back.
TEST_P(ConnectionTest, ReadsAtAcceptStopWhileTheyFindNothingAndComeBackWhenTheyDo) {
  if (!batched()) GTEST_SKIP() << "counted in the batch";
  event::IoBatch& batch = *dispatcher_.ioBatch();
  // Accepts one client (which wrote `first` before the accept, if anything) as a listener
  // does; returns the operations its connection cost over a few turns (its registration, and a
  // receive when it was read at once or bytes came), and what it received.
  const auto accept_one = [&](const std::string& first, std::string* received) -> uint64_t {
    int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(0,
              ::connect(client, listener_.address().sockaddr_ptr(), listener_.address().length()));
    if (!first.empty()) {
      EXPECT_EQ(ssize_t(first.size()), ::send(client, first.data(), first.size(), 0));
    }
    const int fd = listener_.accept();
    EXPECT_GE(fd, 0);
    RecordingCallbacks cb;
    const uint64_t ops0 = batch.operations();
    auto conn = std::make_unique<Connection>(dispatcher_, fd, listener_.address());
    conn->setCallbacks(&cb);
    conn->readAtAccept();
    if (first.empty()) {
      runFor(dispatcher_, milliseconds(3));
    } else {
      EXPECT_TRUE(runUntil(dispatcher_, [&] { return cb.received == first; }));
    }
    const uint64_t ops = batch.operations() - ops0;
    *received = cb.received;
    conn->close(CloseType::NoFlush);
    ::close(client);
    runFor(dispatcher_, milliseconds(1));  // the close leaves with the batch, not counted
    return ops;
  };
  std::string got;
  // Clients that send nothing by the accept: each read at once costs a receive (2 operations
  // with the registration), until the worker stops reading at accept (1).
  int misses = 0;
  while (accept_one("", &got) == 2) {
    ASSERT_LT(++misses, 80) << "reads at accept never stopped";
  }
  // One socket in 16 is still read at once; the one that finds its request brings reads at
  // accept back. Every request arrives, read at once or not.
  for (int i = 0; i < 16; ++i) {
    accept_one("GET / HTTP/1.1\r\n\r\n", &got);
    EXPECT_EQ("GET / HTTP/1.1\r\n\r\n", got);
  }
  EXPECT_EQ(2u, accept_one("", &got)) << "reads at accept did not come back";
  EXPECT_EQ("", got);
}

TEST_P(ConnectionTest, AWriteRightBeforeACloseWithoutFlushStillLeaves) {
  stats::Store& store = stats::Store::get();
  const std::string tx = "test.last_words.tx." + std::to_string(GetParam());
  const std::string rx = "test.last_words.rx." + std::to_string(GetParam());
  connectPair();
  server_->setByteCounters({store.counter(rx), store.counter(tx)});
  send(*server_, "last words");
  server_->close(CloseType::NoFlush);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return client_cb_.end_stream_calls == 1; }));
  EXPECT_EQ("last words", client_cb_.received);
  EXPECT_EQ(10u, store.counterValue(tx));
}

// A connection that stops reading after its receive was queued, and before the batch ran, keeps
// what arrives for later; one that closes meanwhile hears nothing more.
TEST_P(ConnectionTest, AReadDisabledOrClosedBeforeTheBatchRunsHearsNothing) {
  connectPair();
  ConnectionPtr client2 = Connection::connectTo(dispatcher_, listener_.address());
  RecordingCallbacks client2_cb;
  client2->setCallbacks(&client2_cb);
  int fd = listener_.accept();
  ASSERT_GE(fd, 0);
  RecordingCallbacks server2_cb;
  ConnectionPtr server2 = std::make_unique<Connection>(dispatcher_, fd, listener_.address());
  server2->setCallbacks(&server2_cb);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return !client2->connecting(); }));
  // Whichever of the two servers hears its bytes first stops the other from reading.
  bool stopped_other = false;
  server_cb_.on_data = [&](buffer::Buffer&, bool) {
    if (!stopped_other) server2->readDisable(true);
    stopped_other = true;
  };
  server2_cb.on_data = [&](buffer::Buffer&, bool) {
    if (!stopped_other) server_->readDisable(true);
    stopped_other = true;
  };
  send(*client_, "one");
  send(*client2, "two");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return stopped_other; }));
  runFor(dispatcher_, milliseconds(20));
  EXPECT_EQ(1, server_cb_.data_calls + server2_cb.data_calls);
  Connection& held = server_cb_.data_calls == 0 ? *server_ : *server2;
  RecordingCallbacks& held_cb = server_cb_.data_calls == 0 ? server_cb_ : server2_cb;
  held.readDisable(false);
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return held_cb.data_calls == 1; }));
  EXPECT_TRUE(held_cb.received == "one" || held_cb.received == "two");

  // Now one closes the other from its callback, in the same batch.
  server_cb_.on_data = [&](buffer::Buffer&, bool) {
    if (server2->open()) server2->close(CloseType::NoFlush);
  };
  server2_cb.on_data = [&](buffer::Buffer&, bool) {
    if (server_->open()) server_->close(CloseType::NoFlush);
  };
  const int calls = server_cb_.data_calls + server2_cb.data_calls;
  send(*client_, "three");
  send(*client2, "four");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return !server_->open() || !server2->open(); }));
  runFor(dispatcher_, milliseconds(20));
  EXPECT_EQ(calls + 1, server_cb_.data_calls + server2_cb.data_calls);
  client2->close(CloseType::NoFlush);
  server2->close(CloseType::NoFlush);
  runFor(dispatcher_, milliseconds(1));
}

// A connection that stops reading keeps its receive standing (an HTTP/1 client waiting for its
// response sends nothing meanwhile); bytes that come anyway stop it, and it holds at most one
// receive's worth of them. Reading again delivers everything in order and reads by completion
// again once the socket is empty.
TEST_P(ConnectionTest, AReadDisabledConnectionHoldsAtMostOneReceivesWorth) {
  if (GetParam() != kCompletion) GTEST_SKIP() << "reads by completion only";
  connectPair();
  event::IoBatch& batch = *dispatcher_.ioBatch();
  if (!batch.ringAvailable()) GTEST_SKIP() << "io_uring is not available here";
  fixSendBuffer(*client_);
  server_->readDisable(true);
  runFor(dispatcher_, milliseconds(5));
  EXPECT_EQ(2u, batch.standingCount());  // no system call to stop it
  const std::string big = pattern(4 * 1024 * 1024);
  send(*client_, big);
  runFor(dispatcher_, milliseconds(50));
  EXPECT_EQ(0, server_cb_.data_calls);
  EXPECT_GT(server_->readBuffer().length(), 0u);
  EXPECT_LE(server_->readBuffer().length(),
            event::IoBatch::kStandingReceiveLimit + event::IoBatch::kStandingBufferSize);
  EXPECT_EQ(1u, batch.standingCount());         // the server's stopped
  EXPECT_GT(client_->writeBufferLength(), 0u);  // the rest waits in the kernel and the client
  server_->readDisable(false);
  ASSERT_TRUE(runUntil(
      dispatcher_, [&] { return server_cb_.received.size() == big.size(); },
      std::chrono::seconds(10)));
  EXPECT_TRUE(server_cb_.received == big);
  send(*client_, "small");
  ASSERT_TRUE(runUntil(dispatcher_, [&] { return server_cb_.received.size() == big.size() + 5; }));
  runFor(dispatcher_, milliseconds(5));
  EXPECT_EQ(2u, batch.standingCount());
}

INSTANTIATE_TEST_SUITE_P(IoBatching, ConnectionTest,
                         testing::Values(kOneCallEach, kBatched, kCompletion),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(info.param == kOneCallEach ? "OneCallEach"
                                              : info.param == kBatched   ? "Batched"
                                                                         : "Completion");
                         });

}  // namespace
}  // namespace network
}  // namespace sluice
