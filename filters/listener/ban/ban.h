#pragma once

#include <memory>

#include "source/common/ban/ban_table.h"
#include "source/common/network/filter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace ban {

struct BanFilterConfig {
  std::shared_ptr<sluice::ban::BanTable> table;
  stats::Counter refused;  // bans.refused
};
using BanFilterConfigSharedPtr = std::shared_ptr<const BanFilterConfig>;

// "sluice.ban": closes a banned client at accept, before a byte is read or a connection object
// exists. The factory adds it to a socket only while some ban exists, so without bans an
// accept costs one atomic load.
class BanFilter : public network::ListenerFilter {
 public:
  explicit BanFilter(BanFilterConfigSharedPtr config) : config_(std::move(config)) {}

  // ListenerFilter
  network::FilterStatus onAccept(network::ListenerFilterCallbacks& callbacks) override;

 private:
  BanFilterConfigSharedPtr config_;
};

// What the factory's per-socket callback does: adds a BanFilter only when a ban exists.
void addBanFilter(const BanFilterConfigSharedPtr& config, network::ListenerFilterManager& manager);

}  // namespace ban
}  // namespace filters
}  // namespace sluice
