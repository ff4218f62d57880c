#include "source/common/policy/policy.h"

#include "gtest/gtest.h"

namespace sluice {
namespace policy {
namespace {

config::v1::Policy withGroups(std::initializer_list<const char*> names) {
  config::v1::Policy proto;
  for (const char* name : names) proto.add_groups()->set_name(name);
  return proto;
}

TEST(PolicyTest, DefaultGroupExistsWithoutConfig) {
  auto policy = buildPolicy(config::v1::Policy());
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ((*policy)->defaultGroup().name, "default");
  EXPECT_EQ((*policy)->find("default"), &(*policy)->defaultGroup());
  EXPECT_EQ((*policy)->find("staff"), nullptr);
  EXPECT_EQ((*policy)->groups().size(), 1u);
}

TEST(PolicyTest, ConfiguredGroupsKeepTheirOrderAndDefaultComesLast) {
  auto policy = buildPolicy(withGroups({"staff", "ci"}));
  ASSERT_TRUE(policy.ok()) << policy.status();
  ASSERT_EQ((*policy)->groups().size(), 3u);
  EXPECT_EQ((*policy)->groups()[0]->name, "staff");
  EXPECT_EQ((*policy)->groups()[1]->name, "ci");
  EXPECT_EQ((*policy)->groups()[2]->name, "default");
  EXPECT_NE((*policy)->find("ci"), nullptr);
}

TEST(PolicyTest, AConfiguredDefaultIsTheDefault) {
  auto policy = buildPolicy(withGroups({"staff", "default"}));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ((*policy)->groups().size(), 2u);
  EXPECT_EQ(&(*policy)->defaultGroup(), (*policy)->groups()[1].get());
}

TEST(PolicyTest, BadNamesAreRefusedWithTheirPath) {
  auto dup = buildPolicy(withGroups({"staff", "staff"}));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "policy.groups[1].name: \"staff\" is used twice");
  auto bad = buildPolicy(withGroups({"a b"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("policy.groups[0].name"), std::string::npos);
  auto empty = buildPolicy(withGroups({""}));
  EXPECT_FALSE(empty.ok());
  auto long_name = buildPolicy(withGroups({std::string(65, 'g').c_str()}));
  EXPECT_FALSE(long_name.ok());
}

config::v1::Policy withLimits(double rate, uint32_t max) {
  config::v1::Policy proto;
  config::v1::Group* g = proto.add_groups();
  g->set_name("staff");
  g->mutable_limits()->set_requests_per_second(rate);
  g->mutable_limits()->set_max_concurrent(max);
  g->mutable_key_limits()->set_max_concurrent(1);
  return proto;
}

TEST(PolicyTest, EveryGroupHasLimitersAndTheRunningOnesCarryOn) {
  auto first = buildPolicy(withLimits(10, 4));
  ASSERT_TRUE(first.ok()) << first.status();
  const Group* staff = (*first)->find("staff");
  ASSERT_NE(staff, nullptr);
  ASSERT_NE(staff->limiters, nullptr);
  EXPECT_EQ(staff->limiters->groupSpec().burst, 10u);
  EXPECT_EQ(staff->limiters->keySpec().max_concurrent, 1u);
  ASSERT_NE((*first)->defaultGroup().limiters, nullptr);
  EXPECT_FALSE((*first)->defaultGroup().limiters->groupSpec().any());
  auto key = staff->limiters->forKey("ci");

  auto next = buildPolicy(withLimits(20, 8), first->get());
  ASSERT_TRUE(next.ok()) << next.status();
  const Group* again = (*next)->find("staff");
  EXPECT_EQ(again->limiters->groupLimiter(), staff->limiters->groupLimiter());
  EXPECT_EQ(again->limiters->forKey("ci"), key);
  // The new maximum reaches the shared limiter only once the version runs.
  EXPECT_EQ(staff->limiters->groupLimiter()->state().concurrency.max(), 4u);
  (*next)->applyLimits();
  EXPECT_EQ(staff->limiters->groupLimiter()->state().concurrency.max(), 8u);

  // A group renamed starts afresh.
  config::v1::Policy renamed = withLimits(20, 8);
  renamed.mutable_groups(0)->set_name("crew");
  auto third = buildPolicy(renamed, next->get());
  ASSERT_TRUE(third.ok());
  EXPECT_NE((*third)->find("crew")->limiters->groupLimiter(), staff->limiters->groupLimiter());
}

TEST(PolicyTest, AQuotaNeedsAStateFile) {
  config::v1::Policy proto = withLimits(10, 4);
  proto.mutable_groups(0)->mutable_key_limits()->set_upload_bytes_per_second(1 << 20);
  EXPECT_TRUE(buildPolicy(proto).ok());
  proto.mutable_groups(0)->mutable_key_limits()->set_quota_bytes(1000);
  auto refused = buildPolicy(proto);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "policy.state_file: required when a group has a quota_bytes (the counts are kept "
            "there across restarts)");
  proto.set_state_file(::testing::TempDir() + "/policy_test.state");
  auto built = buildPolicy(proto);
  ASSERT_TRUE(built.ok());
  EXPECT_TRUE((*built)->hasQuota());
  config::v1::Policy bad = withLimits(-3, 0);
  EXPECT_FALSE(buildPolicy(bad).ok());
}

TEST(PolicyTest, EmptyIsShared) { EXPECT_EQ(Policy::empty().get(), Policy::empty().get()); }

}  // namespace
}  // namespace policy
}  // namespace sluice
