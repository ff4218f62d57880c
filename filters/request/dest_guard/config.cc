#include "api/sluice/filters/v1/dest_guard.pb.h"
#include "filters/request/dest_guard/dest_guard.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace dest_guard {
namespace {

bool hasWildcard(const std::vector<network::Address>& addresses) {
  for (const network::Address& a : addresses) {
    if (a.family() == AF_INET && a.v4().sin_addr.s_addr == 0) return true;
    if (a.family() == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a.v6().sin6_addr)) return true;
  }
  return false;
}

class DestGuardFactory : public extensions::FactoryBase<extensions::RequestFilterFactory,
                                                        sluice::filters::v1::DestGuardConfig> {
 public:
  std::string name() const override { return "sluice.dest_guard"; }
  absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::DestGuardConfig& proto,
      extensions::FactoryContext& context) const override {
    // Interfaces are listed only when a wildcard bind needs them.
    const std::vector<network::Address> interfaces = hasWildcard(context.local_addresses)
                                                         ? localInterfaceAddresses()
                                                         : std::vector<network::Address>();
    auto config = buildConfig(proto, context.local_addresses, interfaces, context.path);
    if (!config.ok()) return config.status();
    DestGuardConfigSharedPtr shared = std::move(*config);
    return proxy::RequestFilterFactoryCb([shared](proxy::RequestFilterChain& chain) {
      chain.addFilter(std::make_unique<DestGuardFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(DestGuardFactory);

}  // namespace
}  // namespace dest_guard
}  // namespace filters
}  // namespace sluice
