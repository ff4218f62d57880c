#include "source/common/upstream/tunnel_relay.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/stats/stats.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace upstream {
namespace {

using network::Connection;
using network::ConnectionPtr;
using std::chrono::milliseconds;
using test::runFor;
using test::runUntil;

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  return s;
}

using Peer = test::RawPeer;

// The client side of a whole client connection, as upstream::ConnectionTunnel is: hands client
// bytes and watermarks to the relay, and closes the client when the tunnel ends.
class ClientSide : public network::ConnectionCallbacks, public TunnelDownstream {
 public:
  // TunnelDownstream
  void writeDownstream(buffer::Buffer& data, bool end_stream) override {
    connection->write(data, end_stream);
  }
  void readDisableDownstream(bool disable) override { connection->readDisable(disable); }
  network::Connection* spliceableConnection() override { return connection; }
  // network::ConnectionCallbacks
  void onData(buffer::Buffer& data, bool end_stream) override {
    if (relay != nullptr) relay->onDownstreamData(data, end_stream);
  }
  void onEvent(network::ConnectionEvent event) override {
    if (event != network::ConnectionEvent::Connected && relay != nullptr) closed_events++;
  }
  void onAboveWriteHighWatermark() override {
    if (relay != nullptr) relay->onDownstreamBackedUp(true);
  }
  void onBelowWriteLowWatermark() override {
    if (relay != nullptr) relay->onDownstreamBackedUp(false);
  }
  void onTunnelEnd(TunnelEnd end) override { on_end(end); }
  RequestTrace& tunnelTrace() override { return *trace; }
  event::Timer& tunnelTimer() override { return *timer; }
  TunnelRelay* relay = nullptr;
  RequestTrace* trace = nullptr;  // the codec's
  event::Timer* timer = nullptr;
  network::Connection* connection = nullptr;
  int closed_events = 0;
  std::function<void(TunnelEnd)> on_end;
};

