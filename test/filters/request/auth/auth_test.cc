#include "filters/request/auth/auth.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace auth {
namespace {

std::vector<ApiKey> makeKeys(const std::vector<std::string>& keys) {
  std::vector<ApiKey> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    ApiKey k;
    k.name = "key" + std::to_string(i + 1);
    k.digest = sha256(keys[i]);
    out.push_back(std::move(k));
  }
  return out;
}

TEST(MatchKeyTest, FindsTheRightIndex) {
  const auto keys = makeKeys({"alpha", "bravo", "charlie", "delta"});
  EXPECT_EQ(0, matchKey(keys, sha256("alpha")));
  EXPECT_EQ(1, matchKey(keys, sha256("bravo")));
  EXPECT_EQ(2, matchKey(keys, sha256("charlie")));
  EXPECT_EQ(3, matchKey(keys, sha256("delta")));
}

TEST(MatchKeyTest, NoMatchIsMinusOne) {
  const auto keys = makeKeys({"alpha", "bravo"});
  EXPECT_EQ(-1, matchKey(keys, sha256("Alpha")));
  EXPECT_EQ(-1, matchKey(keys, sha256("")));
  EXPECT_EQ(-1, matchKey({}, sha256("alpha")));
}

TEST(MatchKeyTest, DuplicatesStillMatch) {
  const auto keys = makeKeys({"same", "other", "same"});
  int32_t i = matchKey(keys, sha256("same"));
  EXPECT_TRUE(i == 0 || i == 2) << i;
  EXPECT_EQ(1, matchKey(keys, sha256("other")));
  EXPECT_EQ(-1, matchKey(keys, sha256("none")));
}

TEST(MatchKeyTest, Sha256KnownVector) {
  const Digest d = sha256("abc");
  const uint8_t expected[4] = {0xba, 0x78, 0x16, 0xbf};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(expected[i], d[i]);
  EXPECT_EQ(0xad, d[31]);
}

// A stand-in for the filter chain: records what the filter asked for.
class FakeCallbacks : public proxy::RequestFilterCallbacks {
 public:
  proxy::WorkerContext& worker() override { abort(); }  // the auth filter never needs it
  void continueRequest() override { ++continues; }
  void deny(proxy::Denial denial, std::string_view reason) override {
    denials.push_back(denial);
    last_reason = std::string(reason);
  }
  void upstreamReady(upstream::UpstreamHandle) override { ++upstreams; }

  int continues = 0;
  int upstreams = 0;
  std::vector<proxy::Denial> denials;
  std::string last_reason;
};

class AuthFilterTest : public testing::Test {
 protected:
  // A config as the factory would build it, with counters under names unique to this test.
  std::shared_ptr<AuthConfig> makeConfig(
      const std::vector<std::pair<std::string, std::string>>& keys) {
    auto config = std::make_shared<AuthConfig>();
    stats::Store& store = stats::Store::get();
    const std::string p = "test.auth." + std::to_string(++serial_) + ".";
    for (const auto& [name, key] : keys) {
      ApiKey k;
      k.name = name;
      k.digest = sha256(key);
      k.allowed = store.counter(p + "key." + name + ".allowed");
      config->keys.push_back(std::move(k));
    }
    config->realm = "myrealm";
    config->allowed = store.counter(p + "allowed");
    config->denied_missing = store.counter(p + "denied_missing");
    config->denied_invalid = store.counter(p + "denied_invalid");
    config->open_relay = store.counter(p + "open_relay");
    config->denied_revoked = store.counter(p + "denied_revoked");
    prefix_ = p;
    return config;
  }
  uint64_t counter(const std::string& name) {
    return stats::Store::get().counterValue(prefix_ + name);
  }
  proxy::RequestFilterStatus run(const std::shared_ptr<AuthConfig>& config,
                                 proxy::ProxyRequest& request) {
    AuthFilter filter(config);
    filter.setCallbacks(callbacks_);
    return filter.onRequest(request);
  }

  static int serial_;
  std::string prefix_;
  FakeCallbacks callbacks_;
};
int AuthFilterTest::serial_ = 0;

TEST_F(AuthFilterTest, NoKeysIsAnOpenRelay) {
  auto config = makeConfig({});
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  EXPECT_TRUE(callbacks_.denials.empty());
  EXPECT_EQ(1u, counter("open_relay"));
  EXPECT_EQ(0u, counter("allowed"));
  EXPECT_EQ("myrealm", request.auth_realm);
  EXPECT_TRUE(request.principal.empty());
  // Even a credential changes nothing.
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "whatever";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  EXPECT_EQ(2u, counter("open_relay"));
}

