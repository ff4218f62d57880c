#include <netinet/in.h>

#include "absl/strings/str_format.h"

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
    // "0s" is a setting here (one address at a time), not "the default".
    const auto& delay = proto.happy_eyeballs_delay();
    if (proto.has_happy_eyeballs_delay()) {
      config->happy_eyeballs_delay =
          std::chrono::milliseconds(delay.seconds() * 1000 + delay.nanos() / 1000000);
      if (config->happy_eyeballs_delay.count() < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.happy_eyeballs_delay: negative", context.path));
      }
    }
    if (config->happy_eyeballs_delay > config->connect_timeout) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.happy_eyeballs_delay: longer than connect_timeout", context.path));
    }
    if (proto.prefer() == "ipv4") {
      config->prefer = FamilyPreference::Ipv4;
    } else if (!proto.prefer().empty() && proto.prefer() != "ipv6") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.prefer: '%s' is not ipv4 or ipv6", context.path, proto.prefer()));
    }
    if (proto.only() == "ipv4") {
      config->only_family = AF_INET;
    } else if (proto.only() == "ipv6") {
      config->only_family = AF_INET6;
    } else if (!proto.only().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.only: '%s' is not ipv4 or ipv6", context.path, proto.only()));
    }
    if (context.routes != nullptr) config->routes = context.routes;
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
    config->stats.cx_connect_raced =
        store.counter("upstream.cx_connect_raced",
                      "Second connect attempts started beside a slow first one (Happy Eyeballs).");
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
