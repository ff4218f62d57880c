#pragma once

#include <string_view>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/network/egress.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace policy {

// A group's egress (policy.groups[].egress): the source addresses of everything its requests
// send toward destinations and name servers, and what binding them came to.
struct GroupEgress {
  network::Egress addresses;  // empty: the system's choice, as without a policy
  // upstream.egress.<group>.cx: connects started from an egress address.
  stats::Counter cx;
  // upstream.egress.<group>.bind_failed: binds of an egress address that failed (connects,
  // SOCKS5 UDP relay sockets and BIND listeners); each is answered 502 or SOCKS5 0x01.
  stats::Counter bind_failed;
};

// Checks `proto` (errors start with `path`, "policy.groups[i].egress") and registers the
// group's counters.
absl::StatusOr<GroupEgress> buildGroupEgress(const config::v1::Egress& proto, std::string_view path,
                                             std::string_view group);

}  // namespace policy
}  // namespace sluice