TEST_F(AuthFilterTest, MissingCredentialIsDenied) {
  auto config = makeConfig({{"ci", "k1"}});
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, request));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::Unauthorized, callbacks_.denials[0]);
  EXPECT_EQ(1u, counter("denied_missing"));
  EXPECT_EQ(0u, counter("denied_invalid"));
  EXPECT_EQ("myrealm", request.auth_realm);  // the 407 challenge needs it
  EXPECT_TRUE(request.principal.empty());
  EXPECT_EQ(0, callbacks_.continues);
}

TEST_F(AuthFilterTest, WrongKeyIsDenied) {
  auto config = makeConfig({{"ci", "k1"}, {"ops", "k2"}});
  // Keys as SOCKS5 hands them over (the password as it is), an empty one among them.
  const std::vector<std::string> credentials = {"k3", "", "K1", "k1 ", " k1", "k"};
  for (const std::string& cred : credentials) {
    SCOPED_TRACE(cred);
    callbacks_.denials.clear();
    proxy::ProxyRequest request;
    request.credential_form = proxy::CredentialForm::Key;
    request.credential = cred;
    EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, request));
    ASSERT_EQ(1u, callbacks_.denials.size());
    EXPECT_EQ(proxy::Denial::Unauthorized, callbacks_.denials[0]);
    EXPECT_TRUE(request.principal.empty());
  }
  EXPECT_EQ(6u, counter("denied_invalid"));
  EXPECT_EQ(0u, counter("denied_missing"));
  EXPECT_EQ(0u, counter("allowed"));
}

TEST_F(AuthFilterTest, RightKeyContinuesWithPrincipal) {
  auto config = makeConfig({{"ci", "k1"}, {"ops", "k2"}, {"dev", "k3"}});
  proxy::ProxyRequest request;
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "k2";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  EXPECT_TRUE(callbacks_.denials.empty());
  EXPECT_EQ("ops", request.principal);
  EXPECT_EQ(1u, counter("allowed"));
  EXPECT_EQ(1u, counter("key.ops.allowed"));
  EXPECT_EQ(0u, counter("key.ci.allowed"));

  proxy::ProxyRequest bearer;
  bearer.credential_form = proxy::CredentialForm::ProxyAuthorization;
  bearer.credential = "Bearer k3";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, bearer));
  EXPECT_EQ("dev", bearer.principal);
  EXPECT_EQ(2u, counter("allowed"));
  EXPECT_EQ(1u, counter("key.dev.allowed"));

  proxy::ProxyRequest basic;
  basic.credential_form = proxy::CredentialForm::ProxyAuthorization;
  basic.credential = "Basic dTprMQ==";  // u:k1
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, basic));
  EXPECT_EQ("ci", basic.principal);
  EXPECT_EQ(1u, counter("key.ci.allowed"));
}

TEST_F(AuthFilterTest, AProxyAuthorizationValueWithoutAKeyIsDenied) {
  auto config = makeConfig({{"ci", "k1"}});
  // The key itself, an unknown scheme, bad base64, no colon, an empty password, nothing.
  const std::vector<std::string> values = {
      "k1", "Digest k1", "Basic dTprM", "Basic azE=", "Basic dTo=", "Bearer ", ""};
  for (const std::string& value : values) {
    SCOPED_TRACE(value);
    proxy::ProxyRequest request;
    request.credential_form = proxy::CredentialForm::ProxyAuthorization;
    request.credential = value;
    EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, request));
  }
  EXPECT_EQ(values.size(), counter("denied_invalid"));
  EXPECT_EQ(0u, counter("denied_missing"));
}

std::shared_ptr<ban::BanTable> makeBans(uint32_t max_failures = 5) {
  ban::BanOptions options;
  options.max_failures = max_failures;
  return std::make_shared<ban::BanTable>(options, ban::BanStats());
}

network::Address clientAddress(const std::string& ip) {
  auto a = network::Address::parseIp(ip, 40000);
  EXPECT_TRUE(a.ok());
  return *a;
}

