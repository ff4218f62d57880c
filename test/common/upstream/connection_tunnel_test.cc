#include "source/common/upstream/connection_tunnel.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/proxy/grants.h"
#include "source/common/proxy/request.h"
#include "source/common/stats/stats.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace upstream {
namespace {

using network::Connection;
using network::ConnectionPtr;
using std::chrono::milliseconds;
using test::runFor;

uint64_t counterValue(const std::string& name) { return stats::Store::get().counterValue(name); }
int64_t gaugeValue(const std::string& name) { return stats::Store::get().gaugeValue(name); }

// A client connection's filter chain of one filter, as the worker's filter manager keeps it.
class OneFilterChain : public network::ReadFilterCallbacks, public network::ConnectionCallbacks {
 public:
  OneFilterChain(ConnectionPtr connection, network::ReadFilterPtr filter)
      : connection_(std::move(connection)), filter_(std::move(filter)) {
    connection_->setCallbacks(this);
    filter_->initializeReadFilterCallbacks(*this);
  }
  ~OneFilterChain() override {
    filter_.reset();
    connection_.reset();
  }
  network::ReadFilter& filter() { return *filter_; }

  network::Connection& connection() override { return *connection_; }
  void continueReading() override {}
  proxy::WorkerContext& worker() override { abort(); }  // a tunnel never asks
  void replaceReadFilter(network::ReadFilter& current, network::ReadFilterPtr next) override {
    ASSERT_EQ(&current, filter_.get());
    ++replaced;
    next->initializeReadFilterCallbacks(*this);
    connection_->dispatcher().deferredDelete(std::exchange(filter_, std::move(next)));
  }
  void onData(buffer::Buffer& data, bool end_stream) override { filter_->onData(data, end_stream); }
  void onEvent(network::ConnectionEvent event) override {
    if (event == network::ConnectionEvent::Connected) return;
    closed = true;
    filter_->onEvent(event);
  }
  void onAboveWriteHighWatermark() override { filter_->onAboveWriteHighWatermark(); }
  void onBelowWriteLowWatermark() override { filter_->onBelowWriteLowWatermark(); }

  int replaced = 0;
  bool closed = false;

 private:
  ConnectionPtr connection_;
  network::ReadFilterPtr filter_;
};

// A codec that answers "GO\n" by handing its connection over to a tunnel toward `upstream`:
// what follows the line in the same read is the tunnel's first bytes.
class HandingCodec : public network::ReadFilter {
 public:
  HandingCodec(const ConnectionTunnelConfig& config, std::function<UpstreamHandle()> upstream,
               bool* deleted, bool* deleted_during_handover, const proxy::KeyGrant* grant)
      : config_(config),
        upstream_(std::move(upstream)),
        deleted_(deleted),
        deleted_during_handover_(deleted_during_handover),
        grant_(grant) {}
  ~HandingCodec() override { *deleted_ = true; }

  void initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) override {
    callbacks_ = &callbacks;
  }
  network::FilterStatus onData(buffer::Buffer& data, bool) override {
    if (data.length() < 3) return network::FilterStatus::StopIteration;
    data.drain(3);
    trace_.begin(std::chrono::steady_clock::now(), proxy::Protocol::Http1, "CONNECT", "origin.test",
                 443, &callbacks_->connection().peer());
    proxy::ProxyRequest request;
    request.principal = "alice";
    request.grant = grant_;
    trace_.routed(request);
    trace_.setStatus(200);
    ConnectionTunnel::replace(*callbacks_, *this, config_, trace_, {upstream_(), nullptr});
    // Still here: the chain deletes the codec once this call has returned.
    *deleted_during_handover_ = *deleted_;
    EXPECT_FALSE(trace_.open()) << "the request moved to the tunnel";
    return network::FilterStatus::StopIteration;
  }

 private:
  const ConnectionTunnelConfig& config_;
  std::function<UpstreamHandle()> upstream_;
  bool* deleted_;
  bool* deleted_during_handover_;
  const proxy::KeyGrant* grant_;
  network::ReadFilterCallbacks* callbacks_ = nullptr;
  RequestTrace trace_;
};

