#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "source/common/network/address.h"
#include "source/common/network/cidr.h"
#include "source/common/policy/policy.h"

namespace sluice {
namespace policy {

// The built-in destination checks of the filter that enforces the rules (sluice.dest_guard), as
// `sluice policy explain` asks them about one destination. Config time only.
class DestinationGuard {
 public:
  virtual ~DestinationGuard() = default;
  // Why the port is refused; empty when it is allowed.
  virtual std::string_view portRefusal(uint16_t port) const = 0;
  // Why the address (port set) is refused; empty when it is allowed. `datagram`: it is a SOCKS5
  // UDP destination. `opening`: the cidrs of an allow rule that matched the address by them,
  // which open what they hold as the guard's own `allow` ranges do (never a deny range, never
  // sluice itself); null when none.
  virtual std::string_view addressRefusal(const network::Address& address, bool datagram,
                                          const std::vector<network::CidrRange>* opening) const = 0;
};

// One API key as a filter list admits it.
struct KeyGroup {
  std::string name;
  const Group* group = nullptr;
};

// What one list of request filters (a codec's request_filters) does about the policy, recorded
// while its filters are built: the config is refused when keys whose group has rules get in
// where nothing enforces them, and `sluice policy explain` reads it.
struct FilterListPolicy {
  std::string path;  // the list's place in the config ("listeners[0]....request_filters")
  // Set by an Authenticate filter (sluice.auth): the keys it accepts, with their groups, and
  // whether it lets requests in without a key (they are in the default group).
  bool authenticates = false;
  bool keyless = false;
  std::vector<KeyGroup> keys;
  // The filter that checks every request against its group's rules (sluice.dest_guard), with
  // its built-in checks; null when the list has none.
  std::shared_ptr<const DestinationGuard> guard;

  // A group with rules whose requests get in through this list although nothing here enforces
  // them (null when there is none): the config must be refused.
  const Group* unenforcedGroup(const Policy& policy) const {
    if (guard != nullptr) return nullptr;
    // Without an Authenticate filter, or with a keyless one, requests are in the default group.
    if ((!authenticates || keyless) && !policy.defaultGroup().rules.inactive()) {
      return &policy.defaultGroup();
    }
    for (const KeyGroup& key : keys) {
      if (key.group != nullptr && !key.group->rules.inactive()) return key.group;
    }
    return nullptr;
  }
};
using FilterListPolicySharedPtr = std::shared_ptr<const FilterListPolicy>;

}  // namespace policy
}  // namespace sluice
