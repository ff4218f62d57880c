#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/policy/egress.h"
#include "source/common/policy/limits.h"
#include "source/common/policy/rules.h"

namespace sluice {
namespace policy {

// The group of keys that name none, and of requests on a listener without keys.
inline constexpr std::string_view kDefaultGroup = "default";
// Group names appear in stat names: at most this long, of [A-Za-z0-9_-].
inline constexpr size_t kMaxGroupNameLength = 64;

// One group of keys as requests see it (ProxyRequest::group). Built once per config version and
// read-only on the workers afterwards.
struct Group {
  std::string name;
  // What the group's keys may reach: its rules, default_action and report_only.
  RuleSet rules;
  // Its rate and concurrency limits and those of each of its keys (policy/limits.h).
  std::unique_ptr<GroupLimiters> limiters;
  // The source addresses its requests leave from (docs/policy.md, "Egress addresses").
  GroupEgress egress;
};
using GroupSharedPtr = std::shared_ptr<const Group>;

// The egress of a request's group; empty without a group.
const network::Egress& egressOf(const Group* group);

// Every group of one config version. A key's group is looked up once, when its filter config is
// built; requests carry a pointer to it, kept alive by the config that holds the Policy.
class Policy {
 public:
  // The group of this name, or null.
  const Group* find(std::string_view name) const;
  // "default": the configured one, or an implicit one that allows what the destination guard
  // allows and limits nothing.
  const Group& defaultGroup() const { return *default_; }
  const std::vector<GroupSharedPtr>& groups() const { return groups_; }
  // Main thread, once this version runs (a reload's swap): the limiters carried from the
  // running version take this version's values.
  void applyLimits() const;
  // Main thread, every few seconds and before exit: quotas that entered a new period start at
  // 0, their gauges move, and when a count changed all of them are written to `state_file`
  // (a temporary file renamed over it: a reader never sees half of one). Never a worker.
  void tickQuotas() const;
  const std::string& stateFile() const { return state_file_; }
  bool hasQuota() const { return has_quota_; }

  // A policy without configured groups (filters built outside a server config: tests, tools).
  static std::shared_ptr<const Policy> empty();

 private:
  friend absl::StatusOr<std::shared_ptr<const Policy>> buildPolicy(const config::v1::Policy& proto,
                                                                   const Policy* running);
  std::vector<GroupSharedPtr> groups_;  // configured order, then the implicit default
  const Group* default_ = nullptr;
  std::string state_file_;
  bool has_quota_ = false;
  mutable std::string last_saved_;  // main thread
};
using PolicySharedPtr = std::shared_ptr<const Policy>;

// Checks `proto` (errors start with "policy.") and builds the groups. With `running` (a reload),
// what must outlive a config version is carried over from the group of the same name.
absl::StatusOr<PolicySharedPtr> buildPolicy(const config::v1::Policy& proto,
                                            const Policy* running = nullptr);

}  // namespace policy
}  // namespace sluice
