#include "api/sluice/filters/v1/router.pb.h"
#include "filters/request/router/router.h"
#include "source/common/common/duration.h"
#include "source/common/config/filter_config.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace router {
namespace {

class RouterFactory : public extensions::FactoryBase<extensions::RequestFilterFactory,
                                                     sluice::filters::v1::RouterConfig> {
 public:
  std::string name() const override { return "sluice.router"; }
  proxy::RequestPhase phase() const override { return proxy::RequestPhase::Route; }
  absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::RouterConfig& proto,
      extensions::FactoryContext& context) const override {
    absl::Status limits = config::checkLimits(
        context.path, {{"max_splice_pipes", proto.max_splice_pipes(), 1, 65536}});
    if (!limits.ok()) return limits;
    auto config = std::make_shared<RouterConfig>();
    config->connect_timeout =
        durationOr(proto.has_connect_timeout(), proto.connect_timeout(), config->connect_timeout);
    config->upstream.response_timeout = durationOr(
        proto.has_response_timeout(), proto.response_timeout(), config->upstream.response_timeout);
    config->upstream.tunnel_idle_timeout =
        durationOr(proto.has_tunnel_idle_timeout(), proto.tunnel_idle_timeout(),
                   config->upstream.tunnel_idle_timeout);
    config->upstream.splice = !proto.disable_splice();
    config::setIfNonZero(proto.max_splice_pipes(), config->upstream.max_splice_pipes);
    stats::Store& store = stats::Store::get();
    config->stats.cx_connect_total =
        store.counter("upstream.cx_connect_total", "Connects to origins attempted.");
    config->stats.cx_connect_fail = store.counter(
        "upstream.cx_connect_fail", "Connects to origins refused, unreachable or reset.");
    config->stats.cx_connect_timeout =
        store.counter("upstream.cx_connect_timeout", "Connects to origins that timed out.");
    config->stats.pool_reuse =
        store.counter("upstream.pool_reuse", "Requests served on a pooled origin connection.");
    config->stats.dns_fail =
        store.counter("upstream.dns_fail", "Destination names that did not resolve.");
    config->stats.cx_connect_duration = store.histogram(
        "upstream.cx_connect_duration_seconds", stats::latencyBuckets(),
        "Connects to origins that succeeded, from the first attempt to established.");
    RouterConfigSharedPtr shared = std::move(config);
    return proxy::RequestFilterFactoryCb([shared](proxy::RequestFilterChain& chain) {
      chain.addFilter(std::make_unique<RouterFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(RouterFactory);

}  // namespace
}  // namespace router
}  // namespace filters
}  // namespace sluice
