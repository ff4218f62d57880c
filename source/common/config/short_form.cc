#include "source/common/config/short_form.h"

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/ip_allowlist.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "source/common/common/logger.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/network/address.h"
#include "source/common/network/cidr.h"

namespace sluice {
namespace config {
namespace {

constexpr char kDefaultListen[] = "127.0.0.1:8080";
constexpr char kDefaultAdmin[] = "127.0.0.1:9901";
constexpr size_t kMaxKeyNameLength = 64;
constexpr size_t kMaxKeyLength = 1024;

// The text of configs/sluice.yaml; a test keeps the two identical.
constexpr char kInitialConfig[] = R"(# sluice configuration, short form.
#
# These few keys are all most setups need. An unknown or misplaced key fails startup with its
# path. `sluice config expand -c <file>` prints the full form this becomes (listeners, filter
# chains, filters): write that instead to add or reorder filters. Every key, its type and its
# default: docs/configuration.md.

server:
  # host:port of the HTTP proxy port (HTTP/1.1 forwarding and CONNECT). IPv6: "[::1]:8080".
  # API keys cross this port in clear text: keep it on loopback or a trusted network.
  listen: "127.0.0.1:8080"
  # Worker threads, each with its own event loop. 0 = one per CPU core.
  workers: 0

auth:
  # Keys accepted as the password of Proxy-Authorization: Basic (any user name) or as
  # Proxy-Authorization: Bearer. An item is a key, or {name: ci, key: "..."}; the name (default
  # key1, key2, ...) is what stats and logs show, never the key. Make keys with `sluice init`
  # or `openssl rand -base64 32`. An empty list turns the proxy into an open relay.
  api_keys:
    - "{{API_KEY}}"

admin:
  # host:port of the admin endpoint (/stats, /ready, /config_dump, ...). "off" disables it.
  # Keep it on loopback.
  listen: "127.0.0.1:9901"

allowlist:
  # Client ranges admitted ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"); any other client is
  # closed at accept, before a byte is read. Empty: everyone who can reach the port.
  cidrs: []

destinations:
  # Checked for errors but not enforced yet: the destination guard that applies them is
  # planned.
  # Allow loopback, private (RFC 1918) and other internal destinations.
  allow_private: false
  # Destination ports allowed: single ports or ranges "A-B".
  allowed_ports: ["80", "443", "1024-65535"]

# Planned, not supported yet: setting either section fails startup.
# tls:                      # HTTPS proxy port, also speaking HTTP/2
#   listen: "0.0.0.0:8443"
#   cert: "/etc/sluice/fullchain.pem"
#   key: "/etc/sluice/privkey.pem"
# socks5:
#   listen: "127.0.0.1:1080"
)";

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool parsePort(std::string_view text, uint32_t& port) {
  if (text.empty() || text.size() > 5) return false;
  port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  return port >= 1 && port <= 65535;
}

absl::Status withPath(const std::string& path, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, status.message()));
}

}  // namespace

