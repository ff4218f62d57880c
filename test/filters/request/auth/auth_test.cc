#include "filters/request/auth/auth.h"

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
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
    config->memo_hits = store.counter(p + "memo_hits");
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

std::unique_ptr<policy::GroupLimiters> limitedGroup(double rate, uint32_t burst, uint32_t max) {
  config::v1::Group proto;
  proto.set_name("limited");
  proto.mutable_limits()->set_requests_per_second(rate);
  proto.mutable_limits()->set_burst(burst);
  proto.mutable_limits()->set_max_concurrent(max);
  auto built = policy::GroupLimiters::build("limited", proto, "policy.groups[0]", nullptr);
  EXPECT_TRUE(built.ok()) << built.status();
  return std::move(*built);
}

TEST_F(AuthFilterTest, AKeyOverItsLimitIsRefusedWithRetryAfterOnceAuthenticated) {
  auto limits = limitedGroup(0.001, 1, 10);
  auto config = makeConfig({{"ci", "k1"}});
  config->keys[0].limiter = limits->forKey("ci");
  auto request_with = [](policy::LimitSlot* slot) {
    proxy::ProxyRequest r;
    r.credential_form = proxy::CredentialForm::Key;
    r.credential = "k1";
    r.limit_slot = slot;
    return r;
  };
  policy::LimitSlot first;
  proxy::ProxyRequest r1 = request_with(&first);
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, r1));
  EXPECT_TRUE(first.admitted());
  EXPECT_EQ(r1.limiter, config->keys[0].limiter.get());
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 1);
  // The same request again (a retry on a fresh connection) keeps its place and its token.
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, r1));
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 1);

  policy::LimitSlot second;
  proxy::ProxyRequest r2 = request_with(&second);
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, run(config, r2));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::TooManyRequests, callbacks_.denials[0]);
  EXPECT_EQ("request rate limit of group limited", callbacks_.last_reason);
  EXPECT_GE(r2.retry_after, 999u);  // a token every 1,000 s
  EXPECT_FALSE(second.admitted());
  EXPECT_EQ("ci", r2.principal);  // authenticated (auth.allowed counts it), then limited
  EXPECT_EQ(3u, counter("allowed"));
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 1);

  // Without a slot (a SOCKS5 authentication, admitted per command later) only the limiter is
  // handed on.
  proxy::ProxyRequest r3 = request_with(nullptr);
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config, r3));
  EXPECT_EQ(r3.limiter, config->keys[0].limiter.get());
  first.release();
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 0);
}

TEST_F(AuthFilterTest, WithoutKeysTheDefaultGroupsLimitsHoldEveryRequestTogether) {
  auto limits = limitedGroup(0.001, 2, 0);
  auto config = makeConfig({});
  config->keyless_limiter = limits->keyless();
  int admitted = 0;
  for (int i = 0; i < 5; ++i) {
    policy::LimitSlot slot;
    proxy::ProxyRequest request;
    request.limit_slot = &slot;
    admitted += run(config, request) == proxy::RequestFilterStatus::Continue;
  }
  EXPECT_EQ(admitted, 2);
  EXPECT_EQ(3u, callbacks_.denials.size());
  EXPECT_EQ(5u, counter("open_relay"));
}

// The memo on its own: only the very bytes, in the same form, give the remembered index.
TEST(CredentialMemoTest, OnlyTheSameBytesInTheSameFormHit) {
  using proxy::CredentialForm;
  CredentialMemo memo;
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, ""));
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMQ=="));
  memo.remember(CredentialForm::ProxyAuthorization, "Basic dTprMQ==", 3);
  EXPECT_EQ(3, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMQ=="));
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMg=="));   // last byte
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "basic dTprMQ=="));   // first byte
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMQ="));    // shorter
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMQ== "));  // longer
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, ""));
  EXPECT_EQ(-1, memo.find(CredentialForm::Key, "Basic dTprMQ=="));  // same bytes, other form
  // A new credential replaces the old one.
  memo.remember(CredentialForm::Key, "k2", 0);
  EXPECT_EQ(0, memo.find(CredentialForm::Key, "k2"));
  EXPECT_EQ(-1, memo.find(CredentialForm::ProxyAuthorization, "Basic dTprMQ=="));
  memo.forget();
  EXPECT_EQ(-1, memo.find(CredentialForm::Key, "k2"));
}