class ConnectionTunnelTest : public testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(client_listener_.ok());
    ASSERT_TRUE(origin_listener_.ok());
    listener_stats_ = listenerTunnelStats("ct_test");
    const stats::Scope scope("ct_test_codec");
    config_.listener_name = "ct_test";
    config_.listener_stats = &listener_stats_;
    config_.idle_timeout = scope.counter("tunnel_idle_timeout", "");
    config_.upstream_reset = scope.counter("upstream_reset", "");
    config_.downstream_reset = scope.counter("downstream_reset", "");
    config_.tunnels_active = scope.gauge("tunnels_active", "");
  }
  void TearDown() override {
    chain_.reset();
    runFor(dispatcher_, milliseconds(1));
  }

  // A client socket ↔ its connection in a one-filter chain whose codec hands over on "GO\n".
  void open(const proxy::KeyGrant* grant = nullptr) {
    int client_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(0, ::connect(client_fd, client_listener_.address().sockaddr_ptr(),
                           client_listener_.address().length()));
    client_.emplace(client_fd);
    const int accepted = client_listener_.accept();
    ASSERT_GE(accepted, 0);
    auto upstream = [this] {
      ConnectionPtr up = Connection::connectTo(dispatcher_, origin_listener_.address());
      EXPECT_NE(nullptr, up);
      origin_.emplace(origin_listener_.accept());
      return UpstreamHandle(std::move(up), nullptr, UpstreamInfo{});
    };
    chain_ = std::make_unique<OneFilterChain>(
        std::make_unique<Connection>(dispatcher_, accepted, client_listener_.address()),
        std::make_unique<HandingCodec>(config_, upstream, &codec_deleted_,
                                       &codec_deleted_during_handover_, grant));
  }

  bool run(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
    return test::runWithPeers(dispatcher_, client_, origin_, done, timeout);
  }

  event::Dispatcher dispatcher_;
  test::LoopbackListener client_listener_;
  test::LoopbackListener origin_listener_;
  TunnelStats listener_stats_;
  ConnectionTunnelConfig config_;
  std::optional<test::RawPeer> client_;
  std::optional<test::RawPeer> origin_;
  std::unique_ptr<OneFilterChain> chain_;
  bool codec_deleted_ = false;
  bool codec_deleted_during_handover_ = true;
};

TEST_F(ConnectionTunnelTest, TakesTheCodecsPlaceAndCarriesTheRequestToItsEnd) {
  const uint64_t records0 = counterValue("request_record.total");
  const uint64_t to_origin0 = counterValue("request_record.bytes_to_origin");
  const uint64_t from_origin0 = counterValue("request_record.bytes_from_origin");
  const int64_t active0 = gaugeValue("ct_test_codec.tunnels_active");
  const int64_t relays0 = gaugeValue("tunnel.listener.ct_test.tunnels_active");
  open();
  client_->send("GO\nearly");
  ASSERT_TRUE(run([&] { return origin_ && origin_->received == "early"; }));
  EXPECT_EQ(1, chain_->replaced);
  EXPECT_FALSE(codec_deleted_during_handover_) << "deleted under its own call";
  EXPECT_TRUE(codec_deleted_);
  EXPECT_EQ(active0 + 1, gaugeValue("ct_test_codec.tunnels_active"));
  EXPECT_EQ(relays0 + 1, gaugeValue("tunnel.listener.ct_test.tunnels_active"));

  origin_->send("answer");
  ASSERT_TRUE(run([&] { return client_->received == "answer"; }));
  client_->send(" more");
  ASSERT_TRUE(run([&] { return origin_->received == "early more"; }));
  EXPECT_EQ(records0, counterValue("request_record.total")) << "no record while it runs";

  // Both ends half-close: the tunnel is done, the client connection closes, one record.
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return client_->eof; }));
  client_->shutWrite();
  ASSERT_TRUE(run([&] { return chain_->closed && origin_->eof; }));
  ASSERT_TRUE(run([&] { return counterValue("request_record.total") == records0 + 1; }));
  EXPECT_EQ(to_origin0 + 10, counterValue("request_record.bytes_to_origin"));
  EXPECT_EQ(from_origin0 + 6, counterValue("request_record.bytes_from_origin"));
  EXPECT_EQ(active0, gaugeValue("ct_test_codec.tunnels_active"));
  EXPECT_EQ(relays0, gaugeValue("tunnel.listener.ct_test.tunnels_active"));
  chain_.reset();
  EXPECT_EQ(records0 + 1, counterValue("request_record.total")) << "emitted once";
}

TEST_F(ConnectionTunnelTest, DestinationResetFailsTheRecordAndCountsForTheCodec) {
  const uint64_t resets0 = counterValue("ct_test_codec.upstream_reset");
  const uint64_t denied0 = counterValue("request_record.denied");
  open();
  client_->send("GO\n");
  ASSERT_TRUE(run([&] { return origin_.has_value() && chain_->replaced == 1; }));
  runFor(dispatcher_, milliseconds(5));
  origin_->reset_close();
  origin_.reset();
  ASSERT_TRUE(run([&] { return chain_->closed; }));
  EXPECT_EQ(resets0 + 1, counterValue("ct_test_codec.upstream_reset"));
  EXPECT_EQ(denied0 + 1, counterValue("request_record.denied"));
  ASSERT_TRUE(run([&] { return client_->eof || client_->reset; }));
}

TEST_F(ConnectionTunnelTest, ARevokedKeyClosesTheTunnel) {
  proxy::KeyGrant grant("alice", proxy::KeyDigest{});
  open(&grant);
  client_->send("GO\n");
  ASSERT_TRUE(run([&] { return origin_.has_value() && chain_->replaced == 1; }));
  EXPECT_EQ(0u, chain_->filter().onKeysRevoked()) << "the key is still valid";
  grant.revoke();
  EXPECT_EQ(1u, chain_->filter().onKeysRevoked());
  ASSERT_TRUE(run([&] { return chain_->closed && origin_->eof && client_->eof; }));
  EXPECT_EQ(0u, chain_->filter().onKeysRevoked()) << "counted once";
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
