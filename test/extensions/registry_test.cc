#include "source/common/extensions/registry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "extensions/header_rewrite/header_rewrite.pb.h"
#include "source/common/http/h1_parser.h"

namespace sluice {
namespace extensions {
namespace {

using testing::HasSubstr;

config::v1::Filter named(const std::string& name) {
  config::v1::Filter f;
  f.set_name(name);
  return f;
}

config::v1::Filter withConfig(const std::string& name, const google::protobuf::Message& config) {
  config::v1::Filter f = named(name);
  f.mutable_typed_config()->PackFrom(config);
  return f;
}

TEST(RegistryTest, LinkedFactoriesAreRegistered) {
  EXPECT_NE(nullptr, Registry<RequestFilterFactory>::byName("sluice.auth"));
  EXPECT_NE(nullptr, Registry<RequestFilterFactory>::byName("sluice.router"));
  EXPECT_NE(nullptr, Registry<RequestFilterFactory>::byName("sluice.header_rewrite"));
  EXPECT_NE(nullptr, Registry<NetworkFilterFactory>::byName("sluice.http1"));
  // Categories are separate.
  EXPECT_EQ(nullptr, Registry<NetworkFilterFactory>::byName("sluice.auth"));
  EXPECT_EQ(nullptr, Registry<RequestFilterFactory>::byName("sluice.http1"));
  EXPECT_EQ(nullptr, Registry<RequestFilterFactory>::byName("sluice.Auth"));
  EXPECT_TRUE(Registry<RequestFilterFactory>::byName("sluice.router")->terminal());
  EXPECT_FALSE(Registry<RequestFilterFactory>::byName("sluice.auth")->terminal());
  EXPECT_EQ("sluice.filters.v1.AuthConfig",
            Registry<RequestFilterFactory>::byName("sluice.auth")->configType());
  const RequestFilterFactory* by_type =
      Registry<RequestFilterFactory>::byConfigType("sluice.filters.v1.RouterConfig");
  ASSERT_NE(nullptr, by_type);
  EXPECT_EQ("sluice.router", by_type->name());
}

TEST(RegistryTest, DescribeLinkedNamesEveryCategory) {
  const std::string d = describeLinked();
  // Other categories' lists grow as extensions are added: check the shape, not the set.
  EXPECT_THAT(d, HasSubstr("listener filters: "));
  EXPECT_THAT(d, HasSubstr("; network filters: "));
  EXPECT_THAT(d, HasSubstr("; request filters: "));
  EXPECT_THAT(d, HasSubstr("sluice.http1"));
  EXPECT_THAT(d, HasSubstr("sluice.auth"));
  EXPECT_THAT(d, HasSubstr("sluice.router"));
  EXPECT_THAT(d, HasSubstr("sluice.header_rewrite"));
}

TEST(ResolveFilterTest, ByNameWithoutConfigGetsDefaults) {
  auto r = resolveFilter<RequestFilterFactory>(named("sluice.auth"), "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ("sluice.auth", r->factory->name());
  ASSERT_NE(nullptr, r->config);
  EXPECT_EQ("sluice.filters.v1.AuthConfig", r->config->GetDescriptor()->full_name());
  EXPECT_EQ(0, static_cast<const filters::v1::AuthConfig&>(*r->config).api_keys_size());
}

TEST(ResolveFilterTest, ByNameUnpacksTheConfig) {
  filters::v1::AuthConfig auth;
  auth.set_realm("corp");
  auth.add_api_keys()->set_key("k");
  auto r = resolveFilter<RequestFilterFactory>(withConfig("sluice.auth", auth), "x");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& got = static_cast<const filters::v1::AuthConfig&>(*r->config);
  EXPECT_EQ("corp", got.realm());
  ASSERT_EQ(1, got.api_keys_size());
  EXPECT_EQ("k", got.api_keys(0).key());
}

TEST(ResolveFilterTest, ByTypeOnly) {
  filters::v1::RouterConfig router;
  router.mutable_connect_timeout()->set_seconds(3);
  config::v1::Filter f;
  f.mutable_typed_config()->PackFrom(router);
  auto r = resolveFilter<RequestFilterFactory>(f, "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ("sluice.router", r->factory->name());
  EXPECT_EQ(3,
            static_cast<const filters::v1::RouterConfig&>(*r->config).connect_timeout().seconds());

  filters::v1::Http1ProxyConfig http1;
  config::v1::Filter n;
  n.mutable_typed_config()->PackFrom(http1);
  auto rn = resolveFilter<NetworkFilterFactory>(n, "x");
  ASSERT_TRUE(rn.ok()) << rn.status();
  EXPECT_EQ("sluice.http1", rn->factory->name());
}

TEST(ResolveFilterTest, UnknownNameListsLinkedNames) {
  auto r = resolveFilter<RequestFilterFactory>(named("sluice.nope"), "listeners[0].filters[1]");
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("listeners[0].filters[1]"));
  EXPECT_THAT(msg, HasSubstr("unknown request filter 'sluice.nope'"));
  EXPECT_THAT(msg, HasSubstr("sluice.auth"));
  EXPECT_THAT(msg, HasSubstr("sluice.router"));
  EXPECT_THAT(msg, HasSubstr("sluice.header_rewrite"));

  auto n = resolveFilter<NetworkFilterFactory>(named("sluice.auth"), "p");
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("unknown network filter 'sluice.auth'"));
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("(linked: "));
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("sluice.http1"));

