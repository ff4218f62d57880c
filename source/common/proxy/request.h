#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "source/common/network/address.h"
#include "source/common/proxy/grants.h"
#include "source/common/upstream/failure.h"

namespace sluice {
namespace policy {
struct Group;
class KeyLimiter;
class LimitSlot;
}  // namespace policy
namespace upstream {
struct Route;
struct TunnelStats;
}  // namespace upstream
namespace proxy {

enum class Protocol : uint8_t { Http1, Http2, Socks5 };

enum class RequestKind : uint8_t {
  Forward,   // an HTTP request relayed to the origin, with headers
  Tunnel,    // a byte stream to host:port (HTTP CONNECT, SOCKS5 CONNECT)
  Datagram,  // UDP datagrams to host:port (a SOCKS5 UDP relay's destination): checked only
  Bind,      // the peer a SOCKS5 BIND waits for (host:port): checked only, never dialled
  // A SOCKS5 UDP relay's association through a SOCKS5 parent, for a checked destination: the
  // router dials only the route's SOCKS5 parents and asks for UDP ASSOCIATE.
  UdpAssociation,
};

// What wraps the key in ProxyRequest::credential.
enum class CredentialForm : uint8_t {
  None,                // the client presented no credential
  ProxyAuthorization,  // an HTTP Proxy-Authorization value: "Basic base64(user:key)", "Bearer key"
  Key,                 // the key itself (SOCKS5's RFC 1929 password)
};

// Header access for Forward requests. Names compare case-insensitively.
class RequestHeaders {
 public:
  virtual ~RequestHeaders() = default;
  // The first value of the header, or empty.
  virtual std::string_view get(std::string_view name) const = 0;
  // Removes every header of this name from what is sent upstream.
  virtual void remove(std::string_view name) = 0;
  // Adds a header to what is sent upstream. name and value must outlive the request (filter
  // configs hold them). False when the request has no room for more headers.
  virtual bool add(std::string_view name, std::string_view value) = 0;
};

// What a refusal is about where its Denial and the request's failure do not say, set with the
// Denial by the filter that refuses, so an answer can name it (HTTP's Proxy-Status error type).
enum class DenialCause : uint8_t {
  Unspecified,         // the Denial says it all
  DestinationAddress,  // the destination is an address sluice does not reach (private, denied,
                       // sluice itself)
  ConnectionLimit,     // the client's upstream sockets, or sluice's descriptors, ran out
  NoRoute,             // no filter routed the request: the chain has no router
};

// One proxy request as every codec presents it to the request filters, whatever the protocol.
// Views point into codec-owned memory that stays valid until the request ends.
struct ProxyRequest {
  static constexpr uint32_t kMaxPinned = 8;

  Protocol protocol = Protocol::Http1;
  RequestKind kind = RequestKind::Forward;
  // The destination as the client named it: a host name or a literal IP, and a port.
  std::string_view host;
  uint16_t port = 0;
  // The credential as the client presented it, byte for byte, and what wraps the key in it:
  // the Proxy-Authorization value (HTTP/1.1, HTTP/2), the RFC 1929 password (SOCKS5).
  // proxy::presentedKey() takes the key out, whatever the form. Codecs hand it over undecoded
  // so that sluice.auth can recognise a credential it already accepted on this connection
  // without decoding it again.
  std::string_view credential;
  CredentialForm credential_form = CredentialForm::None;
  RequestHeaders* headers = nullptr;  // Forward requests only
  // A Forward request that asks for a WebSocket (HTTP/1.1 Upgrade, RFC 8441 extended CONNECT).
  bool websocket = false;
  network::Address client;
  // The client connection's socket (-1: none, e.g. a UDP association's parent): the router
  // asks it where the client reached sluice (getsockname) only when dialling a parent that
  // wants a PROXY protocol header, so no other request pays for the syscall.
  int client_fd = -1;
  // Set by the codec when it retries after a pooled connection failed: dial a new one.
  bool fresh_connection = false;
  // Set by a filter that refuses the request: the client connection must not carry another
  // request either (its address was just banned, say).
  bool close_connection = false;

  // Set by filters:
  // The authenticated key's name (never the key itself), and its tunnel counters.
  std::string_view principal;
  const upstream::TunnelStats* principal_tunnel_stats = nullptr;
  // The key's grant, named as the key: a request whose key a reload revokes while it runs the
  // chain is refused before it gets its upstream; what it becomes holds the grant for the
  // revocation sweep, and its end-of-request record names the key by it.
  const KeyGrant* grant = nullptr;
  // The policy group of the key (or the default group when the listener has no keys), set by
  // the Authenticate filter; the config that holds it outlives the request. Null when no
  // Authenticate filter ran: sluice.dest_guard then sets the default group, whose rules apply.
  const policy::Group* group = nullptr;
  // The policy rule that refused the request, or that would have in a report-only group (then
  // `policy_report_only`, and the request is served), for its record; set by the filter that
  // checks the rules (sluice.dest_guard). Config-owned. Empty: no rule refused it.
  std::string_view policy_rule;
  bool policy_report_only = false;
  // The rate and concurrency limits the key's requests are held to (its own and its group's),
  // set by the Authenticate filter with the group. The codec gives the slot its request keeps
  // its place under them in, for as long as the request and what it becomes run (its
  // RequestTrace's); the Authenticate filter admits the request into it. Null slot: admitted
  // elsewhere or not at all (SOCKS5 authenticates before its command is known and admits each
  // command itself; a UDP destination check is not a request).
  policy::KeyLimiter* limiter = nullptr;
  policy::LimitSlot* limit_slot = nullptr;
  // Set with a TooManyRequests denial: seconds until a retry may be admitted (at least 1).
  uint32_t retry_after = 0;
  // Realm for a 407 challenge.
  std::string_view auth_realm = "sluice";
  // Destination addresses (ports set): checked ones pinned by the destination guard, or those
  // the router resolved. The router dials only these when present, so no second lookup can
  // differ from what was checked, and a retry needs no lookup.
  network::Address pinned[kMaxPinned];
  uint32_t pinned_count = 0;
  // Set by the destination guard instead of pins when the request's route has `resolve:
  // parent`: nothing was resolved here, and the router asks that route's parents for the name.
  const upstream::Route* parent_route = nullptr;
  // Why the destination could not be reached (set with a BadGateway or GatewayTimeout denial
  // by the filter that found out: a failed lookup, a refused or timed-out connect), so each
  // codec can answer in its own terms (an HTTP status, a SOCKS5 reply code) without parsing
  // text.
  upstream::Failure failure;
  // What a refusal is about, beyond its Denial and failure (set by the filter that refuses).
  DenialCause denial_cause = DenialCause::Unspecified;

  // For the end-of-request record: the time the destination lookup and the connect took (-1:
  // not done, e.g. a literal address or a pooled connection), set by the filter that did them,
  // and the address the router handed over a connection to.
  std::chrono::microseconds resolve_time{-1};
  std::chrono::microseconds connect_time{-1};
  network::Address upstream_address;
};

// Why a request was refused; each codec maps it to its own answer (HTTP status, SOCKS5 reply).
enum class Denial : uint8_t {
  BadRequest,          // 400
  Unauthorized,        // 407 with a Basic challenge
  Forbidden,           // 403
  BadGateway,          // 502: cannot reach the destination, or it answered badly
  GatewayTimeout,      // 504
  ServiceUnavailable,  // 503: draining, over a limit
  TooManyRequests,     // 429 with Retry-After: over a rate or concurrency limit of the policy
};

}  // namespace proxy
}  // namespace sluice
