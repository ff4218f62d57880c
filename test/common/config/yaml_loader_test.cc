#include "source/common/config/yaml_loader.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "extensions/header_rewrite/header_rewrite.pb.h"
#include "test/common/config/test_config.pb.h"

namespace sluice {
namespace config {
namespace {

using google::protobuf::util::MessageDifferencer;
using test::Kitchen;
using ::testing::HasSubstr;
using ::testing::Not;

// Loads yaml into a fresh M and returns the error text ("" when it loaded).
template <typename M>
std::string loadError(const std::string& yaml, M* out = nullptr) {
  M msg;
  absl::Status status = loadYaml(yaml, "c.yaml", msg);
  if (out != nullptr) *out = msg;
  return status.ok() ? "" : std::string(status.message());
}

// A full-form config whose second filter is sluice.http1 with `http1_fields` in its payload.
std::string withHttp1(const std::string& http1_fields) {
  return R"(listeners:
  - name: http
    address: 127.0.0.1:8080
    filter_chains:
      - filters:
          - name: first
            typed_config:
              "@type": type.googleapis.com/sluice.filters.v1.RouterConfig
          - name: sluice.http1
            typed_config:
              "@type": type.googleapis.com/sluice.filters.v1.Http1ProxyConfig
)" + http1_fields;
}

TEST(YamlLoaderTest, LoadsFullFormWithNestedAny) {
  v1::Bootstrap b;
  ASSERT_EQ(loadError(withHttp1(R"(              max_request_head_bytes: 4096
              request_head_timeout: 1.5s
              request_filters:
                - name: sluice.auth
                  typed_config:
                    "@type": type.googleapis.com/sluice.filters.v1.AuthConfig
                    realm: proxy
                    api_keys: [{name: ci, key: k1}]
)"),
                      &b),
            "");
  ASSERT_EQ(b.listeners_size(), 1);
  EXPECT_EQ(b.listeners(0).address(), "127.0.0.1:8080");
  const auto& filters = b.listeners(0).filter_chains(0).filters();
  ASSERT_EQ(filters.size(), 2);
  EXPECT_TRUE(filters[0].typed_config().Is<filters::v1::RouterConfig>());
  filters::v1::Http1ProxyConfig http1;
  ASSERT_TRUE(filters[1].typed_config().UnpackTo(&http1));
  EXPECT_EQ(http1.max_request_head_bytes(), 4096u);
  EXPECT_EQ(http1.request_head_timeout().seconds(), 1);
  EXPECT_EQ(http1.request_head_timeout().nanos(), 500000000);
  filters::v1::AuthConfig auth;
  ASSERT_TRUE(http1.request_filters(0).typed_config().UnpackTo(&auth));
  EXPECT_EQ(auth.realm(), "proxy");
  ASSERT_EQ(auth.api_keys_size(), 1);
  EXPECT_EQ(auth.api_keys(0).key(), "k1");
}

TEST(YamlLoaderTest, UnknownTopLevelKeySuggestsClosestField) {
  EXPECT_EQ(loadError<v1::Bootstrap>("workerz: 2\n"),
            "c.yaml: workerz: unknown field; did you mean workers? (line 1, column 1)");
}

TEST(YamlLoaderTest, UnknownKeyInsideAnyHasFullPath) {
  const std::string err =
      loadError<v1::Bootstrap>(withHttp1("              max_request_head_bytez: 1\n"));
  EXPECT_THAT(err, HasSubstr("c.yaml: listeners[0].filter_chains[0].filters[1].typed_config."
                             "max_request_head_bytez: unknown field; did you mean "
                             "max_request_head_bytes?"));
  EXPECT_THAT(err, HasSubstr("(line 12, column 15)"));
}

TEST(YamlLoaderTest, UnknownKeyInAnyInsideAny) {
  const std::string err = loadError<v1::Bootstrap>(withHttp1(R"(              request_filters:
                - name: sluice.auth
                  typed_config:
                    "@type": type.googleapis.com/sluice.filters.v1.AuthConfig
                    realmz: x
)"));
  EXPECT_THAT(err, HasSubstr("listeners[0].filter_chains[0].filters[1].typed_config."
                             "request_filters[0].typed_config.realmz: unknown field; did you "
                             "mean realm?"));
}

TEST(YamlLoaderTest, UnknownKeyWithoutCloseMatchListsKnownFields) {
  EXPECT_THAT(loadError<v1::Bootstrap>("listeners:\n  - xyzzy: 1\n"),
              HasSubstr("listeners[0].xyzzy: unknown field (known fields: name, address, "
                        "listener_filters, filter_chains, backlog, connection_limits, "
                        "listener_filters_timeout)"));
}

TEST(YamlLoaderTest, MisplacedKeyFails) {
  // `workers` belongs at the top level, not under admin.
  EXPECT_THAT(loadError<v1::Bootstrap>("admin:\n  workers: 2\n"),
              HasSubstr("c.yaml: admin.workers: unknown field (known fields: address) (line 2, "
                        "column 3)"));
  // And `address` belongs under admin.
  EXPECT_THAT(loadError<v1::Bootstrap>("address: 127.0.0.1:1\n"),
              HasSubstr("address: unknown field"));
}

TEST(YamlLoaderTest, JsonOrDashedSpellingSuggestsTheFieldName) {
  EXPECT_THAT(loadError<v1::Bootstrap>("drainTimeout: 5s\n"),
              HasSubstr("drainTimeout: unknown field; did you mean drain_timeout?"));
  EXPECT_THAT(loadError<v1::Bootstrap>("log-level: info\n"), HasSubstr("did you mean log_level?"));
}

TEST(YamlLoaderTest, StringFieldsTakeAnyScalarAsText) {
  v1::Bootstrap b;
  ASSERT_EQ(loadError("log_level: true\nlisteners:\n  - name: 12345\n    address: 0x10\n", &b), "");
  EXPECT_EQ(b.log_level(), "true");
  EXPECT_EQ(b.listeners(0).name(), "12345");
  EXPECT_EQ(b.listeners(0).address(), "0x10");
}

TEST(YamlLoaderTest, IntegerFieldsRejectTextNegativesAndOverflow) {
  EXPECT_EQ(loadError<v1::Bootstrap>("workers: abc\n"),
            "c.yaml: workers: expected an unsigned integer (uint32), found \"abc\" (line 1, "
            "column 10)");
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: \"abc\"\n"), HasSubstr("expected an unsigned"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: -1\n"),
              HasSubstr("workers: must not be negative"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: 4294967296\n"),
              HasSubstr("workers: 4294967296 is out of range for uint32"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: 99999999999999999999999\n"),
              HasSubstr("workers: expected an unsigned integer"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: 1.5\n"), HasSubstr("expected an unsigned"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: 1e3\n"), HasSubstr("expected an unsigned"));
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: \n  - 1\n"),
              HasSubstr("workers: expected an unsigned integer (uint32), found a list"));
  v1::Bootstrap b;
  ASSERT_EQ(loadError("workers: 4294967295\n", &b), "");
  EXPECT_EQ(b.workers(), 4294967295u);
  ASSERT_EQ(loadError("workers: \"7\"\n", &b), "");
  EXPECT_EQ(b.workers(), 7u);
}

TEST(YamlLoaderTest, SignedAndWideIntegerRanges) {
  Kitchen k;
  ASSERT_EQ(
      loadError("i32: -2147483648\ni64: -9223372036854775808\nu64: 18446744073709551615\n", &k),
      "");
  EXPECT_EQ(k.i32(), INT32_MIN);
  EXPECT_EQ(k.i64(), INT64_MIN);
  EXPECT_EQ(k.u64(), UINT64_MAX);
  EXPECT_THAT(loadError<Kitchen>("i32: 2147483648\n"), HasSubstr("out of range for int32"));
  EXPECT_THAT(loadError<Kitchen>("i32: -2147483649\n"), HasSubstr("out of range for int32"));
  EXPECT_THAT(loadError<Kitchen>("i64: 9223372036854775808\n"),
              HasSubstr("out of range for int64"));
  EXPECT_THAT(loadError<Kitchen>("u64: 18446744073709551616\n"),
              HasSubstr("expected an unsigned integer (uint64)"));
  ASSERT_EQ(loadError("ports: [80, 443]\n", &k), "");
  EXPECT_EQ(k.ports_size(), 2);
  EXPECT_THAT(loadError<Kitchen>("ports: [80, -1]\n"), HasSubstr("ports[1]: must not be negative"));
}

TEST(YamlLoaderTest, FloatsBoolsEnumsBytes) {
  Kitchen k;
  ASSERT_EQ(loadError("d: 1.5\nf: -2.25\nb: true\ncolor: GREEN\ncolors: [RED, GREEN]\n"
                      "raw: aGVsbG8=\n",
                      &k),
            "");
  EXPECT_DOUBLE_EQ(k.d(), 1.5);
  EXPECT_FLOAT_EQ(k.f(), -2.25f);
  EXPECT_TRUE(k.b());
  EXPECT_EQ(k.color(), Kitchen::GREEN);
  ASSERT_EQ(k.colors_size(), 2);
  EXPECT_EQ(k.colors(0), Kitchen::RED);
  EXPECT_EQ(k.raw(), "hello");
  EXPECT_THAT(loadError<Kitchen>("d: abc\n"), HasSubstr("d: expected a number"));
  EXPECT_THAT(loadError<Kitchen>("d: .inf\n"), HasSubstr("d: expected a number"));
  EXPECT_THAT(loadError<Kitchen>("f: 1e39\n"), HasSubstr("f: 1e39 is out of range for float"));
  EXPECT_THAT(loadError<Kitchen>("b: yes\n"),
              HasSubstr("b: expected true or false, found \"yes\""));
  EXPECT_THAT(loadError<Kitchen>("b: 1\n"), HasSubstr("b: expected true or false"));
  EXPECT_THAT(loadError<Kitchen>("b: True\n"), HasSubstr("b: expected true or false"));
  EXPECT_THAT(loadError<Kitchen>("color: BLUE\n"),
              HasSubstr("color: expected one of COLOR_UNSPECIFIED, RED, GREEN, found \"BLUE\""));
  EXPECT_THAT(loadError<Kitchen>("color: 1\n"), HasSubstr("color: expected one of"));
  EXPECT_THAT(loadError<Kitchen>("colors: [RED, red]\n"), HasSubstr("colors[1]: expected one of"));
  EXPECT_THAT(loadError<Kitchen>("raw: \"not base64!\"\n"), HasSubstr("raw: expected base64"));
}

TEST(YamlLoaderTest, RejectsInvalidUtf8InStrings) {
  // Raw bytes that are not UTF-8 (yaml-cpp passes them through).
  EXPECT_THAT(loadError<Kitchen>("s: \"\xff\"\n"), HasSubstr("s: not valid UTF-8"));
  EXPECT_THAT(loadError<Kitchen>("names: [ok, \"\xC0\xAF\"]\n"),
              HasSubstr("names[1]: not valid UTF-8"));
  EXPECT_THAT(loadError<Kitchen>("s: \xED\xA0\x80\n"), HasSubstr("s: not valid UTF-8"));
  Kitchen k;
  ASSERT_EQ(loadError("s: \"h\\u00e9llo \\U0001F600\"\n", &k), "");
  EXPECT_EQ(k.s(), "h\xC3\xA9llo \xF0\x9F\x98\x80");
}

TEST(YamlLoaderTest, WrongShapesFailWithPath) {
  EXPECT_EQ(loadError<v1::Bootstrap>("listeners:\n  name: x\n"),
            "c.yaml: listeners: expected a list, found a map (line 2, column 3)");
  EXPECT_THAT(loadError<v1::Bootstrap>("admin: [a]\n"),
              HasSubstr("admin: expected a map, found a list"));
  EXPECT_THAT(loadError<v1::Bootstrap>("admin: 127.0.0.1:9901\n"),
              HasSubstr("admin: expected a map, found a scalar (line 1, column 8)"));
  EXPECT_THAT(loadError<v1::Bootstrap>("log_level: {a: b}\n"),
              HasSubstr("log_level: expected a string, found a map"));
  EXPECT_THAT(loadError<v1::Bootstrap>("listeners: [x]\n"),
              HasSubstr("listeners[0]: expected a map, found a scalar"));
  EXPECT_THAT(loadError<v1::Bootstrap>("listeners: [~]\n"),
              HasSubstr("listeners[0]: empty list item"));
  EXPECT_THAT(loadError<v1::Bootstrap>("dns:\n  resolvers: 1.1.1.1\n"),
              HasSubstr("dns.resolvers: expected a list, found a scalar"));
  EXPECT_THAT(loadError<v1::Bootstrap>("[1, 2]\n"),
              HasSubstr("c.yaml: expected a map at the top level, found a list"));
  EXPECT_THAT(loadError<v1::Bootstrap>("just text\n"),
              HasSubstr("expected a map at the top level"));
  EXPECT_THAT(loadError<v1::Bootstrap>("? [a]\n: b\n"), HasSubstr("expected a field name"));
}

TEST(YamlLoaderTest, NullLeavesDefaultsAndEmptyFileIsEmpty) {
  v1::Bootstrap b;
  ASSERT_EQ(loadError("admin:\nworkers: ~\nlisteners: null\n", &b), "");
  EXPECT_FALSE(b.has_admin());
  EXPECT_EQ(b.workers(), 0u);
  ASSERT_EQ(loadError("", &b), "");
  EXPECT_EQ(b.ByteSizeLong(), 0u);
  ASSERT_EQ(loadError("# only a comment\n", &b), "");
  ASSERT_EQ(loadError("admin: {}\n", &b), "");
  EXPECT_TRUE(b.has_admin());
}

TEST(YamlLoaderTest, DuplicateKeysFail) {
  EXPECT_EQ(loadError<v1::Bootstrap>("workers: 1\nworkers: 2\n"),
            "c.yaml: workers: duplicate key (line 2, column 1)");
  EXPECT_THAT(loadError<v1::Bootstrap>("listeners:\n  - name: a\n    name: b\n"),
              HasSubstr("listeners[0].name: duplicate key (line 3, column 5)"));
  EXPECT_THAT(loadError<v1::Bootstrap>(withHttp1("              idle_timeout: 1s\n"
                                                 "              idle_timeout: 2s\n")),
              HasSubstr("typed_config.idle_timeout: duplicate key"));
  EXPECT_THAT(
      loadError<v1::Bootstrap>(withHttp1(
          "              \"@type\": type.googleapis.com/sluice.filters.v1.Http1ProxyConfig\n")),
      HasSubstr("typed_config.@type: duplicate key"));
  EXPECT_THAT(loadError<Kitchen>("counts: {a: 1, a: 2}\n"), HasSubstr("counts[a]: duplicate key"));
}

TEST(YamlLoaderTest, SyntaxErrorsCarryLineAndColumn) {
  EXPECT_EQ(loadError<v1::Bootstrap>("workers: 1\n  admin: x\n"),
            "c.yaml: YAML syntax error at line 2, column 8: illegal map value");
  EXPECT_EQ(loadError<v1::Bootstrap>("workers: 1\nadmin: [a, b\n"),
            "c.yaml: YAML syntax error at line 3, column 1: end of sequence flow not found");
  EXPECT_EQ(loadError<v1::Bootstrap>("workers: 1\nlog_level: a: b\n"),
            "c.yaml: YAML syntax error at line 2, column 13: illegal map value");
}

TEST(YamlLoaderTest, UnquotedAtTypeGetsAHint) {
  EXPECT_THAT(loadError<Kitchen>("any:\n  @type: type.googleapis.com/x.Y\n"),
              HasSubstr("c.yaml: YAML syntax error at line 2, column 3: unknown token (quote keys "
                        "that start with @: \"@type\")"));
}

TEST(YamlLoaderTest, SecretsAreNotEchoedInErrors) {
  // Where a value does not fit, a scalar is echoed only for non-sensitive scalar fields.
  const std::string err = loadError<Kitchen>("inner: {pin: hunter2}\n");
  EXPECT_THAT(err, HasSubstr("inner.pin: expected an unsigned integer (uint32), found a scalar"));
  EXPECT_THAT(err, Not(HasSubstr("hunter2")));
  EXPECT_THAT(loadError<Kitchen>("inner: {level: hunter2}\n"),
              HasSubstr("inner.level: expected an integer (int32), found \"hunter2\""));
  EXPECT_THAT(loadError<Kitchen>("inner_list: hunter2\n"), Not(HasSubstr("hunter2")));
}

TEST(YamlLoaderTest, ClearsTheMessageFirst) {
  v1::Bootstrap b;
  b.set_workers(9);
  ASSERT_EQ(std::string(loadYaml("log_level: info\n", "", b).message()), "");
  EXPECT_EQ(b.workers(), 0u);
}

TEST(YamlLoaderTest, OnlyOneDocument) {
  EXPECT_THAT(loadError<v1::Bootstrap>("workers: 1\n---\nworkers: 2\n"),
              HasSubstr("only one YAML document is allowed"));
}

TEST(YamlLoaderTest, DurationsTakeUnitsAndRejectJunk) {
  v1::Bootstrap b;
  ASSERT_EQ(loadError("drain_timeout: 500ms\n", &b), "");
  EXPECT_EQ(b.drain_timeout().seconds(), 0);
  EXPECT_EQ(b.drain_timeout().nanos(), 500000000);
  ASSERT_EQ(loadError("drain_timeout: 2m\n", &b), "");
  EXPECT_EQ(b.drain_timeout().seconds(), 120);
  EXPECT_EQ(loadError<v1::Bootstrap>("drain_timeout: 10\n"),
            "c.yaml: drain_timeout: duration \"10\" lacks a unit (ns, us, ms, s, m or h), e.g. "
            "\"10s\" (line 1, column 16)");
  EXPECT_THAT(loadError<v1::Bootstrap>("drain_timeout: soon\n"),
              HasSubstr("drain_timeout: expected a duration such as 10s"));
  EXPECT_THAT(loadError<v1::Bootstrap>("drain_timeout: 10 s\n"),
              HasSubstr("drain_timeout: unknown duration unit"));
  EXPECT_THAT(loadError<v1::Bootstrap>("drain_timeout: -1s\n"),
              HasSubstr("drain_timeout: negative durations are not allowed"));
  EXPECT_THAT(loadError<v1::Bootstrap>("drain_timeout: {seconds: 1}\n"),
              HasSubstr("drain_timeout: expected a duration such as 10s, 1.5s, 500ms, 2m or 1h, "
                        "found a map"));
  EXPECT_THAT(loadError<v1::Bootstrap>(withHttp1("              idle_timeout: 5 minutes\n")),
              HasSubstr("filters[1].typed_config.idle_timeout: unknown duration unit"));
}

TEST(YamlLoaderTest, AnyNeedsAKnownType) {
  const std::string prefix = R"(listeners:
  - name: http
    filter_chains:
      - filters:
          - name: x
            typed_config:
)";
  EXPECT_THAT(
      loadError<v1::Bootstrap>(
          prefix + "              \"@type\": type.googleapis.com/sluice.filters.v1.Nope\n"),
      HasSubstr("c.yaml: listeners[0].filter_chains[0].filters[0].typed_config.@type: unknown "
                "type \"sluice.filters.v1.Nope\" (no such message in this build) (line 7, "
                "column 24)"));
  EXPECT_THAT(loadError<v1::Bootstrap>(prefix + "              realm: x\n"),
              HasSubstr("filters[0].typed_config: missing \"@type\""));
  EXPECT_THAT(loadError<v1::Bootstrap>(prefix +
                                       "              \"@type\": sluice.filters.v1.RouterConfig\n"),
              HasSubstr("typed_config.@type: expected type.googleapis.com/<message name>"));
  EXPECT_THAT(loadError<v1::Bootstrap>(prefix + "              \"@type\": [a]\n"),
              HasSubstr("typed_config.@type: expected a type URL, found a list"));
  EXPECT_THAT(loadError<v1::Bootstrap>(prefix + "              - a\n"),
              HasSubstr("typed_config: expected a map with an \"@type\" key, found a list"));
  // A payload field of another filter's config is unknown here.
  EXPECT_THAT(
      loadError<v1::Bootstrap>(
          prefix + "              \"@type\": type.googleapis.com/sluice.filters.v1.RouterConfig\n"
                   "              realm: x\n"),
      HasSubstr("typed_config.realm: unknown field (known fields: @type, connect_timeout, "
                "response_timeout, tunnel_idle_timeout, disable_splice, max_splice_pipes, "
                "happy_eyeballs_delay, prefer, only)"));
}

TEST(YamlLoaderTest, AnyOfExtensionConfig) {
  Kitchen k;
  ASSERT_EQ(loadError(R"(any:
  "@type": type.googleapis.com/sluice.extensions.header_rewrite.v1.HeaderRewriteConfig
  remove: [x-forwarded-for, via]
  add: [{name: x-proxy, value: sluice}]
  replace: true
)",
                      &k),
            "");
  sluice::extensions::header_rewrite::v1::HeaderRewriteConfig hr;
  ASSERT_TRUE(k.any().UnpackTo(&hr));
  EXPECT_EQ(hr.remove_size(), 2);
  EXPECT_EQ(hr.add(0).value(), "sluice");
  EXPECT_TRUE(hr.replace());
  EXPECT_THAT(loadError<Kitchen>(R"(any:
  "@type": type.googleapis.com/sluice.extensions.header_rewrite.v1.HeaderRewriteConfig
  add: [{name: x-proxy, valeu: sluice}]
)"),
              HasSubstr("any.add[0].valeu: unknown field; did you mean value?"));
}

TEST(YamlLoaderTest, ScalarWellKnownTypesInsideAnyUseValue) {
  Kitchen k;
  ASSERT_EQ(loadError("any:\n  \"@type\": type.googleapis.com/google.protobuf.Duration\n"
                      "  value: 3s\n",
                      &k),
            "");
  google::protobuf::Duration d;
  ASSERT_TRUE(k.any().UnpackTo(&d));
  EXPECT_EQ(d.seconds(), 3);
  EXPECT_THAT(loadError<Kitchen>("any:\n  \"@type\": type.googleapis.com/google.protobuf.Duration\n"
                                 "  seconds: 3\n"),
              HasSubstr("any.seconds: unknown field (known fields: @type, value)"));
}

TEST(YamlLoaderTest, MapsOneofsWrappers) {
  Kitchen k;
  ASSERT_EQ(
      loadError("counts: {a: 1, b: 2}\ninners: {x: {level: 3}}\nfirst: one\nwrapped: 0\n", &k), "");
  EXPECT_EQ(k.counts().at("b"), 2);
  EXPECT_EQ(k.inners().at("x").level(), 3);
  EXPECT_EQ(k.first(), "one");
  ASSERT_TRUE(k.has_wrapped());  // A wrapper keeps presence even for 0.
  EXPECT_EQ(k.wrapped().value(), 0u);
  EXPECT_THAT(loadError<Kitchen>("first: a\nsecond: b\n"),
              HasSubstr("second: only one of the fields of choice may be set; first is already"));
  EXPECT_THAT(loadError<Kitchen>("counts: {a: x}\n"),
              HasSubstr("counts[a]: expected an integer (int32), found \"x\""));
  EXPECT_THAT(loadError<Kitchen>("inners: {x: {levl: 3}}\n"),
              HasSubstr("inners[x].levl: unknown field; did you mean level?"));
  EXPECT_THAT(loadError<Kitchen>("wrapped: -3\n"), HasSubstr("wrapped: must not be negative"));
}

TEST(YamlLoaderTest, ScalarShorthandOnlyWhereEnabled) {
  Kitchen k;
  EXPECT_THAT(loadError<Kitchen>("inner_list: [abc]\n"),
              HasSubstr("inner_list[0]: expected a map, found a scalar"));
  LoadOptions options;
  options.scalar_shorthands.emplace_back("sluice.config.test.Kitchen.Inner", "secret");
  ASSERT_TRUE(loadYaml("inner_list: [abc, {secret: def, level: 2}]\n", "", k, options).ok());
  ASSERT_EQ(k.inner_list_size(), 2);
  EXPECT_EQ(k.inner_list(0).secret(), "abc");
  EXPECT_EQ(k.inner_list(1).secret(), "def");
  EXPECT_EQ(k.inner_list(1).level(), 2);
}

TEST(YamlLoaderTest, AliasBlowUpIsBounded) {
  // 100 x 100 x 100 filters through aliases from a few hundred bytes of text.
  std::string fs = "&f {name: x}";
  std::string fcs = "&fc {filters: [" + fs;
  for (int i = 0; i < 99; ++i) fcs += ", *f";
  fcs += "]}";
  std::string listener = "&l {name: a, filter_chains: [" + fcs;
  for (int i = 0; i < 99; ++i) listener += ", *fc";
  listener += "]}";
  std::string yaml = "listeners: [" + listener;
  for (int i = 0; i < 99; ++i) yaml += ", *l";
  yaml += "]\n";
  EXPECT_THAT(loadError<v1::Bootstrap>(yaml), HasSubstr("configuration too large"));
}

TEST(YamlLoaderTest, AnyNestingIsBounded) {
  // Http1ProxyConfig -> Filter -> Any -> Http1ProxyConfig ... without end.
  std::string yaml = "any:\n";
  std::string indent = "  ";
  for (int i = 0; i < 40; ++i) {
    yaml += indent + "\"@type\": type.googleapis.com/sluice.filters.v1.Http1ProxyConfig\n";
    yaml += indent + "request_filters:\n";
    yaml += indent + "  - name: n\n";
    yaml += indent + "    typed_config:\n";
    indent += "      ";
  }
  yaml += indent + "\"@type\": type.googleapis.com/sluice.filters.v1.RouterConfig\n";
  EXPECT_THAT(loadError<Kitchen>(yaml), HasSubstr("nested too deeply"));
}

TEST(YamlLoaderTest, NoSourceNoPrefix) {
  v1::Bootstrap b;
  absl::Status status = loadYaml("workerz: 1\n", "", b);
  EXPECT_EQ(std::string(status.message()),
            "workerz: unknown field; did you mean workers? (line 1, column 1)");
}

TEST(ToYamlTest, PrintsBlockYamlWithAnyAndDurations) {
  v1::Bootstrap b;
  b.mutable_admin()->set_address("127.0.0.1:9901");
  auto* l = b.add_listeners();
  l->set_name("http");
  auto* f = l->add_filter_chains()->add_filters();
  f->set_name("sluice.router");
  filters::v1::RouterConfig router;
  router.mutable_connect_timeout()->set_seconds(10);
  router.mutable_response_timeout()->set_nanos(500000000);
  f->mutable_typed_config()->PackFrom(router);
  b.mutable_dns();
  b.mutable_drain_timeout()->set_seconds(0);
  EXPECT_EQ(toYaml(b), R"(admin:
  address: "127.0.0.1:9901"
listeners:
  - name: "http"
    filter_chains:
      - filters:
          - name: "sluice.router"
            typed_config:
              "@type": "type.googleapis.com/sluice.filters.v1.RouterConfig"
              connect_timeout: 10s
              response_timeout: 0.5s
dns: {}
drain_timeout: 0s
)");
  EXPECT_EQ(toYaml(v1::Bootstrap()), "{}\n");
}

TEST(ToYamlTest, RoundTripsEveryFieldKind) {
  Kitchen k;
  k.set_i32(-5);
  k.set_i64(INT64_MIN);
  k.set_u32(7);
  k.set_u64(UINT64_MAX);
  k.set_d(0.1);
  k.set_f(1.25f);
  k.set_b(true);
  k.set_s("quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xC3\xA9 # not a comment");
  k.set_raw(std::string("\x00\xff\x10", 3));
  k.set_color(Kitchen::RED);
  k.add_colors(Kitchen::GREEN);
  k.add_ports(80);
  k.add_ports(443);
  (*k.mutable_inners())["a b"].set_level(2);
  (*k.mutable_inners())["empty"];
  (*k.mutable_counts())["n"] = -1;
  k.set_second("2");
  k.mutable_wrapped()->set_value(0);
  k.mutable_timeout()->set_seconds(1);
  k.mutable_timeout()->set_nanos(1);
  google::protobuf::Duration d;
  d.set_seconds(90);
  k.mutable_any()->PackFrom(d);
  filters::v1::AuthConfig auth;
  auth.set_realm("r");
  k.add_anys()->PackFrom(auth);
  k.add_anys()->PackFrom(filters::v1::RouterConfig());
  k.add_inner_list();
  k.add_inner_list()->add_tokens("t");
  k.add_names("true");
  k.add_names("");
  k.add_names("~");
  const std::string yaml = toYaml(k);
  Kitchen back;
  absl::Status status = loadYaml(yaml, "roundtrip", back);
  ASSERT_TRUE(status.ok()) << status.message() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(k, back)) << yaml;
  EXPECT_EQ(toYaml(back), yaml);
}

}  // namespace
}  // namespace config
}  // namespace sluice
