#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "source/common/event/dispatcher.h"
#include "source/common/http/h1_parser.h"
#include "source/common/http/proxy_stats.h"
#include "source/common/http/proxy_status.h"
#include "source/common/network/filter.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/connection_tunnel.h"
#include "source/common/upstream/origin_exchange.h"
#include "source/common/upstream/request_record.h"

namespace sluice {
namespace filters {
namespace http1proxy {

// The shared HTTP proxy stats (http/proxy_stats.h) and the HTTP/1.1 codec's own.
struct Http1Stats : http::ProxyStats {
  stats::Counter rq_total;  // every request head parsed
  // WebSocket upgrades (HTTP/1.1 Upgrade relayed to the origin).
  stats::Counter rq_upgrade;        // websocket upgrade requests relayed to an origin
  stats::Counter upgrade_rejected;  // refused by the proxy (400): body, not GET, wss://, ...
  stats::Counter upgrade_refused;   // the origin answered with a final status instead of 101
  stats::Counter upgrade_switched;  // 101 relayed: the connection became a tunnel
  stats::Gauge upgrades_active;     // upgraded connections open (also in tunnels_active)
};

// Immutable, shared by every worker: built once from Http1ProxyConfig.
struct Http1Config {
  http1::ParseLimits request_limits;
  std::chrono::milliseconds request_head_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  uint64_t max_request_body_bytes = 0;  // 0: unlimited
  // The exchange with origins: response limits, the request body deadline, stats (pointing at
  // `stats` below).
  upstream::ExchangeOptions exchange;
  // Relay WebSocket upgrades (absolute-form ws:// or http:// with Upgrade: websocket). When
  // off, Upgrade is stripped as any hop-by-hop header and ws:// URLs get 400.
  bool websocket = true;
  std::vector<proxy::RequestFilterSpec> request_filters;
  Http1Stats stats;
  upstream::TunnelStats tunnel_stats;  // tunnel.listener.<listener>.*
  // How the tunnels the codec's connections become are counted and recorded (pointing at the
  // stats above).
  upstream::ConnectionTunnelConfig tunnel;
  std::string listener_name;          // for the end-of-request records
  stats::Histogram request_duration;  // request.<listener>.http1.duration_seconds
};
using Http1ConfigSharedPtr = std::shared_ptr<const Http1Config>;

// The HTTP/1.1 forward-proxy codec of one client connection: parses request heads in place,
// passes each request through the request filters, relays absolute-form requests over pooled
// origin connections (bodies streamed, never buffered whole) and turns CONNECT into a tunnel.
// Requests on a connection are served one at a time, in order; pipelined ones wait unread.
// How long a keep-alive connection idle at a drain waits for a request already on its way.
inline constexpr std::chrono::milliseconds kDrainIdleGrace{1000};

class Http1ProxyFilter : public network::ReadFilter,
                         public proxy::RequestSink,
                         public proxy::RequestHeaders,
                         public upstream::ExchangeOwner {
 public:
  static constexpr uint32_t kMaxAddedHeaders = 16;
  // What one request needs from its head being parsed until that head is sent (or refused).
  struct PendingRequest : memory::SlabAllocatedPassing {
    http1::RequestHead head;
    proxy::ProxyRequest request;
    upstream::AddedField added[kMaxAddedHeaders];
    uint32_t added_count = 0;
    std::string host;  // Host for an HTTP/1.0 request that has none
  };

  explicit Http1ProxyFilter(Http1ConfigSharedPtr config);
  ~Http1ProxyFilter() override;

  // network::ReadFilter
  void initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) override;
  network::FilterStatus onNewConnection() override;
  network::FilterStatus onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;
  void onDrain() override;
  uint32_t onKeysRevoked() override;
  void onPeerEndWhileReadDisabled() override;

  // proxy::RequestSink
  void onUpstreamReady(upstream::UpstreamHandle upstream) override;
  void onDenied(proxy::Denial denial, std::string_view reason) override;

  // proxy::RequestHeaders
  std::string_view get(std::string_view name) const override;
  void remove(std::string_view name) override;
  bool add(std::string_view name, std::string_view value) override;

