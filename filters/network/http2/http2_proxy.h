#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "filters/network/http2/codec.h"
#include "filters/network/http2/flood.h"
#include "filters/network/http2/headers.h"
#include "source/common/event/dispatcher.h"
#include "source/common/http/h1_parser.h"
#include "source/common/http/proxy_stats.h"
#include "source/common/network/filter.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/origin_exchange.h"
#include "source/common/upstream/request_record.h"
#include "source/common/upstream/tunnel_relay.h"

namespace sluice {
namespace filters {
namespace http2proxy {

// The shared HTTP proxy stats (http/proxy_stats.h) and the HTTP/2 codec's own.
struct Http2Stats : http::ProxyStats {
  stats::Counter cx_total;  // HTTP/2 connections served
  stats::Gauge cx_active;
  stats::Counter streams_total;  // request streams opened by clients
  stats::Gauge streams_active;
  stats::Counter streams_refused;           // over max_concurrent_streams
  stats::Counter rq_websocket;              // RFC 8441 websocket streams bridged to an Upgrade
  stats::Counter websocket_switched;        // the origin's 101 accepted: the stream is a tunnel
  stats::Counter websocket_refused;         // the origin answered with a final status instead
  stats::Counter websocket_rejected;        // a bad 101 (wrong protocol or accept key): 502
  stats::Counter rq_header_list_too_large;  // 431
  stats::Counter upstream_read_paused;      // an upstream was paused: client window or queue full
  stats::Counter connection_read_paused;    // every upstream of a connection paused: its queue full
  stats::Counter preface_timeout;           // no connection preface within preface_timeout
  // Protections:
  stats::Counter rapid_reset;           // GOAWAY: too many client resets per window
  stats::Counter control_flood;         // GOAWAY: SETTINGS/PING/PRIORITY flood
  stats::Counter empty_data_flood;      // GOAWAY: empty DATA frames
  stats::Counter continuation_flood;    // GOAWAY: CONTINUATION frames
  stats::Counter protocol_error;        // frames nghttp2 rejected
  stats::Counter protocol_error_flood;  // GOAWAY: too many protocol errors
  stats::Counter codec_error;           // connections ended by a fatal codec error
  stats::Counter goaway_drain;          // GOAWAY sent on drain
};

// Immutable, shared by every worker: built once from Http2ProxyConfig.
struct Http2Config {
  http2::CodecSettings codec;
  http2::FloodLimits flood;
  uint32_t max_request_headers = 100;
  uint64_t max_request_body_bytes = 0;  // 0: unlimited
  uint32_t stream_buffer_bytes = 256 * 1024;
  uint32_t connection_buffer_bytes = 1024 * 1024;
  std::chrono::milliseconds preface_timeout{10000};
  bool disable_websocket = false;  // no RFC 8441 (SETTINGS_ENABLE_CONNECT_PROTOCOL not sent)
  std::chrono::milliseconds idle_timeout{60000};
  // The exchange with origins: response limits, the request body deadline (also the header
  // block's), stats (pointing at `stats` below).
  upstream::ExchangeOptions exchange;
  std::vector<proxy::RequestFilterSpec> request_filters;
  Http2Stats stats;
  upstream::TunnelStats tunnel_stats;  // tunnel.listener.<listener>.*
  std::string listener_name;           // for the end-of-request records
  stats::Histogram request_duration;   // request.<listener>.http2.duration_seconds
};
using Http2ConfigSharedPtr = std::shared_ptr<const Http2Config>;

// The HTTP/2 server codec of one client connection (h2c with prior knowledge, or h2 over TLS:
// it only sees the connection's bytes). Every stream is one proxy request through its own
// request filter chain: http:// requests are relayed as HTTP/1.1 over the worker's keep-alive
// pool, CONNECT streams become tunnels. Flow control is the backpressure: request bytes are
// credited back to the client only as the upstream takes them, and an upstream is not read
// while its stream's queue toward the client is full.
class Http2ProxyFilter : public network::ReadFilter, public http2::ServerCodecCallbacks {
 public:
  explicit Http2ProxyFilter(Http2ConfigSharedPtr config);
  ~Http2ProxyFilter() override;

  // network::ReadFilter
  void initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) override;
  network::FilterStatus onNewConnection() override;
  network::FilterStatus onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override {}
  void onBelowWriteLowWatermark() override;
  void onDrain() override;
  uint32_t onKeysRevoked() override;

  // http2::ServerCodecCallbacks
  bool onFrameHeader(const http2::FrameInfo& frame) override;
  bool onFrame(const http2::FrameInfo& frame) override;
  void* onStreamBegin(int32_t stream_id) override;
  bool onHeader(void* stream, std::string_view name, std::string_view value) override;
  void onRequestHeaders(void* stream, bool end_stream) override;
  void onRequestData(void* stream, const uint8_t* data, size_t length) override;
  void onRequestEnd(void* stream) override;
  bool onStreamReset(void* stream, http2::ErrorCode code) override;
  void onResponseSent(void* stream) override;
  void onStreamClose(void* stream, http2::ErrorCode code) override;
  bool onProtocolError(const http2::FrameInfo& frame) override;
  size_t readResponseBody(void* stream, uint8_t* buf, size_t max, bool& eof) override;

  class Stream;

 private:
  friend class Stream;
  network::Connection& downstream() { return callbacks_->connection(); }
  // Output is serialized once per loop turn: callbacks only ask for a flush.
  void scheduleFlush();
  void flush();
  void onIdleTimer();
  void updateIdleTimer();
  bool onFlood(http2::Flood flood);
  void closeConnection();
  // GOAWAY with this error, flushed, then close.
  void terminate(http2::ErrorCode code);
  // GOAWAY with the last stream taken; in-flight streams finish, then the connection closes.
  void startDrain();
  Stream* acquireStream();
  void releaseStream(Stream* stream);
  // Response bytes entering or leaving the streams' queues toward the client: past
  // connection_buffer_bytes every stream's origin is paused, until the total is back to half.
  void onQueued(size_t added);
  void onDequeued(size_t removed);

  Http2ConfigSharedPtr config_;
  network::ReadFilterCallbacks* callbacks_ = nullptr;
  http2::ServerCodecPtr codec_;
  http2::FloodGuard flood_;
  std::optional<event::Timer> flush_timer_;
  std::optional<event::Timer> idle_timer_;
  // Stream objects (each with its filter chain) are kept for reuse on this connection.
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<Stream*> free_streams_;
  uint32_t open_streams_ = 0;
  size_t queued_bytes_ = 0;  // response bytes in every stream's queue
  bool queue_full_ = false;  // over connection_buffer_bytes: origins paused
  bool preface_received_ = false;
  bool in_receive_ = false;
  bool in_flush_ = false;
  bool flush_pending_ = false;
  // The key of the connection's latest request: once a reload revokes it, a connection left
  // without streams closes.
  const proxy::KeyGrant* last_grant_ = nullptr;
  bool closed_ = false;
  bool draining_ = false;
};

}  // namespace http2proxy
}  // namespace filters
}  // namespace sluice