// The fixed-time lookup (the worker's memo) gives what find() gives, whatever was remembered.
TEST(CredentialMemoTest, TheFixedTimeLookupAgreesWithFind) {
  using proxy::CredentialForm;
  CredentialMemo memo;
  const std::vector<std::pair<CredentialForm, std::string>> probes = {
      {CredentialForm::ProxyAuthorization, ""},
      {CredentialForm::ProxyAuthorization, "Basic dTprMQ=="},
      {CredentialForm::ProxyAuthorization, "Basic dTprMg=="},
      {CredentialForm::ProxyAuthorization, "Basic dTprMQ="},
      {CredentialForm::ProxyAuthorization, "Basic dTprMQ=\0"},
      {CredentialForm::ProxyAuthorization, std::string("Basic dTprMQ==\0", 15)},
      {CredentialForm::Key, "Basic dTprMQ=="},
      {CredentialForm::Key, "k2"},
      {CredentialForm::Key, std::string(CredentialMemo::kCapacity, 'k')},
      {CredentialForm::Key, std::string(CredentialMemo::kCapacity + 1, 'k')},
  };
  auto agree = [&] {
    for (const auto& [form, value] : probes) {
      EXPECT_EQ(memo.find(form, value), memo.findInFixedTime(form, CredentialMemo::Padded(value)))
          << value;
    }
  };
  agree();
  memo.remember(CredentialForm::ProxyAuthorization, "Basic dTprMQ==", 3);
  EXPECT_EQ(3, memo.findInFixedTime(CredentialForm::ProxyAuthorization,
                                    CredentialMemo::Padded("Basic dTprMQ==")));
  agree();
  memo.remember(CredentialForm::Key, "k2", 0);
  EXPECT_EQ(0, memo.findInFixedTime(CredentialForm::Key, CredentialMemo::Padded("k2")));
  agree();
  memo.remember(CredentialForm::Key, std::string(CredentialMemo::kCapacity, 'k'), 7);
  agree();
  memo.forget();
  agree();
}

// A set of the worker's memo keeps two credentials whose hashes meet; a third takes the place of
// the one used least recently, a hit counting as a use.
TEST(CredentialMemoTest, AWorkerSetKeepsTwoAndReplacesTheOneUsedLeastRecently) {
  using proxy::CredentialForm;
  WorkerCredentials::Set set;
  constexpr auto kForm = CredentialForm::ProxyAuthorization;
  EXPECT_EQ(-1, set.find(kForm, "Basic YQ=="));
  set.remember(kForm, "Basic YQ==", 0);
  set.remember(kForm, "Basic Yg==", 1);
  EXPECT_EQ(0, set.find(kForm, "Basic YQ=="));  // both kept; a is now the one used last
  EXPECT_EQ(1, set.find(kForm, "Basic Yg=="));  // b now
  EXPECT_EQ(0, set.find(kForm, "Basic YQ=="));  // a now
  set.remember(kForm, "Basic Yw==", 2);         // c replaces b
  EXPECT_EQ(0, set.find(kForm, "Basic YQ=="));
  EXPECT_EQ(2, set.find(kForm, "Basic Yw=="));
  EXPECT_EQ(-1, set.find(kForm, "Basic Yg=="));
  EXPECT_EQ(-1, set.find(CredentialForm::Key, "Basic Yw=="));  // the form counts
  // A revoked key's credential goes: the one the last find() hit.
  EXPECT_EQ(2, set.find(kForm, "Basic Yw=="));
  set.forgetFound();
  EXPECT_EQ(-1, set.find(kForm, "Basic Yw=="));
  EXPECT_EQ(0, set.find(kForm, "Basic YQ=="));
  // The emptied memo is filled first, whichever was used last.
  set.remember(kForm, "Basic ZA==", 3);
  EXPECT_EQ(0, set.find(kForm, "Basic YQ=="));
  EXPECT_EQ(3, set.find(kForm, "Basic ZA=="));
}

