#include "filters/request/dest_guard/dest_guard.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "event2/event.h"
#include "gtest/gtest.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/local_host.h"
#include "source/common/network/port_range.h"
#include "source/common/policy/policy.h"

namespace sluice {
namespace filters {
namespace dest_guard {
namespace {

using std::chrono::milliseconds;

network::Address addr(const std::string& ip, uint16_t port = 443) {
  auto a = network::Address::parseIp(ip, port);
  EXPECT_TRUE(a.ok()) << ip;
  return a.ok() ? *a : network::Address();
}

const char* name(Verdict v) {
  switch (v) {
    case Verdict::Allowed:
      return "allowed";
    case Verdict::Private:
      return "private";
    case Verdict::Denied:
      return "denied";
    case Verdict::Self:
      return "self";
  }
  return "?";
}

struct ConfigSpec {
  ConfigSpec& allowPrivate() {
    allow_private = true;
    return *this;
  }
  ConfigSpec& allowRanges(std::vector<std::string> v) {
    allow = std::move(v);
    return *this;
  }
  ConfigSpec& denyRanges(std::vector<std::string> v) {
    deny = std::move(v);
    return *this;
  }
  ConfigSpec& withPorts(std::vector<std::string> v) {
    ports = std::move(v);
    return *this;
  }
  ConfigSpec& withLocal(std::vector<std::string> v) {
    local = std::move(v);
    return *this;
  }
  ConfigSpec& withInterfaces(std::vector<std::string> v) {
    interfaces = std::move(v);
    return *this;
  }

