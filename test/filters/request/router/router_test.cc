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

}  // namespace
}  // namespace router
}  // namespace filters
}  // namespace sluice