TEST(CredentialMemoTest, ACredentialLongerThanItsRoomIsNotRemembered) {
  using proxy::CredentialForm;
  CredentialMemo memo;
  const std::string fits(CredentialMemo::kCapacity, 'a');
  const std::string too_long(CredentialMemo::kCapacity + 1, 'a');
  memo.remember(CredentialForm::Key, fits, 1);
  EXPECT_EQ(1, memo.find(CredentialForm::Key, fits));
  // It leaves the memo empty rather than holding the one before.
  memo.remember(CredentialForm::Key, too_long, 2);
  EXPECT_EQ(-1, memo.find(CredentialForm::Key, too_long));
  EXPECT_EQ(-1, memo.find(CredentialForm::Key, fits));
}

// Several requests through one filter instance, as on one keep-alive connection.
class AuthMemoTest : public AuthFilterTest {
 protected:
  void SetUp() override {
    config_ = makeConfig({{"ci", "k1"}, {"ops", "k2"}});
    for (ApiKey& k : config_->keys) k.grant = std::make_shared<proxy::KeyGrant>(k.name, k.digest);
    filter_ = std::make_unique<AuthFilter>(config_);
    filter_->setCallbacks(callbacks_);
  }
  proxy::RequestFilterStatus present(std::string_view value, proxy::ProxyRequest* out = nullptr) {
    return presentOn(*filter_, value, out);
  }
  // The same through another filter instance (another connection's).
  proxy::RequestFilterStatus presentOn(AuthFilter& filter, std::string_view value,
                                       proxy::ProxyRequest* out = nullptr) const {
    proxy::ProxyRequest request;
    request.client = client_;
    request.credential_form = proxy::CredentialForm::ProxyAuthorization;
    request.credential = value;
    proxy::RequestFilterStatus status = filter.onRequest(request);
    if (out != nullptr) *out = request;
    return status;
  }
  int32_t remembered(std::string_view value) const {
    return filter_->memo().find(proxy::CredentialForm::ProxyAuthorization, value);
  }
  // Makes the full path refuse key `index` from now on: a request that still gets in with it
  // was let in by the memo, without its key being decoded and hashed again.
  void changeDigest(size_t index) { config_->keys[index].digest = sha256("something else"); }

  static constexpr std::string_view kBasic1 = "Basic dTprMQ==";  // u:k1
  static constexpr std::string_view kBasic2 = "Basic dTprMg==";  // u:k2
  static constexpr std::string_view kWrong = "Basic dTprMw==";   // u:k3
  std::shared_ptr<AuthConfig> config_;
  std::unique_ptr<AuthFilter> filter_;
  network::Address client_ = clientAddress("192.0.2.40");
};

TEST_F(AuthMemoTest, TheSameCredentialAgainSkipsDecodingAndHashing) {
  proxy::ProxyRequest request;
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1, &request));
  EXPECT_EQ("ci", request.principal);
  EXPECT_EQ(0, remembered(kBasic1));
  changeDigest(0);
  for (int i = 0; i < 3; ++i) {
    proxy::ProxyRequest again;
    EXPECT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1, &again));
    // The same key, with what a request carries of it.
    EXPECT_EQ("ci", again.principal);
    EXPECT_EQ(config_->keys[0].grant.get(), again.grant);
    EXPECT_EQ(&config_->keys[0].tunnel_stats, again.principal_tunnel_stats);
  }
  EXPECT_TRUE(callbacks_.denials.empty());
  // The per-key and listener counters count every request, hit or not.
  EXPECT_EQ(4u, counter("allowed"));
  EXPECT_EQ(4u, counter("key.ci.allowed"));
  EXPECT_EQ(3u, counter("memo_hits"));
  // The same key in other bytes (the scheme in lower case) is a miss: the full path, which now
  // refuses it.
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present("basic dTprMQ=="));
  EXPECT_EQ(1u, counter("denied_invalid"));
}

