#include "source/common/proxy/grants.h"

#include <memory>

#include "gtest/gtest.h"

namespace sluice {
namespace proxy {
namespace {

KeyDigest digest(uint8_t b) {
  KeyDigest d{};
  d.fill(b);
  return d;
}

KeyGrantSharedPtr grant(const char* name, uint8_t b) {
  return std::make_shared<const KeyGrant>(name, digest(b));
}

network::Address ip(const char* text) { return *network::Address::parseIp(text, 1); }

TEST(KeyGrantTest, RevokedOnceForEveryHolder) {
  KeyGrantSharedPtr g = grant("ci", 1);
  const KeyGrant* held = g.get();
  EXPECT_FALSE(held->revoked());
  g->revoke();
  EXPECT_TRUE(held->revoked());
  EXPECT_EQ("ci", held->name());
}

TEST(ListenerGrantsTest, WithoutAuthenticationEveryKeyIsAccepted) {
  ListenerGrants none;
  EXPECT_TRUE(none.accepts(digest(9)));
  // An authenticating filter without keys lets everyone in too.
  ListenerGrants open;
  open.key_sets.emplace_back();
  EXPECT_TRUE(open.accepts(digest(9)));
}

TEST(ListenerGrantsTest, AKeyOfAnyChainIsAccepted) {
  ListenerGrants g;
  g.key_sets.push_back({grant("a", 1)});
  g.key_sets.push_back({grant("b", 2), grant("c", 3)});
  EXPECT_TRUE(g.accepts(digest(1)));
  EXPECT_TRUE(g.accepts(digest(3)));
  EXPECT_FALSE(g.accepts(digest(4)));
}

TEST(ListenerGrantsTest, FindMatchesNameAndDigest) {
  ListenerGrants g;
  KeyGrantSharedPtr a = grant("a", 1);
  g.key_sets.push_back({a});
  g.key_sets.push_back({a});  // the same key on two chains
  EXPECT_EQ(a, g.find("a", digest(1)));
  EXPECT_EQ(nullptr, g.find("renamed", digest(1)));
  EXPECT_EQ(nullptr, g.find("a", digest(2)));
  EXPECT_EQ(1u, g.all().size());
}

TEST(ListenerGrantsTest, EveryClientCheckMustAdmit) {
  ListenerGrants g;
  EXPECT_TRUE(g.admits(ip("192.0.2.1")));
  g.client_checks.push_back([](const network::Address& a) { return a.family() == AF_INET; });
  g.client_checks.push_back(
      [](const network::Address& a) { return a.asString().rfind("192.0.2.", 0) == 0; });
  EXPECT_TRUE(g.admits(ip("192.0.2.1")));
  EXPECT_FALSE(g.admits(ip("198.51.100.1")));
  EXPECT_FALSE(g.admits(ip("2001:db8::1")));
}

}  // namespace
}  // namespace proxy
}  // namespace sluice