absl::Status validatePortRange(std::string_view text) {
  const size_t dash = text.find('-');
  uint32_t low = 0;
  uint32_t high = 0;
  if (dash == std::string_view::npos) {
    if (!parsePort(text, low)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected a port (1-65535) or a range \"A-B\", found \"%s\"", text.substr(0, 32)));
    }
    return absl::OkStatus();
  }
  if (!parsePort(text.substr(0, dash), low) || !parsePort(text.substr(dash + 1), high)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expected a port (1-65535) or a range \"A-B\", found \"%s\"", text.substr(0, 32)));
  }
  if (low > high) {
    return absl::InvalidArgumentError(
        absl::StrFormat("range \"%s\" is reversed (the low port comes first)", text));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Bootstrap> expandShortConfig(const v1::ShortConfig& config) {
  if (config.has_tls()) {
    return absl::InvalidArgumentError("tls: not supported yet (planned: HTTPS proxy port)");
  }
  if (config.has_socks5()) {
    return absl::InvalidArgumentError("socks5: not supported yet (planned)");
  }

  const std::string listen =
      config.server().listen().empty() ? kDefaultListen : config.server().listen();
  absl::StatusOr<network::Address> listen_address = network::Address::parseHostPort(listen);
  if (!listen_address.ok()) return withPath("server.listen", listen_address.status());

  std::string admin = config.admin().listen().empty() ? kDefaultAdmin : config.admin().listen();
  if (admin == "off") {
    admin.clear();
  } else {
    absl::StatusOr<network::Address> admin_address = network::Address::parseHostPort(admin);
    if (!admin_address.ok()) return withPath("admin.listen", admin_address.status());
    if (*admin_address == *listen_address) {
      return absl::InvalidArgumentError(
          absl::StrFormat("admin.listen: same address as server.listen (%s)", admin));
    }
  }

  // Not applied yet (the destination guard is planned), but a typo must not wait for it.
  for (int i = 0; i < config.destinations().allowed_ports_size(); ++i) {
    absl::Status status = validatePortRange(config.destinations().allowed_ports(i));
    if (!status.ok()) {
      return withPath(absl::StrFormat("destinations.allowed_ports[%d]", i), status);
    }
  }

  filters::v1::AuthConfig auth;
  auth.set_realm("sluice");
  absl::flat_hash_map<std::string, int> names;
  absl::flat_hash_map<std::string, int> keys;
  for (int i = 0; i < config.auth().api_keys_size(); ++i) {
    const v1::ShortConfig::ApiKey& in = config.auth().api_keys(i);
    const std::string path = absl::StrFormat("auth.api_keys[%d]", i);
    std::string name = in.name().empty() ? absl::StrFormat("key%d", i + 1) : in.name();
    if (name.size() > kMaxKeyNameLength) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.name: longer than %d characters", path, kMaxKeyNameLength));
    }
    for (char c : name) {
      if (!isNameChar(c)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.name: \"%s\" may hold only letters, digits, '_' and '-' (it names stats)", path,
            name));
      }
    }
    auto [name_pos, name_new] = names.try_emplace(name, i);
    if (!name_new) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.name: \"%s\" is already the name of auth.api_keys[%d]", path, name,
                          name_pos->second));
    }
    if (in.key().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.key: must not be empty", path));
    }
    if (in.key().size() > kMaxKeyLength) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.key: longer than %d bytes", path, kMaxKeyLength));
    }
    for (char c : in.key()) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.key: must not contain control characters", path));
      }
    }
    // The key itself is never echoed: errors end up in logs.
    auto [key_pos, key_new] = keys.try_emplace(in.key(), i);
    if (!key_new) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.key: the same key as auth.api_keys[%d]", path, key_pos->second));
    }
    if (in.key() == kPlaceholderApiKey) {
      SLUICE_LOG(Warn,
                 "%s.key is the placeholder of the example config: anyone can read it; "
                 "run `sluice init` or set a key from `openssl rand -base64 32`",
                 path);
    }
    filters::v1::AuthConfig::ApiKey* out = auth.add_api_keys();
    out->set_name(name);
    out->set_key(in.key());
  }

  filters::v1::RouterConfig router;
  router.mutable_connect_timeout()->set_seconds(10);
  router.mutable_response_timeout()->set_seconds(60);
  router.mutable_tunnel_idle_timeout()->set_seconds(300);

  filters::v1::Http1ProxyConfig http1;
  http1.set_max_request_head_bytes(65536);
  http1.set_max_request_headers(100);
  http1.set_max_response_head_bytes(65536);
  http1.mutable_request_head_timeout()->set_seconds(10);
  http1.mutable_idle_timeout()->set_seconds(60);
  v1::Filter* auth_filter = http1.add_request_filters();
  auth_filter->set_name("sluice.auth");
  auth_filter->mutable_typed_config()->PackFrom(auth);
  v1::Filter* router_filter = http1.add_request_filters();
  router_filter->set_name("sluice.router");
  router_filter->mutable_typed_config()->PackFrom(router);

  v1::Bootstrap bootstrap;
  bootstrap.mutable_admin()->set_address(admin);
  bootstrap.set_workers(config.server().workers());
  v1::Listener* listener = bootstrap.add_listeners();
  listener->set_name("http");
  listener->set_address(listen);
  listener->set_backlog(1024);
  if (config.allowlist().cidrs_size() > 0) {
    filters::v1::IpAllowlistConfig allowlist;
    for (int i = 0; i < config.allowlist().cidrs_size(); ++i) {
      auto range = network::CidrRange::parse(config.allowlist().cidrs(i));
      if (!range.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("allowlist.cidrs[%d]: %s", i, range.status().message()));
      }
      allowlist.add_cidrs(config.allowlist().cidrs(i));
    }
    v1::Filter* filter = listener->add_listener_filters();
    filter->set_name("sluice.ip_allowlist");
    filter->mutable_typed_config()->PackFrom(allowlist);
  }
  v1::FilterChain* chain = listener->add_filter_chains();
  chain->set_name("http");
  v1::Filter* codec = chain->add_filters();
  codec->set_name("sluice.http1");
  codec->mutable_typed_config()->PackFrom(http1);

  v1::Dns* dns = bootstrap.mutable_dns();
  dns->mutable_timeout()->set_seconds(5);
  dns->mutable_max_cache_ttl()->set_seconds(60);
  dns->set_cache_size(4096);
  v1::UpstreamPool* pool = bootstrap.mutable_upstream_pool();
  pool->set_max_idle_per_destination(256);
  pool->mutable_idle_timeout()->set_seconds(60);
  bootstrap.mutable_drain_timeout()->set_seconds(10);
  bootstrap.set_log_level("info");
  return bootstrap;
}

std::string initialConfigText(std::string_view api_key) {
  std::string escaped;
  for (char c : api_key) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    escaped.push_back(c);
  }
  std::string text = kInitialConfig;
  const std::string token = "{{API_KEY}}";
  text.replace(text.find(token), token.size(), escaped);
  return text;
}

}  // namespace config
}  // namespace sluice