class TunnelRelayTest : public testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(client_listener_.ok());
    ASSERT_TRUE(origin_listener_.ok());
    listener_stats_ = listenerTunnelStats("relay_test");
    key_stats_ = keyTunnelStats("relay_test_key");
  }
  void TearDown() override {
    TunnelRelay::dispose(relay_);
    if (client_conn_) client_conn_->close(network::CloseType::NoFlush);
    client_conn_.reset();
    runFor(dispatcher_, milliseconds(1));
  }

  uint64_t counter(const std::string& name) {
    return stats::Store::get().counterValue("tunnel.listener.relay_test." + name);
  }
  int64_t active() {
    return stats::Store::get().gaugeValue("tunnel.listener.relay_test.tunnels_active");
  }
  uint64_t durations() {
    return stats::Store::get()
        .histogramValue("tunnel.listener.relay_test.duration_seconds")
        .value_or(stats::Store::HistogramValue{})
        .count();
  }

  // Client socket ↔ client Connection, origin Connection ↔ origin socket, and a relay between
  // the two Connections.
  void open(TunnelOptions options) {
    options.listener_stats = &listener_stats_;
    options.key_stats = &key_stats_;
    int client_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(0, ::connect(client_fd, client_listener_.address().sockaddr_ptr(),
                           client_listener_.address().length()));
    client_.emplace(client_fd);
    int accepted = client_listener_.accept();
    ASSERT_GE(accepted, 0);
    client_conn_ = std::make_unique<Connection>(dispatcher_, accepted, client_listener_.address());
    client_conn_->setCallbacks(&client_side_);
    client_side_.connection = client_conn_.get();

    ConnectionPtr up = Connection::connectTo(dispatcher_, origin_listener_.address());
    ASSERT_NE(nullptr, up);
    up->setCallbacks(&connecting_);
    int origin_fd = origin_listener_.accept();
    ASSERT_GE(origin_fd, 0);
    origin_.emplace(origin_fd);
    Connection* raw = up.get();
    ASSERT_TRUE(runUntil(dispatcher_, [raw] { return !raw->connecting(); }));

    UpstreamInfo info;
    trace_.begin(std::chrono::steady_clock::now(), proxy::Protocol::Http1, "CONNECT", "origin.test",
                 443, nullptr);
    client_side_.on_end = [this](TunnelEnd end) {
      ends_.push_back(end);
      // What a codec does: let the relay go, close the client.
      client_side_.relay = nullptr;
      TunnelRelay::dispose(relay_);
      client_conn_->close(network::CloseType::FlushWrite);
    };
    client_side_.trace = &trace_;
    client_side_.timer = &codec_timer_;
    relay_ = std::make_unique<TunnelRelay>(UpstreamHandle(std::move(up), nullptr, info),
                                           client_side_, options);
    client_side_.relay = relay_.get();
    buffer::Buffer none;
    relay_->start(none, false);
  }

  // `sender` writes 32 MiB toward `reader`, which reads nothing at first: the sender must be
  // pushed back, with what sluice holds toward the reader (`held`, when given) bounded by the
  // watermark plus one read. Then the reader reads and everything arrives, in order.
  void pushBackThenDrain(Peer& sender, Peer& reader, const Connection* held) {
    const std::string data = pattern(32 * 1024 * 1024);
    size_t sent = 0;
    for (int i = 0; i < 400 && sent < data.size(); ++i) {
      sent += sender.send(std::string_view(data).substr(sent));
      runFor(dispatcher_, milliseconds(2));
    }
    ASSERT_LT(sent, data.size()) << "the sender was never pushed back";
    if (held != nullptr) {
      EXPECT_LE(held->writeBufferLength(),
                Connection::kDefaultHighWatermark + TunnelRelay::kSpliceAfterRead + 64 * 1024);
    }
    ASSERT_TRUE(run([&] {
      sent += sender.send(std::string_view(data).substr(sent));
      return reader.received.size() == data.size();
    }));
    EXPECT_TRUE(reader.received == data);
  }

  // `sender` streams toward `receiver` until the tunnel splices, then resets (RST): the tunnel
  // ends, and the receiver sees its side closed.
  void resetMidSplice(std::optional<Peer>& sender, std::optional<Peer>& receiver) {
    const std::string data = pattern(2 * 1024 * 1024);
    size_t sent = 0;
    ASSERT_TRUE(run([&] {
      sent += sender->send(std::string_view(data).substr(sent));
      return relay_ != nullptr && relay_->spliced() && receiver->received.size() > 512 * 1024;
    }));
    sender->reset_close();
    sender.reset();
    ASSERT_TRUE(run([&] { return !ends_.empty(); }));
    ASSERT_TRUE(run([&] { return receiver->eof || receiver->reset; }));
  }

  // Pumps the loop and both raw peers until done() holds.
  bool run(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
    return test::runWithPeers(dispatcher_, client_, origin_, done, timeout);
  }

  event::Dispatcher dispatcher_;
  // The codec's timer: while the tunnel runs its expiries go to the relay.
  event::Timer codec_timer_{dispatcher_, [this] {
                              if (relay_) relay_->onTimer();
                            }};
  test::LoopbackListener client_listener_;
  test::LoopbackListener origin_listener_;
  TunnelStats listener_stats_;
  TunnelStats key_stats_;
  test::RecordingCallbacks connecting_;
  ClientSide client_side_;
  // The request the tunnel carries (begun in open()).
  RequestTrace trace_;
  std::optional<Peer> client_;
  std::optional<Peer> origin_;
  ConnectionPtr client_conn_;
  std::unique_ptr<TunnelRelay> relay_;
  std::vector<TunnelEnd> ends_;
};

