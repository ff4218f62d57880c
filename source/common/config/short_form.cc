#include "source/common/config/short_form.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/ban.pb.h"
#include "api/sluice/filters/v1/dest_guard.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/http2.pb.h"
#include "api/sluice/filters/v1/ip_allowlist.pb.h"
#include "api/sluice/filters/v1/protocol_sniffer.pb.h"
#include "api/sluice/filters/v1/proxy_protocol.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "api/sluice/filters/v1/socks5.pb.h"
#include "api/sluice/filters/v1/tls.pb.h"
#include "source/common/ban/ban_config.h"
#include "source/common/common/logger.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/network/address.h"
#include "source/common/network/cidr.h"
#include "source/common/network/port_range.h"

namespace sluice {
namespace config {
namespace {

constexpr char kDefaultListen[] = "127.0.0.1:8080";
constexpr char kDefaultAdmin[] = "127.0.0.1:9901";
constexpr size_t kMaxKeyNameLength = 64;
constexpr size_t kMaxKeyLength = 1024;
constexpr std::string_view kSha256KeyPrefix = "sha256:";

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
  # or `openssl rand -base64 32`. An empty list turns the proxy into an open relay: refused on
  # an address other than loopback unless `open_relay: true` is set here.
  # To keep a key out of this file, write its SHA-256 instead: "sha256:<64 hex digits>", from
  # `printf %s KEY | sha256sum`.
  api_keys:
    - "{{API_KEY}}"
  # More keys from a file read at startup: one "name:key" or "key" per line ("sha256:..." too),
  # '#' comments.
  # api_keys_file: "/etc/sluice/keys"

admin:
  # host:port of the admin endpoint (/stats, /ready, /config_dump, ...). "off" disables it.
  # Keep it on loopback.
  listen: "127.0.0.1:9901"

allowlist:
  # Client ranges admitted ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"); any other client is
  # closed at accept, before a byte is read. Empty: everyone who can reach the port.
  cidrs: []

bans:
  # A client that gives max_failures wrong keys within window is banned for duration: its
  # connections are closed at accept, before a byte is read. IPv6 clients are banned per
  # /ipv6_prefix. GET /bans on the admin endpoint lists bans; POST /bans/unban?addr=IP lifts one.
  max_failures: 5
  window: 1m
  duration: 15m
  ipv6_prefix: 64
  # When ipv6_aggregate_threshold /64s of one /48 are banned, the whole /48 is banned, so
  # hopping between /64s buys no more guesses. 0 turns that off.
  ipv6_aggregate_prefix: 48
  ipv6_aggregate_threshold: 3
  # Addresses tracked at once (banned or counting failures). When full, addresses counting
  # failures are evicted first; a ban only ever gives way to a newer ban.
  max_entries: 100000

destinations:
  # Where clients may go. Every address a name resolves to is checked, and sluice connects only
  # to checked addresses. Refused by default (403): loopback, private (RFC 1918), link-local,
  # CGNAT, multicast, reserved and documentation ranges, and sluice's own listen addresses.
  # Allow loopback, private and other internal destinations (sluice itself stays refused).
  allow_private: false
  # Ranges opened even when allow_private is false, e.g. ["10.1.0.0/16"].
  allow: []
  # Ranges always refused, whatever allow_private and allow say.
  deny: []
  # Destination ports allowed: single ports or ranges "A-B".
  allowed_ports: ["80", "443", "1024-65535"]

limits:
  # Slow and greedy clients. A request head must arrive whole within request_head_timeout
  # (408), however slowly it trickles in; a kept-alive client is closed after idle_timeout.
  request_head_timeout: 10s
  idle_timeout: 60s
  # Request line and headers (431 beyond); header fields in one head (431 beyond).
  max_request_head_bytes: 65536
  max_request_headers: 100
  # Request body limit in bytes (413 beyond); 0 = unlimited.
  max_request_body_bytes: 0
  # An upload the client leaves silent this long is cut off (408).
  request_body_timeout: 30s
  # Open connections of the proxy port, and per client (IPv4 address or IPv6 /64); over a
  # limit a client gets 503 and is closed at accept. Below the open-file limit (ulimit -n).
  max_connections: 10000
  max_connections_per_client: 256
  # Upstream sockets one client may hold at once, across ports, protocols and HTTP/2 streams
  # (503 beyond), and descriptors kept back from upstream sockets for accepts and the admin
  # endpoint; 0 = automatic (512 and 128, less under a low open-file limit).
  max_upstream_connections_per_client: 0
  descriptor_reserve: 0
  # A CONNECT tunnel with no bytes either way is closed after this.
  tunnel_idle_timeout: 300s
  # A connection closed after its last bytes (Connection: close) gives its peer this long to
  # take them, then closes with the rest unsent.
  close_flush_timeout: 10s

# One line per request, tunnel and SOCKS5 command: off, errors (refused or failed) or all; as
# json or squid (Squid's native format, for the tools that read Squid logs); to a file
# (reopened on SIGUSR1 and SIGHUP, for logrotate) or "-" for standard output.
access_log:
  mode: off
  format: json
  path: "-"

# The HTTPS proxy port: the one to expose beyond this machine, since keys then never cross
# the network in clear text. Same auth, bans, destinations and limits as the plain port.
# tls:
#   listen: "0.0.0.0:8443"
#   cert: "/etc/sluice/fullchain.pem"   # certificate, then its chain (PEM)
#   key: "/etc/sluice/privkey.pem"
#   sni_certificates:                   # more certificates, chosen by the client's SNI
#     - {cert: "/etc/sluice/other.pem", key: "/etc/sluice/other.key"}

# A SOCKS5 port (CONNECT, BIND, UDP ASSOCIATE) with the same auth (the key is the password,
# any user name), bans, destinations and limits. Keys cross it in clear text: keep it on
# loopback or a trusted network.
# socks5:
#   listen: "127.0.0.1:1080"
)";

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// "sha256:" keys carry the 64 hex digits of the key's SHA-256 (as sha256sum prints them).
bool isSha256Hex(std::string_view hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

absl::Status withPath(const std::string& path, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, status.message()));
}

uint32_t uintOr(uint32_t value, uint32_t fallback) { return value != 0 ? value : fallback; }

// A short-form duration, or the default (in seconds) when it is absent or zero.
void setDuration(bool present, const google::protobuf::Duration& in, int64_t fallback_seconds,
                 google::protobuf::Duration& out) {
  if (present && (in.seconds() != 0 || in.nanos() != 0)) {
    out = in;
  } else {
    out.set_seconds(fallback_seconds);
  }
}

// The HTTPS proxy port: the plain port's listener (same listener filters, limits and request
// filters) with TLS under its codec.
absl::Status addTlsListener(const v1::ShortConfig::Tls& tls, const network::Address& plain,
                            const std::string& admin, v1::Bootstrap& bootstrap) {
  if (tls.listen().empty()) return absl::InvalidArgumentError("tls.listen: required");
  auto address = network::Address::parseHostPort(tls.listen());
  if (!address.ok()) return withPath("tls.listen", address.status());
  if (*address == plain) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tls.listen: same address as server.listen (%s)", tls.listen()));
  }
  if (!admin.empty() && tls.listen() == admin) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tls.listen: same address as admin.listen (%s)", admin));
  }
  if (tls.cert().empty()) return absl::InvalidArgumentError("tls.cert: required (PEM file)");
  if (tls.key().empty()) return absl::InvalidArgumentError("tls.key: required (PEM file)");
  filters::v1::TlsConfig transport;
  auto* cert = transport.add_certificates();
  cert->set_cert(tls.cert());
  cert->set_key(tls.key());
  for (int i = 0; i < tls.sni_certificates_size(); ++i) {
    const auto& in = tls.sni_certificates(i);
    if (in.cert().empty() || in.key().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tls.sni_certificates[%d]: both cert and key are required", i));
    }
    auto* extra = transport.add_certificates();
    extra->set_cert(in.cert());
    extra->set_key(in.key());
  }
  transport.set_min_version("1.2");
  transport.set_session_ticket_key_file(tls.session_ticket_key_file());
  transport.mutable_session_ticket_rotation()->set_seconds(3600);
  transport.set_session_cache_size(20480);
  transport.mutable_handshake_timeout()->set_seconds(10);
  transport.set_max_handshake_bytes(65536);

  v1::Listener* listener = bootstrap.add_listeners();
  *listener = bootstrap.listeners(0);
  listener->set_name("https");
  listener->set_address(tls.listen());
  // Nothing but TLS is spoken here: no plain-text 503 at the connection limit.
  listener->mutable_connection_limits()->set_overflow_reply(v1::ConnectionLimits::CLOSE);
  // After the ban and allowlist filters: a refused client is closed before anything is read.
  filters::v1::ProtocolSnifferConfig sniffer;
  sniffer.add_protocols("tls");
  v1::Filter* sniff = listener->add_listener_filters();
  sniff->set_name("sluice.protocol_sniffer");
  sniff->mutable_typed_config()->PackFrom(sniffer);
  // Clients that offer h2 by ALPN get HTTP/2 (the sniffer read their ClientHello); the others
  // HTTP/1.1. Both codecs run the plain port's request filters with its limits.
  v1::FilterChain http1_chain = listener->filter_chains(0);
  filters::v1::Http1ProxyConfig http1;
  if (!http1_chain.filters(0).typed_config().UnpackTo(&http1)) {
    return absl::InternalError("tls: the HTTP listener has no sluice.http1 config");
  }
  filters::v1::Http2ProxyConfig http2;
  *http2.mutable_request_filters() = http1.request_filters();
  http2.set_max_concurrent_streams(100);
  http2.set_max_header_list_size(http1.max_request_head_bytes());
  http2.set_max_request_headers(http1.max_request_headers());
  http2.set_max_response_head_bytes(http1.max_response_head_bytes());
  http2.set_max_request_body_bytes(http1.max_request_body_bytes());
  *http2.mutable_idle_timeout() = http1.idle_timeout();
  *http2.mutable_request_body_timeout() = http1.request_body_timeout();
  *http2.mutable_preface_timeout() = http1.request_head_timeout();

  listener->clear_filter_chains();
  v1::FilterChain* h2_chain = listener->add_filter_chains();
  h2_chain->set_name("https");
  h2_chain->mutable_match()->set_transport_protocol("tls");
  h2_chain->mutable_match()->add_application_protocols("h2");
  transport.clear_alpn();
  transport.add_alpn("h2");
  transport.add_alpn("http/1.1");
  h2_chain->mutable_transport_socket()->set_name("sluice.tls");
  h2_chain->mutable_transport_socket()->mutable_typed_config()->PackFrom(transport);
  v1::Filter* codec = h2_chain->add_filters();
  codec->set_name("sluice.http2");
  codec->mutable_typed_config()->PackFrom(http2);

  v1::FilterChain* chain = listener->add_filter_chains();
  *chain = std::move(http1_chain);
  chain->set_name("https");
  chain->mutable_match()->set_transport_protocol("tls");
  transport.clear_alpn();
  transport.add_alpn("http/1.1");
  chain->mutable_transport_socket()->set_name("sluice.tls");
  chain->mutable_transport_socket()->mutable_typed_config()->PackFrom(transport);
  return absl::OkStatus();
}

}  // namespace

