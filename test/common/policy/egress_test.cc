#include "source/common/policy/egress.h"

#include <string>

#include "gtest/gtest.h"

#include "source/common/policy/policy.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace policy {
namespace {

config::v1::Policy withEgress(const char* ipv4, const char* ipv6) {
  config::v1::Policy proto;
  proto.add_groups()->set_name("staff");
  config::v1::Group* group = proto.add_groups();
  group->set_name("ci");
  if (ipv4 != nullptr) group->mutable_egress()->set_ipv4(ipv4);
  if (ipv6 != nullptr) group->mutable_egress()->set_ipv6(ipv6);
  return proto;
}

std::string errorOf(const char* ipv4, const char* ipv6) {
  auto policy = buildPolicy(withEgress(ipv4, ipv6));
  return policy.ok() ? "ok" : std::string(policy.status().message());
}

TEST(GroupEgressTest, AGroupTakesItsAddresses) {
  auto policy = buildPolicy(withEgress("192.0.2.10", "2001:db8::10"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Group* ci = (*policy)->find("ci");
  ASSERT_NE(ci, nullptr);
  EXPECT_EQ(ci->egress.addresses.ipv4.asString(), "192.0.2.10:0");
  EXPECT_EQ(ci->egress.addresses.ipv6.asString(), "[2001:db8::10]:0");
  EXPECT_EQ(&egressOf(ci), &ci->egress.addresses);
  // Groups without one, and no group at all, leave the source to the system.
  EXPECT_TRUE((*policy)->find("staff")->egress.addresses.empty());
  EXPECT_TRUE((*policy)->defaultGroup().egress.addresses.empty());
  EXPECT_TRUE(egressOf(nullptr).empty());
}

TEST(GroupEgressTest, OneFamilyIsEnough) {
  auto policy = buildPolicy(withEgress(nullptr, "fd00::2"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  const network::Egress& egress = (*policy)->find("ci")->egress.addresses;
  EXPECT_FALSE(egress.ipv4.valid());
  EXPECT_EQ(egress.ipv6.ipString(), "fd00::2");
}

TEST(GroupEgressTest, BadAddressesAreRefusedWithTheirPath) {
  EXPECT_EQ(errorOf("::1", nullptr),
            "policy.groups[1].egress.ipv4: \"::1\" is an IPv6 address: it goes in egress.ipv6");
  EXPECT_EQ(errorOf(nullptr, "127.0.0.2"),
            "policy.groups[1].egress.ipv6: \"127.0.0.2\" is an IPv4 address: it goes in "
            "egress.ipv4");
  EXPECT_EQ(errorOf("egress.example.com", nullptr),
            "policy.groups[1].egress.ipv4: \"egress.example.com\" is not an IPv4 address (a "
            "literal, no port, no name)");
  EXPECT_EQ(errorOf("127.1", nullptr),
            "policy.groups[1].egress.ipv4: \"127.1\" is not an IPv4 address (a literal, no "
            "port, no name)");
  EXPECT_EQ(errorOf(nullptr, "[fd00::2]"),
            "policy.groups[1].egress.ipv6: \"[fd00::2]\" is not an IPv6 address (a literal, no "
            "port, no name)");
  EXPECT_EQ(errorOf("0.0.0.0", nullptr),
            "policy.groups[1].egress.ipv4: \"0.0.0.0\" is unspecified; leave egress.ipv4 out "
            "for the system's choice");
  EXPECT_EQ(errorOf(nullptr, "::"),
            "policy.groups[1].egress.ipv6: \"::\" is unspecified; leave egress.ipv6 out for the "
            "system's choice");
  EXPECT_EQ(errorOf("239.1.1.1", nullptr),
            "policy.groups[1].egress.ipv4: \"239.1.1.1\" is a multicast, reserved or broadcast "
            "address, not a source");
  EXPECT_NE(errorOf("255.255.255.255", nullptr).find("is a multicast, reserved or broadcast"),
            std::string::npos);
  EXPECT_EQ(errorOf(nullptr, "ff02::1"),
            "policy.groups[1].egress.ipv6: \"ff02::1\" is a multicast address, not a source");
  EXPECT_EQ(errorOf(nullptr, "fe80::1"),
            "policy.groups[1].egress.ipv6: \"fe80::1\" is link-local (it needs an interface); "
            "use a global or unique local address");
  EXPECT_EQ(errorOf(nullptr, "::ffff:192.0.2.1"),
            "policy.groups[1].egress.ipv6: \"::ffff:192.0.2.1\" is an IPv4-mapped address: its "
            "IPv4 address goes in egress.ipv4");
  EXPECT_EQ(errorOf("", ""), "policy.groups[1].egress: names no address (set ipv4, ipv6 or both)");
}

TEST(GroupEgressTest, EachGroupCountsOnItsOwn) {
  auto policy = buildPolicy(withEgress("192.0.2.10", nullptr));
  ASSERT_TRUE(policy.ok()) << policy.status();
  const GroupEgress& egress = (*policy)->find("ci")->egress;
  stats::Store& store = stats::Store::get();
  const uint64_t before = store.counterValue("upstream.egress.ci.bind_failed");
  egress.bind_failed.inc();
  egress.cx.add(2);
  EXPECT_EQ(store.counterValue("upstream.egress.ci.bind_failed"), before + 1);
  EXPECT_GE(store.counterValue("upstream.egress.ci.cx"), 2u);
}

}  // namespace
}  // namespace policy
}  // namespace sluice
