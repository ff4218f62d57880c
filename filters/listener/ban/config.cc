#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/ban.pb.h"
#include "extensions/registry.h"
#include "filters/listener/ban/ban.h"
#include "source/common/common/logger.h"

namespace sluice {
namespace filters {
namespace ban {
namespace {

class BanFactory : public extensions::ListenerFilterFactory {
 public:
  using Category = extensions::ListenerFilterFactory;

  std::string name() const override { return "sluice.ban"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::BanConfig>();
  }

  absl::StatusOr<network::ListenerFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message&, extensions::FactoryContext& context) const override {
    if (context.bans == nullptr) {
      SLUICE_LOG(Info, "%s: bans are disabled (bans.disabled): sluice.ban admits everyone",
                 context.path);
      return network::ListenerFilterFactoryCb([](network::ListenerFilterManager&) {});
    }
    auto config = std::make_shared<BanFilterConfig>();
    config->table = context.bans;
    config->refused = stats::Store::get().counter("bans.refused");
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
