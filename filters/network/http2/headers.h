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

// A filter's header addition.
struct AddedHeader {
  std::string_view name;
  std::string_view value;
};

// Appends the HTTP/1.1 request head for a Forward request: request line, Host from the
// authority, the forwardable fields (Cookie fields joined with "; "), the filters' additions,
// then Content-Length when known or Transfer-Encoding: chunked when a body of unknown length
// follows (chunked). Fields flagged kHopByHop or kRemoved are skipped.
void writeHttp1Head(const RequestInfo& info, const http1::HeaderField* fields, uint32_t count,
                    const AddedHeader* added, uint32_t added_count, bool chunked,
                    buffer::Buffer& out);

// True for response fields that must not be sent over HTTP/2 (RFC 9113 8.2.2) or that the
// proxy re-frames (Content-Length, Transfer-Encoding).
bool dropResponseField(const http1::HeaderField& field);

// Removes the chunked framing of a response body as it streams by. The ChunkedDecoder checks
// the framing strictly; this only follows it to pick out the data bytes, so it needs no
// validation of its own.
class Dechunker {
 public:
  enum class Status : uint8_t { NeedMore, Done, Error };
  // Moves the chunk data in `in` to `out`, draining everything that belongs to the body.
  Status decode(buffer::Buffer& in, buffer::Buffer& out);
  void reset();
  const char* error() const { return validator_.error(); }
  uint64_t payloadBytes() const { return validator_.payloadBytes(); }

 private:
  enum class State : uint8_t { Line, Data, DataEnd, Trailer, Done };
  http1::ChunkedDecoder validator_;
  State state_ = State::Line;
  uint64_t left_ = 0;  // data bytes left in the current chunk
  bool in_extension_ = false;
  bool trailer_line_empty_ = true;
};

// "CONNECT"-style helpers.
http1::Method methodOf(std::string_view method_text);
bool idempotent(http1::Method m);

}  // namespace http2
}  // namespace filters
}  // namespace sluice
