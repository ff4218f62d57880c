#pragma once

#include <cerrno>
#include <cstdint>

namespace sluice {
namespace upstream {

// Why the way to a destination failed, in the upstream layer's words. Each codec maps it to
// its own answer (an HTTP status, a SOCKS5 reply code, an HTTP/2 stream reset).
enum class FailureKind : uint8_t {
  None,
  DnsFailure,     // the name did not resolve (or resolved to nothing usable)
  Refused,        // the destination refused the connection (RST to our SYN)
  Unreachable,    // no route to the network or host
  Timeout,        // the connect (or the origin's answer) did not come in time
  Reset,          // the connection closed or reset under an exchange or a tunnel
  ProtocolError,  // the origin answered something that is not HTTP, or not what was asked
  Local,          // sluice could not open a socket (out of descriptors, ...)
  ParentRefused,  // a parent proxy refused the request: its 403 or 407, a SOCKS5 parent's
                  // "not allowed" or its refusal of sluice's credentials
  EgressBind,     // the group's egress address could not be bound (not an address of this host)

  // An https parent's certificate did not verify (its CA, its name, its dates).
  TlsCertificate,
  // No TLS handshake with an https parent: it closed, spoke no TLS, had nothing in common.
  TlsProtocol,
};

struct Failure {
  FailureKind kind = FailureKind::None;
  // errno where one applies (a failed connect; ETIMEDOUT for a lookup that timed out), else 0
  int error = 0;
  explicit operator bool() const { return kind != FailureKind::None; }
};

// A failed lookup of the destination's name.
inline Failure dnsFailure(bool timed_out) {
  return {FailureKind::DnsFailure, timed_out ? ETIMEDOUT : 0};
}

// Why an exchange failed. The exchange counted it; the codec answers in its own protocol.
enum class ExchangeError : uint8_t {
  BadResponse,      // a malformed head or body, an unasked or bad 101 (upstream_rs_bad)
  OriginClosed,     // the origin closed before the response ended (upstream_reset)
  ResponseTimeout,  // the origin was silent past response_timeout (upstream_rs_timeout)
  BodyTimeout,      // the client's body stalled before any response (the codec counts it)
  ClientStalled,    // the client took nothing past response_timeout while the origin was held
                    // back for it, before or after the response head (downstream_rs_timeout)
};

// The upstream layer's failure kind of an exchange error (BodyTimeout and ClientStalled are the
// client's: None).
FailureKind failureKind(ExchangeError error);

// The kind of a failed connect's errno.
FailureKind kindForConnectError(int error);
// Its stable lower-case name ("dns_failure", "refused", ...), for logs and records.
const char* failureName(FailureKind kind);

}  // namespace upstream
}  // namespace sluice
