#pragma once

#include <cstdint>
#include <string_view>

#include "source/common/buffer/buffer.h"
#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"
#include "source/common/proxy/request.h"

// HTTP/2 request header blocks to proxy requests and HTTP/1.1 heads, and HTTP/1.1 response
// heads back to HTTP/2 fields. Pure functions over caller-owned memory, no allocation.
namespace sluice {
namespace filters {
namespace http2 {

// What a request header block asks for, once validated. Views point into the block.
struct RequestInfo {
  std::string_view method_text;
  http1::Method method = http1::Method::Other;
  std::string_view scheme;
  std::string_view authority;
  std::string_view path;
  std::string_view protocol;  // RFC 8441 :protocol (extended CONNECT)
  proxy::RequestKind kind = proxy::RequestKind::Forward;
  std::string_view host;  // from :authority (or Host), no IPv6 brackets
  uint16_t port = 0;
  bool has_content_length = false;
  uint64_t content_length = 0;
  int32_t proxy_authorization = -1;  // field index
  bool has_cookie = false;
  // RFC 8441 extended CONNECT with :protocol websocket: a Forward request that the codec
  // bridges to an HTTP/1.1 Upgrade (GET :path) to the origin.
  bool websocket = false;
};

struct RequestError {
  uint16_t status = 400;
  const char* reason = "";
};

// Validates a request header block (RFC 9113 section 8.3 and 8.5, RFC 8441 extended CONNECT
// when allow_websocket, plus what a proxy needs:
// an http:// or CONNECT target with a usable authority) and flags the fields that must not be
// forwarded as HTTP/1.1 (pseudo-headers, connection-specific ones, Host, Proxy-Authorization,
// Content-Length: re-emitted from the parsed value) with HeaderField::kHopByHop.
// Returns false with err set when the request must be refused.
bool parseRequest(http1::HeaderField* fields, uint32_t count, RequestInfo& out, RequestError& err,
                  bool allow_websocket = false);

// True for response fields that must not be sent over HTTP/2 (RFC 9113 8.2.2) or that the
// proxy re-frames (Content-Length, Transfer-Encoding).
bool dropResponseField(const http1::HeaderField& field);

// The method of a :method value (case-sensitive, as HTTP/2 methods are).
http1::Method methodOf(std::string_view method_text);

}  // namespace http2
}  // namespace filters
}  // namespace sluice
