#include "api/sluice/filters/v1/http1.pb.h"
#include "filters/network/http1/http1_proxy.h"
#include "source/common/common/duration.h"
#include "source/common/config/filter_config.h"
#include "source/common/extensions/registry.h"
#include "source/common/http/proxy_stats.h"

namespace sluice {
namespace filters {
namespace http1proxy {

namespace {

Http1Stats makeStats(const std::string& chain) {
  const stats::Scope scope("http1", "chain", chain);
  Http1Stats s;
  http::registerProxyStats(scope, s);
  s.rq_total = scope.counter("rq_total", "Request heads parsed.");
  s.rq_upgrade = scope.counter("rq_upgrade", "WebSocket upgrade requests relayed to an origin.");
  s.upgrade_rejected =
      scope.counter("upgrade_rejected", "Upgrade requests refused by sluice (400).");
  s.upgrade_refused =
      scope.counter("upgrade_refused",
                    "Upgrade requests the origin answered with a final status instead of 101.");
  s.upgrade_switched = scope.counter(
      "upgrade_switched", "Upgrades switched (101 relayed): the connection became a tunnel.");
  s.upgrades_active = scope.gauge("upgrades_active", "Upgraded connections open.");
  return s;
}

class Http1ProxyFactory : public extensions::FactoryBase<extensions::NetworkFilterFactory,
                                                         sluice::filters::v1::Http1ProxyConfig> {
 public:
  std::string name() const override { return "sluice.http1"; }
  absl::StatusOr<network::NetworkFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::Http1ProxyConfig& proto,
      extensions::FactoryContext& context) const override {
    absl::Status limits = config::checkLimits(
        context.path,
        {{"max_request_head_bytes", proto.max_request_head_bytes(), 1024, 1 << 20},
         {"max_response_head_bytes", proto.max_response_head_bytes(), 1024, 1 << 20},
         {"max_request_headers", proto.max_request_headers(), 1, http1::kMaxHeaderCapacity}});
    if (!limits.ok()) return limits;
    auto config = std::make_shared<Http1Config>();
    config::setIfNonZero(proto.max_request_head_bytes(), config->request_limits.max_head_bytes);
    config::setIfNonZero(proto.max_request_headers(), config->request_limits.max_headers);
    config->exchange.response_limits.max_headers = http1::kMaxHeaderCapacity;
    config::setIfNonZero(proto.max_response_head_bytes(),
                         config->exchange.response_limits.max_head_bytes);
    config->request_head_timeout =
        durationOr(proto.has_request_head_timeout(), proto.request_head_timeout(),
                   config->request_head_timeout);
    config->idle_timeout =
        durationOr(proto.has_idle_timeout(), proto.idle_timeout(), config->idle_timeout);
    config->max_request_body_bytes = proto.max_request_body_bytes();
    config->exchange.max_request_body_bytes = proto.max_request_body_bytes();
    config->exchange.request_body_timeout =
        durationOr(proto.has_request_body_timeout(), proto.request_body_timeout(),
                   config->exchange.request_body_timeout);
    config->websocket = !proto.disable_websocket();
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    config->stats = makeStats(context.chain_name);
    config->exchange.stats = &config->stats;
    config->tunnel_stats = upstream::listenerTunnelStats(context.listener_name);
    config->listener_name = context.listener_name;
    config->request_duration =
        upstream::requestDurationHistogram(context.listener_name, proxy::Protocol::Http1);
    config->tunnel = upstream::connectionTunnelConfig(
        config->listener_name, config->request_duration, config->tunnel_stats, config->stats);
    config->tunnel.upgrades_active = config->stats.upgrades_active;
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
