#include "filters/listener/ip_allowlist/ip_allowlist.h"

#include <gtest/gtest.h>

#include "source/common/event/dispatcher.h"
#include "source/common/network/cidr.h"

namespace sluice {
namespace {

network::Address ip(const char* text) { return *network::Address::parseIp(text, 1234); }

TEST(CidrRange, ParsesAndMatchesIpv4) {
  auto r = network::CidrRange::parse("10.0.0.0/8");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->contains(ip("10.1.2.3")));
  EXPECT_TRUE(r->contains(ip("10.255.255.255")));
  EXPECT_FALSE(r->contains(ip("11.0.0.0")));
  EXPECT_FALSE(r->contains(ip("9.255.255.255")));
  EXPECT_EQ(r->asString(), "10.0.0.0/8");
}

TEST(CidrRange, OddPrefixLengths) {
  auto r = network::CidrRange::parse("192.168.4.0/22");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->contains(ip("192.168.7.255")));
  EXPECT_FALSE(r->contains(ip("192.168.8.0")));
  EXPECT_FALSE(r->contains(ip("192.168.3.255")));
  auto all = network::CidrRange::parse("0.0.0.0/0");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->contains(ip("203.0.113.9")));
  EXPECT_FALSE(all->contains(ip("::1")));
}

TEST(CidrRange, SingleAddressAndIpv6) {
  auto one = network::CidrRange::parse("192.0.2.7");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prefixLength(), 32u);
  EXPECT_TRUE(one->contains(ip("192.0.2.7")));
  EXPECT_FALSE(one->contains(ip("192.0.2.8")));
  auto v6 = network::CidrRange::parse("2001:db8::/32");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->contains(ip("2001:db8:1::5")));
  EXPECT_FALSE(v6->contains(ip("2001:db9::1")));
  EXPECT_FALSE(v6->contains(ip("10.0.0.1")));
}

TEST(CidrRange, MappedIpv6PeerMatchesIpv4Range) {
  auto r = network::CidrRange::parse("127.0.0.0/8");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->contains(ip("::ffff:127.0.0.1")));
  EXPECT_FALSE(r->contains(ip("::ffff:128.0.0.1")));
  EXPECT_FALSE(r->contains(ip("::127.0.0.1")));  // IPv4-compatible form is not a mapped peer
}

TEST(CidrRange, RejectsBadInput) {
  for (const char* bad :
       {"", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0.0/8/8", "10.0.0/8", "example.com/8",
        "10.0.0.0/-1", "10.0.0.0/ 8", "10.1.2.3/8", "2001:db8::1/32", "10.0.0.0/0008"}) {
    EXPECT_FALSE(network::CidrRange::parse(bad).ok()) << bad;
  }
}

class FakeSocket : public network::ListenerFilterCallbacks {
 public:
  explicit FakeSocket(network::Address peer) : peer_(peer) {}
  int fd() const override { return -1; }
  const network::Address& peer() const override { return peer_; }
  void setPeer(const network::Address& client) override { peer_ = client; }
  network::SocketFacts& facts() override { return facts_; }
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  void continueFilterChain(bool success) override {
    ++continued;
    last_success = success;
  }
  int continued = 0;
  bool last_success = true;

 private:
  network::Address peer_;
  network::SocketFacts facts_;
  event::Dispatcher dispatcher_;
};

TEST(IpAllowlistFilter, AdmitsInsideAndClosesOutside) {
  auto config = std::make_shared<filters::ip_allowlist::IpAllowlistConfig>();
  config->ranges.push_back(*network::CidrRange::parse("127.0.0.0/8"));
  config->ranges.push_back(*network::CidrRange::parse("::1"));
  config->allowed = stats::Store::get().counter("test.allowlist.allowed");
  config->refused = stats::Store::get().counter("test.allowlist.refused");
  filters::ip_allowlist::IpAllowlistFilter filter(config);

  FakeSocket inside(ip("127.0.0.9"));
  EXPECT_EQ(filter.onAccept(inside), network::FilterStatus::Continue);
  EXPECT_EQ(inside.continued, 0);

  FakeSocket v6(ip("::1"));
  EXPECT_EQ(filter.onAccept(v6), network::FilterStatus::Continue);

  FakeSocket outside(ip("192.0.2.1"));
  EXPECT_EQ(filter.onAccept(outside), network::FilterStatus::StopIteration);
  EXPECT_EQ(outside.continued, 1);
  EXPECT_FALSE(outside.last_success);

  EXPECT_EQ(stats::Store::get().counterValue("test.allowlist.allowed"), 2u);
  EXPECT_EQ(stats::Store::get().counterValue("test.allowlist.refused"), 1u);
}

}  // namespace
}  // namespace sluice