  bool allow_private = false;
  std::vector<std::string> allow;
  std::vector<std::string> deny;
  std::vector<std::string> ports;
  std::vector<std::string> local;  // "ip:port"
  std::vector<std::string> interfaces;
};

absl::StatusOr<DestGuardConfigSharedPtr> tryBuild(const ConfigSpec& spec) {
  sluice::filters::v1::DestGuardConfig proto;
  proto.set_allow_private(spec.allow_private);
  for (const auto& s : spec.allow) proto.add_allow(s);
  for (const auto& s : spec.deny) proto.add_deny(s);
  for (const auto& s : spec.ports) proto.add_allowed_ports(s);
  std::vector<network::Address> local;
  for (const auto& s : spec.local) {
    auto a = network::Address::parseHostPort(s);
    EXPECT_TRUE(a.ok()) << s;
    if (a.ok()) local.push_back(*a);
  }
  std::vector<network::Address> interfaces;
  for (const auto& s : spec.interfaces) interfaces.push_back(addr(s, 0));
  // The test's own host (none of this machine's addresses), kept for the life of the process.
  static std::vector<std::unique_ptr<network::HostAddresses>>* hosts =
      new std::vector<std::unique_ptr<network::HostAddresses>>();
  hosts->push_back(std::make_unique<network::HostAddresses>());
  hosts->back()->set(interfaces);
  return buildConfig(proto, local, "f", *hosts->back());
}

DestGuardConfigSharedPtr build(const ConfigSpec& spec) {
  auto config = tryBuild(spec);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : nullptr;
}

std::string verdict(const DestGuardConfig& config, const std::string& ip, uint16_t port = 443) {
  return name(config.check(addr(ip, port)));
}

std::string udpVerdict(const DestGuardConfig& config, const std::string& ip, uint16_t port) {
  return name(config.check(addr(ip, port), network::OwnPorts::Transport::Udp));
}

// ---------------------------------------------------------------------------------------------
// The ranges

struct RangeCase {
  const char* range;
  std::vector<const char*> inside;   // first, last and one in between
  std::vector<const char*> outside;  // the neighbours just past each edge (when allowed)
};

const std::vector<RangeCase>& rangeCases() {
  static const std::vector<RangeCase> cases = {
      {"0.0.0.0/8", {"0.0.0.0", "0.1.2.3", "0.255.255.255"}, {"1.0.0.0"}},
      {"10.0.0.0/8", {"10.0.0.0", "10.20.30.40", "10.255.255.255"}, {"9.255.255.255", "11.0.0.0"}},
      {"100.64.0.0/10",
       {"100.64.0.0", "100.100.100.100", "100.127.255.255"},
       {"100.63.255.255", "100.128.0.0"}},
      {"127.0.0.0/8",
       {"127.0.0.0", "127.0.0.1", "127.255.255.255"},
       {"126.255.255.255", "128.0.0.0"}},
      {"169.254.0.0/16",
       {"169.254.0.0", "169.254.169.254", "169.254.255.255"},
       {"169.253.255.255", "169.255.0.0"}},
      {"172.16.0.0/12",
       {"172.16.0.0", "172.20.1.1", "172.31.255.255"},
       {"172.15.255.255", "172.32.0.0"}},
      {"192.0.0.0/24", {"192.0.0.0", "192.0.0.8", "192.0.0.255"}, {"191.255.255.255", "192.0.1.0"}},
      {"192.0.2.0/24", {"192.0.2.0", "192.0.2.7", "192.0.2.255"}, {"192.0.1.255", "192.0.3.0"}},
      {"192.88.99.0/24",
       {"192.88.99.0", "192.88.99.1", "192.88.99.255"},
       {"192.88.98.255", "192.88.100.0"}},
      {"192.168.0.0/16",
       {"192.168.0.0", "192.168.1.1", "192.168.255.255"},
       {"192.167.255.255", "192.169.0.0"}},
      {"198.18.0.0/15",
       {"198.18.0.0", "198.19.1.1", "198.19.255.255"},
       {"198.17.255.255", "198.20.0.0"}},
      {"198.51.100.0/24",
       {"198.51.100.0", "198.51.100.7", "198.51.100.255"},
       {"198.51.99.255", "198.51.101.0"}},
      {"203.0.113.0/24",
       {"203.0.113.0", "203.0.113.5", "203.0.113.255"},
       {"203.0.112.255", "203.0.114.0"}},
      // 224/4 and 240/4 are adjacent: 240/4 is the upper neighbour of multicast.
      {"224.0.0.0/4", {"224.0.0.0", "233.1.2.3", "239.255.255.255"}, {"223.255.255.255"}},
      {"240.0.0.0/4", {"240.0.0.0", "250.1.2.3", "255.255.255.254", "255.255.255.255"}, {}},
      {"::/128", {"::"}, {"::1:0:0"}},
      {"::1/128", {"::1"}, {"::1:0:0"}},
      {"::/96", {"::2", "::7f00:1", "::ffff:ffff"}, {"::1:0:0"}},
      {"::ffff:0:0/96",
       {"::ffff:0.0.0.0", "::ffff:8.8.8.8", "::ffff:127.0.0.1", "::ffff:255.255.255.255"},
       {"::fffe:ffff:ffff", "::1:0:0:0"}},
      {"64:ff9b::/96",
       {"64:ff9b::", "64:ff9b::7f00:1", "64:ff9b::ffff:ffff"},
       {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "64:ff9b::1:0:0"}},
      {"64:ff9b:1::/48",
       {"64:ff9b:1::", "64:ff9b:1:2::3", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff"},
       {"64:ff9b:0:ffff:ffff:ffff:ffff:ffff", "64:ff9b:2::"}},
      {"100::/64",
       {"100::", "100::1", "100::ffff:ffff:ffff:ffff"},
       {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "100:0:0:1::"}},
      {"2001::/32",
       {"2001::", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff"},
       {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:1::"}},
      {"2001:db8::/32",
       {"2001:db8::", "2001:db8::1", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"},
       {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"}},
      {"2002::/16",
       {"2002::", "2002:7f00:1::1", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
       {"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2003::"}},
      {"fc00::/7",
       {"fc00::", "fd12:3456::1", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
       {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"}},
      // fe80::/10, fec0::/10 and ff00::/8 are adjacent.
      {"fe80::/10",
       {"fe80::", "fe80::1", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
       {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
      {"fec0::/10", {"fec0::", "fec0::1", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, {}},
      {"ff00::/8", {"ff00::", "ff02::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, {}},
  };
  return cases;
}

TEST(DestGuardRangesTest, EveryInternalRangeIsRefusedInsideAndAtItsEdges) {
  auto config = build(ConfigSpec());
  ASSERT_NE(config, nullptr);
  for (const RangeCase& c : rangeCases()) {
    SCOPED_TRACE(c.range);
    for (const char* ip : c.inside) EXPECT_EQ(verdict(*config, ip), "private") << ip;
    for (const char* ip : c.outside) EXPECT_EQ(verdict(*config, ip), "allowed") << ip;
  }
}

TEST(DestGuardRangesTest, TheBuiltInListIsExactlyTheDocumentedOne) {
  // Every range of the table above is in internalRanges() and nothing else is.
  std::vector<std::string> listed;
  for (const auto& r : internalRanges()) listed.push_back(r.asString());
  std::vector<std::string> expected;
  for (const RangeCase& c : rangeCases()) {
    auto r = network::CidrRange::parse(c.range);
    ASSERT_TRUE(r.ok()) << c.range;
    expected.push_back(r->asString());
  }
  std::sort(listed.begin(), listed.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listed, expected);
}

TEST(DestGuardRangesTest, PublicAddressesAreAllowed) {
  auto config = build(ConfigSpec());
  ASSERT_NE(config, nullptr);
  for (const char* ip :
       {"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.0.1", "172.32.0.1", "223.255.255.254",
        "2606:4700:4700::1111", "2a00:1450:4001::200e", "2001:4860:4860::8888"}) {
    EXPECT_EQ(verdict(*config, ip), "allowed") << ip;
  }
}

TEST(DestGuardRangesTest, AllowPrivateOpensEveryInternalRange) {
  auto config = build(ConfigSpec().allowPrivate());
  ASSERT_NE(config, nullptr);
  for (const RangeCase& c : rangeCases()) {
    for (const char* ip : c.inside) EXPECT_EQ(verdict(*config, ip), "allowed") << ip;
  }
}

// ---------------------------------------------------------------------------------------------
// allow / deny

TEST(DestGuardPolicyTest, AllowOpensOnlyItsRanges) {
  auto config = build(ConfigSpec().allowRanges({"10.1.0.0/16", "fd00:1::/32"}));
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(verdict(*config, "10.1.0.0"), "allowed");
  EXPECT_EQ(verdict(*config, "10.1.255.255"), "allowed");
  EXPECT_EQ(verdict(*config, "10.0.255.255"), "private");
  EXPECT_EQ(verdict(*config, "10.2.0.0"), "private");
  EXPECT_EQ(verdict(*config, "127.0.0.1"), "private");
  EXPECT_EQ(verdict(*config, "fd00:1::5"), "allowed");
  EXPECT_EQ(verdict(*config, "fd00:2::5"), "private");
  // The IPv4-mapped form of an opened address reaches the same host.
  EXPECT_EQ(verdict(*config, "::ffff:10.1.2.3"), "allowed");
  EXPECT_EQ(verdict(*config, "::ffff:10.2.2.3"), "private");
}

TEST(DestGuardPolicyTest, DenyWinsOverAllowAndAllowPrivate) {
  auto config = build(ConfigSpec()
                          .allowPrivate()
                          .allowRanges({"10.0.0.0/8"})
                          .denyRanges({"10.9.0.0/16", "8.8.8.0/24", "2606:4700::/32"}));
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(verdict(*config, "10.9.1.1"), "denied");
  EXPECT_EQ(verdict(*config, "10.8.1.1"), "allowed");
  EXPECT_EQ(verdict(*config, "192.168.1.1"), "allowed");
  // Public ranges can be denied too, in either notation.
  EXPECT_EQ(verdict(*config, "8.8.8.8"), "denied");
  EXPECT_EQ(verdict(*config, "::ffff:8.8.8.8"), "denied");
  EXPECT_EQ(verdict(*config, "::ffff:10.9.0.1"), "denied");
  EXPECT_EQ(verdict(*config, "8.8.4.4"), "allowed");
  EXPECT_EQ(verdict(*config, "2606:4700::1111"), "denied");
  EXPECT_EQ(verdict(*config, "2606:4701::1111"), "allowed");

  auto strict = build(ConfigSpec().allowRanges({"10.0.0.0/8"}).denyRanges({"10.0.0.0/8"}));
  ASSERT_NE(strict, nullptr);
  EXPECT_EQ(verdict(*strict, "10.1.1.1"), "denied");
}

TEST(DestGuardPolicyTest, BadRangesAreConfigErrorsWithTheirPath) {
  auto bad = tryBuild(ConfigSpec().allowRanges({"10.0.0.0/8", "10.1.2.3/8"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "f.typed_config.allow[1]: '10.1.2.3/8': address has bits set beyond the /8 prefix");
  bad = tryBuild(ConfigSpec().denyRanges({"example.com"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "f.typed_config.deny[0]: 'example.com': not an IP address or range");
  EXPECT_FALSE(tryBuild(ConfigSpec().denyRanges({"10.0.0.0/33"})).ok());
  EXPECT_FALSE(tryBuild(ConfigSpec().denyRanges({""})).ok());
}

// ---------------------------------------------------------------------------------------------
// sluice itself

TEST(DestGuardSelfTest, OwnAddressesAreRefusedEvenWhenEverythingIsOpen) {
  auto config = build(ConfigSpec()
                          .allowPrivate()
                          .allowRanges({"127.0.0.0/8"})
                          .withLocal({"127.0.0.1:8080", "127.0.0.1:9901", "[::1]:8443"}));
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(verdict(*config, "127.0.0.1", 8080), "self");
  EXPECT_EQ(verdict(*config, "127.0.0.1", 9901), "self");
  EXPECT_EQ(verdict(*config, "::ffff:127.0.0.1", 8080), "self");
  EXPECT_EQ(verdict(*config, "::1", 8443), "self");
  // connect() to the unspecified address reaches the local host.
  EXPECT_EQ(verdict(*config, "0.0.0.0", 8080), "self");
  EXPECT_EQ(verdict(*config, "::", 9901), "self");
  // Other ports of the same address are other services.
  EXPECT_EQ(verdict(*config, "127.0.0.1", 8081), "allowed");
  EXPECT_EQ(verdict(*config, "127.0.0.2", 8080), "allowed");
  EXPECT_EQ(verdict(*config, "::1", 8080), "allowed");
  // Deny cannot make it less refused; self is reported first.
  auto denied = build(ConfigSpec().denyRanges({"127.0.0.0/8"}).withLocal({"127.0.0.1:8080"}));
  ASSERT_NE(denied, nullptr);
  EXPECT_EQ(verdict(*denied, "127.0.0.1", 8080), "self");
  EXPECT_EQ(verdict(*denied, "127.0.0.1", 80), "denied");
}

TEST(DestGuardSelfTest, WildcardBindCoversEveryInterfaceAndLoopback) {
  auto config = build(ConfigSpec()
                          .allowPrivate()
                          .withLocal({"0.0.0.0:8080", "[::]:3128"})
                          .withInterfaces({"127.0.0.1", "10.1.2.3", "fe80::1", "2001:db8::5"}));
  ASSERT_NE(config, nullptr);
  for (uint16_t port : {8080, 3128}) {
    SCOPED_TRACE(port);
    EXPECT_EQ(verdict(*config, "10.1.2.3", port), "self");
    EXPECT_EQ(verdict(*config, "127.0.0.1", port), "self");
    EXPECT_EQ(verdict(*config, "127.9.9.9", port), "self");
    EXPECT_EQ(verdict(*config, "::1", port), "self");
    EXPECT_EQ(verdict(*config, "2001:db8::5", port), "self");
    EXPECT_EQ(verdict(*config, "::ffff:10.1.2.3", port), "self");
    EXPECT_EQ(verdict(*config, "0.0.0.0", port), "self");
    EXPECT_EQ(verdict(*config, "10.1.2.4", port), "allowed");
  }
  EXPECT_EQ(verdict(*config, "10.1.2.3", 8081), "allowed");
}

TEST(DestGuardSelfTest, TheHostsOwnAddressesAreRefusedOnEveryPortUnlessOpened) {
  const std::vector<std::string> host = {"127.0.0.1", "1.2.3.4", "2600:1f18::5"};
  auto config = build(ConfigSpec().withInterfaces(host));
  ASSERT_NE(config, nullptr);
  for (uint16_t port : {80, 6379, 16379}) {
    SCOPED_TRACE(port);
    EXPECT_EQ(verdict(*config, "1.2.3.4", port), "self");
    EXPECT_EQ(verdict(*config, "2600:1f18::5", port), "self");
    EXPECT_EQ(verdict(*config, "1.2.3.5", port), "allowed");
    EXPECT_EQ(verdict(*config, "2600:1f18::6", port), "allowed");
  }
  // Loopback keeps its own reason.
  EXPECT_EQ(verdict(*config, "127.0.0.1", 6379), "private");
  // A deny range says so first; an allow range or allow_private opens the host explicitly.
  EXPECT_EQ(verdict(*build(ConfigSpec().withInterfaces(host).denyRanges({"1.2.3.0/24"})), "1.2.3.4",
                    6379),
            "denied");
  EXPECT_EQ(verdict(*build(ConfigSpec().withInterfaces(host).allowRanges({"1.2.3.4/32"})),
                    "1.2.3.4", 6379),
            "allowed");
  EXPECT_EQ(verdict(*build(ConfigSpec().withInterfaces(host).allowPrivate()), "1.2.3.4", 6379),
            "allowed");
  // Opening NAT64 does not open the host behind it.
  auto nat64 = build(ConfigSpec().withInterfaces(host).allowRanges({"64:ff9b::/96"}));
  EXPECT_EQ(verdict(*nat64, "64:ff9b::102:304", 6379), "self");
  EXPECT_EQ(verdict(*nat64, "64:ff9b::102:305", 6379), "allowed");
}

TEST(DestGuardSelfTest, TheHostsAddressesFollowItsInterfaces) {
  network::HostAddresses host;
  sluice::filters::v1::DestGuardConfig proto;
  auto config = buildConfig(proto, {}, "f", host);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(verdict(**config, "1.2.3.4", 6379), "allowed");
  host.set({addr("1.2.3.4", 0)});
  EXPECT_EQ(verdict(**config, "1.2.3.4", 6379), "self");
  host.set({});
  EXPECT_EQ(verdict(**config, "1.2.3.4", 6379), "allowed");
}

TEST(DestGuardSelfTest, PortsSluiceHoldsForClientsAreSluiceOnLocalAddresses) {
  // Ports above the ephemeral range's usual start, held only by this test.
  constexpr uint16_t kBindPort = 61001;
  constexpr uint16_t kUdpPort = 61002;
  auto config = build(ConfigSpec().allowPrivate().withInterfaces({"127.0.0.1", "10.1.2.3"}));
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(verdict(*config, "127.0.0.1", kBindPort), "allowed");
  {
    network::OwnPort bind_port;
    bind_port.hold(network::OwnPorts::Transport::Tcp, kBindPort);
    network::OwnPort udp_port;
    udp_port.hold(network::OwnPorts::Transport::Udp, kUdpPort);
    for (const char* local :
         {"127.0.0.1", "127.0.0.2", "::1", "10.1.2.3", "0.0.0.0", "::ffff:127.0.0.1"}) {
      SCOPED_TRACE(local);
      EXPECT_EQ(verdict(*config, local, kBindPort), "self");
      EXPECT_EQ(udpVerdict(*config, local, kUdpPort), "self");
      // The other transport's port of the same number is someone else's.
      EXPECT_EQ(udpVerdict(*config, local, kBindPort), "allowed");
      EXPECT_EQ(verdict(*config, local, kUdpPort), "allowed");
    }
    // Another host's port of the same number is not sluice.
    EXPECT_EQ(verdict(*config, "10.1.2.4", kBindPort), "allowed");
    EXPECT_EQ(udpVerdict(*config, "8.8.8.8", kUdpPort), "allowed");
    // Two sockets on one port: the port stays sluice's until both are gone.
    network::OwnPort second;
    second.hold(network::OwnPorts::Transport::Tcp, kBindPort);
    bind_port.release();
    EXPECT_EQ(verdict(*config, "127.0.0.1", kBindPort), "self");
  }
  EXPECT_EQ(verdict(*config, "127.0.0.1", kBindPort), "allowed");
  EXPECT_EQ(udpVerdict(*config, "127.0.0.1", kUdpPort), "allowed");
}

// ---------------------------------------------------------------------------------------------
// IPv4 inside IPv6

TEST(DestGuardEmbeddedTest, RangesApplyToTheIpv4AddressEveryTranslatorReaches) {
  auto config =
      build(ConfigSpec().allowPrivate().denyRanges({"169.254.169.254/32", "203.0.113.0/24"}));
  ASSERT_NE(config, nullptr);
  for (const char* ip : {
           "169.254.169.254", "::ffff:169.254.169.254",
           "64:ff9b::a9fe:a9fe",                    // NAT64 well-known prefix
           "64:ff9b:1::a9fe:a9fe",                  // local-use NAT64, /96 layout
           "64:ff9b:1:a9fe:a9:fe00::",              // local-use NAT64, /48 layout (octet 8 skipped)
           "64:ff9b:1:ffa9:fe:a9fe::",              // /56 layout
           "64:ff9b:1:ffff:a9:fea9:fe00:0",         // /64 layout
           "2002:a9fe:a9fe::1",                     // 6to4
           "::a9fe:a9fe",                           // IPv4-compatible
           "2001:0:4136:e378:8000:63bf:5601:5601",  // Teredo: client 169.254.169.254 inverted
           "64:ff9b::cb00:7101",                    // 203.0.113.1
       }) {
    EXPECT_EQ(verdict(*config, ip), "denied") << ip;
  }
  // The same forms of an address outside the deny ranges pass.
  for (const char* ip : {"64:ff9b::808:808", "2002:808:808::1", "::808:808",
                         "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "64:ff9b:1::808:808"}) {
    EXPECT_EQ(verdict(*config, ip), "allowed") << ip;
  }
}

TEST(DestGuardEmbeddedTest, OpeningATranslatorsRangeDoesNotOpenTheInternalAddressesBehindIt) {
  auto config = build(ConfigSpec().allowRanges({"64:ff9b::/96", "2002::/16"}));
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(verdict(*config, "64:ff9b::808:808"), "allowed");
  EXPECT_EQ(verdict(*config, "2002:808:808::1"), "allowed");
  for (const char* ip : {"64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",
                         "2002:c0a8:101::1", "2002:7f00:1::"}) {
    EXPECT_EQ(verdict(*config, ip), "private") << ip;
  }
  // Without an allow range the translators' prefixes stay internal themselves.
  auto defaults = build(ConfigSpec());
  EXPECT_EQ(verdict(*defaults, "64:ff9b::808:808"), "private");
  EXPECT_EQ(verdict(*defaults, "2001:0:4136:e378:8000:63bf:f7f7:f7f7"), "private");
}

TEST(DestGuardEmbeddedTest, ARulesCidrsOpenWhatTheyHoldAsAllowRangesDo) {
  auto config = build(ConfigSpec().denyRanges({"127.0.0.9/32"}));
  ASSERT_NE(config, nullptr);
  auto ranges = [](std::vector<const char*> texts) {
    std::vector<network::CidrRange> out;
    for (const char* t : texts) out.push_back(*network::CidrRange::parse(t));
    return out;
  };
  const auto loopback = ranges({"127.0.0.0/8"});
  auto opened = [&](const std::vector<network::CidrRange>& r, const std::string& ip) {
    return name(config->check(addr(ip), network::OwnPorts::Transport::Tcp, &r));
  };
  EXPECT_EQ(opened(loopback, "127.0.0.1"), "allowed");
  EXPECT_EQ(opened(loopback, "::ffff:127.0.0.1"), "allowed");
  EXPECT_EQ(opened(loopback, "10.0.0.1"), "private");
  EXPECT_EQ(verdict(*config, "127.0.0.1"), "private");  // only for the request they open
  EXPECT_EQ(opened(loopback, "127.0.0.9"), "denied");   // never a deny range
  // A translator's prefix opens public IPv4 behind it, not the internal addresses.
  const auto nat64 = ranges({"64:ff9b::/96"});
  EXPECT_EQ(opened(nat64, "64:ff9b::808:808"), "allowed");
  EXPECT_EQ(opened(nat64, "64:ff9b::a9fe:a9fe"), "private");
  // The IPv4 range alone leaves the NAT64 prefix internal.
  EXPECT_EQ(opened(ranges({"10.0.0.0/8"}), "64:ff9b::a00:1"), "private");
  EXPECT_EQ(opened(ranges({"10.0.0.0/8", "64:ff9b::/96"}), "64:ff9b::a00:1"), "allowed");
  EXPECT_EQ(config->addressRefusal(addr("127.0.0.1"), false, &loopback), "");
  EXPECT_EQ(config->addressRefusal(addr("127.0.0.1"), false, nullptr), kReasonPrivate);
}

// ---------------------------------------------------------------------------------------------
// ports

TEST(DestGuardPortsTest, DefaultIsWebPortsAndUnprivileged) {
  auto config = build(ConfigSpec());
  ASSERT_NE(config, nullptr);
  for (uint16_t p : {80, 443, 1024, 8080, 65535}) EXPECT_TRUE(config->portAllowed(p)) << p;
  for (uint16_t p : {0, 1, 22, 25, 79, 81, 442, 444, 587, 1023}) {
    EXPECT_FALSE(config->portAllowed(p)) << p;
  }
}

TEST(DestGuardPortsTest, ConfiguredListReplacesTheDefault) {
  auto config = build(ConfigSpec().withPorts({"25", "8000-8010", "443"}));
  ASSERT_NE(config, nullptr);
  for (uint16_t p : {25, 443, 8000, 8005, 8010}) EXPECT_TRUE(config->portAllowed(p)) << p;
  for (uint16_t p : {24, 26, 80, 7999, 8011, 1024, 65535}) {
    EXPECT_FALSE(config->portAllowed(p)) << p;
  }
  auto all = build(ConfigSpec().withPorts({"1-65535"}));
  ASSERT_NE(all, nullptr);
  EXPECT_TRUE(all->portAllowed(1));
  EXPECT_TRUE(all->portAllowed(65535));
  EXPECT_FALSE(all->portAllowed(0));
}

TEST(DestGuardPortsTest, BadPortsAreConfigErrorsWithTheirPath) {
  auto bad = tryBuild(ConfigSpec().withPorts({"80", "100-50"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "f.typed_config.allowed_ports[1]: range \"100-50\" is reversed (the low port comes "
            "first)");
  for (const char* text : {"0", "65536", "80-", "-80", "abc", "80 ", "1-2-3", "", "0-10",
                           "10-70000", "+80", "999999", "8O"}) {
    auto r = tryBuild(ConfigSpec().withPorts({text}));
    ASSERT_FALSE(r.ok()) << "'" << text << "'";
    EXPECT_EQ(r.status().message().substr(0, 34), "f.typed_config.allowed_ports[0]: e") << text;
  }
}

TEST(PortRangeTest, Parses) {
  auto r = network::parsePortRange("1024-65535");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->low, 1024);
  EXPECT_EQ(r->high, 65535);
  r = network::parsePortRange("80");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->low, 80);
  EXPECT_EQ(r->high, 80);
  EXPECT_TRUE(r->contains(80));
  EXPECT_FALSE(r->contains(81));
  r = network::parsePortRange("7-7");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->low, 7);
  EXPECT_EQ(r->high, 7);
  // Quoted text in errors is bounded.
  std::string long_text(100, '9');
  auto bad = network::parsePortRange(long_text);
  ASSERT_FALSE(bad.ok());
  EXPECT_LT(bad.status().message().size(), 100u);
}

// ---------------------------------------------------------------------------------------------
// The filter, in a real chain with a real resolver

// A UDP name server on 127.0.0.1 that answers A queries from a table (AAAA: no records),
// NXDOMAIN for anything else, or stays silent.
class MiniDnsServer {
 public:
  explicit MiniDnsServer(event::Dispatcher& dispatcher) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    event_ = std::make_unique<event::FileEvent>(
        dispatcher, fd_, this, event::FileEvent::To<&MiniDnsServer::onSocketEvent>());
  }
  ~MiniDnsServer() {
    event_.reset();
    ::close(fd_);
  }
  std::string address() const { return absl::StrFormat("127.0.0.1:%d", port_); }

  std::map<std::string, std::vector<uint32_t>> a_records;
  bool silent = false;
  int queries = 0;

 private:
  void onSocketEvent(uint32_t) { onRead(); }
  void onRead() {
    uint8_t q[512];
    sockaddr_storage peer;
    while (true) {
      socklen_t plen = sizeof(peer);
      ssize_t n = ::recvfrom(fd_, q, sizeof(q), 0, reinterpret_cast<sockaddr*>(&peer), &plen);
      if (n < 0) return;
      ++queries;
      if (silent || n < 17) continue;
      size_t pos = 12;
      std::string qname;
      while (pos < static_cast<size_t>(n) && q[pos] != 0) {
        if (!qname.empty()) qname += '.';
        qname.append(reinterpret_cast<char*>(q + pos + 1), q[pos]);
        pos += q[pos] + 1;
      }
      pos += 1;
      if (pos + 4 > static_cast<size_t>(n)) continue;
      const uint16_t qtype = static_cast<uint16_t>(q[pos] << 8 | q[pos + 1]);
      const size_t question_end = pos + 4;
      std::vector<uint8_t> r(q, q + question_end);
      r[2] = 0x81;  // response, recursion desired
      r[3] = 0x80;  // recursion available, NOERROR
      r[6] = r[7] = r[8] = r[9] = r[10] = r[11] = 0;
      // evdns randomises the case of the name it asks for.
      for (char& c : qname) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
      auto found = a_records.find(qname);
      if (found == a_records.end()) {
        r[3] |= 3;  // NXDOMAIN
      } else if (qtype == 1) {
        r[7] = static_cast<uint8_t>(found->second.size());
        for (uint32_t ip : found->second) {
          const uint8_t rr[] = {0xc0,
                                12,
                                0,
                                1,
                                0,
                                1,
                                0,
                                0,
                                0,
                                60,
                                0,
                                4,
                                static_cast<uint8_t>(ip >> 24),
                                static_cast<uint8_t>(ip >> 16),
                                static_cast<uint8_t>(ip >> 8),
                                static_cast<uint8_t>(ip)};
          r.insert(r.end(), rr, rr + sizeof(rr));
        }
      }
      ::sendto(fd_, r.data(), r.size(), 0, reinterpret_cast<sockaddr*>(&peer), plen);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<event::FileEvent> event_;
};

class FakeWorker : public proxy::WorkerContext {
 public:
  FakeWorker(event::Dispatcher& dispatcher, dns::Resolver& resolver)
      : dispatcher_(dispatcher), resolver_(resolver) {}
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  dns::Resolver& resolver() override { return resolver_; }
  dns::Resolver& resolver(const network::Egress& egress) override {
    asked_egress = egress;
    return resolver_;
  }
  upstream::Pool& pool() override { abort(); }  // the guard never pools
  network::Egress asked_egress;                 // of the last lookup
  uint32_t index() const override { return 0; }
  bool draining() const override { return false; }

 private:
  event::Dispatcher& dispatcher_;
  dns::Resolver& resolver_;
};

class RecordingSink : public proxy::RequestSink {
 public:
  void onUpstreamReady(upstream::UpstreamHandle) override { ++ready; }
  void onDenied(proxy::Denial d, std::string_view r) override {
    ++denials;
    denial = d;
    reason = std::string(r);
  }
  int ready = 0;
  int denials = 0;
  proxy::Denial denial = proxy::Denial::BadRequest;
  std::string reason;
};

// Stands in for the router: records the pinned addresses it was handed.
class TerminalFilter : public proxy::RequestFilter {
 public:
  explicit TerminalFilter(std::vector<std::string>& seen) : seen_(seen) {}
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override {
    seen_.clear();
    for (uint32_t i = 0; i < request.pinned_count; ++i) {
      seen_.push_back(request.pinned[i].asString());
    }
    ++reached;
    callbacks_->upstreamReady(upstream::UpstreamHandle());
    return proxy::RequestFilterStatus::StopIteration;
  }
  int reached = 0;

 private:
  std::vector<std::string>& seen_;
};

std::string tempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrFormat("%s/%s.%d", dir != nullptr ? dir : "/tmp", name, getpid());
}

class DestGuardFilterTest : public ::testing::Test {
 protected:
  DestGuardFilterTest() : dns_(dispatcher_) {
    hosts_ = tempPath("hosts");
    std::ofstream out(hosts_, std::ios::trunc);
    out << "8.8.8.8 good.test\n"
           "127.0.0.1 evil.test\n"
           "8.8.8.8 mixed.test\n"
           "10.0.0.1 mixed.test\n"
           "2606:4700::1111 v6.test\n"
           "::ffff:127.0.0.1 mapped.test\n";
    for (int i = 1; i <= 9; ++i) out << absl::StrFormat("8.8.8.%d many.test\n", i);
    for (int i = 1; i <= 8; ++i) out << absl::StrFormat("8.8.4.%d lastbad.test\n", i);
    out << "192.168.0.1 lastbad.test\n";
  }

  void makeChain(const ConfigSpec& spec, bool with_name_server = false) {
    config::v1::Dns dns_config;
    if (with_name_server) dns_config.add_resolvers(dns_.address());
    dns_config.mutable_timeout()->set_seconds(2);
    resolver_ = std::make_unique<dns::Resolver>(dispatcher_, dns_config, hosts_,
                                                "/nonexistent/resolv.conf");
    worker_ = std::make_unique<FakeWorker>(dispatcher_, *resolver_);
    chain_ = std::make_unique<proxy::RequestFilterChain>(*worker_, sink_);
    config_ = build(spec);
    ASSERT_NE(config_, nullptr);
    chain_->addFilter(std::make_unique<DestGuardFilter>(config_));
    auto terminal = std::make_unique<TerminalFilter>(pinned_);
    terminal_ = terminal.get();
    chain_->addFilter(std::move(terminal));
  }

  // Runs one request; returns "pinned a, b" or "denied <status>: <reason>" or "pending".
  std::string run(const std::string& host, uint16_t port = 443,
                  proxy::RequestKind kind = proxy::RequestKind::Tunnel) {
    host_ = host;
    request_ = proxy::ProxyRequest();
    request_.kind = kind;
    request_.group = group_;
    request_.host = host_;
    request_.port = port;
    const int ready = sink_.ready;
    const int denials = sink_.denials;
    chain_->start(request_);
    return outcome(ready, denials);
  }

  std::string outcome(int ready_before, int denials_before) {
    if (sink_.ready > ready_before) {
      std::string out = "pinned";
      for (size_t i = 0; i < pinned_.size(); ++i) out += (i == 0 ? " " : ", ") + pinned_[i];
      return out;
    }
    if (sink_.denials > denials_before) {
      return absl::StrFormat("denied %d: %s", static_cast<int>(sink_.denial), sink_.reason);
    }
    return "pending";
  }

  bool runUntil(const std::function<bool()>& pred, milliseconds limit = milliseconds(3000)) {
    bool expired = false;
    event::Timer guard(dispatcher_, [&expired] { expired = true; });
    guard.enable(limit);
    while (!pred() && !expired) dispatcher_.runOnce();
    return pred();
  }

  uint64_t resolverCalls() const {
    const auto& c = resolver_->counters();
    return c.queries + c.cache_hits + c.hosts_hits + c.failures + c.invalid_names;
  }

  static std::string forbidden(std::string_view reason) {
    return absl::StrFormat("denied %d: %s", static_cast<int>(proxy::Denial::Forbidden), reason);
  }
  static std::string badGateway() {
    return absl::StrFormat("denied %d: ", static_cast<int>(proxy::Denial::BadGateway));
  }

  event::Dispatcher dispatcher_;
  MiniDnsServer dns_;
  std::string hosts_;
  std::unique_ptr<dns::Resolver> resolver_;
  std::unique_ptr<FakeWorker> worker_;
  RecordingSink sink_;
  std::unique_ptr<proxy::RequestFilterChain> chain_;
  DestGuardConfigSharedPtr config_;
  TerminalFilter* terminal_ = nullptr;
  std::vector<std::string> pinned_;
  std::string host_;
  proxy::ProxyRequest request_;
  const policy::Group* group_ = nullptr;
  std::vector<policy::PolicySharedPtr> policies_;

  // A group "g" of `yaml`-like rules: (action, hosts, cidrs) each.
  struct RuleSpec {
    const char* action;
    std::vector<const char*> hosts;
    std::vector<const char*> cidrs;
    std::vector<const char*> kinds;
  };
  void useGroup(std::vector<RuleSpec> rules, bool report_only = false,
                const char* default_action = "allow") {
    config::v1::Policy proto;
    config::v1::Group* g = proto.add_groups();
    g->set_name("g");
    g->set_report_only(report_only);
    g->set_default_action(default_action);
    for (const RuleSpec& r : rules) {
      config::v1::PolicyRule* rule = g->add_rules();
      rule->set_action(r.action);
      for (const char* h : r.hosts) rule->add_hosts(h);
      for (const char* c : r.cidrs) rule->add_cidrs(c);
      for (const char* k : r.kinds) rule->add_kinds(k);
    }
    auto built = policy::buildPolicy(proto);
    ASSERT_TRUE(built.ok()) << built.status();
    policies_.push_back(*built);
    group_ = policies_.back()->find("g");
    // The counters are the process's: every test's group "g" shares them.
    for (const char* which : {"allowed", "denied", "report_only"}) base_[which] = groupStat(which);
  }
  static uint64_t groupStat(const std::string& which) {
    return stats::Store::get().counterValue("policy.group.g." + which);
  }
  // What the group's counter counted since the last useGroup().
  uint64_t counted(const std::string& which) { return groupStat(which) - base_[which]; }
  std::map<std::string, uint64_t> base_;
};

TEST_F(DestGuardFilterTest, EveryLiteralNotationOfLoopbackIsRefusedWithoutDns) {
  makeChain(ConfigSpec());
  for (const char* host :
       {"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7f000001", "0x7f.0.0.1",
        "017700000001", "127.0.1", "127.000.000.001", "127.0.0.1.", "::1", "[::1]",
        "::ffff:127.0.0.1", "::ffff:7f00:1", "0:0:0:0:0:0:0:1", "::", "0", "0.0.0.0"}) {
    EXPECT_EQ(run(host), forbidden(kReasonPrivate)) << host;
  }
  EXPECT_EQ(resolverCalls(), 0u);
  EXPECT_EQ(terminal_->reached, 0);
}

TEST_F(DestGuardFilterTest, LiteralsArePinnedInCanonicalForm) {
  makeChain(ConfigSpec());
  EXPECT_EQ(run("8.8.8.8"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("0x08.0x08.0x08.0x08", 80), "pinned 8.8.8.8:80");
  EXPECT_EQ(run("134744072", 8080), "pinned 8.8.8.8:8080");
  EXPECT_EQ(run("010.010.010.010"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("2606:4700::1111"), "pinned [2606:4700::1111]:443");
  EXPECT_EQ(run("[2606:4700::1111]"), "pinned [2606:4700::1111]:443");
  EXPECT_EQ(resolverCalls(), 0u);
}

TEST_F(DestGuardFilterTest, JunkThatIsNotALiteralIsNotResolvedEither) {
  makeChain(ConfigSpec().allowPrivate());
  for (const char* host : {"1.2.3.4.5", "0x", "08.1", "4294967296", "1..2", "0x7g.1"}) {
    const uint64_t invalid = resolver_->counters().invalid_names;
    EXPECT_EQ(run(host).substr(0, badGateway().size()), badGateway()) << host;
    // The resolver refused it as a would-be IP: nothing went to a name server.
    EXPECT_EQ(resolver_->counters().invalid_names, invalid + 1) << host;
  }
  EXPECT_EQ(resolver_->counters().queries, 0u);
  EXPECT_EQ(terminal_->reached, 0);
}

TEST_F(DestGuardFilterTest, PortIsCheckedBeforeAnythingElse) {
  makeChain(ConfigSpec().allowPrivate().withPorts({"443"}));
  EXPECT_EQ(run("good.test", 25), forbidden(kReasonPort));
  EXPECT_EQ(run("8.8.8.8", 80), forbidden(kReasonPort));
  EXPECT_EQ(run("unresolvable.test", 22), forbidden(kReasonPort));
  EXPECT_EQ(resolverCalls(), 0u);
  EXPECT_EQ(run("good.test", 443), "pinned 8.8.8.8:443");
}

TEST_F(DestGuardFilterTest, NamesAreResolvedAndEveryAddressChecked) {
  makeChain(ConfigSpec());
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("evil.test"), forbidden(kReasonPrivate));
  // One public and one private address: refused, never "try the public one".
  EXPECT_EQ(run("mixed.test"), forbidden(kReasonPrivate));
  EXPECT_EQ(run("mapped.test"), forbidden(kReasonPrivate));
  EXPECT_EQ(run("v6.test", 8443), "pinned [2606:4700::1111]:8443");
  // At most kMaxPinned are pinned, but the ninth is checked as well.
  EXPECT_EQ(run("many.test"),
            "pinned 8.8.8.1:443, 8.8.8.2:443, 8.8.8.3:443, 8.8.8.4:443, 8.8.8.5:443, "
            "8.8.8.6:443, 8.8.8.7:443, 8.8.8.8:443");
  EXPECT_EQ(run("lastbad.test"), forbidden(kReasonPrivate));
}

TEST_F(DestGuardFilterTest, NamesAreLookedUpFromTheGroupsEgress) {
  makeChain(ConfigSpec());
  policy::Group group;
  group.name = "ci";
  group.egress.addresses.ipv4 = *network::Address::parseIp("192.0.2.10", 0);
  host_ = "good.test";
  request_ = proxy::ProxyRequest();
  request_.kind = proxy::RequestKind::Tunnel;
  request_.host = host_;
  request_.port = 443;
  request_.group = &group;
  const int ready = sink_.ready;
  chain_->start(request_);
  EXPECT_EQ(outcome(ready, sink_.denials), "pinned 8.8.8.8:443");
  EXPECT_EQ(worker_->asked_egress, group.egress.addresses);
  // Without a group, the worker's own resolver (an empty egress).
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_TRUE(worker_->asked_egress.empty());
}

TEST_F(DestGuardFilterTest, ReasonsAndCountersMatch) {
  makeChain(ConfigSpec().denyRanges({"8.8.4.0/24"}).withLocal({"127.0.0.1:3128"}));
  auto value = [](const char* name) {
    return stats::Store::get().counterValue(absl::StrFormat("dest_guard.%s", name));
  };
  const uint64_t allowed = value("allowed"), priv = value("blocked_private"),
                 denied = value("blocked_denied"), port = value("blocked_port"),
                 self = value("blocked_self"), failed = value("resolve_failed");
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("10.0.0.1"), forbidden(kReasonPrivate));
  EXPECT_EQ(run("evil.test"), forbidden(kReasonPrivate));
  EXPECT_EQ(run("8.8.4.4"), forbidden(kReasonDenied));
  EXPECT_EQ(run("8.8.8.8", 22), forbidden(kReasonPort));
  EXPECT_EQ(run("127.0.0.1", 3128), forbidden(kReasonSelf));
  EXPECT_EQ(run("nosuch.test"), badGateway() + "nosuch.test: no DNS name server configured");
  EXPECT_EQ(value("allowed"), allowed + 1);
  EXPECT_EQ(value("blocked_private"), priv + 2);
  EXPECT_EQ(value("blocked_denied"), denied + 1);
  EXPECT_EQ(value("blocked_port"), port + 1);
  EXPECT_EQ(value("blocked_self"), self + 1);
  EXPECT_EQ(value("resolve_failed"), failed + 1);
}

TEST_F(DestGuardFilterTest, ZoneIds) {
  makeChain(ConfigSpec());
  EXPECT_EQ(run("fe80::1%lo"), forbidden(kReasonPrivate));
  makeChain(ConfigSpec().allowPrivate());
  const unsigned lo = if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  EXPECT_EQ(run("fe80::1%lo"), "pinned [fe80::1]:443");
  EXPECT_EQ(request_.pinned[0].v6().sin6_scope_id, lo);
  EXPECT_EQ(run(absl::StrFormat("fe80::1%%%d", lo)), "pinned [fe80::1]:443");
  EXPECT_EQ(request_.pinned[0].v6().sin6_scope_id, lo);
  EXPECT_EQ(run("fe80::1%nosuchif0"), badGateway() + "no such interface in the address's zone id");
  EXPECT_EQ(run("fe80::1%999999"), badGateway() + "no such interface in the address's zone id");
  EXPECT_EQ(resolverCalls(), 0u);
}

TEST_F(DestGuardFilterTest, RetriedRequestDropsOldPins) {
  makeChain(ConfigSpec());
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(request_.pinned_count, 1u);
  // The codec restarts the chain on the same request after a pooled connection failed.
  request_.host = "evil.test";
  const int denials = sink_.denials;
  chain_->start(request_);
  EXPECT_EQ(outcome(sink_.ready, denials), forbidden(kReasonPrivate));
  EXPECT_EQ(request_.pinned_count, 0u);
}

TEST_F(DestGuardFilterTest, AsynchronousAnswersAreCheckedAndPinned) {
  dns_.a_records["public.test"] = {0x08080808, 0x01010101};
  dns_.a_records["rebind.test"] = {0x7f000001};
  dns_.a_records["half.test"] = {0x01010101, 0x0a000001};
  makeChain(ConfigSpec(), /*with_name_server=*/true);
  for (const auto& [host, expected] : std::vector<std::pair<std::string, std::string>>{
           {"public.test", "pinned 8.8.8.8:443, 1.1.1.1:443"},
           {"rebind.test", forbidden(kReasonPrivate)},
           {"half.test", forbidden(kReasonPrivate)},
       }) {
    const int ready = sink_.ready;
    const int denials = sink_.denials;
    EXPECT_EQ(run(host), "pending") << host;
    EXPECT_TRUE(runUntil([&] { return sink_.ready + sink_.denials > ready + denials; })) << host;
    EXPECT_EQ(outcome(ready, denials), expected) << host;
  }
  EXPECT_GT(dns_.queries, 0);
  // NXDOMAIN is a resolution failure.
  const int denials = sink_.denials;
  EXPECT_EQ(run("nxdomain.test"), "pending");
  EXPECT_TRUE(runUntil([&] { return sink_.denials > denials; }));
  EXPECT_EQ(outcome(sink_.ready, denials), badGateway() + "nxdomain.test: no such host");
}

TEST_F(DestGuardFilterTest, EndingTheRequestCancelsTheLookup) {
  dns_.silent = true;
  makeChain(ConfigSpec(), /*with_name_server=*/true);
  EXPECT_EQ(run("slow.test"), "pending");
  EXPECT_TRUE(runUntil([&] { return dns_.queries > 0; }));
  EXPECT_EQ(resolver_->lookupsInFlight(), 1u);
  chain_->end();  // the client went away
  EXPECT_EQ(resolver_->lookupsInFlight(), 0u);
  // Nothing arrives later, not even the timeout.
  const int outcomes = sink_.ready + sink_.denials;
  runUntil([] { return false; }, milliseconds(2500));
  EXPECT_EQ(sink_.ready + sink_.denials, outcomes);
  // Destroying a filter with a lookup in flight cancels it too.
  EXPECT_EQ(run("slow2.test"), "pending");
  EXPECT_EQ(resolver_->lookupsInFlight(), 1u);
  chain_.reset();
  EXPECT_EQ(resolver_->lookupsInFlight(), 0u);
  // evdns hands a cancelled request back on the next loop turn, which frees its context: without
  // that turn LeakSanitizer (tools/sanitize.sh) reports it.
  runUntil([] { return false; }, milliseconds(10));
}

TEST_F(DestGuardFilterTest, ARuleOnTheNameDecidesBeforeAnyLookup) {
  makeChain(ConfigSpec());
  useGroup({{"deny", {"*.test"}, {}, {}}, {"deny", {}, {"10.0.0.0/8"}, {}}});
  const uint64_t blocked_policy = stats::Store::get().counterValue("dest_guard.blocked_policy");
  const uint64_t before = resolverCalls();
  EXPECT_EQ(run("good.test"), forbidden("policy rule g.rules[0]"));
  EXPECT_EQ(resolverCalls(), before);
  EXPECT_EQ(request_.policy_rule, "g.rules[0]");
  EXPECT_FALSE(request_.policy_report_only);
  EXPECT_EQ(request_.denial_cause, proxy::DenialCause::Unspecified);
  EXPECT_EQ(stats::Store::get().counterValue("dest_guard.blocked_policy") - blocked_policy, 1u);
  // An address is no name: the host rule does not see it, the cidr rule does.
  EXPECT_EQ(run("8.8.8.8"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("10.1.2.3"), forbidden("policy rule g.rules[1]"));
  EXPECT_EQ(request_.denial_cause, proxy::DenialCause::DestinationAddress);
}

TEST_F(DestGuardFilterTest, OneRefusedAddressRefusesTheName) {
  makeChain(ConfigSpec().allowPrivate());
  useGroup({{"deny", {}, {"10.0.0.0/8"}, {}}, {"allow", {".test"}, {}, {}}}, false, "deny");
  EXPECT_EQ(run("mixed.test"), forbidden("policy rule g.rules[0]"));
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(run("evil.test"), "pinned 127.0.0.1:443");  // allow_private: the guard allows it
  EXPECT_EQ(counted("denied"), 1u);
  EXPECT_EQ(counted("allowed"), 2u);
}

TEST_F(DestGuardFilterTest, AnAllowRuleByCidrOpensOnlyWhatItHolds) {
  makeChain(ConfigSpec().denyRanges({"127.0.0.9/32"}));
  useGroup({{"allow", {}, {"127.0.0.0/8"}, {}}});
  EXPECT_EQ(run("evil.test"), "pinned 127.0.0.1:443");
  EXPECT_EQ(run("mapped.test"), "pinned [::ffff:127.0.0.1]:443");
  EXPECT_EQ(run("mixed.test"), forbidden(kReasonPrivate));  // 10.0.0.1 is not in it
  EXPECT_EQ(run("127.0.0.9"), forbidden(kReasonDenied));
  // A group without the rule: the guard as always.
  group_ = nullptr;
  EXPECT_EQ(run("evil.test"), forbidden(kReasonPrivate));
  // An allow by name opens nothing.
  useGroup({{"allow", {"evil.test"}, {}, {}}});
  EXPECT_EQ(run("evil.test"), forbidden(kReasonPrivate));
}

TEST_F(DestGuardFilterTest, ReportOnlyRecordsTheRuleAndOpensNothing) {
  makeChain(ConfigSpec());
  useGroup({{"deny", {"good.test"}, {}, {}}, {"allow", {}, {"127.0.0.0/8"}, {}}}, true);
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(request_.policy_rule, "g.rules[0]");
  EXPECT_TRUE(request_.policy_report_only);
  EXPECT_EQ(run("evil.test"), forbidden(kReasonPrivate));
  EXPECT_EQ(request_.policy_rule, "");
  EXPECT_EQ(counted("report_only"), 1u);
  EXPECT_EQ(counted("denied"), 0u);
}

TEST_F(DestGuardFilterTest, ABindForAnyPeerPassesTheRulesOnItsKind) {
  makeChain(ConfigSpec());
  // No rule on socks5-bind: nothing to check, nothing pinned (and no port check: DST.PORT 0).
  EXPECT_EQ(run("0.0.0.0", 0, proxy::RequestKind::Bind), "pinned");
  useGroup({{"deny", {}, {}, {"socks5-bind"}}});
  EXPECT_EQ(run("0.0.0.0", 0, proxy::RequestKind::Bind), forbidden("policy rule g.rules[0]"));
  EXPECT_EQ(run("::", 0, proxy::RequestKind::Bind), forbidden("policy rule g.rules[0]"));
  // A rule that needs the peer's address leaves it to the peer that connects.
  useGroup({{"deny", {}, {"127.0.0.0/8"}, {"socks5-bind"}}});
  EXPECT_EQ(run("0.0.0.0", 0, proxy::RequestKind::Bind), "pinned");
  EXPECT_EQ(counted("denied"), 0u);
  // A named peer is a destination like any other.
  EXPECT_EQ(run("127.0.0.1", 40000, proxy::RequestKind::Bind), forbidden("policy rule g.rules[0]"));
}

TEST_F(DestGuardFilterTest, ARequestWithoutAGroupIsInTheDefaultGroup) {
  makeChain(ConfigSpec());
  EXPECT_EQ(run("good.test"), "pinned 8.8.8.8:443");
  EXPECT_EQ(request_.group, &config_->policy->defaultGroup());
}

}  // namespace
}  // namespace dest_guard
}  // namespace filters
}  // namespace sluice
