#include "source/common/policy/policy.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace sluice {
namespace policy {
namespace {

bool validGroupName(std::string_view name) {
  if (name.empty() || name.size() > kMaxGroupNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const Group* Policy::find(std::string_view name) const {
  for (const GroupSharedPtr& group : groups_) {
    if (group->name == name) return group.get();
  }
  return nullptr;
}

const network::Egress& egressOf(const Group* group) {
  static const network::Egress none;
  return group != nullptr ? group->egress.addresses : none;
}

PolicySharedPtr Policy::empty() {
  static const PolicySharedPtr* policy = [] {
    auto built = buildPolicy(config::v1::Policy());
    return new PolicySharedPtr(std::move(*built));
  }();
  return *policy;
}

void Policy::applyLimits() const {
  const int64_t now = monotonicNanos();
  for (const GroupSharedPtr& group : groups_) group->limiters->apply(now);
}

absl::StatusOr<PolicySharedPtr> buildPolicy(const config::v1::Policy& proto,
                                            const Policy* running) {
  // The running version's limiters of a group that stays carry on (tokens, requests in
  // flight).
  auto running_limiters = [running](std::string_view name) -> const GroupLimiters* {
    const Group* group = running != nullptr ? running->find(name) : nullptr;
    return group != nullptr ? group->limiters.get() : nullptr;
  };
  auto policy = std::make_shared<Policy>();
  for (int i = 0; i < proto.groups_size(); ++i) {
    const config::v1::Group& in = proto.groups(i);
    const std::string path = absl::StrFormat("policy.groups[%d]", i);
    if (!validGroupName(in.name())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.name: \"%s\" must be 1 to %d letters, digits, '_' or '-' (it names stats)", path,
          in.name(), kMaxGroupNameLength));
    }
    if (policy->find(in.name()) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.name: \"%s\" is used twice", path, in.name()));
    }
    auto group = std::make_shared<Group>();
    group->name = in.name();
    absl::Status rules = buildRuleSet(in, path, group->rules);
    if (!rules.ok()) return rules;
    auto limiters = GroupLimiters::build(in.name(), in, path, running_limiters(in.name()));
    if (!limiters.ok()) return limiters.status();
    group->limiters = std::move(*limiters);
    if (in.has_egress()) {
      auto egress = buildGroupEgress(in.egress(), path + ".egress", group->name);
      if (!egress.ok()) return egress.status();
      group->egress = *egress;
    }
    policy->groups_.push_back(std::move(group));
  }
  if (policy->find(kDefaultGroup) == nullptr) {
    auto group = std::make_shared<Group>();
    group->name = std::string(kDefaultGroup);
    auto limiters = GroupLimiters::build(kDefaultGroup, config::v1::Group(), "policy",
                                         running_limiters(kDefaultGroup));
    if (!limiters.ok()) return limiters.status();
    group->limiters = std::move(*limiters);
    policy->groups_.push_back(std::move(group));
  }
  policy->default_ = policy->find(kDefaultGroup);
  return PolicySharedPtr(std::move(policy));
}

}  // namespace policy
}  // namespace sluice