 private:
  enum class State : uint8_t {
    ReadingHead,  // waiting for (the rest of) a request head
    Filtering,    // request filters running; the client is not read
    Forwarding,   // request sent or being sent; relaying the response
    // Also once the connection became a tunnel (CONNECT established, upgrade accepted): the
    // codec gave its place to an upstream::ConnectionTunnel and is about to go.
    Closed,
  };

  network::Connection& downstream() { return callbacks_->connection(); }
  void processHead(buffer::Buffer& data);
  void startRequest();
  // The request head (and what came of the body) goes to the origin through the exchange.
  void sendRequest(upstream::UpstreamHandle&& upstream);
  void relayRequestBody(buffer::Buffer& data, bool end_stream);
  // After the exchange took body bytes: refuse a broken or oversized body, read on or stop.
  // reading: the client is being read now (not while the request was being started).
  void afterBody(upstream::BodyProgress progress, bool client_ended, bool reading);
  // The origin answered: the request head kept for a retry leaves the client's buffer.
  void forgetHead();

  // upstream::ExchangeOwner
  void onInterimResponse(const http1::ResponseHead& head) override;
  void onResponseHead(const http1::ResponseHead& head) override;
  void onResponseBody(buffer::Buffer& body, bool end) override;
  void onUpgraded(const http1::ResponseHead& head, upstream::UpstreamHandle upstream,
                  buffer::Buffer& early, bool origin_ended) override;
  void onRetry() override;
  void onExchangeError(upstream::ExchangeError error, std::string_view detail) override;
  void onOriginBackedUp(bool backed_up) override;

  // CONNECT answered or upgrade accepted: the connection is a tunnel from here on, served by
  // an upstream::ConnectionTunnel in this codec's place. Bytes the client sent behind its head
  // (still in its read buffer) go first.
  void startTunnel(upstream::UpstreamHandle upstream, bool upgrade, bool upstream_ended);
  void finishExchange();
  void onTimer();
  void armHeadTimer();
  // A reply made by the proxy itself, its Proxy-Status naming `error`; closes the connection
  // after it when close is set. retry_after: seconds for a Retry-After field (0: none).
  void sendLocalReply(uint16_t status, http::ProxyError error, std::string_view detail, bool close,
                      bool auth_challenge = false, uint32_t retry_after = 0);
  void releaseUpstream();
  void closeAll();
  void releaseHead();
  // The request in flight ends: its record goes out (once).
  void endRecord();

  Http1ConfigSharedPtr config_;
  network::ReadFilterCallbacks* callbacks_ = nullptr;
  // Built in onNewConnection (they need the worker); let go when the connection becomes a
  // tunnel.
  std::unique_ptr<proxy::RequestFilterChain> chain_;
  // The exchange with the origin of an http:// request, while it is forwarded (from the
  // worker's free list); it holds the origin connection.
  upstream::OriginExchangePtr exchange_;
  // The authenticated key's tunnel counters, for a tunnel the request becomes.
  const upstream::TunnelStats* key_tunnel_stats_ = nullptr;
  std::optional<event::Timer> timer_;

  // The request in flight. The head lives in a per-worker pooled object while it is needed and
  // points into the client's read buffer, which is not drained until the head is sent.
  PendingRequest* pending_ = nullptr;

  // What the request in flight leaves in its end-of-request record.
  upstream::RequestTrace trace_;

  uint32_t head_size_ = 0;
  uint32_t head_scanned_ = 0;  // bytes of the next head already looked at
  State state_ = State::ReadingHead;
  http1::Method method_ = http1::Method::Other;
  http1::BodyFraming request_framing_ = http1::BodyFraming::None;
  bool client_keep_alive_ = true;
  bool client_http10_ = false;
  bool head_in_buffer_ = false;  // the request head is still at the front of the client buffer
  bool retried_ = false;
  bool head_timer_armed_ = false;
  bool draining_ = false;
  // The request in flight is a WebSocket upgrade: sent with Upgrade / Connection: Upgrade on a
  // fresh origin connection that never goes back to the pool.
  bool upgrade_ = false;
  // The response in flight ends with Connection: close (the client is closed after it).
  bool response_close_client_ = false;
  // The client half-closed (while its request was served, or before its tunnel started).
  bool downstream_ended_ = false;
};

}  // namespace http1proxy
}  // namespace filters
}  // namespace sluice