TEST_F(TunnelRelayTest, BytesBothWaysAndCounters) {
  const uint64_t up0 = counter("bytes_to_upstream");
  const uint64_t down0 = counter("bytes_to_downstream");
  const uint64_t total0 = counter("tunnels_total");
  const int64_t active0 = active();
  const uint64_t key0 =
      stats::Store::get().counterValue("tunnel.key.relay_test_key.bytes_to_upstream");
  open({});
  EXPECT_EQ(total0 + 1, counter("tunnels_total"));
  EXPECT_EQ(active0 + 1, active());
  client_->send("hello");
  ASSERT_TRUE(run([&] { return origin_->received == "hello"; }));
  origin_->send("world!");
  ASSERT_TRUE(run([&] { return client_->received == "world!"; }));
  EXPECT_EQ(up0 + 5, counter("bytes_to_upstream"));
  EXPECT_EQ(down0 + 6, counter("bytes_to_downstream"));
  // The request's trace counts them as they move, and the destination's first byte.
  const RequestRecord record = trace_.record("l", dispatcher_.now());
  EXPECT_EQ(5u, record.bytes_to_origin);
  EXPECT_EQ(6u, record.bytes_from_origin);
  EXPECT_GE(record.first_byte.count(), 0);
  EXPECT_FALSE(relay_->spliced());  // small exchanges are copied
  // The key's counters see the same bytes as the listener's.
  EXPECT_EQ(key0 + 5,
            stats::Store::get().counterValue("tunnel.key.relay_test_key.bytes_to_upstream"));
}

TEST_F(TunnelRelayTest, HalfCloseClientFirst) {
  const uint64_t durations0 = durations();
  open({});
  client_->send("request");
  client_->shutWrite();
  ASSERT_TRUE(run([&] { return origin_->eof; }));
  EXPECT_EQ("request", origin_->received);
  EXPECT_TRUE(ends_.empty());
  // The other direction still flows after the client's end.
  origin_->send("late answer");
  ASSERT_TRUE(run([&] { return client_->received == "late answer"; }));
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return client_->eof && !ends_.empty(); }));
  EXPECT_EQ(TunnelEnd::Done, ends_[0]);
  // The tunnel's duration counts in its listener's histogram, never in the key's.
  EXPECT_EQ(durations0 + 1, durations());
  EXPECT_FALSE(
      stats::Store::get().histogramValue("tunnel.key.relay_test_key.duration_seconds").has_value());
}

TEST_F(TunnelRelayTest, HalfCloseOriginFirst) {
  open({});
  origin_->send("banner");
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return client_->eof; }));
  EXPECT_EQ("banner", client_->received);
  EXPECT_TRUE(ends_.empty());
  client_->send("still talking");
  ASSERT_TRUE(run([&] { return origin_->received == "still talking"; }));
  client_->shutWrite();
  ASSERT_TRUE(run([&] { return origin_->eof && !ends_.empty(); }));
  EXPECT_EQ(TunnelEnd::Done, ends_[0]);
}

TEST_F(TunnelRelayTest, IdleTimeoutClosesASilentTunnel) {
  const uint64_t idle0 = counter("idle_timeout");
  TunnelOptions options;
  options.idle_timeout = milliseconds(80);
  open(options);
  // Traffic keeps it open past several idle periods.
  for (int i = 0; i < 6; ++i) {
    client_->send("x");
    runFor(dispatcher_, milliseconds(30));
  }
  EXPECT_TRUE(ends_.empty());
  ASSERT_TRUE(run([&] { return !ends_.empty(); }, milliseconds(2000)));
  EXPECT_EQ(TunnelEnd::IdleTimeout, ends_[0]);
  EXPECT_EQ(idle0 + 1, counter("idle_timeout"));
  ASSERT_TRUE(run([&] { return origin_->eof && client_->eof; }));
}

// Without splice the relay copies; a client that does not read stops the origin from being
// read once the client's write buffer passes its high watermark.
TEST_F(TunnelRelayTest, BackpressureTowardASlowClient) {
  TunnelOptions options;
  options.splice = false;
  open(options);
  pushBackThenDrain(*origin_, *client_, client_conn_.get());
  EXPECT_FALSE(relay_->spliced());
}

TEST_F(TunnelRelayTest, BackpressureTowardASlowOrigin) {
  TunnelOptions options;
  options.splice = false;
  open(options);
  pushBackThenDrain(*client_, *origin_, nullptr);
}

