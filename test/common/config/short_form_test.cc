#include "source/common/config/short_form.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/yaml_loader.h"

namespace sluice {
namespace config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Expanded {
  v1::Bootstrap bootstrap;
  filters::v1::Http1ProxyConfig http1;
  filters::v1::AuthConfig auth;
  filters::v1::RouterConfig router;
};

// Loads a short-form text through the public loader and unpacks the generated filters.
Expanded load(const std::string& yaml) {
  Expanded out;
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(yaml, "s.yaml");
  EXPECT_TRUE(b.ok()) << b.status().message();
  if (!b.ok()) return out;
  out.bootstrap = *b;
  const v1::Filter& codec = b->listeners(0).filter_chains(0).filters(0);
  EXPECT_EQ(codec.name(), "sluice.http1");
  EXPECT_TRUE(codec.typed_config().UnpackTo(&out.http1));
  EXPECT_EQ(out.http1.request_filters_size(), 2);
  if (out.http1.request_filters_size() != 2) return out;
  EXPECT_EQ(out.http1.request_filters(0).name(), "sluice.auth");
  EXPECT_TRUE(out.http1.request_filters(0).typed_config().UnpackTo(&out.auth));
  EXPECT_EQ(out.http1.request_filters(1).name(), "sluice.router");
  EXPECT_TRUE(out.http1.request_filters(1).typed_config().UnpackTo(&out.router));
  return out;
}

std::string loadError(const std::string& yaml) {
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(yaml, "s.yaml");
  return b.ok() ? "" : std::string(b.status().message());
}

TEST(ShortFormTest, EmptyConfigGetsEveryDefault) {
  Expanded e = load("");
  const v1::Bootstrap& b = e.bootstrap;
  EXPECT_EQ(b.admin().address(), "127.0.0.1:9901");
  EXPECT_EQ(b.workers(), 0u);
  ASSERT_EQ(b.listeners_size(), 1);
  EXPECT_EQ(b.listeners(0).name(), "http");
  EXPECT_EQ(b.listeners(0).address(), "127.0.0.1:8080");
  EXPECT_EQ(b.listeners(0).backlog(), 1024u);
  ASSERT_EQ(b.listeners(0).filter_chains_size(), 1);
  EXPECT_EQ(b.listeners(0).filter_chains(0).name(), "http");
  EXPECT_EQ(b.listeners(0).filter_chains(0).filters_size(), 1);
  EXPECT_EQ(b.dns().timeout().seconds(), 5);
  EXPECT_EQ(b.dns().max_cache_ttl().seconds(), 60);
  EXPECT_EQ(b.dns().cache_size(), 4096u);
  EXPECT_EQ(b.upstream_pool().max_idle_per_destination(), 256u);
  EXPECT_EQ(b.upstream_pool().idle_timeout().seconds(), 60);
  EXPECT_EQ(b.drain_timeout().seconds(), 10);
  EXPECT_EQ(b.log_level(), "info");
  EXPECT_EQ(e.http1.max_request_head_bytes(), 65536u);
  EXPECT_EQ(e.http1.max_request_headers(), 100u);
  EXPECT_EQ(e.http1.max_response_head_bytes(), 65536u);
  EXPECT_EQ(e.http1.request_head_timeout().seconds(), 10);
  EXPECT_EQ(e.http1.idle_timeout().seconds(), 60);
  EXPECT_EQ(e.auth.realm(), "sluice");
  EXPECT_EQ(e.auth.api_keys_size(), 0);
  EXPECT_EQ(e.router.connect_timeout().seconds(), 10);
  EXPECT_EQ(e.router.response_timeout().seconds(), 60);
  EXPECT_EQ(e.router.tunnel_idle_timeout().seconds(), 300);
}

TEST(ShortFormTest, ServerAndAdminSettings) {
  Expanded e = load(
      "server:\n  listen: \"[::1]:3128\"\n  workers: 3\nadmin:\n  listen: "
      "127.0.0.1:19901\n");
  EXPECT_EQ(e.bootstrap.listeners(0).address(), "[::1]:3128");
  EXPECT_EQ(e.bootstrap.workers(), 3u);
  EXPECT_EQ(e.bootstrap.admin().address(), "127.0.0.1:19901");
}

TEST(ShortFormTest, AdminOffDisablesIt) {
  Expanded e = load("admin:\n  listen: \"off\"\n");
  EXPECT_TRUE(e.bootstrap.has_admin());
  EXPECT_EQ(e.bootstrap.admin().address(), "");
  // Unquoted off is text too: the field is a string.
  EXPECT_EQ(load("admin: {listen: off}\n").bootstrap.admin().address(), "");
}

TEST(ShortFormTest, ApiKeysAsScalarsOrNamedMaps) {
  Expanded e = load("auth:\n  api_keys: [\"k1\", {name: ci, key: \"k2\"}, k3, 12345]\n");
  ASSERT_EQ(e.auth.api_keys_size(), 4);
  EXPECT_EQ(e.auth.api_keys(0).name(), "key1");
  EXPECT_EQ(e.auth.api_keys(0).key(), "k1");
  EXPECT_EQ(e.auth.api_keys(1).name(), "ci");
  EXPECT_EQ(e.auth.api_keys(1).key(), "k2");
  EXPECT_EQ(e.auth.api_keys(2).name(), "key3");
  EXPECT_EQ(e.auth.api_keys(2).key(), "k3");
  EXPECT_EQ(e.auth.api_keys(3).key(), "12345");
}

TEST(ShortFormTest, ApiKeyErrors) {
  EXPECT_EQ(loadError("auth: {api_keys: [\"\"]}\n"),
            "s.yaml: auth.api_keys[0].key: must not be empty");
  EXPECT_EQ(loadError("auth: {api_keys: [{name: ci}]}\n"),
            "s.yaml: auth.api_keys[0].key: must not be empty");
  EXPECT_EQ(loadError("auth: {api_keys: [{name: ci, key: a}, {name: ci, key: b}]}\n"),
            "s.yaml: auth.api_keys[1].name: \"ci\" is already the name of auth.api_keys[0]");
  // An explicit name can collide with a generated one.
  EXPECT_THAT(loadError("auth: {api_keys: [a, {name: key1, key: b}]}\n"),
              HasSubstr("auth.api_keys[1].name: \"key1\" is already the name"));
  const std::string dup = loadError("auth: {api_keys: [s3cr3t-value, s3cr3t-value]}\n");
  EXPECT_EQ(dup, "s.yaml: auth.api_keys[1].key: the same key as auth.api_keys[0]");
  EXPECT_THAT(dup, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(loadError("auth: {api_keys: [{name: \"a.b\", key: x}]}\n"),
              HasSubstr("auth.api_keys[0].name: \"a.b\" may hold only letters"));
  EXPECT_THAT(loadError("auth: {api_keys: [\"a\\nb\"]}\n"),
              HasSubstr("auth.api_keys[0].key: must not contain control characters"));
  EXPECT_THAT(loadError("auth: {api_keys: [{kee: x}]}\n"),
              HasSubstr("s.yaml: auth.api_keys[0].kee: unknown field; did you mean key?"));
  EXPECT_THAT(loadError("auth: {api_keys: [[x]]}\n"),
              HasSubstr("auth.api_keys[0]: expected a map, found a list"));
  // A key written where the list belongs is not echoed into the error (and so the logs).
  const std::string err = loadError("auth: {api_keys: s3cr3t-value}\n");
  EXPECT_THAT(err, HasSubstr("auth.api_keys: expected a list, found a scalar"));
  EXPECT_THAT(err, Not(HasSubstr("s3cr3t")));
}

TEST(ShortFormTest, TlsAndSocks5AreRefused) {
  EXPECT_EQ(loadError("tls:\n  listen: 0.0.0.0:8443\n"),
            "s.yaml: tls: not supported yet (planned: HTTPS proxy port)");
  EXPECT_EQ(loadError("socks5:\n  listen: 127.0.0.1:1080\n"),
            "s.yaml: socks5: not supported yet (planned)");
  EXPECT_EQ(loadError("tls: {}\n"), "s.yaml: tls: not supported yet (planned: HTTPS proxy port)");
  // An empty section (all keys commented out) sets nothing.
  EXPECT_EQ(loadError("tls:\nsocks5:\n"), "");
  // The refusal comes from expansion, so it holds for the function itself too.
  v1::ShortConfig config;
  config.mutable_socks5()->set_listen("127.0.0.1:1080");
  EXPECT_FALSE(expandShortConfig(config).ok());
}

TEST(ShortFormTest, AllowedPortsAreValidated) {
  EXPECT_EQ(loadError("destinations:\n  allow_private: true\n  allowed_ports: [80, \"443\", "
                      "1024-65535, 1-1, 65535]\n"),
            "");
  for (const std::string bad : {"0", "65536", "80-", "-80", "100-50", "abc", "\"80 \"", "1-2-3",
                                "\"\"", "0-10", "10-70000", "+80", "999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(loadError("destinations:\n  allowed_ports: [80, " + bad + "]\n"),
                HasSubstr("s.yaml: destinations.allowed_ports[1]: "));
  }
  EXPECT_THAT(loadError("destinations:\n  allowed_ports: [100-50]\n"),
              HasSubstr("range \"100-50\" is reversed"));
  EXPECT_TRUE(validatePortRange("1024-65535").ok());
  EXPECT_FALSE(validatePortRange("").ok());
}

TEST(ShortFormTest, DestinationsDoNotAppearInTheBootstrap) {
  Expanded with = load("destinations:\n  allow_private: true\n  allowed_ports: [80]\n");
  Expanded without = load("");
  EXPECT_EQ(with.bootstrap.SerializeAsString(), without.bootstrap.SerializeAsString());
}

TEST(ShortFormTest, AddressesAreChecked) {
  EXPECT_THAT(loadError("server: {listen: \"localhost:8080\"}\n"),
              HasSubstr("s.yaml: server.listen: "));
  EXPECT_THAT(loadError("server: {listen: \"127.0.0.1\"}\n"), HasSubstr("server.listen: "));
  EXPECT_THAT(loadError("admin: {listen: \"127.0.0.1:99999\"}\n"), HasSubstr("admin.listen: "));
  EXPECT_EQ(loadError("server: {listen: \"127.0.0.1:9000\"}\nadmin: {listen: "
                      "\"127.0.0.1:9000\"}\n"),
            "s.yaml: admin.listen: same address as server.listen (127.0.0.1:9000)");
  EXPECT_THAT(loadError("server: {listen: \"127.0.0.1:0\"}\n"), HasSubstr("server.listen: port 0"));
}

TEST(ShortFormTest, StrictnessAppliesToTheShortForm) {
  EXPECT_EQ(loadError("server:\n  lisen: 127.0.0.1:1\n"),
            "s.yaml: server.lisen: unknown field; did you mean listen? (line 2, column 3)");
  EXPECT_THAT(loadError("server:\n  workers: many\n"),
              HasSubstr("server.workers: expected an unsigned integer"));
  EXPECT_THAT(loadError("destinations: {allow_private: 1}\n"),
              HasSubstr("destinations.allow_private: expected true or false"));
}

TEST(ShortFormTest, FullFormKeyWithoutListenersGetsAHint) {
  EXPECT_THAT(loadError("drain_timeout: 5s\nserver: {listen: 127.0.0.1:1}\n"),
              HasSubstr("s.yaml: drain_timeout: a full-form key, but there is no top-level "
                        "`listeners` list"));
}

TEST(ShortFormTest, InitialConfigTextLoadsWithTheGivenKey) {
  const std::string text = initialConfigText("abc_DEF-123");
  EXPECT_THAT(text, HasSubstr("- \"abc_DEF-123\"\n"));
  Expanded e = load(text);
  ASSERT_EQ(e.auth.api_keys_size(), 1);
  EXPECT_EQ(e.auth.api_keys(0).key(), "abc_DEF-123");
  EXPECT_EQ(e.auth.api_keys(0).name(), "key1");
  // Quotes and backslashes in a key stay inside the YAML string.
  Expanded q = load(initialConfigText("a\"b\\c"));
  ASSERT_EQ(q.auth.api_keys_size(), 1);
  EXPECT_EQ(q.auth.api_keys(0).key(), "a\"b\\c");
}

}  // namespace
}  // namespace config
}  // namespace sluice
