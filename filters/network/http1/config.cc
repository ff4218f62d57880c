#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/http1.pb.h"
#include "extensions/registry.h"
#include "filters/network/http1/http1_proxy.h"
#include "source/common/common/duration.h"

namespace sluice {
namespace filters {
namespace http1proxy {

namespace {

Http1Stats makeStats(const std::string& chain) {
  stats::Store& store = stats::Store::get();
  std::string p = absl::StrFormat("http1.%s.", stats::sanitizeNamePart(chain));
  auto c = [&](const char* name) { return store.counter(p + name); };
  Http1Stats s;
  s.rq_total = c("rq_total");
  s.rq_forward = c("rq_forward");
  s.rq_connect = c("rq_connect");
  s.rq_rejected = c("rq_rejected");
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
  s.downstream_idle_timeout = c("downstream_idle_timeout");
  s.downstream_reset = c("downstream_reset");
  s.tunnel_idle_timeout = c("tunnel_idle_timeout");
  s.tunnels_active = store.gauge(p + "tunnels_active");
  s.bytes_upstream_tx = c("upstream_bytes_tx");
  s.bytes_upstream_rx = c("upstream_bytes_rx");
  s.rq_upgrade = c("rq_upgrade");
  s.upgrade_rejected = c("upgrade_rejected");
  s.upgrade_refused = c("upgrade_refused");
  s.upgrade_switched = c("upgrade_switched");
  s.upgrades_active = store.gauge(p + "upgrades_active");
  return s;
}

absl::Status checkLimit(const std::string& path, const char* field, uint32_t value, uint32_t min,
                        uint32_t max) {
  if (value != 0 && (value < min || value > max)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.typed_config.%s: %d is out of range [%d, %d]", path, field, value, min, max));
  }
  return absl::OkStatus();
}

class Http1ProxyFactory : public extensions::NetworkFilterFactory {
 public:
  using Category = extensions::NetworkFilterFactory;

  std::string name() const override { return "sluice.http1"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::Http1ProxyConfig>();
  }

  absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& message,
      extensions::FactoryContext& context) const override {
    const auto& proto = static_cast<const sluice::filters::v1::Http1ProxyConfig&>(message);
    for (const auto& [field, value, min, max] :
         {std::tuple<const char*, uint32_t, uint32_t, uint32_t>{
              "max_request_head_bytes", proto.max_request_head_bytes(), 1024, 1 << 20},
          {"max_response_head_bytes", proto.max_response_head_bytes(), 1024, 1 << 20},
          {"max_request_headers", proto.max_request_headers(), 1, http1::kMaxHeaderCapacity}}) {
      absl::Status s = checkLimit(context.path, field, value, min, max);
      if (!s.ok()) return s;
    }
    auto config = std::make_shared<Http1Config>();
    if (proto.max_request_head_bytes() != 0) {
      config->request_limits.max_head_bytes = proto.max_request_head_bytes();
    }
    if (proto.max_request_headers() != 0) {
      config->request_limits.max_headers = proto.max_request_headers();
    }
    config->response_limits.max_headers = http1::kMaxHeaderCapacity;
    if (proto.max_response_head_bytes() != 0) {
      config->response_limits.max_head_bytes = proto.max_response_head_bytes();
    }
    config->request_head_timeout =
        durationOr(proto.has_request_head_timeout(), proto.request_head_timeout(),
                   config->request_head_timeout);
    config->idle_timeout =
        durationOr(proto.has_idle_timeout(), proto.idle_timeout(), config->idle_timeout);
    config->max_request_body_bytes = proto.max_request_body_bytes();
    config->request_body_timeout =
        durationOr(proto.has_request_body_timeout(), proto.request_body_timeout(),
                   config->request_body_timeout);
    config->websocket = !proto.disable_websocket();
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    config->stats = makeStats(context.chain_name);
    Http1ConfigSharedPtr shared = std::move(config);
    return network::NetworkFilterFactoryCb([shared](network::FilterManager& manager) {
      manager.addReadFilter(std::make_unique<Http1ProxyFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(Http1ProxyFactory);

}  // namespace
}  // namespace http1proxy
}  // namespace filters
}  // namespace sluice
