#include "filters/listener/ban/ban.h"

namespace sluice {
namespace filters {
namespace ban {

network::FilterStatus BanFilter::onAccept(network::ListenerFilterCallbacks& callbacks) {
  if (!config_->table->isBanned(callbacks.peer())) return network::FilterStatus::Continue;
  config_->refused.inc();
  callbacks.continueFilterChain(false);
  return network::FilterStatus::StopIteration;
}

void addBanFilter(const BanFilterConfigSharedPtr& config, network::ListenerFilterManager& manager) {
  if (!config->table->anyBanned()) return;
  manager.addListenerFilter(std::make_unique<BanFilter>(config));
}

}  // namespace ban
}  // namespace filters
}  // namespace sluice
