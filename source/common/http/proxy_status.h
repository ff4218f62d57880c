#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "source/common/proxy/request.h"
#include "source/common/upstream/failure.h"

namespace sluice {
namespace http {

// The RFC 9209 error types sluice's own answers name in their Proxy-Status field (section 2.3),
// the ones sluice has a use for.
enum class ProxyError : uint8_t {
  DnsTimeout,               // the destination's name servers did not answer in time
  DnsError,                 // the name did not resolve
  DestinationIpProhibited,  // the destination guard refuses the address
  DestinationIpUnroutable,  // no route to the address
  ConnectionRefused,        // the destination refused the connect
  ConnectionTerminated,     // the connection closed before any of the response came
  ConnectionTimeout,        // the connect timed out
  ConnectionLimitReached,   // a connection limit or the descriptor reserve
  HttpRequestError,         // the client's request is malformed, too large or too slow
  HttpRequestDenied,        // a policy refuses the request (a key, a ban, a port)
  HttpResponseIncomplete,   // the origin closed in the middle of its response head
  HttpResponseTimeout,      // the origin's response head did not come in time
  HttpProtocolError,        // the origin answered something that is not valid HTTP/1.1
  ProxyInternalError,       // sluice could not do its part (a socket, room for headers)
  ProxyConfigurationError,  // the filter chain cannot route
  TlsProtocolError,         // no TLS handshake with the next hop (an https parent)
  TlsCertificateError,      // the next hop's certificate did not verify
};

// The error type's RFC 9209 name ("destination_ip_prohibited", ...): a static string.
const char* proxyErrorName(ProxyError error);

// The error type of a refusal by the request filters, from what the refusing filter said: its
// cause first, then the failure it met (for a 502 or 504), then the Denial alone.
ProxyError denialError(proxy::Denial denial, proxy::DenialCause cause, upstream::Failure failure);

// The error type of a failed origin exchange answered by the proxy (no response head went out
// to the client). origin_answered: some bytes of the response had come from the origin.
ProxyError exchangeError(upstream::ExchangeError error, bool origin_answered);

// At most this many characters of a reason go into the details parameter.
inline constexpr size_t kMaxProxyStatusDetails = 256;

// Appends `text` as an RFC 8941 sf-string: quoted, `"` and `\` escaped, bytes other than
// printable ASCII dropped, at most kMaxProxyStatusDetails characters of it kept.
void appendSfString(std::string& out, std::string_view text);

// The Proxy-Status field value of an answer sluice makes itself:
// `sluice; error=<type>; details="<details>"`. details is a reason sluice already shows in the
// answer's body (never a key).
std::string proxyStatusValue(ProxyError error, std::string_view details);

}  // namespace http
}  // namespace sluice
