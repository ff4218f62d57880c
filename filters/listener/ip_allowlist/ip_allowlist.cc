#include "filters/listener/ip_allowlist/ip_allowlist.h"

namespace sluice {
namespace filters {
namespace ip_allowlist {

network::FilterStatus IpAllowlistFilter::onAccept(network::ListenerFilterCallbacks& callbacks) {
  for (const network::CidrRange& range : config_->ranges) {
    if (range.contains(callbacks.peer())) {
      config_->allowed.inc();
      return network::FilterStatus::Continue;
    }
  }
  config_->refused.inc();
  callbacks.continueFilterChain(false);
  return network::FilterStatus::StopIteration;
}

}  // namespace ip_allowlist
}  // namespace filters
}  // namespace sluice
