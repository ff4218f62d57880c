#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/ban.pb.h"
#include "filters/listener/ban/ban.h"
#include "source/common/common/logger.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace ban {
namespace {

class BanFactory : public extensions::FactoryBase<extensions::ListenerFilterFactory,
                                                  sluice::filters::v1::BanConfig> {
 public:
  std::string name() const override { return "sluice.ban"; }
  absl::StatusOr<network::ListenerFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::BanConfig&, extensions::FactoryContext& context) const override {
    if (context.bans == nullptr) {
      SLUICE_LOG(Info, "%s: bans are disabled (bans.disabled): sluice.ban admits everyone",
                 context.path);
      return network::ListenerFilterFactoryCb([](network::ListenerFilterManager&) {});
    }
    auto config = std::make_shared<BanFilterConfig>();
    config->table = context.bans;
    config->refused = stats::Store::get().counter(
        "bans.refused", "Client connections closed at accept because banned.");
    BanFilterConfigSharedPtr shared = std::move(config);
    return network::ListenerFilterFactoryCb(
        [shared](network::ListenerFilterManager& manager) { addBanFilter(shared, manager); });
  }
};

SLUICE_REGISTER_FACTORY(BanFactory);

}  // namespace
}  // namespace ban
}  // namespace filters
}  // namespace sluice
