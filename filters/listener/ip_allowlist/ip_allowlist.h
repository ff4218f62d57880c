#pragma once

#include <memory>
#include <vector>

#include "source/common/network/cidr.h"
#include "source/common/network/filter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace ip_allowlist {

struct IpAllowlistConfig {
  std::vector<network::CidrRange> ranges;
  stats::Counter allowed;
  stats::Counter refused;
};
using IpAllowlistConfigSharedPtr = std::shared_ptr<const IpAllowlistConfig>;

// Whether the client is inside one of the ranges (counts nothing).
bool admits(const IpAllowlistConfig& config, const network::Address& client);

// "sluice.ip_allowlist": admits only clients inside the configured ranges; the rest are closed
// at accept, before a byte is read or a connection object exists.
class IpAllowlistFilter : public network::ListenerFilter {
 public:
  explicit IpAllowlistFilter(IpAllowlistConfigSharedPtr config) : config_(std::move(config)) {}
  network::FilterStatus onAccept(network::ListenerFilterCallbacks& callbacks) override;

 private:
  IpAllowlistConfigSharedPtr config_;
};

}  // namespace ip_allowlist
}  // namespace filters
}  // namespace sluice
