#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "source/common/network/address.h"

namespace sluice {
namespace server {

// What `sluice status` reports about a running instance, read from its admin endpoint.
struct InstanceStatus {
  struct Listener {
    std::string name;
    std::string address;
  };
  std::string admin_address;
  std::string version;
  int64_t uptime_seconds = 0;
  std::string state;  // "live" or "draining"
  int64_t workers = 0;
  // 1 at start, +1 per reload.
  int64_t config_version = 0;
  std::vector<Listener> listeners;
  int64_t active_connections = 0;
  // Sum of the tunnel.listener.<name>.tunnels_active gauges.
  int64_t tunnels_active = 0;
  // request_record.total: every request, stream, tunnel and SOCKS5 command that ended.
  int64_t requests_total = 0;
  // upstream.client_limit_refused and upstream.descriptor_reserve_refused.
  int64_t budget_client_refused = 0;
  int64_t budget_reserve_refused = 0;
  // Addresses and ranges banned now (GET /bans); bans_enabled is false with bans.disabled.
  bool bans_enabled = false;
  int64_t bans = 0;
};

// Builds the status from the admin answers: GET /server_info, /listeners, /stats (text) and
// /bans. An error names what was malformed.
absl::StatusOr<InstanceStatus> parseInstanceStatus(std::string_view server_info,
                                                   std::string_view listeners,
                                                   std::string_view stats_text,
                                                   std::string_view bans);

// Asks the instance whose admin endpoint is configured at `admin`; Unavailable (naming the
// address) when nothing answers there.
absl::StatusOr<InstanceStatus> queryInstanceStatus(const network::Address& admin);

// For people: aligned lines. For programs: one JSON object (fields in docs/operations.md).
std::string renderStatusText(const InstanceStatus& status);
std::string renderStatusJson(const InstanceStatus& status);

}  // namespace server
}  // namespace sluice
