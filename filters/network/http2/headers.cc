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

bool dropResponseField(const http1::HeaderField& field) {
  if ((field.flags & (http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved)) != 0) {
    return true;
  }
  return http1::isFieldName(field.name, "transfer-encoding") ||
         http1::isFieldName(field.name, "content-length") ||
         http1::isFieldName(field.name, "connection") ||
         http1::isFieldName(field.name, "keep-alive") ||
         http1::isFieldName(field.name, "proxy-connection") ||
         http1::isFieldName(field.name, "upgrade");
}

}  // namespace http2
}  // namespace filters
}  // namespace sluice
