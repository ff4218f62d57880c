#include "filters/listener/ip_allowlist/ip_allowlist.h"

namespace sluice {
namespace filters {
namespace ip_allowlist {

bool admits(const IpAllowlistConfig& config, const network::Address& client) {
  for (const network::CidrRange& range : config.ranges) {
    if (range.contains(client)) return true;
  }
  return false;
}

network::FilterStatus IpAllowlistFilter::onAccept(network::ListenerFilterCallbacks& callbacks) {
  if (admits(*config_, callbacks.peer())) {
    config_->allowed.inc();
    return network::FilterStatus::Continue;
  }
  config_->refused.inc();
  callbacks.continueFilterChain(false);
  return network::FilterStatus::StopIteration;
}

}  // namespace ip_allowlist
}  // namespace filters
}  // namespace sluice
