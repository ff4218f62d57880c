#include "filters/request/router/router.h"

#include <string>
#include <vector>

#include <netinet/in.h>

#include "gtest/gtest.h"

namespace sluice {
namespace filters {
namespace router {
namespace {

std::vector<std::string> order(std::vector<std::string> ips, FamilyPreference prefer,
                               int only = 0) {
  network::Address a[proxy::ProxyRequest::kMaxPinned];
  uint32_t n = 0;
  for (const std::string& ip : ips) a[n++] = *network::Address::parseIp(ip, 80);
  n = orderAddresses(a, n, prefer, only);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(a[i].asString());
  return out;
}

TEST(OrderAddressesTest, InterleavesFromThePreferredFamily) {
  const std::vector<std::string> ips = {"192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2",
                                        "2001:db8::3"};
  EXPECT_EQ((std::vector<std::string>{"[2001:db8::1]:80", "192.0.2.1:80", "[2001:db8::2]:80",
                                      "192.0.2.2:80", "[2001:db8::3]:80"}),
            order(ips, FamilyPreference::Ipv6));
  EXPECT_EQ((std::vector<std::string>{"192.0.2.1:80", "[2001:db8::1]:80", "192.0.2.2:80",
                                      "[2001:db8::2]:80", "[2001:db8::3]:80"}),
            order(ips, FamilyPreference::Ipv4));
}

TEST(OrderAddressesTest, OneFamilyKeepsItsOrder) {
  EXPECT_EQ((std::vector<std::string>{"192.0.2.2:80", "192.0.2.1:80"}),
            order({"192.0.2.2", "192.0.2.1"}, FamilyPreference::Ipv6));
}

TEST(OrderAddressesTest, OnlyDropsTheOtherFamily) {
  EXPECT_EQ((std::vector<std::string>{"[2001:db8::1]:80"}),
            order({"192.0.2.1", "2001:db8::1"}, FamilyPreference::Ipv4, AF_INET6));
  EXPECT_TRUE(order({"192.0.2.1"}, FamilyPreference::Ipv6, AF_INET6).empty());
}

std::vector<std::string> reachable(std::vector<std::string> ips, const char* v4, const char* v6) {
  network::Egress egress;
  if (v4 != nullptr) egress.ipv4 = *network::Address::parseIp(v4, 0);
  if (v6 != nullptr) egress.ipv6 = *network::Address::parseIp(v6, 0);
  network::Address a[proxy::ProxyRequest::kMaxPinned];
  uint32_t n = 0;
  for (const std::string& ip : ips) a[n++] = *network::Address::parseIp(ip, 80);
  n = keepReachable(a, n, egress);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(a[i].asString());
  return out;
}

TEST(KeepReachableTest, AnEgressKeepsOnlyItsFamilies) {
  const std::vector<std::string> ips = {"2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2"};
  EXPECT_EQ(reachable(ips, nullptr, nullptr).size(), 4u);
  EXPECT_EQ((std::vector<std::string>{"192.0.2.1:80", "192.0.2.2:80"}),
            reachable(ips, "198.51.100.1", nullptr));
  EXPECT_EQ((std::vector<std::string>{"[2001:db8::1]:80", "[2001:db8::2]:80"}),
            reachable(ips, nullptr, "2001:db8::100"));
  EXPECT_EQ(reachable(ips, "198.51.100.1", "2001:db8::100").size(), 4u);
  EXPECT_TRUE(reachable({"2001:db8::1"}, "198.51.100.1", nullptr).empty());
}

}  // namespace
}  // namespace router
}  // namespace filters
}  // namespace sluice