TEST_F(AuthMemoTest, ADifferentCredentialTakesTheFullPathAndReplacesTheMemo) {
  proxy::ProxyRequest request;
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1, &request));
  EXPECT_EQ("ci", request.principal);
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic2, &request));
  EXPECT_EQ("ops", request.principal);
  EXPECT_EQ(1, remembered(kBasic2));
  EXPECT_EQ(-1, remembered(kBasic1));
  changeDigest(0);
  changeDigest(1);
  // k2 is the connection's, k1 no longer is: k1 gets in again only because the worker's memo
  // (another connection's way in) has it, and then it is the connection's again.
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic2, &request));
  EXPECT_EQ("ops", request.principal);
  EXPECT_EQ(1u, counter("memo_hits"));
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1, &request));
  EXPECT_EQ("ci", request.principal);
  EXPECT_EQ(0, remembered(kBasic1));
  EXPECT_EQ(-1, remembered(kBasic2));
  EXPECT_EQ(2u, counter("key.ops.allowed"));
  EXPECT_EQ(2u, counter("key.ci.allowed"));
  EXPECT_EQ(2u, counter("memo_hits"));
}

TEST_F(AuthMemoTest, AFailedCredentialIsNeverRemembered) {
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(kWrong));
  EXPECT_EQ(-1, remembered(kWrong));
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  // A wrong key in between leaves the memo as it was, and is refused every time.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(kWrong));
    EXPECT_EQ(-1, remembered(kWrong));
  }
  EXPECT_EQ(0, remembered(kBasic1));
  EXPECT_EQ(4u, counter("denied_invalid"));
  // Nor is a credential without a key, or a revoked key's.
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present("Basic dTo="));
  EXPECT_EQ(-1, remembered("Basic dTo="));
  config_->keys[1].grant->revoke();
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(kBasic2));
  EXPECT_EQ(-1, remembered(kBasic2));
  EXPECT_EQ(0, remembered(kBasic1));
}

TEST_F(AuthMemoTest, AKeyRevokedAfterItWasRememberedIsRefused) {
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  ASSERT_EQ(0, remembered(kBasic1));
  config_->keys[0].grant->revoke();
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(kBasic1, &request));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::Unauthorized, callbacks_.denials[0]);
  EXPECT_EQ(proxy::kRevokedReason, callbacks_.last_reason);
  EXPECT_TRUE(request.principal.empty());
  EXPECT_EQ(nullptr, request.grant);
  EXPECT_EQ(1u, counter("denied_revoked"));
  EXPECT_EQ(1u, counter("key.ci.allowed"));
  EXPECT_EQ(1u, counter("memo_hits"));  // recognised, then refused
  EXPECT_EQ(-1, remembered(kBasic1));
  // The other key still gets in on the same connection.
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic2, &request));
  EXPECT_EQ("ops", request.principal);
}

TEST_F(AuthMemoTest, ABannedClientIsRefusedEvenWithTheRememberedCredential) {
  config_->bans = makeBans(1);
  config_->denied_banned = stats::Store::get().counter(prefix_ + "denied_banned");
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  ASSERT_EQ(0, remembered(kBasic1));
  // Banned from another connection of the same client.
  config_->bans->recordFailure(client_, "invalid proxy credentials");
  ASSERT_TRUE(config_->bans->isBanned(client_));
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(kBasic1, &request));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::Forbidden, callbacks_.denials[0]);
  EXPECT_TRUE(request.close_connection);
  EXPECT_TRUE(request.principal.empty());
  EXPECT_EQ(1u, counter("denied_banned"));
  EXPECT_EQ(1u, counter("key.ci.allowed"));
}

TEST_F(AuthMemoTest, ACredentialTooLongForTheMemoIsCheckedInFullEveryTime) {
  // "Basic " + base64 of a 70-character user name and the key: 104 bytes.
  const std::string user(70, 'u');
  const std::string value = "Basic " + absl::Base64Escape(user + ":k1");
  ASSERT_GT(value.size(), CredentialMemo::kCapacity);
  proxy::ProxyRequest request;
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(value, &request));
  EXPECT_EQ("ci", request.principal);
  EXPECT_EQ(-1, remembered(value));
  changeDigest(0);
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, present(value));
  EXPECT_EQ(1u, counter("denied_invalid"));
  EXPECT_EQ(0u, counter("memo_hits"));
}