absl::Status validatePortRange(std::string_view text) {
  return network::parsePortRange(text).status();
}

absl::StatusOr<v1::Bootstrap> expandShortConfig(const v1::ShortConfig& config) {
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

  // SOCKS5 port: off unless socks5.listen is set.
  const std::string& socks5_listen = config.socks5().listen();
  if (!socks5_listen.empty()) {
    absl::StatusOr<network::Address> socks5_address =
        network::Address::parseHostPort(socks5_listen);
    if (!socks5_address.ok()) return withPath("socks5.listen", socks5_address.status());
    if (*socks5_address == *listen_address) {
      return absl::InvalidArgumentError(
          absl::StrFormat("socks5.listen: same address as server.listen (%s)", socks5_listen));
    }
    absl::StatusOr<network::Address> admin_address = network::Address::parseHostPort(admin);
    if (!admin.empty() && admin_address.ok() && *admin_address == *socks5_address) {
      return absl::InvalidArgumentError(
          absl::StrFormat("socks5.listen: same address as admin.listen (%s)", socks5_listen));
    }
  }

  filters::v1::DestGuardConfig dest_guard;
  dest_guard.set_allow_private(config.destinations().allow_private());
  for (int i = 0; i < config.destinations().allowed_ports_size(); ++i) {
    absl::Status status = validatePortRange(config.destinations().allowed_ports(i));
    if (!status.ok()) {
      return withPath(absl::StrFormat("destinations.allowed_ports[%d]", i), status);
    }
    dest_guard.add_allowed_ports(config.destinations().allowed_ports(i));
  }
  if (dest_guard.allowed_ports().empty()) {
    for (const char* ports : {"80", "443", "1024-65535"}) dest_guard.add_allowed_ports(ports);
  }
  const v1::ShortConfig::Destinations& destinations = config.destinations();
  for (int i = 0; i < destinations.allow_size(); ++i) {
    auto range = network::CidrRange::parse(destinations.allow(i));
    if (!range.ok()) return withPath(absl::StrFormat("destinations.allow[%d]", i), range.status());
    dest_guard.add_allow(destinations.allow(i));
  }
  for (int i = 0; i < destinations.deny_size(); ++i) {
    auto range = network::CidrRange::parse(destinations.deny(i));
    if (!range.ok()) return withPath(absl::StrFormat("destinations.deny[%d]", i), range.status());
    dest_guard.add_deny(destinations.deny(i));
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
    if (in.key().rfind(kSha256KeyPrefix, 0) == 0 &&
        !isSha256Hex(std::string_view(in.key()).substr(kSha256KeyPrefix.size()))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.key: \"sha256:\" must be followed by the 64 hex digits of the key's SHA-256 "
          "(`printf %%s KEY | sha256sum`)",
          path));
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
    if (!in.group().empty() && in.group() != "default") {
      bool known = false;
      for (const v1::Group& group : config.policy().groups()) known |= group.name() == in.group();
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.group: \"%s\" is not a group of policy.groups", path, in.group()));
      }
    }
    out->set_group(in.group());
  }
  // Read (and checked, with file:line in errors) by sluice.auth when the proxy starts.
  auth.set_api_keys_file(config.auth().api_keys_file());
  auth.set_open_relay(config.auth().open_relay());

  const v1::ShortConfig::Bans& short_bans = config.bans();
  v1::Bans bans;
  bans.set_disabled(short_bans.disabled());
  bans.set_max_failures(uintOr(short_bans.max_failures(), 5));
  setDuration(short_bans.has_window(), short_bans.window(), 60, *bans.mutable_window());
  setDuration(short_bans.has_duration(), short_bans.duration(), 900, *bans.mutable_duration());
  bans.set_ipv6_prefix(uintOr(short_bans.ipv6_prefix(), 64));
  bans.set_max_entries(uintOr(short_bans.max_entries(), 100000));
  bans.set_ipv6_aggregate_prefix(
      short_bans.has_ipv6_aggregate_prefix()
          ? short_bans.ipv6_aggregate_prefix()
          : std::min(ban::kDefaultIpv6AggregatePrefix, bans.ipv6_prefix()));
  bans.set_ipv6_aggregate_threshold(uintOr(short_bans.ipv6_aggregate_threshold(), 3));
  // Its errors name the key as both forms spell it: "bans.window: ...".
  absl::Status bans_status = ban::banOptionsFromProto(bans).status();
  if (!bans_status.ok()) return bans_status;

  const v1::ShortConfig::Limits& limits = config.limits();
  const uint32_t head_bytes = uintOr(limits.max_request_head_bytes(), 65536);
  const uint32_t headers = uintOr(limits.max_request_headers(), 100);
  const uint32_t max_connections = uintOr(limits.max_connections(), 10000);
  const uint32_t per_client = uintOr(limits.max_connections_per_client(), 256);
  // The ranges sluice.http1 and the listener accept; checked here to name the short-form key.
  for (const auto& [key, value, min, max] :
       {std::tuple<const char*, uint32_t, uint32_t, uint32_t>{"max_request_head_bytes", head_bytes,
                                                              1024, 1 << 20},
        {"max_request_headers", headers, 1, 128},
        {"max_connections", max_connections, 1, 10000000},
        {"max_connections_per_client", per_client, 1, 10000000}}) {
    if (value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrFormat("limits.%s: %d is out of range [%d, %d]", key, value, min, max));
    }
  }

  filters::v1::RouterConfig router;
  router.mutable_connect_timeout()->set_seconds(10);
  router.mutable_response_timeout()->set_seconds(60);
  setDuration(limits.has_tunnel_idle_timeout(), limits.tunnel_idle_timeout(), 300,
              *router.mutable_tunnel_idle_timeout());
  router.set_disable_splice(limits.disable_splice());
  const v1::ShortConfig::Upstream& up = config.upstream();
  if (up.has_happy_eyeballs_delay())
    *router.mutable_happy_eyeballs_delay() = up.happy_eyeballs_delay();
  router.set_prefer(up.prefer());
  router.set_only(up.only());

  filters::v1::Http1ProxyConfig http1;
  http1.set_max_request_head_bytes(head_bytes);
  http1.set_max_request_headers(headers);
  http1.set_max_response_head_bytes(65536);
  setDuration(limits.has_request_head_timeout(), limits.request_head_timeout(), 10,
              *http1.mutable_request_head_timeout());
  setDuration(limits.has_idle_timeout(), limits.idle_timeout(), 60, *http1.mutable_idle_timeout());
  http1.set_max_request_body_bytes(limits.max_request_body_bytes());
  setDuration(limits.has_request_body_timeout(), limits.request_body_timeout(), 30,
              *http1.mutable_request_body_timeout());
  v1::Filter* auth_filter = http1.add_request_filters();
  auth_filter->set_name("sluice.auth");
  auth_filter->mutable_typed_config()->PackFrom(auth);
  v1::Filter* dest_guard_filter = http1.add_request_filters();
  dest_guard_filter->set_name("sluice.dest_guard");
  dest_guard_filter->mutable_typed_config()->PackFrom(dest_guard);
  v1::Filter* router_filter = http1.add_request_filters();
  router_filter->set_name("sluice.router");
  router_filter->mutable_typed_config()->PackFrom(router);

  v1::Bootstrap bootstrap;
  bootstrap.mutable_admin()->set_address(admin);
  bootstrap.set_workers(config.server().workers());
  bootstrap.set_pin_workers(config.server().pin_workers());
  bootstrap.set_disable_io_uring(config.server().disable_io_uring());
  bootstrap.set_reads_by_completion(config.server().reads_by_completion());
  bootstrap.set_pid_file(config.server().pid_file());
  if (config.tls().has_handshakes_per_turn()) {
    bootstrap.set_tls_handshakes_per_turn(config.tls().handshakes_per_turn());
  }
  if (config.server().has_revoke_grace()) {
    *bootstrap.mutable_reload()->mutable_revoke_grace() = config.server().revoke_grace();
  }
  v1::Listener* listener = bootstrap.add_listeners();
  listener->set_name("http");
  listener->set_address(listen);
  listener->set_backlog(1024);
  v1::ConnectionLimits* connection_limits = listener->mutable_connection_limits();
  connection_limits->set_max_connections(max_connections);
  connection_limits->set_max_connections_per_client(per_client);
  connection_limits->set_overflow_reply(v1::ConnectionLimits::HTTP_503);
  *bootstrap.mutable_bans() = bans;
  // Checked where the full form's is (buildServerConfig): its errors read "policy...." either way.
  if (config.has_policy()) *bootstrap.mutable_policy() = config.policy();
  *bootstrap.mutable_parents() = config.parents();
  *bootstrap.mutable_routes() = config.routes();
  // Before everything: the filters after it, and the limits, see the client it names.
  if (config.proxy_protocol().trusted_cidrs_size() > 0) {
    filters::v1::ProxyProtocolConfig proxy;
    for (int i = 0; i < config.proxy_protocol().trusted_cidrs_size(); ++i) {
      auto range = network::CidrRange::parse(config.proxy_protocol().trusted_cidrs(i));
      if (!range.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("proxy_protocol.trusted_cidrs[%d]: %s", i, range.status().message()));
      }
      proxy.add_trusted_cidrs(config.proxy_protocol().trusted_cidrs(i));
    }
    v1::Filter* filter = listener->add_listener_filters();
    filter->set_name("sluice.proxy_protocol");
    filter->mutable_typed_config()->PackFrom(proxy);
  }
  // Then: a banned client is closed before any other filter spends time on it.
  if (!bans.disabled()) {
    v1::Filter* filter = listener->add_listener_filters();
    filter->set_name("sluice.ban");
    filter->mutable_typed_config()->PackFrom(filters::v1::BanConfig());
  }
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

  if (!socks5_listen.empty()) {
    // The same gate (listener filters, connection limits) and the same request filters as the
    // HTTP port: a key, a ban and a destination rule mean the same on both.
    v1::Listener* socks5_listener = bootstrap.add_listeners();
    socks5_listener->set_name("socks5");
    socks5_listener->set_address(socks5_listen);
    socks5_listener->set_backlog(1024);
    *socks5_listener->mutable_listener_filters() = bootstrap.listeners(0).listener_filters();
    *socks5_listener->mutable_connection_limits() = bootstrap.listeners(0).connection_limits();
    // No HTTP 503 on a SOCKS port: over a limit, the client is closed without a word.
    socks5_listener->mutable_connection_limits()->set_overflow_reply(v1::ConnectionLimits::CLOSE);
    filters::v1::Socks5Config socks5;
    *socks5.mutable_request_filters() = http1.request_filters();
    socks5.mutable_handshake_timeout()->set_seconds(10);
    socks5.mutable_bind_timeout()->set_seconds(60);
    *socks5.mutable_bind_idle_timeout() = router.tunnel_idle_timeout();
    socks5.set_disable_splice(router.disable_splice());
    socks5.mutable_udp_idle_timeout()->set_seconds(120);
    socks5.set_max_udp_datagram_bytes(65507);
    socks5.set_max_udp_pending_datagrams(16);
    socks5.set_max_udp_destinations(64);
    v1::FilterChain* socks5_chain = socks5_listener->add_filter_chains();
    socks5_chain->set_name("socks5");
    v1::Filter* socks5_codec = socks5_chain->add_filters();
    socks5_codec->set_name("sluice.socks5");
    socks5_codec->mutable_typed_config()->PackFrom(socks5);
  }

  if (config.has_tls()) {
    absl::Status status = addTlsListener(config.tls(), *listen_address, admin, bootstrap);
    if (!status.ok()) return status;
  }

  v1::Dns* dns = bootstrap.mutable_dns();
  dns->mutable_timeout()->set_seconds(5);
  dns->mutable_max_cache_ttl()->set_seconds(60);
  dns->set_cache_size(4096);
  if (config.has_access_log()) {
    v1::AccessLog* log = bootstrap.mutable_access_log();
    log->set_mode(config.access_log().mode());
    log->set_format(config.access_log().format());
    log->set_path(config.access_log().path());
  }
  v1::UpstreamLimits* upstream_limits = bootstrap.mutable_upstream_limits();
  upstream_limits->set_max_connections_per_client(
      config.limits().max_upstream_connections_per_client());
  upstream_limits->set_descriptor_reserve(config.limits().descriptor_reserve());
  v1::UpstreamPool* pool = bootstrap.mutable_upstream_pool();
  pool->set_max_idle_per_destination(256);
  pool->mutable_idle_timeout()->set_seconds(60);
  bootstrap.mutable_drain_timeout()->set_seconds(10);
  setDuration(config.limits().has_close_flush_timeout(), config.limits().close_flush_timeout(), 10,
              *bootstrap.mutable_close_flush_timeout());
  bootstrap.mutable_memory_release_interval()->set_seconds(10);
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
