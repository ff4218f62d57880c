#include "source/common/policy/policy.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

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

namespace {

// The state file: one line per quota, "<group> <key or -> <period start> <bytes>".
std::map<std::string, GroupLimiters::SavedQuotas> readQuotaState(const std::string& path) {
  std::map<std::string, GroupLimiters::SavedQuotas> saved;
  std::ifstream in(path);
  std::string group, key;
  int64_t start = 0;
  uint64_t used = 0;
  while (in >> group >> key >> start >> used) {
    saved[group][key == "-" ? std::string() : key] = {start, used};
  }
  return saved;
}

}  // namespace

void Policy::tickQuotas() const {
  if (!has_quota_) return;
  const int64_t now = wallSeconds();
  std::string out;
  for (const GroupSharedPtr& group : groups_) {
    group->limiters->tickQuotas(now);
    group->limiters->forEachQuota([&](std::string_view key, const ByteQuota& quota) {
      absl::StrAppendFormat(&out, "%s %s %d %d\n", group->name, key.empty() ? "-" : key,
                            quota.periodStart(), quota.used());
    });
  }
  if (out == last_saved_) return;
  const std::string temp = state_file_ + ".tmp";
  {
    std::ofstream file(temp, std::ios::trunc);
    file << out;
    file.flush();
    if (!file) {
      SLUICE_LOG(Warn, "cannot write the quota state to %s", temp);
      return;
    }
  }
  if (std::rename(temp.c_str(), state_file_.c_str()) != 0) {
    SLUICE_LOG(Warn, "cannot rename %s to %s", temp, state_file_);
    return;
  }
  last_saved_ = std::move(out);
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
  for (const GroupSharedPtr& group : policy->groups_) {
    if (group->limiters->hasQuota()) policy->has_quota_ = true;
  }
  policy->state_file_ = proto.state_file();
  if (policy->has_quota_ && policy->state_file_.empty()) {
    return absl::InvalidArgumentError(
        "policy.state_file: required when a group has a quota_bytes (the counts are kept there "
        "across restarts)");
  }
  if (policy->has_quota_) {
    if (running != nullptr) {
      policy->last_saved_ = running->last_saved_;
    } else {
      // At start: the counts of the current period carry on from the state file.
      auto saved = readQuotaState(policy->state_file_);
      for (const GroupSharedPtr& group : policy->groups_) {
        if (auto it = saved.find(group->name); it != saved.end()) {
          group->limiters->restoreQuotas(std::move(it->second));
        }
      }
    }
  }
  return PolicySharedPtr(std::move(policy));
}

}  // namespace policy
}  // namespace sluice