// Long credentials that authenticate (never remembered) leave the worker's memo as it was: a
// thousand of them would otherwise land on k1's slot all but surely (1 in 64 each).
TEST_F(AuthMemoTest, CredentialsTooLongForTheMemoLeaveTheWorkersMemoAlone) {
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  for (int i = 0; i < 1000; ++i) {
    const std::string value =
        "Basic " + absl::Base64Escape(std::string(70, 'u') + std::to_string(i) + ":k2");
    ASSERT_GT(value.size(), CredentialMemo::kCapacity);
    AuthFilter other(config_);
    other.setCallbacks(callbacks_);
    ASSERT_EQ(proxy::RequestFilterStatus::Continue, presentOn(other, value));
  }
  changeDigest(0);
  AuthFilter later(config_);
  later.setCallbacks(callbacks_);
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, presentOn(later, kBasic1));
}

// Another connection of the same worker: its own memo is empty, the worker's has the credential.
TEST_F(AuthMemoTest, AnotherConnectionOfTheWorkerFindsTheCredentialInTheWorkersMemo) {
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  changeDigest(0);  // from now on only a memo lets k1 in
  AuthFilter other(config_);
  other.setCallbacks(callbacks_);
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, presentOn(other, kBasic1, &request));
  EXPECT_EQ("ci", request.principal);
  EXPECT_EQ(config_->keys[0].grant.get(), request.grant);
  EXPECT_EQ(1u, counter("memo_hits"));
  // ...and keeps it in its own from then on.
  EXPECT_EQ(0, other.memo().find(proxy::CredentialForm::ProxyAuthorization, kBasic1));
  // The same bytes in another form, or other bytes, take the full path.
  proxy::ProxyRequest as_key;
  as_key.credential_form = proxy::CredentialForm::Key;
  as_key.credential = kBasic1;
  AuthFilter third(config_);
  third.setCallbacks(callbacks_);
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, third.onRequest(as_key));
  proxy::ProxyRequest wrong;
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, presentOn(third, "basic dTprMQ==", &wrong));
  EXPECT_EQ(2u, counter("denied_invalid"));
}

TEST_F(AuthMemoTest, TheWorkersMemoIsPerThreadAndPerConfig) {
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  changeDigest(0);
  // Another worker thread never saw it.
  proxy::RequestFilterStatus elsewhere = proxy::RequestFilterStatus::Continue;
  std::thread([&] {
    FakeCallbacks callbacks;
    AuthFilter filter(config_);
    filter.setCallbacks(callbacks);
    elsewhere = presentOn(filter, kBasic1);
  }).join();
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, elsewhere);
  // The next config (a reload) with the same key at another place starts with an empty memo:
  // the index remembered under the old config never reaches the new one's keys.
  auto next = makeConfig({{"other", "k9"}, {"ci", "k1"}});
  for (ApiKey& k : next->keys) k.grant = std::make_shared<proxy::KeyGrant>(k.name, k.digest);
  next->keys[1].digest = sha256("something else");
  AuthFilter after_reload(next);
  after_reload.setCallbacks(callbacks_);
  proxy::ProxyRequest request;
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, presentOn(after_reload, kBasic1, &request));
  EXPECT_TRUE(request.principal.empty());
}

TEST_F(AuthMemoTest, AKeyRevokedIsRefusedThroughTheWorkersMemoToo) {
  ASSERT_EQ(proxy::RequestFilterStatus::Continue, present(kBasic1));
  config_->keys[0].grant->revoke();
  AuthFilter other(config_);
  other.setCallbacks(callbacks_);
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration, presentOn(other, kBasic1));
  EXPECT_EQ(proxy::kRevokedReason, callbacks_.last_reason);
  EXPECT_EQ(1u, counter("denied_revoked"));
  EXPECT_EQ(-1, other.memo().find(proxy::CredentialForm::ProxyAuthorization, kBasic1));
}

}  // namespace
}  // namespace auth
}  // namespace filters
}  // namespace sluice
