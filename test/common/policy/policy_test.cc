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

TEST(PolicyTest, EmptyIsShared) { EXPECT_EQ(Policy::empty().get(), Policy::empty().get()); }

}  // namespace
}  // namespace policy
}  // namespace sluice