  auto l = resolveFilter<ListenerFilterFactory>(named("sluice.tls_inspector"), "p");
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(std::string(l.status().message()),
              HasSubstr("unknown listener filter 'sluice.tls_inspector' (linked: "));
}

TEST(ResolveFilterTest, TypeMismatchIsAnError) {
  filters::v1::RouterConfig router;
  auto r = resolveFilter<RequestFilterFactory>(withConfig("sluice.auth", router), "chain");
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("chain.typed_config"));
  EXPECT_THAT(msg, HasSubstr("'sluice.filters.v1.AuthConfig'"));
  EXPECT_THAT(msg, HasSubstr("'sluice.filters.v1.RouterConfig'"));
}

TEST(ResolveFilterTest, UnknownTypeOnlyIsAnError) {
  config::v1::Filter f;
  f.mutable_typed_config()->set_type_url("type.googleapis.com/sluice.filters.v1.Nope");
  auto r = resolveFilter<RequestFilterFactory>(f, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("sluice.filters.v1.Nope"));

  // A config of another category's filter does not resolve here either.
  filters::v1::Http1ProxyConfig http1;
  config::v1::Filter g;
  g.mutable_typed_config()->PackFrom(http1);
  EXPECT_FALSE(resolveFilter<RequestFilterFactory>(g, "p").ok());
}

TEST(ResolveFilterTest, NeitherNameNorConfigIsAnError) {
  auto r = resolveFilter<RequestFilterFactory>(config::v1::Filter(), "p");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("needs a name"));
}

