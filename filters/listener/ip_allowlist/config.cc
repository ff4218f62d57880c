#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/ip_allowlist.pb.h"
#include "filters/listener/ip_allowlist/ip_allowlist.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace ip_allowlist {
namespace {

class IpAllowlistFactory : public extensions::FactoryBase<extensions::ListenerFilterFactory,
                                                          sluice::filters::v1::IpAllowlistConfig> {
 public:
  std::string name() const override { return "sluice.ip_allowlist"; }
  absl::StatusOr<network::ListenerFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::IpAllowlistConfig& proto,
      extensions::FactoryContext& context) const override {
    if (proto.cidrs().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.cidrs: empty (it would refuse every client; leave the filter out "
          "to admit everyone)",
          context.path));
    }
    auto config = std::make_shared<IpAllowlistConfig>();
    for (int i = 0; i < proto.cidrs_size(); ++i) {
      auto range = network::CidrRange::parse(proto.cidrs(i));
      if (!range.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.typed_config.cidrs[%d]: %s", context.path, i, range.status().message()));
      }
      config->ranges.push_back(*range);
    }
    const stats::Scope scope =
        stats::Scope("listener", "listener", context.listener_name).scope("ip_allowlist");
    config->allowed = scope.counter("allowed", "Client connections the IP allowlist admitted.");
    config->refused = scope.counter("refused", "Client connections the IP allowlist closed.");
    IpAllowlistConfigSharedPtr shared = std::move(config);
    if (context.grants != nullptr) {
      // A reload that takes a client's range out closes its connections too.
      context.grants->client_checks.push_back(
          [shared](const network::Address& client) { return admits(*shared, client); });
    }
    return network::ListenerFilterFactoryCb([shared](network::ListenerFilterManager& manager) {
      manager.addListenerFilter(std::make_unique<IpAllowlistFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(IpAllowlistFactory);

}  // namespace
}  // namespace ip_allowlist
}  // namespace filters
}  // namespace sluice
