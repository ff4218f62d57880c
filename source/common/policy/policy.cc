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

PolicySharedPtr Policy::empty() {
  static const PolicySharedPtr* policy = [] {
    auto built = buildPolicy(config::v1::Policy());
    return new PolicySharedPtr(std::move(*built));
  }();
  return *policy;
}

absl::StatusOr<PolicySharedPtr> buildPolicy(const config::v1::Policy& proto,
                                            const Policy* running) {
  (void)running;
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
    // Parts of a group this build does not enforce yet are refused, never silently ignored.
    for (const auto& [set, field] : {std::pair<bool, const char*>{in.has_limits(), "limits"},
                                     {in.has_key_limits(), "key_limits"},
                                     {in.has_egress(), "egress"}}) {
      if (set) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.%s: not supported by this build of sluice", path, field));
      }
    }
    auto group = std::make_shared<Group>();
    group->name = in.name();
    absl::Status rules = buildRuleSet(in, path, group->rules);
    if (!rules.ok()) return rules;
    policy->groups_.push_back(std::move(group));
  }
  if (policy->find(kDefaultGroup) == nullptr) {
    auto group = std::make_shared<Group>();
    group->name = std::string(kDefaultGroup);
    policy->groups_.push_back(std::move(group));
  }
  policy->default_ = policy->find(kDefaultGroup);
  return PolicySharedPtr(std::move(policy));
}

}  // namespace policy
}  // namespace sluice