TEST(ResolveFilterTest, UndecodableConfigIsAnError) {
  config::v1::Filter f = named("sluice.auth");
  f.mutable_typed_config()->set_type_url("type.googleapis.com/sluice.filters.v1.AuthConfig");
  f.mutable_typed_config()->set_value(std::string("\xff\xff\xff\xff", 4));
  auto r = resolveFilter<RequestFilterFactory>(f, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot decode"));
}

class RequestFactoriesTest : public testing::Test {
 protected:
  google::protobuf::RepeatedPtrField<config::v1::Filter> filters_;
  FactoryContext context_{"main", "main", "listeners[0].filter_chains[0].filters[0].typed_config"};
};

TEST_F(RequestFactoriesTest, AuthThenRouter) {
  *filters_.Add() = named("sluice.auth");
  *filters_.Add() = named("sluice.router");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_TRUE(cbs.ok()) << cbs.status();
  EXPECT_EQ(2u, cbs->size());
  EXPECT_EQ("listeners[0].filter_chains[0].filters[0].typed_config", context_.path);
}

TEST_F(RequestFactoriesTest, RouterAlone) {
  *filters_.Add() = named("sluice.router");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_TRUE(cbs.ok()) << cbs.status();
  EXPECT_EQ(1u, cbs->size());
}

TEST_F(RequestFactoriesTest, EmptyListIsAnError) {
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(cbs.ok());
  EXPECT_THAT(std::string(cbs.status().message()), HasSubstr("request_filters: empty"));
  EXPECT_THAT(std::string(cbs.status().message()), HasSubstr("sluice.router"));
}

TEST_F(RequestFactoriesTest, RouterMustBeLast) {
  *filters_.Add() = named("sluice.router");
  *filters_.Add() = named("sluice.auth");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(cbs.ok());
  EXPECT_THAT(std::string(cbs.status().message()),
              HasSubstr("request_filters[0]: terminal filter 'sluice.router' must be the last"));
}

TEST_F(RequestFactoriesTest, FiltersDeclareTheirPhase) {
  EXPECT_EQ(proxy::RequestPhase::Authenticate,
            Registry<RequestFilterFactory>::byName("sluice.auth")->phase());
  EXPECT_EQ(proxy::RequestPhase::Authorize,
            Registry<RequestFilterFactory>::byName("sluice.dest_guard")->phase());
  EXPECT_EQ(proxy::RequestPhase::Route,
            Registry<RequestFilterFactory>::byName("sluice.router")->phase());
  *filters_.Add() = named("sluice.auth");
  *filters_.Add() = named("sluice.dest_guard");
  *filters_.Add() = named("sluice.router");
  auto specs = createRequestFilterFactories(filters_, context_);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(3u, specs->size());
  EXPECT_EQ(proxy::RequestPhase::Authenticate, (*specs)[0].phase);
  EXPECT_EQ(proxy::RequestPhase::Authorize, (*specs)[1].phase);
  EXPECT_EQ(proxy::RequestPhase::Route, (*specs)[2].phase);
  // sluice.auth without keys lets everyone through: it requires no credential.
  EXPECT_FALSE((*specs)[0].requires_credential);
}

TEST_F(RequestFactoriesTest, KeylessAuthBeyondLoopbackNeedsOpenRelay) {
  auto build = [this](const char* listener, sluice::filters::v1::AuthConfig auth) {
    filters_.Clear();
    *filters_.Add() = withConfig("sluice.auth", auth);
    *filters_.Add() = named("sluice.router");
    context_.listener_address = *network::Address::parseHostPort(listener);
    auto cbs = createRequestFilterFactories(filters_, context_);
    return cbs.ok() ? std::string("ok") : std::string(cbs.status().message());
  };
  sluice::filters::v1::AuthConfig keyless;
  sluice::filters::v1::AuthConfig open;
  open.set_open_relay(true);
  sluice::filters::v1::AuthConfig keyed;
  keyed.add_api_keys()->set_key("k-0123456789abcdef");
  // Loopback only: warned, as before.
  for (const char* loopback : {"127.0.0.1:8080", "127.9.8.7:1", "[::1]:8080"}) {
    EXPECT_EQ("ok", build(loopback, keyless)) << loopback;
  }
  for (const char* exposed :
       {"0.0.0.0:8080", "[::]:8080", "192.0.2.1:8080", "[2001:db8::1]:3128"}) {
    const std::string error = build(exposed, keyless);
    EXPECT_THAT(error, HasSubstr("listeners[0].filter_chains[0].filters[0].typed_config."
                                 "request_filters[0]: no API keys, and listener 'main' listens on"))
        << exposed;
    EXPECT_THAT(error, HasSubstr("an open relay")) << exposed;
    EXPECT_THAT(error, HasSubstr("auth.open_relay: true")) << exposed;
    EXPECT_EQ("ok", build(exposed, open)) << exposed;
    EXPECT_EQ("ok", build(exposed, keyed)) << exposed;
  }
  EXPECT_THAT(build("0.0.0.0:8080", keyless), HasSubstr("listens on 0.0.0.0:8080"));
}

TEST_F(RequestFactoriesTest, PhasesMustBeInOrder) {
  *filters_.Add() = named("sluice.dest_guard");
  *filters_.Add() = named("sluice.auth");
  *filters_.Add() = named("sluice.router");
  auto specs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(specs.ok());
  EXPECT_THAT(std::string(specs.status().message()),
              HasSubstr("request_filters[1]: 'sluice.auth' runs in the authenticate phase, after "
                        "filters of the authorize phase"));
}

TEST_F(RequestFactoriesTest, LastMustBeTerminal) {
  *filters_.Add() = named("sluice.auth");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(cbs.ok());
  EXPECT_THAT(std::string(cbs.status().message()),
              HasSubstr("request_filters[0]: the last request filter must be terminal"));
}

TEST_F(RequestFactoriesTest, RouterTwiceIsAnError) {
  *filters_.Add() = named("sluice.router");
  *filters_.Add() = named("sluice.router");
  EXPECT_FALSE(createRequestFilterFactories(filters_, context_).ok());
}

TEST_F(RequestFactoriesTest, FactoryErrorsCarryThePath) {
  filters::v1::AuthConfig auth;
  auth.add_api_keys()->set_name("empty");  // no key
  *filters_.Add() = withConfig("sluice.auth", auth);
  *filters_.Add() = named("sluice.router");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(cbs.ok());
  EXPECT_THAT(std::string(cbs.status().message()),
              HasSubstr("typed_config.request_filters[0].typed_config.api_keys[0].key: empty"));
  // The context's path is restored for whoever continues with it.
  EXPECT_EQ("listeners[0].filter_chains[0].filters[0].typed_config", context_.path);
}

TEST_F(RequestFactoriesTest, UnknownFilterInTheListIsAnError) {
  *filters_.Add() = named("sluice.nope");
  *filters_.Add() = named("sluice.router");
  auto cbs = createRequestFilterFactories(filters_, context_);
  ASSERT_FALSE(cbs.ok());
  EXPECT_THAT(std::string(cbs.status().message()), HasSubstr("request_filters[0]: unknown"));
}

TEST_F(RequestFactoriesTest, AuthFactoryValidatesItsConfig) {
  auto build = [&](const filters::v1::AuthConfig& auth) {
    filters_.Clear();
    *filters_.Add() = withConfig("sluice.auth", auth);
    *filters_.Add() = named("sluice.router");
    return createRequestFilterFactories(filters_, context_).status();
  };
  filters::v1::AuthConfig ok;
  ok.add_api_keys()->set_key("a");
  ok.add_api_keys()->set_key("b");  // default names key1, key2: distinct
  EXPECT_TRUE(build(ok).ok()) << build(ok);

  filters::v1::AuthConfig dup;
  auto* k1 = dup.add_api_keys();
  k1->set_name("ci");
  k1->set_key("a");
  auto* k2 = dup.add_api_keys();
  k2->set_name("ci");
  k2->set_key("b");
  EXPECT_THAT(std::string(build(dup).message()), HasSubstr("'ci' is used twice"));

  for (const char* realm : {"a\"b", "a\\b", "a\rb", "a\nb"}) {
    filters::v1::AuthConfig bad;
    bad.set_realm(realm);
    EXPECT_THAT(std::string(build(bad).message()), HasSubstr("typed_config.realm")) << realm;
  }
}

absl::Status buildHttp1(const filters::v1::Http1ProxyConfig& proto) {
  const NetworkFilterFactory* f = Registry<NetworkFilterFactory>::byName("sluice.http1");
  if (f == nullptr) return absl::NotFoundError("sluice.http1 not linked");
  FactoryContext context{"main", "main", "listeners[0].filters[0]"};
  return f->createFilterFactory(proto, context).status();
}

filters::v1::Http1ProxyConfig http1WithRouter() {
  filters::v1::Http1ProxyConfig proto;
  *proto.add_request_filters() = named("sluice.router");
  return proto;
}

TEST(Http1FactoryTest, DefaultsAreAccepted) {
  EXPECT_TRUE(buildHttp1(http1WithRouter()).ok()) << buildHttp1(http1WithRouter());
}

TEST(Http1FactoryTest, NeedsRequestFilters) {
  absl::Status s = buildHttp1(filters::v1::Http1ProxyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("listeners[0].filters[0].request_filters: empty"));
}

TEST(Http1FactoryTest, LimitsAtTheirBoundsAreAccepted) {
  auto proto = http1WithRouter();
  proto.set_max_request_head_bytes(1024);
  proto.set_max_response_head_bytes(1 << 20);
  proto.set_max_request_headers(http1::kMaxHeaderCapacity);
  EXPECT_TRUE(buildHttp1(proto).ok()) << buildHttp1(proto);
  proto.set_max_request_head_bytes(1 << 20);
  proto.set_max_response_head_bytes(1024);
  proto.set_max_request_headers(1);
  EXPECT_TRUE(buildHttp1(proto).ok()) << buildHttp1(proto);
}

TEST(Http1FactoryTest, OutOfRangeLimitsAreRejected) {
  struct Case {
    const char* field;
    void (filters::v1::Http1ProxyConfig::*set)(uint32_t);
    uint32_t value;
  };
  const Case cases[] = {
      {"max_request_head_bytes", &filters::v1::Http1ProxyConfig::set_max_request_head_bytes, 1023},
      {"max_request_head_bytes", &filters::v1::Http1ProxyConfig::set_max_request_head_bytes,
       (1 << 20) + 1},
      {"max_request_head_bytes", &filters::v1::Http1ProxyConfig::set_max_request_head_bytes,
       0xffffffffu},
      {"max_response_head_bytes", &filters::v1::Http1ProxyConfig::set_max_response_head_bytes, 1},
      {"max_response_head_bytes", &filters::v1::Http1ProxyConfig::set_max_response_head_bytes,
       (1 << 20) + 1},
      {"max_request_headers", &filters::v1::Http1ProxyConfig::set_max_request_headers,
       http1::kMaxHeaderCapacity + 1},
      {"max_request_headers", &filters::v1::Http1ProxyConfig::set_max_request_headers, 100000},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + "=" + std::to_string(c.value));
    auto proto = http1WithRouter();
    (proto.*c.set)(c.value);
    absl::Status s = buildHttp1(proto);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::string("typed_config.") + c.field));
    EXPECT_THAT(std::string(s.message()), HasSubstr("out of range"));
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::to_string(c.value)));
  }
}

TEST(Http1FactoryTest, BadNestedRequestFilterIsRejected) {
  auto proto = http1WithRouter();
  *proto.mutable_request_filters()->Add() = named("sluice.auth");  // after the router
  absl::Status s = buildHttp1(proto);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("listeners[0].filters[0].request_filters[0]"));
}

}  // namespace
}  // namespace extensions
}  // namespace sluice
