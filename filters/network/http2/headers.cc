#include "filters/network/http2/headers.h"

#include <charconv>

namespace sluice {
namespace filters {
namespace http2 {

namespace {

bool allOf(std::string_view s, uint8_t cls) {
  for (char c : s) {
    if (!http1::detail::is(c, cls)) return false;
  }
  return true;
}

bool validName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    // RFC 9113 8.2.1: field names are lowercase tokens.
    if (!http1::detail::is(c, http1::detail::kTchar) || (c >= 'A' && c <= 'Z')) return false;
  }
  return true;
}

bool validValue(std::string_view value) {
  // No CR, LF or NUL (they would split the HTTP/1.1 head), no leading or trailing whitespace.
  if (!value.empty() && (value.front() == ' ' || value.front() == '\t' || value.back() == ' ' ||
                         value.back() == '\t')) {
    return false;
  }
  return allOf(value, http1::detail::kValue);
}

bool fail(RequestError& err, uint16_t status, const char* reason) {
  err.status = status;
  err.reason = reason;
  return false;
}

void addLine(buffer::Buffer& out, std::string_view name, std::string_view value) {
  out.add(name);
  out.add(": ", 2);
  out.add(value);
  out.add("\r\n", 2);
}

// Connection-specific fields (RFC 9113 8.2.2) and what the proxy itself consumes or re-frames.
bool notForwarded(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "connection", "keep-alive", "proxy-connection",    "transfer-encoding", "upgrade",
      "te",         "host",       "proxy-authorization", "content-length",    "trailer"};
  for (std::string_view n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

http1::Method methodOf(std::string_view m) {
  using http1::Method;
  if (m == "GET") return Method::Get;
  if (m == "HEAD") return Method::Head;
  if (m == "POST") return Method::Post;
  if (m == "PUT") return Method::Put;
  if (m == "DELETE") return Method::Delete;
  if (m == "CONNECT") return Method::Connect;
  if (m == "OPTIONS") return Method::Options;
  if (m == "TRACE") return Method::Trace;
  if (m == "PATCH") return Method::Patch;
  return Method::Other;
}

bool idempotent(http1::Method m) {
  return m == http1::Method::Get || m == http1::Method::Head || m == http1::Method::Options ||
         m == http1::Method::Trace || m == http1::Method::Put || m == http1::Method::Delete;
}

bool parseRequest(http1::HeaderField* fields, uint32_t count, RequestInfo& out, RequestError& err,
                  bool allow_websocket) {
  out = RequestInfo();
  bool regular_seen = false;
  bool has_method = false, has_scheme = false, has_authority = false, has_path = false,
       has_protocol = false;
  std::string_view host_header;
  bool has_host_header = false;
  for (uint32_t i = 0; i < count; ++i) {
    http1::HeaderField& f = fields[i];
    f.flags = 0;
    if (!f.name.empty() && f.name[0] == ':') {
      f.flags |= http1::HeaderField::kHopByHop;
      if (regular_seen) return fail(err, 400, "pseudo-header after a regular header");
      std::string_view* slot = nullptr;
      bool* seen = nullptr;
      if (f.name == ":method") {
        slot = &out.method_text;
        seen = &has_method;
      } else if (f.name == ":scheme") {
        slot = &out.scheme;
        seen = &has_scheme;
      } else if (f.name == ":authority") {
        slot = &out.authority;
        seen = &has_authority;
      } else if (f.name == ":path") {
        slot = &out.path;
        seen = &has_path;
      } else if (f.name == ":protocol") {
        slot = &out.protocol;
        seen = &has_protocol;
      } else {
        return fail(err, 400, "unknown pseudo-header");
      }
      if (*seen) return fail(err, 400, "repeated pseudo-header");
      *seen = true;
      *slot = f.value;
      continue;
    }
    regular_seen = true;
    if (!validName(f.name)) return fail(err, 400, "invalid header name");
    if (!validValue(f.value)) return fail(err, 400, "invalid header value");
    if (notForwarded(f.name)) {
      f.flags |= http1::HeaderField::kHopByHop;
      if (f.name == "te") {
        if (f.value != "trailers") return fail(err, 400, "te other than trailers");
      } else if (f.name == "host") {
        if (has_host_header) return fail(err, 400, "repeated host");
        has_host_header = true;
        host_header = f.value;
      } else if (f.name == "proxy-authorization") {
        if (out.proxy_authorization < 0) out.proxy_authorization = static_cast<int32_t>(i);
      } else if (f.name == "content-length") {
        uint64_t n = 0;
        const char* b = f.value.data();
        const char* e = b + f.value.size();
        if (f.value.empty() || !allOf(f.value, http1::detail::kDigit) || f.value.size() > 19) {
          return fail(err, 400, "invalid content-length");
        }
        std::from_chars(b, e, n);
        if (out.has_content_length && n != out.content_length) {
          return fail(err, 400, "conflicting content-length");
        }
        out.has_content_length = true;
        out.content_length = n;
      } else {
        return fail(err, 400, "connection-specific header");
      }
    } else if (f.name == "cookie") {
      out.has_cookie = true;
    }
  }
  if (!has_method || out.method_text.empty() || !allOf(out.method_text, http1::detail::kTchar)) {
    return fail(err, 400, "missing or invalid :method");
  }
  out.method = methodOf(out.method_text);
  bool has_port = false;
  if (out.method == http1::Method::Connect) {
    if (has_protocol) {
      // RFC 8441 extended CONNECT: the stream becomes an HTTP/1.1 Upgrade to the origin.
      if (!allow_websocket || out.protocol != "websocket") {
        return fail(err, 501, "extended CONNECT is only bridged for websocket");
      }
      if (!has_scheme || !has_path || out.path.empty() || out.path[0] != '/' ||
          !allOf(out.path, http1::detail::kTarget)) {
        return fail(err, 400, "extended CONNECT needs :scheme and :path");
      }
      if (out.scheme != "http") {
        return fail(err, 400, "only ws:// (:scheme http) is bridged; use CONNECT for wss");
      }
      if (!has_authority) return fail(err, 400, "missing :authority");
      if (!http1::parseAuthority(out.authority, out.host, out.port, has_port)) {
        return fail(err, 400, "invalid :authority");
      }
      if (!has_port) out.port = 80;
      if (out.has_content_length && out.content_length != 0) {
        return fail(err, 400, "websocket request with a body");
      }
      out.websocket = true;
      out.kind = proxy::RequestKind::Forward;
      return true;
    }
    if (has_scheme || has_path) return fail(err, 400, "CONNECT with :scheme or :path");
    if (!has_authority) return fail(err, 400, "CONNECT without :authority");
    if (!http1::parseAuthority(out.authority, out.host, out.port, has_port) || !has_port) {
      return fail(err, 400, "CONNECT :authority must be host:port");
    }
    if (out.has_content_length && out.content_length != 0) {
      return fail(err, 400, "CONNECT with a body");
    }
    out.kind = proxy::RequestKind::Tunnel;
    return true;
  }
  if (has_protocol) return fail(err, 400, ":protocol without CONNECT");
  if (!has_scheme || !has_path || out.path.empty())
    return fail(err, 400, "missing :scheme or :path");
  if (out.scheme != "http") {
    return fail(err, 400, "only http:// URLs are relayed; use CONNECT for others");
  }
  if (!(out.path[0] == '/' || (out.path == "*" && out.method == http1::Method::Options)) ||
      !allOf(out.path, http1::detail::kTarget)) {
    return fail(err, 400, "invalid :path");
  }
  if (!has_authority) {
    if (!has_host_header) return fail(err, 400, "missing :authority");
    out.authority = host_header;
  }
  if (!http1::parseAuthority(out.authority, out.host, out.port, has_port)) {
    return fail(err, 400, "invalid :authority");
  }
  if (!has_port) out.port = 80;
  out.kind = proxy::RequestKind::Forward;
  return true;
}

void writeHttp1Head(const RequestInfo& info, const http1::HeaderField* fields, uint32_t count,
                    const AddedHeader* added, uint32_t added_count, bool chunked,
                    buffer::Buffer& out) {
  constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
  out.add(info.method_text);
  out.add(" ", 1);
  out.add(info.path);
  out.add(" HTTP/1.1\r\n", 11);
  // :authority as the client wrote it (validated): "host", "host:port" or "[v6]:port".
  addLine(out, "host", info.authority);
  bool cookie_done = false;
  for (uint32_t i = 0; i < count; ++i) {
    const http1::HeaderField& f = fields[i];
    if ((f.flags & kSkip) != 0) continue;
    if (f.name == "cookie") {
      // RFC 9113 8.2.3: HTTP/2 may split Cookie; HTTP/1.1 carries one field.
      if (cookie_done) continue;
      cookie_done = true;
      out.add("cookie: ", 8);
      bool first = true;
      for (uint32_t j = i; j < count; ++j) {
        if ((fields[j].flags & kSkip) != 0 || fields[j].name != "cookie") continue;
        if (!first) out.add("; ", 2);
        out.add(fields[j].value);
        first = false;
      }
      out.add("\r\n", 2);
      continue;
    }
    addLine(out, f.name, f.value);
  }
  for (uint32_t i = 0; i < added_count; ++i) addLine(out, added[i].name, added[i].value);
  if (info.has_content_length) {
    char digits[20];
    auto r = std::to_chars(digits, digits + sizeof(digits), info.content_length);
    addLine(out, "content-length", std::string_view(digits, r.ptr - digits));
  } else if (chunked) {
    addLine(out, "transfer-encoding", "chunked");
  }
  out.add("\r\n", 2);
}

bool dropResponseField(const http1::HeaderField& field) {
  if ((field.flags & (http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved)) != 0) {
    return true;
  }
  return http1::equalsIgnoreCase(field.name, "transfer-encoding") ||
         http1::equalsIgnoreCase(field.name, "content-length") ||
         http1::equalsIgnoreCase(field.name, "connection") ||
         http1::equalsIgnoreCase(field.name, "keep-alive") ||
         http1::equalsIgnoreCase(field.name, "proxy-connection") ||
         http1::equalsIgnoreCase(field.name, "upgrade");
}

void Dechunker::reset() {
  validator_.reset();
  state_ = State::Line;
  left_ = 0;
  in_extension_ = false;
  trailer_line_empty_ = true;
}

Dechunker::Status Dechunker::decode(buffer::Buffer& in, buffer::Buffer& out) {
  while (!in.empty() && state_ != State::Done) {
    std::string_view piece = in.front();
    size_t used = 0;
    http1::ChunkedDecoder::Status st = validator_.consume(piece, used);
    if (st == http1::ChunkedDecoder::Status::Error) return Status::Error;
    // The validator accepted piece[0, used): follow the framing to copy out the data.
    size_t i = 0;
    while (i < used) {
      char c = piece[i];
      switch (state_) {
        case State::Line:
          if (c == '\n') {
            state_ = left_ == 0 ? State::Trailer : State::Data;
            trailer_line_empty_ = true;
            in_extension_ = false;
          } else if (!in_extension_ && http1::detail::is(c, http1::detail::kHex)) {
            const int digit = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
            left_ = left_ * 16 + static_cast<uint64_t>(digit);
          } else {
            in_extension_ = true;  // ';', BWS, CR: the size is complete
          }
          ++i;
          break;
        case State::Data: {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, used - i));
          out.add(piece.data() + i, n);
          left_ -= n;
          i += n;
          if (left_ == 0) state_ = State::DataEnd;
          break;
        }
        case State::DataEnd:
          if (c == '\n') state_ = State::Line;
          ++i;
          break;
        case State::Trailer:
          if (c == '\n') {
            if (trailer_line_empty_) state_ = State::Done;
            trailer_line_empty_ = true;
          } else if (c != '\r') {
            trailer_line_empty_ = false;
          }
          ++i;
          break;
        case State::Done:
          i = used;
          break;
      }
    }
    in.drain(used);
    if (st == http1::ChunkedDecoder::Status::Done) {
      state_ = State::Done;
      return Status::Done;
    }
  }
  return state_ == State::Done ? Status::Done : Status::NeedMore;
}

}  // namespace http2
}  // namespace filters
}  // namespace sluice
