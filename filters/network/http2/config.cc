#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/http2.pb.h"
#include "extensions/registry.h"
#include "filters/network/http2/http2_proxy.h"
#include "source/common/common/duration.h"

namespace sluice {
namespace filters {
namespace http2proxy {

namespace {

Http2Stats makeStats(const std::string& chain) {
  stats::Store& store = stats::Store::get();
  std::string p = absl::StrFormat("http2.%s.", stats::sanitizeNamePart(chain));
  auto c = [&](const char* name) { return store.counter(p + name); };
  auto g = [&](const char* name) { return store.gauge(p + name); };
  Http2Stats s;
  s.cx_total = c("cx_total");
  s.cx_active = g("cx_active");
  s.streams_total = c("streams_total");
  s.streams_active = g("streams_active");
  s.streams_refused = c("streams_refused");
  s.rq_forward = c("rq_forward");
  s.rq_connect = c("rq_connect");
  s.rq_websocket = c("rq_websocket");
  s.websocket_switched = c("websocket_switched");
  s.websocket_refused = c("websocket_refused");
  s.websocket_rejected = c("websocket_rejected");
  s.rq_rejected = c("rq_rejected");
  s.rq_header_list_too_large = c("rq_header_list_too_large");
  s.rq_head_timeout = c("rq_head_timeout");
  s.rq_body_too_large = c("rq_body_too_large");
  s.rq_body_timeout = c("rq_body_timeout");
  s.rq_retry = c("rq_retry");
  s.rs_1xx = c("rs_1xx");
  s.rs_2xx = c("rs_2xx");
  s.rs_3xx = c("rs_3xx");
  s.rs_4xx = c("rs_4xx");
  s.rs_5xx = c("rs_5xx");
  s.upstream_rs_bad = c("upstream_rs_bad");
  s.upstream_rs_timeout = c("upstream_rs_timeout");
  s.upstream_reset = c("upstream_reset");
  s.downstream_reset = c("downstream_reset");
  s.downstream_idle_timeout = c("downstream_idle_timeout");
  s.tunnel_idle_timeout = c("tunnel_idle_timeout");
  s.tunnels_active = g("tunnels_active");
  s.bytes_upstream_tx = c("upstream_bytes_tx");
  s.bytes_upstream_rx = c("upstream_bytes_rx");
  s.upstream_read_paused = c("upstream_read_paused");
  s.rapid_reset = c("rapid_reset");
  s.control_flood = c("control_flood");
  s.empty_data_flood = c("empty_data_flood");
  s.continuation_flood = c("continuation_flood");
  s.protocol_error = c("protocol_error");
  s.protocol_error_flood = c("protocol_error_flood");
  s.codec_error = c("codec_error");
  s.goaway_drain = c("goaway_drain");
  return s;
}

struct Range {
  const char* field;
  uint64_t value;
  uint64_t min;
  uint64_t max;
};

class Http2ProxyFactory : public extensions::NetworkFilterFactory {
 public:
  using Category = extensions::NetworkFilterFactory;

  std::string name() const override { return "sluice.http2"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::Http2ProxyConfig>();
  }

  absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& message,
      extensions::FactoryContext& context) const override {
    const auto& proto = static_cast<const sluice::filters::v1::Http2ProxyConfig&>(message);
    const Range ranges[] = {
        {"max_concurrent_streams", proto.max_concurrent_streams(), 1, 10000},
        {"max_header_list_size", proto.max_header_list_size(), 1024, 1 << 20},
        {"header_table_size", proto.header_table_size(), 1, 1 << 16},
        {"initial_stream_window_size", proto.initial_stream_window_size(), 1024, (1u << 31) - 1},
        {"initial_connection_window_size", proto.initial_connection_window_size(), 65535,
         (1u << 31) - 1},
        {"max_request_headers", proto.max_request_headers(), 1, http1::kMaxHeaderCapacity},
        {"max_response_head_bytes", proto.max_response_head_bytes(), 1024, 1 << 20},
        {"stream_buffer_bytes", proto.stream_buffer_bytes(), 16384, 64u << 20},
        {"max_continuation_frames", proto.max_continuation_frames(), 1, 1000},
        {"max_outbound_control_frames", proto.max_outbound_control_frames(), 16, 100000},
    };
    for (const Range& r : ranges) {
      if (r.value != 0 && (r.value < r.min || r.value > r.max)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.%s: %d is out of range [%d, %d]", context.path,
                            r.field, r.value, r.min, r.max));
      }
    }
    auto config = std::make_shared<Http2Config>();
    http2::CodecSettings& codec = config->codec;
    auto set = [](uint32_t value, uint32_t& field) {
      if (value != 0) field = value;
    };
    set(proto.max_concurrent_streams(), codec.max_concurrent_streams);
    set(proto.max_header_list_size(), codec.max_header_list_size);
    set(proto.header_table_size(), codec.header_table_size);
    set(proto.initial_stream_window_size(), codec.initial_stream_window);
    set(proto.initial_connection_window_size(), codec.connection_window);
    set(proto.max_outbound_control_frames(), codec.max_outbound_control_frames);
    set(proto.max_request_headers(), config->max_request_headers);
    config->response_limits.max_headers = http1::kMaxHeaderCapacity;
    set(proto.max_response_head_bytes(), config->response_limits.max_head_bytes);
    set(proto.stream_buffer_bytes(), config->stream_buffer_bytes);
    config->max_request_body_bytes = proto.max_request_body_bytes();
    config->disable_websocket = proto.disable_websocket();
    codec.enable_connect_protocol = !proto.disable_websocket();
    config->idle_timeout =
        durationOr(proto.has_idle_timeout(), proto.idle_timeout(), config->idle_timeout);
    config->request_body_timeout =
        durationOr(proto.has_request_body_timeout(), proto.request_body_timeout(),
                   config->request_body_timeout);
    http2::FloodLimits& flood = config->flood;
    flood.window = durationOr(proto.has_flood_window(), proto.flood_window(), flood.window);
    set(proto.max_rapid_resets(), flood.max_rapid_resets);
    set(proto.max_control_frames(), flood.max_control_frames);
    set(proto.max_empty_data_frames(), flood.max_empty_data_frames);
    set(proto.max_continuation_frames(), flood.max_continuation_frames);
    set(proto.max_protocol_errors(), flood.max_protocol_errors);
    // nghttp2's own CONTINUATION limit backs ours up (one above, so ours fires first).
    codec.max_continuation_frames = flood.max_continuation_frames + 1;
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    config->stats = makeStats(context.chain_name);
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
