#include "source/common/config/short_form.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/dest_guard.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/http2.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "api/sluice/filters/v1/socks5.pb.h"
#include "api/sluice/filters/v1/tls.pb.h"
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
  filters::v1::DestGuardConfig dest_guard;
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
  EXPECT_EQ(out.http1.request_filters_size(), 3);
  if (out.http1.request_filters_size() != 3) return out;
  EXPECT_EQ(out.http1.request_filters(0).name(), "sluice.auth");
  EXPECT_TRUE(out.http1.request_filters(0).typed_config().UnpackTo(&out.auth));
  // The destination guard runs after auth (strangers learn nothing about destinations) and
  // right before the router, which dials only the addresses it checked.
  EXPECT_EQ(out.http1.request_filters(1).name(), "sluice.dest_guard");
  EXPECT_TRUE(out.http1.request_filters(1).typed_config().UnpackTo(&out.dest_guard));
  EXPECT_EQ(out.http1.request_filters(2).name(), "sluice.router");
  EXPECT_TRUE(out.http1.request_filters(2).typed_config().UnpackTo(&out.router));
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
  EXPECT_EQ(b.close_flush_timeout().seconds(), 10);
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
  EXPECT_FALSE(e.bootstrap.disable_io_uring());
  EXPECT_TRUE(load("server:\n  disable_io_uring: true\n").bootstrap.disable_io_uring());
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

TEST(ShortFormTest, TlsErrorsNameTheKey) {
  EXPECT_EQ(loadError("tls:\n  listen: 0.0.0.0:8443\n"), "s.yaml: tls.cert: required (PEM file)");
  EXPECT_EQ(loadError("tls: {listen: \"127.0.0.1:8443\", cert: c.pem}\n"),
            "s.yaml: tls.key: required (PEM file)");
  EXPECT_EQ(loadError("tls: {}\n"), "s.yaml: tls.listen: required");
  EXPECT_EQ(loadError("tls: {listen: \"127.0.0.1:8080\", cert: c.pem, key: k.pem}\n"),
            "s.yaml: tls.listen: same address as server.listen (127.0.0.1:8080)");
  EXPECT_THAT(loadError("tls: {listen: nope, cert: c.pem, key: k.pem}\n"),
              HasSubstr("s.yaml: tls.listen: "));
  EXPECT_EQ(loadError("tls: {listen: \"127.0.0.1:8443\", cert: c.pem, key: k.pem, "
                      "sni_certificates: [{cert: o.pem}]}\n"),
            "s.yaml: tls.sni_certificates[0]: both cert and key are required");
  // An empty section (all keys commented out) sets nothing.
  EXPECT_EQ(loadError("tls:\n"), "");
}