TEST_F(AuthFilterTest, WrongKeysBanTheClientAndThenEvenTheRightKeyIsRefused) {
  auto config = makeConfig({{"ci", "k1"}});
  config->bans = makeBans();
  config->denied_banned = stats::Store::get().counter(prefix_ + "denied_banned");
  const auto client = clientAddress("192.0.2.10");
  for (int i = 0; i < 5; ++i) {
    proxy::ProxyRequest request;
    request.client = client;
    request.credential_form = proxy::CredentialForm::Key;
    request.credential = "wrong";
    EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, request));
  }
  // The 5th wrong key was still answered 407; it started the ban.
  ASSERT_EQ(5u, callbacks_.denials.size());
  for (proxy::Denial d : callbacks_.denials) EXPECT_EQ(proxy::Denial::Unauthorized, d);
  EXPECT_TRUE(config->bans->isBanned(client));
  EXPECT_EQ(5u, counter("denied_invalid"));

  proxy::ProxyRequest right;
  right.client = client;
  right.credential_form = proxy::CredentialForm::Key;
  right.credential = "k1";
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, right));
  ASSERT_EQ(6u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::Forbidden, callbacks_.denials.back());
  EXPECT_EQ("client address is banned", callbacks_.last_reason);
  EXPECT_TRUE(right.principal.empty());
  EXPECT_EQ(1u, counter("denied_banned"));
  EXPECT_EQ(0u, counter("allowed"));

  // Another client is not affected.
  proxy::ProxyRequest other = right;
  other.client = clientAddress("192.0.2.11");
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, other));
  EXPECT_EQ("ci", other.principal);
}

TEST_F(AuthFilterTest, MissingCredentialsAreNotFailures) {
  auto config = makeConfig({{"ci", "k1"}});
  config->bans = makeBans(1);
  proxy::ProxyRequest request;
  request.client = clientAddress("192.0.2.20");
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, request));
  }
  EXPECT_EQ(10u, counter("denied_missing"));
  EXPECT_EQ(0u, config->bans->size());
  EXPECT_FALSE(config->bans->anyBanned());
  // Whereas with max_failures 1 a single wrong key bans.
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "nope";
  run(config, request);
  EXPECT_TRUE(config->bans->isBanned(request.client));
}

TEST_F(AuthFilterTest, RightKeysAreNotFailures) {
  auto config = makeConfig({{"ci", "k1"}});
  config->bans = makeBans(1);
  proxy::ProxyRequest request;
  request.client = clientAddress("2001:db8::1");
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "k1";
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  }
  EXPECT_EQ(0u, config->bans->size());
}

TEST_F(AuthFilterTest, WithoutABanTableWrongKeysAreOnlyDenied) {
  auto config = makeConfig({{"ci", "k1"}});
  proxy::ProxyRequest request;
  request.client = clientAddress("192.0.2.30");
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "nope";
  for (int i = 0; i < 20; ++i) run(config, request);
  EXPECT_EQ(20u, counter("denied_invalid"));
  for (proxy::Denial d : callbacks_.denials) EXPECT_EQ(proxy::Denial::Unauthorized, d);
}

TEST_F(AuthFilterTest, Sha256ConfiguredKeyMatchesTheClearKey) {
  auto config = makeConfig({});
  ApiKey k;
  k.name = "hashed";
  k.digest = *configuredKeyDigest(
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  config->keys.push_back(k);
  proxy::ProxyRequest request;
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "abc";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  EXPECT_EQ("hashed", request.principal);
  proxy::ProxyRequest digest;
  digest.credential_form = proxy::CredentialForm::Key;
  digest.credential = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, digest));
}

TEST_F(AuthFilterTest, ARevokedKeyIsRefusedAndTheGrantTravelsWithTheRequest) {
  auto config = makeConfig({{"ci", "k1"}, {"ops", "k2"}});
  for (ApiKey& k : config->keys) k.grant = std::make_shared<proxy::KeyGrant>(k.name, k.digest);
  proxy::ProxyRequest request;
  request.credential_form = proxy::CredentialForm::Key;
  request.credential = "k1";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, request));
  EXPECT_EQ(config->keys[0].grant.get(), request.grant);
  config->keys[0].grant->revoke();
  proxy::ProxyRequest again;
  again.credential_form = proxy::CredentialForm::Key;
  again.credential = "k1";
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, again));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::Unauthorized, callbacks_.denials[0]);
  EXPECT_EQ(proxy::kRevokedReason, callbacks_.last_reason);
  EXPECT_EQ(1u, counter("denied_revoked"));
  EXPECT_EQ(0u, counter("denied_invalid"));
  // The other key is untouched.
  proxy::ProxyRequest other;
  other.credential_form = proxy::CredentialForm::Key;
  other.credential = "k2";
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, other));
}

}  // namespace
}  // namespace auth
}  // namespace filters
}  // namespace sluice
