#include "api/sluice/filters/v1/http2.pb.h"
#include "filters/network/http2/http2_proxy.h"
#include "source/common/common/duration.h"
#include "source/common/config/filter_config.h"
#include "source/common/extensions/registry.h"
#include "source/common/http/proxy_stats.h"

namespace sluice {
namespace filters {
namespace http2proxy {

namespace {

Http2Stats makeStats(const std::string& chain) {
  const stats::Scope scope("http2", "chain", chain);
  Http2Stats s;
  http::registerProxyStats(scope, s);
  s.cx_total = scope.counter("cx_total", "HTTP/2 connections served.");
  s.cx_active = scope.gauge("cx_active", "HTTP/2 connections open.");
  s.streams_total = scope.counter("streams_total", "Request streams opened by clients.");
  s.streams_active = scope.gauge("streams_active", "Request streams open.");
  s.streams_refused =
      scope.counter("streams_refused", "Streams refused over max_concurrent_streams.");
  s.rq_websocket =
      scope.counter("rq_websocket", "RFC 8441 WebSocket streams bridged to an HTTP/1.1 upgrade.");
  s.websocket_switched = scope.counter(
      "websocket_switched", "WebSocket streams whose origin 101 was accepted: now tunnels.");
  s.websocket_refused = scope.counter(
      "websocket_refused", "WebSocket streams the origin answered with a final status instead.");
  s.websocket_rejected = scope.counter("websocket_rejected",
                                       "WebSocket streams with a bad 101 from the origin (502).");
  s.rq_header_list_too_large =
      scope.counter("rq_header_list_too_large", "Streams whose header list was too large (431).");
  s.upstream_read_paused = scope.counter("upstream_read_paused",
                                         "Upstreams paused: client window or stream queue full.");
  s.connection_read_paused = scope.counter(
      "connection_read_paused", "Connections whose every upstream was paused: queue full.");
  s.preface_timeout = scope.counter(
      "preface_timeout", "Connections without a connection preface within preface_timeout.");
  s.rapid_reset = scope.counter(
      "rapid_reset", "Connections ended (GOAWAY) for too many stream resets per window.");
  s.control_flood = scope.counter(
      "control_flood", "Connections ended (GOAWAY) for a SETTINGS, PING or PRIORITY flood.");
  s.empty_data_flood =
      scope.counter("empty_data_flood", "Connections ended (GOAWAY) for empty DATA frames.");
  s.continuation_flood = scope.counter(
      "continuation_flood", "Connections ended (GOAWAY) for too many CONTINUATION frames.");
  s.protocol_error = scope.counter("protocol_error", "Frames the HTTP/2 codec rejected.");
  s.protocol_error_flood = scope.counter(
      "protocol_error_flood", "Connections ended (GOAWAY) for too many protocol errors.");
  s.codec_error = scope.counter("codec_error", "Connections ended by a fatal codec error.");
  s.goaway_drain = scope.counter("goaway_drain", "GOAWAY frames sent on drain.");
  return s;
}

class Http2ProxyFactory : public extensions::FactoryBase<extensions::NetworkFilterFactory,
                                                         sluice::filters::v1::Http2ProxyConfig> {
 public:
  std::string name() const override { return "sluice.http2"; }
  absl::StatusOr<network::NetworkFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::Http2ProxyConfig& proto,
      extensions::FactoryContext& context) const override {
    absl::Status limits = config::checkLimits(
        context.path,
        {
            {"max_concurrent_streams", proto.max_concurrent_streams(), 1, 10000},
            {"max_header_list_size", proto.max_header_list_size(), 1024, 1 << 20},
            {"header_table_size", proto.header_table_size(), 1, 1 << 16},
            {"initial_stream_window_size", proto.initial_stream_window_size(), 1024,
             (1u << 31) - 1},
            {"initial_connection_window_size", proto.initial_connection_window_size(), 65535,
             (1u << 31) - 1},
            {"max_request_headers", proto.max_request_headers(), 1, http1::kMaxHeaderCapacity},
            {"max_response_head_bytes", proto.max_response_head_bytes(), 1024, 1 << 20},
            {"stream_buffer_bytes", proto.stream_buffer_bytes(), 16384, 64u << 20},
            {"connection_buffer_bytes", proto.connection_buffer_bytes(), 65536, 1u << 30},
            {"max_continuation_frames", proto.max_continuation_frames(), 1, 1000},
            {"max_outbound_control_frames", proto.max_outbound_control_frames(), 16, 100000},
        });
    if (!limits.ok()) return limits;
    auto config = std::make_shared<Http2Config>();
    http2::CodecSettings& codec = config->codec;
    config::setIfNonZero(proto.max_concurrent_streams(), codec.max_concurrent_streams);
    config::setIfNonZero(proto.max_header_list_size(), codec.max_header_list_size);
    config::setIfNonZero(proto.header_table_size(), codec.header_table_size);
    config::setIfNonZero(proto.initial_stream_window_size(), codec.initial_stream_window);
    config::setIfNonZero(proto.initial_connection_window_size(), codec.connection_window);
    config::setIfNonZero(proto.max_outbound_control_frames(), codec.max_outbound_control_frames);
    config::setIfNonZero(proto.max_request_headers(), config->max_request_headers);
    config->exchange.response_limits.max_headers = http1::kMaxHeaderCapacity;
    config::setIfNonZero(proto.max_response_head_bytes(),
                         config->exchange.response_limits.max_head_bytes);
    config->exchange.response_body = upstream::ResponseBody::Payload;
    config::setIfNonZero(proto.stream_buffer_bytes(), config->stream_buffer_bytes);
    config::setIfNonZero(proto.connection_buffer_bytes(), config->connection_buffer_bytes);
    config->preface_timeout =
        durationOr(proto.has_preface_timeout(), proto.preface_timeout(), config->preface_timeout);
    config->max_request_body_bytes = proto.max_request_body_bytes();
    config->disable_websocket = proto.disable_websocket();
    codec.enable_connect_protocol = !proto.disable_websocket();
    config->idle_timeout =
        durationOr(proto.has_idle_timeout(), proto.idle_timeout(), config->idle_timeout);
    config->exchange.request_body_timeout =
        durationOr(proto.has_request_body_timeout(), proto.request_body_timeout(),
                   config->exchange.request_body_timeout);
    http2::FloodLimits& flood = config->flood;
    flood.window = durationOr(proto.has_flood_window(), proto.flood_window(), flood.window);
    config::setIfNonZero(proto.max_rapid_resets(), flood.max_rapid_resets);
    config::setIfNonZero(proto.max_control_frames(), flood.max_control_frames);
    config::setIfNonZero(proto.max_empty_data_frames(), flood.max_empty_data_frames);
    config::setIfNonZero(proto.max_continuation_frames(), flood.max_continuation_frames);
    config::setIfNonZero(proto.max_protocol_errors(), flood.max_protocol_errors);
    // nghttp2's own CONTINUATION limit backs ours up (one above, so ours fires first).
    codec.max_continuation_frames = flood.max_continuation_frames + 1;
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    config->stats = makeStats(context.chain_name);
    config->exchange.stats = &config->stats;
    config->tunnel_stats = upstream::listenerTunnelStats(context.listener_name);
    config->listener_name = context.listener_name;
    config->request_duration =
        upstream::requestDurationHistogram(context.listener_name, proxy::Protocol::Http2);
    Http2ConfigSharedPtr shared = std::move(config);
    return network::NetworkFilterFactoryCb([shared](network::FilterManager& manager) {
      manager.addReadFilter(std::make_unique<Http2ProxyFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(Http2ProxyFactory);

}  // namespace
}  // namespace http2proxy
}  // namespace filters
}  // namespace sluice
