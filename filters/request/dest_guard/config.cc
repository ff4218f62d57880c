#include "api/sluice/filters/v1/dest_guard.pb.h"
#include "filters/request/dest_guard/dest_guard.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace dest_guard {
namespace {

class DestGuardFactory : public extensions::FactoryBase<extensions::RequestFilterFactory,
                                                        sluice::filters::v1::DestGuardConfig> {
 public:
  std::string name() const override { return "sluice.dest_guard"; }
  absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::DestGuardConfig& proto,
      extensions::FactoryContext& context) const override {
    auto config = buildConfig(proto, context.local_addresses, context.path,
                              network::HostAddresses::get(), context.policy, context.routes);
    if (!config.ok()) return config.status();
    DestGuardConfigSharedPtr shared = std::move(*config);
    // The rules of every group whose requests reach this filter are checked here.
    if (context.filter_list != nullptr) context.filter_list->guard = shared;
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