TEST(ShortFormTest, TlsBecomesASecondListener) {
  v1::ShortConfig config;
  config.mutable_tls()->set_listen("127.0.0.1:8443");
  config.mutable_tls()->set_cert("/etc/sluice/c.pem");
  config.mutable_tls()->set_key("/etc/sluice/k.pem");
  auto bootstrap = expandShortConfig(config);
  ASSERT_TRUE(bootstrap.ok()) << bootstrap.status();
  ASSERT_EQ(bootstrap->listeners_size(), 2);
  const v1::Listener& plain = bootstrap->listeners(0);
  const v1::Listener& https = bootstrap->listeners(1);
  EXPECT_EQ(https.name(), "https");
  EXPECT_EQ(https.address(), "127.0.0.1:8443");
  // The plain port's listener filters (bans first), then the sniffer that admits only TLS.
  ASSERT_EQ(https.listener_filters_size(), plain.listener_filters_size() + 1);
  EXPECT_EQ(https.listener_filters(0).name(), "sluice.ban");
  EXPECT_EQ(https.listener_filters(https.listener_filters_size() - 1).name(),
            "sluice.protocol_sniffer");
  // HTTP/2 for clients whose ClientHello offers h2, then HTTP/1.1 for the others.
  ASSERT_EQ(https.filter_chains_size(), 2);
  const v1::FilterChain& h2 = https.filter_chains(0);
  EXPECT_EQ(h2.match().transport_protocol(), "tls");
  ASSERT_EQ(h2.match().application_protocols_size(), 1);
  EXPECT_EQ(h2.match().application_protocols(0), "h2");
  EXPECT_EQ(h2.filters(0).name(), "sluice.http2");
  filters::v1::TlsConfig h2_tls;
  ASSERT_TRUE(h2.transport_socket().typed_config().UnpackTo(&h2_tls));
  ASSERT_EQ(h2_tls.alpn_size(), 2);
  EXPECT_EQ(h2_tls.alpn(0), "h2");
  filters::v1::Http1ProxyConfig http1;
  ASSERT_TRUE(plain.filter_chains(0).filters(0).typed_config().UnpackTo(&http1));
  filters::v1::Http2ProxyConfig http2;
  ASSERT_TRUE(h2.filters(0).typed_config().UnpackTo(&http2));
  ASSERT_EQ(http2.request_filters_size(), http1.request_filters_size());
  for (int i = 0; i < http1.request_filters_size(); ++i) {
    EXPECT_EQ(http2.request_filters(i).SerializeAsString(),
              http1.request_filters(i).SerializeAsString());
  }
  EXPECT_EQ(http2.max_header_list_size(), http1.max_request_head_bytes());
  EXPECT_EQ(http2.idle_timeout().seconds(), http1.idle_timeout().seconds());

  const v1::FilterChain& chain = https.filter_chains(1);
  EXPECT_EQ(chain.match().transport_protocol(), "tls");
  EXPECT_EQ(chain.match().application_protocols_size(), 0);
  EXPECT_EQ(chain.transport_socket().name(), "sluice.tls");
  filters::v1::TlsConfig tls;
  ASSERT_TRUE(chain.transport_socket().typed_config().UnpackTo(&tls));
  ASSERT_EQ(tls.certificates_size(), 1);
  EXPECT_EQ(tls.certificates(0).cert(), "/etc/sluice/c.pem");
  ASSERT_EQ(tls.alpn_size(), 1);
  EXPECT_EQ(tls.alpn(0), "http/1.1");
  // The same codec and request filters as the plain port.
  EXPECT_EQ(chain.filters(0).SerializeAsString(),
            plain.filter_chains(0).filters(0).SerializeAsString());
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

TEST(ShortFormTest, DestinationsBecomeTheDestGuard) {
  Expanded defaults = load("");
  EXPECT_FALSE(defaults.dest_guard.allow_private());
  EXPECT_EQ(defaults.dest_guard.allow_size(), 0);
  EXPECT_EQ(defaults.dest_guard.deny_size(), 0);
  ASSERT_EQ(defaults.dest_guard.allowed_ports_size(), 3);
  EXPECT_EQ(defaults.dest_guard.allowed_ports(0), "80");
  EXPECT_EQ(defaults.dest_guard.allowed_ports(1), "443");
  EXPECT_EQ(defaults.dest_guard.allowed_ports(2), "1024-65535");

  Expanded set = load(
      "destinations:\n  allow_private: true\n  allowed_ports: [80, 8000-8080]\n"
      "  allow: [\"10.1.0.0/16\", \"fd00::/8\"]\n  deny: [\"10.1.2.0/24\", 192.0.2.7]\n");
  EXPECT_TRUE(set.dest_guard.allow_private());
  ASSERT_EQ(set.dest_guard.allowed_ports_size(), 2);
  EXPECT_EQ(set.dest_guard.allowed_ports(0), "80");
  EXPECT_EQ(set.dest_guard.allowed_ports(1), "8000-8080");
  ASSERT_EQ(set.dest_guard.allow_size(), 2);
  EXPECT_EQ(set.dest_guard.allow(1), "fd00::/8");
  ASSERT_EQ(set.dest_guard.deny_size(), 2);
  EXPECT_EQ(set.dest_guard.deny(0), "10.1.2.0/24");
  EXPECT_EQ(set.dest_guard.deny(1), "192.0.2.7");
}

TEST(ShortFormTest, DestinationRangesAreValidated) {
  EXPECT_EQ(loadError("destinations:\n  allow: [\"10.0.0.0/8\", \"10.1.2.3/8\"]\n"),
            "s.yaml: destinations.allow[1]: '10.1.2.3/8': address has bits set beyond the /8 "
            "prefix");
  EXPECT_EQ(loadError("destinations:\n  deny: [example.com]\n"),
            "s.yaml: destinations.deny[0]: 'example.com': not an IP address or range");
  EXPECT_THAT(loadError("destinations:\n  deny: [\"::/129\"]\n"),
              HasSubstr("s.yaml: destinations.deny[0]: '::/129': prefix length above 128"));
  EXPECT_THAT(loadError("destinations:\n  allow: \"10.0.0.0/8\"\n"),
              HasSubstr("destinations.allow: expected a list"));
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

// The codec's and the router's configs, found by name (other request filters may sit between).
struct LimitsView {
  v1::ConnectionLimits listener;
  filters::v1::Http1ProxyConfig http1;
  filters::v1::RouterConfig router;
};

LimitsView loadLimits(const std::string& yaml) {
  LimitsView out;
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(yaml, "s.yaml");
  EXPECT_TRUE(b.ok()) << b.status().message();
  if (!b.ok()) return out;
  out.listener = b->listeners(0).connection_limits();
  EXPECT_TRUE(b->listeners(0).filter_chains(0).filters(0).typed_config().UnpackTo(&out.http1));
  bool found = false;
  for (const v1::Filter& f : out.http1.request_filters()) {
    if (f.name() == "sluice.router") found = f.typed_config().UnpackTo(&out.router);
  }
  EXPECT_TRUE(found);
  return out;
}

TEST(ShortFormTest, LimitsDefaultsAreWrittenOut) {
  LimitsView v = loadLimits("");
  EXPECT_EQ(v.listener.max_connections(), 10000u);
  EXPECT_EQ(v.listener.max_connections_per_client(), 256u);
  EXPECT_EQ(v.listener.overflow_reply(), v1::ConnectionLimits::HTTP_503);
  EXPECT_EQ(v.http1.request_head_timeout().seconds(), 10);
  EXPECT_EQ(v.http1.idle_timeout().seconds(), 60);
  EXPECT_EQ(v.http1.max_request_head_bytes(), 65536u);
  EXPECT_EQ(v.http1.max_request_headers(), 100u);
  EXPECT_EQ(v.http1.max_request_body_bytes(), 0u);
  EXPECT_TRUE(v.http1.has_request_body_timeout());
  EXPECT_EQ(v.http1.request_body_timeout().seconds(), 30);
  EXPECT_EQ(v.router.tunnel_idle_timeout().seconds(), 300);
}

TEST(ShortFormTest, LimitsAreMapped) {
  LimitsView v = loadLimits(
      "limits:\n"
      "  request_head_timeout: 2s\n"
      "  idle_timeout: 1500ms\n"
      "  max_request_head_bytes: 4096\n"
      "  max_request_headers: 20\n"
      "  max_request_body_bytes: 10000000000\n"
      "  request_body_timeout: 3s\n"
      "  max_connections: 20\n"
      "  max_connections_per_client: 5\n"
      "  tunnel_idle_timeout: 1m\n");
  EXPECT_EQ(v.http1.request_head_timeout().seconds(), 2);
  EXPECT_EQ(v.http1.idle_timeout().seconds(), 1);
  EXPECT_EQ(v.http1.idle_timeout().nanos(), 500000000);
  EXPECT_EQ(v.http1.max_request_head_bytes(), 4096u);
  EXPECT_EQ(v.http1.max_request_headers(), 20u);
  EXPECT_EQ(v.http1.max_request_body_bytes(), 10000000000u);  // above 32 bits
  EXPECT_EQ(v.http1.request_body_timeout().seconds(), 3);
  EXPECT_EQ(v.listener.max_connections(), 20u);
  EXPECT_EQ(v.listener.max_connections_per_client(), 5u);
  EXPECT_EQ(v.router.tunnel_idle_timeout().seconds(), 60);
  EXPECT_EQ(load("limits: {close_flush_timeout: 2s}\n").bootstrap.close_flush_timeout().seconds(),
            2);
  // Zero is the default, as everywhere else.
  LimitsView zero = loadLimits("limits: {request_head_timeout: 0, max_connections: 0}\n");
  EXPECT_EQ(zero.http1.request_head_timeout().seconds(), 10);
  EXPECT_EQ(zero.listener.max_connections(), 10000u);
}

TEST(ShortFormTest, LimitsAreRangeChecked) {
  EXPECT_EQ(loadError("limits: {max_request_head_bytes: 100}\n"),
            "s.yaml: limits.max_request_head_bytes: 100 is out of range [1024, 1048576]");
  EXPECT_EQ(loadError("limits: {max_request_head_bytes: 2000000}\n"),
            "s.yaml: limits.max_request_head_bytes: 2000000 is out of range [1024, 1048576]");
  EXPECT_EQ(loadError("limits: {max_request_headers: 129}\n"),
            "s.yaml: limits.max_request_headers: 129 is out of range [1, 128]");
  EXPECT_EQ(loadError("limits: {max_connections: 20000000}\n"),
            "s.yaml: limits.max_connections: 20000000 is out of range [1, 10000000]");
  EXPECT_EQ(loadError("limits: {max_connections_per_client: 4294967295}\n"),
            "s.yaml: limits.max_connections_per_client: 4294967295 is out of range [1, 10000000]");
  EXPECT_EQ(loadError("limits: {max_request_headers: 128, max_request_head_bytes: 1024}\n"), "");
  EXPECT_THAT(loadError("limits: {max_conections: 5}\n"),
              HasSubstr("limits.max_conections: unknown field; did you mean max_connections?"));
  EXPECT_THAT(loadError("limits: {request_body_timeout: 30}\n"),
              HasSubstr("limits.request_body_timeout: "));
  EXPECT_THAT(loadError("limits: {max_request_body_bytes: -1}\n"),
              HasSubstr("limits.max_request_body_bytes: "));
}

TEST(ShortFormTest, BansDefaultsAndTheBanListenerFilter) {
  Expanded e = load("");
  const v1::Bans& bans = e.bootstrap.bans();
  EXPECT_FALSE(bans.disabled());
  EXPECT_EQ(bans.max_failures(), 5u);
  EXPECT_EQ(bans.window().seconds(), 60);
  EXPECT_EQ(bans.duration().seconds(), 900);
  EXPECT_EQ(bans.ipv6_prefix(), 64u);
  EXPECT_EQ(bans.max_entries(), 100000u);
  EXPECT_TRUE(bans.has_ipv6_aggregate_prefix());
  EXPECT_EQ(bans.ipv6_aggregate_prefix(), 48u);
  EXPECT_EQ(bans.ipv6_aggregate_threshold(), 3u);
  const v1::Listener& listener = e.bootstrap.listeners(0);
  ASSERT_EQ(listener.listener_filters_size(), 1);
  EXPECT_EQ(listener.listener_filters(0).name(), "sluice.ban");
  EXPECT_EQ(listener.listener_filters(0).typed_config().type_url(),
            "type.googleapis.com/sluice.filters.v1.BanConfig");
  // With an allowlist, a banned client is still closed first.
  Expanded a = load("allowlist: {cidrs: [\"10.0.0.0/8\"]}\n");
  ASSERT_EQ(a.bootstrap.listeners(0).listener_filters_size(), 2);
  EXPECT_EQ(a.bootstrap.listeners(0).listener_filters(0).name(), "sluice.ban");
  EXPECT_EQ(a.bootstrap.listeners(0).listener_filters(1).name(), "sluice.ip_allowlist");
}

TEST(ShortFormTest, BansAreMapped) {
  Expanded e = load(
      "bans: {max_failures: 3, window: 30s, duration: 1h, ipv6_prefix: 56, max_entries: 500}\n");
  const v1::Bans& bans = e.bootstrap.bans();
  EXPECT_EQ(bans.max_failures(), 3u);
  EXPECT_EQ(bans.window().seconds(), 30);
  EXPECT_EQ(bans.duration().seconds(), 3600);
  EXPECT_EQ(bans.ipv6_prefix(), 56u);
  EXPECT_EQ(bans.max_entries(), 500u);
  Expanded aggregate = load("bans: {ipv6_aggregate_prefix: 40, ipv6_aggregate_threshold: 5}\n");
  EXPECT_EQ(aggregate.bootstrap.bans().ipv6_aggregate_prefix(), 40u);
  EXPECT_EQ(aggregate.bootstrap.bans().ipv6_aggregate_threshold(), 5u);
  // 0 is written through (it turns aggregation off), not read as "unset".
  Expanded no_aggregate = load("bans: {ipv6_aggregate_prefix: 0}\n");
  EXPECT_TRUE(no_aggregate.bootstrap.bans().has_ipv6_aggregate_prefix());
  EXPECT_EQ(no_aggregate.bootstrap.bans().ipv6_aggregate_prefix(), 0u);
  // Left out, the aggregate prefix is never longer than a shorter ipv6_prefix.
  EXPECT_EQ(load("bans: {ipv6_prefix: 32}\n").bootstrap.bans().ipv6_aggregate_prefix(), 32u);
  Expanded off = load("bans: {disabled: true}\n");
  EXPECT_TRUE(off.bootstrap.bans().disabled());
  EXPECT_EQ(off.bootstrap.listeners(0).listener_filters_size(), 0);
}

TEST(ShortFormTest, BansAreRangeChecked) {
  EXPECT_THAT(loadError("bans: {ipv6_prefix: 8}\n"), HasSubstr("s.yaml: bans.ipv6_prefix: 8"));
  EXPECT_THAT(loadError("bans: {ipv6_prefix: 129}\n"), HasSubstr("bans.ipv6_prefix: 129"));
  EXPECT_THAT(loadError("bans: {max_failures: 1001}\n"), HasSubstr("bans.max_failures: at most"));
  EXPECT_THAT(loadError("bans: {max_entries: 10000001}\n"), HasSubstr("bans.max_entries"));
  EXPECT_THAT(loadError("bans: {window: 25h}\n"), HasSubstr("bans.window: at most"));
  EXPECT_THAT(loadError("bans: {duration: 9000h}\n"), HasSubstr("bans.duration: at most"));
  EXPECT_THAT(loadError("bans: {duration: 15}\n"), HasSubstr("bans.duration: "));
  EXPECT_EQ(loadError("bans: {ipv6_prefix: 128, max_failures: 1, max_entries: 1}\n"), "");
  EXPECT_THAT(loadError("bans: {ipv6_aggregate_prefix: 65}\n"),
              HasSubstr("s.yaml: bans.ipv6_aggregate_prefix: 65 is longer than bans.ipv6_prefix"));
  EXPECT_THAT(loadError("bans: {ipv6_aggregate_prefix: 129}\n"),
              HasSubstr("bans.ipv6_aggregate_prefix: 129"));
  EXPECT_THAT(loadError("bans: {ipv6_aggregate_prefix: -1}\n"),
              HasSubstr("bans.ipv6_aggregate_prefix"));
  EXPECT_THAT(loadError("bans: {ipv6_aggregate_threshold: 1001}\n"),
              HasSubstr("bans.ipv6_aggregate_threshold: at most"));
}

TEST(ShortFormTest, OpenRelayIsSaidInWords) {
  EXPECT_FALSE(load("").auth.open_relay());
  EXPECT_TRUE(load("auth: {open_relay: true}\n").auth.open_relay());
}

TEST(ShortFormTest, Sha256KeysAndTheKeysFile) {
  const std::string hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  Expanded e =
      load("auth:\n  api_keys: [\"sha256:" + hex + "\"]\n  api_keys_file: /etc/sluice/keys\n");
  ASSERT_EQ(e.auth.api_keys_size(), 1);
  EXPECT_EQ(e.auth.api_keys(0).key(), "sha256:" + hex);
  EXPECT_EQ(e.auth.api_keys_file(), "/etc/sluice/keys");
  EXPECT_EQ(load("").auth.api_keys_file(), "");
  for (const std::string& bad :
       {std::string("sha256:abc"), "sha256:" + hex + "0", "sha256:" + hex.substr(1) + "x"}) {
    const std::string error = loadError("auth: {api_keys: [\"" + bad + "\"]}\n");
    EXPECT_THAT(error, HasSubstr("auth.api_keys[0].key: \"sha256:\" must be followed by the 64 "
                                 "hex digits"));
    EXPECT_THAT(error, Not(HasSubstr(bad)));
  }
}

TEST(ShortFormTest, Socks5ListenerMirrorsTheHttpListener) {
  // Off by default; an empty section (all keys commented out) is off too.
  EXPECT_EQ(load("").bootstrap.listeners_size(), 1);
  EXPECT_EQ(load("socks5:\n").bootstrap.listeners_size(), 1);
  Expanded e = load(
      "auth: {api_keys: [k1]}\nallowlist: {cidrs: [10.0.0.0/8]}\n"
      "socks5: {listen: \"127.0.0.1:1080\"}\n");
  const v1::Bootstrap& b = e.bootstrap;
  ASSERT_EQ(b.listeners_size(), 2);
  const v1::Listener& http = b.listeners(0);
  const v1::Listener& socks = b.listeners(1);
  EXPECT_EQ(socks.name(), "socks5");
  EXPECT_EQ(socks.address(), "127.0.0.1:1080");
  // The same gate: ban, then the allowlist; the same connection limits, closed without a word.
  ASSERT_EQ(socks.listener_filters_size(), http.listener_filters_size());
  ASSERT_EQ(socks.listener_filters_size(), 2);
  EXPECT_EQ(socks.listener_filters(0).name(), "sluice.ban");
  EXPECT_EQ(socks.listener_filters(1).name(), "sluice.ip_allowlist");
  EXPECT_EQ(socks.connection_limits().max_connections(),
            http.connection_limits().max_connections());
  EXPECT_EQ(socks.connection_limits().overflow_reply(), v1::ConnectionLimits::CLOSE);
  ASSERT_EQ(socks.filter_chains_size(), 1);
  EXPECT_EQ(socks.filter_chains(0).name(), "socks5");
  const v1::Filter& codec = socks.filter_chains(0).filters(0);
  EXPECT_EQ(codec.name(), "sluice.socks5");
  filters::v1::Socks5Config socks5;
  ASSERT_TRUE(codec.typed_config().UnpackTo(&socks5));
  // The same request filters, byte for byte: keys, destinations and timeouts agree.
  ASSERT_EQ(socks5.request_filters_size(), e.http1.request_filters_size());
  for (int i = 0; i < socks5.request_filters_size(); ++i) {
    EXPECT_EQ(socks5.request_filters(i).SerializeAsString(),
              e.http1.request_filters(i).SerializeAsString());
  }
  EXPECT_EQ(socks5.handshake_timeout().seconds(), 10);
  EXPECT_EQ(socks5.bind_timeout().seconds(), 60);
  EXPECT_EQ(socks5.bind_idle_timeout().seconds(), 300);
  EXPECT_EQ(socks5.udp_idle_timeout().seconds(), 120);
  EXPECT_EQ(socks5.max_udp_datagram_bytes(), 65507u);
}

TEST(ShortFormTest, Socks5ListenErrors) {
  EXPECT_THAT(loadError("socks5: {listen: nope}\n"), HasSubstr("s.yaml: socks5.listen: "));
  EXPECT_EQ(loadError("socks5: {listen: \"127.0.0.1:8080\"}\n"),
            "s.yaml: socks5.listen: same address as server.listen (127.0.0.1:8080)");
  EXPECT_EQ(loadError("socks5: {listen: \"127.0.0.1:9901\"}\n"),
            "s.yaml: socks5.listen: same address as admin.listen (127.0.0.1:9901)");
  EXPECT_EQ(loadError("admin: {listen: \"off\"}\nsocks5: {listen: \"127.0.0.1:9901\"}\n"), "");
}

}  // namespace
}  // namespace config
}  // namespace sluice