TEST_F(TunnelRelayTest, BulkDataIsSplicedAndPipesGoBack) {
  const uint64_t spliced0 = counter("bytes_spliced");
  open({});
  const std::string down = pattern(8 * 1024 * 1024);
  const std::string up = pattern(6 * 1024 * 1024 + 17);
  size_t down_sent = 0;
  size_t up_sent = 0;
  ASSERT_TRUE(run([&] {
    down_sent += origin_->send(std::string_view(down).substr(down_sent));
    up_sent += client_->send(std::string_view(up).substr(up_sent));
    return client_->received.size() == down.size() && origin_->received.size() == up.size();
  }));
  EXPECT_TRUE(client_->received == down);
  EXPECT_TRUE(origin_->received == up);
  EXPECT_TRUE(relay_->spliced());
  EXPECT_GT(counter("bytes_spliced") - spliced0, 8u * 1024 * 1024);
  const RequestRecord record = trace_.record("l", dispatcher_.now());
  EXPECT_EQ(down.size(), record.bytes_from_origin);
  EXPECT_EQ(up.size(), record.bytes_to_origin);
  // Idle: no pipe held.
  runFor(dispatcher_, milliseconds(5));
  EXPECT_EQ(0u, PipePool::forThisThread().inUse());
  EXPECT_GE(PipePool::forThisThread().spareCount(), 1u);
  // Half-close works while spliced.
  client_->shutWrite();
  ASSERT_TRUE(run([&] { return origin_->eof; }));
  origin_->send("bye");
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return client_->eof && !ends_.empty(); }));
  EXPECT_EQ(TunnelEnd::Done, ends_[0]);
  EXPECT_EQ(down.size() + 3, client_->received.size());
}

TEST_F(TunnelRelayTest, NoPipeFallsBackToCopying) {
  const uint64_t fallback0 = counter("splice_fallback");
  TunnelOptions options;
  options.max_pipes = 0;
  open(options);
  const std::string down = pattern(4 * 1024 * 1024);
  size_t sent = 0;
  ASSERT_TRUE(run([&] {
    sent += origin_->send(std::string_view(down).substr(sent));
    return client_->received.size() == down.size();
  }));
  EXPECT_TRUE(client_->received == down);
  EXPECT_FALSE(relay_->spliced());
  EXPECT_EQ(fallback0 + 1, counter("splice_fallback"));
  // It keeps working as a copying tunnel.
  client_->send("ping");
  ASSERT_TRUE(run([&] { return origin_->received == "ping"; }));
}

TEST_F(TunnelRelayTest, OriginResetMidSplice) {
  const uint64_t reset0 = counter("upstream_reset");
  open({});
  resetMidSplice(origin_, client_);
  EXPECT_EQ(TunnelEnd::UpstreamReset, ends_[0]);
  EXPECT_EQ(reset0 + 1, counter("upstream_reset"));
}

TEST_F(TunnelRelayTest, ClientResetMidSplice) {
  const uint64_t reset0 = counter("downstream_reset");
  open({});
  resetMidSplice(client_, origin_);
  EXPECT_EQ(TunnelEnd::DownstreamReset, ends_[0]);
  EXPECT_EQ(reset0 + 1, counter("downstream_reset"));
}

TEST_F(TunnelRelayTest, AbortEndsWithoutACallback) {
  const int64_t active0 = active();
  const uint64_t durations0 = durations();
  open({});
  EXPECT_EQ(active0 + 1, active());
  client_->send("x");
  ASSERT_TRUE(run([&] { return origin_->received == "x"; }));
  client_side_.relay = nullptr;
  TunnelRelay::dispose(relay_);
  EXPECT_EQ(active0, active());
  EXPECT_EQ(durations0 + 1, durations());  // an aborted tunnel has a duration too
  ASSERT_TRUE(run([&] { return origin_->eof; }));
  EXPECT_TRUE(ends_.empty());
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
