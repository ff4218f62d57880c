#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "source/common/memory/slab.h"

// Strict, in-place HTTP/1.1 head parser (RFC 9112). Every result is a std::string_view into the
// caller's buffer, so the buffer must outlive the parsed head; nothing here allocates.
//
// Incremental use: call again with everything buffered so far. Each call re-parses from the
// start. The result for any prefix of a message is either Incomplete or exactly the result for
// the whole message: errors are reported as soon as they are certain (a bad line is rejected
// when its LF arrives; a first line that cannot start a request or status line is rejected even
// before), and a valid head is Complete only once its final CRLF is buffered. Since each call
// starts over, a caller should call again only when the bytes just read contain a LF (or on the
// first read, or once the buffer exceeds max_head_bytes): that bounds the work for one head to
// about one parse per line, whatever the peer's read sizes.
namespace sluice::http1 {

enum class Method : uint8_t { Other, Get, Head, Post, Put, Delete, Connect, Options, Trace, Patch };
enum class TargetForm : uint8_t { Origin, Absolute, Authority, Asterisk };
enum class BodyFraming : uint8_t { None, ContentLength, Chunked, UntilClose };
enum class ParseStatus : uint8_t { Complete, Incomplete, Error };

inline constexpr uint32_t kMaxHeaderCapacity = 128;     // hard cap; config may set lower
inline constexpr uint32_t kInitialHeaderCapacity = 16;  // what a head reserves the first time

struct HeaderField {
  std::string_view name;
  std::string_view value;  // OWS-trimmed
  uint8_t flags = 0;       // kHopByHop | kRemoved (the codec sets kRemoved for edits)
  static constexpr uint8_t kHopByHop = 1;
  static constexpr uint8_t kRemoved = 2;
};

// The field lines of a head in order, each pointing into the parsed bytes: as many entries as the
// head has. Parsing into a head again reuses its capacity, so a head kept for reuse (the codecs'
// per-worker request objects) parses without allocating once it has held one as large.
// They come from the slabs: a burst of requests in flight leaves no holes in the heap.
using HeaderFields = std::vector<HeaderField, memory::SlabAllocator<HeaderField>>;

struct ParseLimits {
  uint32_t max_head_bytes = 65536;
  uint32_t max_headers = 100;  // values above kMaxHeaderCapacity act as kMaxHeaderCapacity
};

// Request errors carry the status to answer with: 400, 431 (head too large / too many headers),
// 501 (unsupported transfer coding) or 505 (version). Response errors always carry 502, the
// status the codec sends to the client for a malformed origin response.
struct ParseError {
  uint16_t status = 400;
  const char* reason =
      "";  // static, short, lowercase, e.g. "content-length with transfer-encoding"
};

struct RequestHead {
  std::string_view method_text;
  Method method = Method::Other;
  std::string_view target;
  TargetForm form = TargetForm::Origin;
  uint8_t version_minor = 1;  // HTTP/1.0 or HTTP/1.1
  // From the target. absolute-form: scheme://authority/path?query ; authority-form: host:port.
  // origin-form and asterisk-form leave scheme and host empty and port 0 (the Host header is
  // validated but not copied here; parseAuthority() splits it when the codec needs it).
  std::string_view scheme;  // as written ("http"); empty unless absolute-form
  std::string_view host;    // no brackets for IPv6 literals; not lowercased
  uint16_t port = 0;        // explicit, or the scheme's default (http/ws 80, https/wss 443), else 0
  // origin-form to send upstream: path + query. For origin-form the target itself, for
  // asterisk-form "*", for absolute-form the part from the first '/' ("/", a static string, when
  // there is none: "http://a" gives "/"). "http://a?x" is rejected with 400: "/?x" cannot be made
  // in place. Empty for authority-form.
  std::string_view path;
  HeaderFields headers;
  // Derived facts:
  BodyFraming framing = BodyFraming::None;  // requests: None, ContentLength or Chunked only
  uint64_t content_length = 0;
  bool keep_alive = true;            // per version and Connection/Proxy-Connection tokens
  bool expect_continue = false;      // Expect: 100-continue (case-insensitive)
  bool upgrade = false;              // Connection lists "upgrade" and an Upgrade header exists
  int32_t host_header = -1;          // index of Host, -1 if none
  int32_t proxy_authorization = -1;  // index of Proxy-Authorization, -1 if none
  uint32_t head_size = 0;            // bytes of the head including the final CRLFCRLF
};

struct ResponseHead {
  uint8_t version_minor = 1;
  uint16_t status = 0;
  std::string_view reason;  // may be empty
  HeaderFields headers;
  BodyFraming framing = BodyFraming::None;
  uint64_t content_length = 0;  // parsed even when framing is None (e.g. HEAD, 304)
  bool keep_alive = true;       // false whenever framing is UntilClose
  uint32_t head_size = 0;
};

// data: everything buffered so far from the start of the head. Incomplete means "read more"
// (but Error 431 once data exceeds max_head_bytes without a complete head). Up to two empty
// lines before the request line are skipped and counted in head_size.
ParseStatus parseRequestHead(std::string_view data, const ParseLimits& limits, RequestHead& out,
                             ParseError& err);
// request_method: the method of the request this answers (HEAD → no body; CONNECT 2xx → no
// body/tunnel). A status line without the SP and reason ("HTTP/1.1 200") is accepted for
// compatibility with old origins; no empty lines may precede it.
ParseStatus parseResponseHead(std::string_view data, const ParseLimits& limits,
                              Method request_method, ResponseHead& out, ParseError& err);

// Case-insensitive (ASCII) comparison.
bool equalsIgnoreCase(std::string_view a, std::string_view b);

namespace detail {
// Up to eight bytes at p, little-endian, zero-filled above n.
inline uint64_t loadWord(const char* p, size_t n) {
  uint64_t x = 0;
  std::memcpy(&x, p, n);
  return x;
}
// 0x20 in each byte of w that is a lowercase letter, 0 elsewhere (w's bytes are below 0x80).
constexpr uint64_t letterBits(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  const uint64_t from_a = w + kOnes * (0x80 - 'a');      // high bit: byte >= 'a'
  const uint64_t past_z = w + kOnes * (0x80 - 'z' - 1);  // high bit: byte > 'z'
  return ((from_a & ~past_z) & (kOnes * 0x80)) >> 2;
}
}  // namespace detail

// equalsIgnoreCase(name, lower) for a `lower` without capital letters (a field name or scheme
// sluice knows, a literal), eight bytes at a time: OR-ing 0x20 into a byte where `lower` has a
// letter folds that letter's case and no other byte onto it ('X' and 'x' alone give 'x'); every
// other byte must be equal. With a literal, its words and letter bits fold into constants.
inline bool isFieldName(std::string_view name, std::string_view lower) {
  const size_t n = lower.size();
  if (name.size() != n) {
    return false;
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t want = detail::loadWord(lower.data() + i, 8);
    if ((detail::loadWord(name.data() + i, 8) | detail::letterBits(want)) != want) {
      return false;
    }
  }
  if (i == n) {
    return true;
  }
  const uint64_t want = detail::loadWord(lower.data() + i, n - i);
  return (detail::loadWord(name.data() + i, n - i) | detail::letterBits(want)) == want;
}
// RFC 9110 9.2.2: a request that can be repeated with the same effect (safe to retry).
inline bool idempotent(Method m) {
  return m == Method::Get || m == Method::Head || m == Method::Options || m == Method::Trace ||
         m == Method::Put || m == Method::Delete;
}
// Index of the first header with that name (case-insensitive) not flagged kRemoved; -1 if none.
int32_t findHeader(const HeaderField* headers, uint32_t count, std::string_view name);
// Does a comma-separated header value list contain token (case-insensitive, OWS-trimmed)?
bool headerHasToken(std::string_view value, std::string_view token);
// Splits `uri-host [":" port]` (as in a Host header or authority-form target). host comes back
// without IPv6 brackets; has_port tells whether a port was written (port is 0 otherwise). The
// host must be an IPv6 literal in brackets or 1*(ALPHA / DIGIT / "-" / "." / "_" / "~"): stricter
// than RFC 3986 reg-name (no percent-encoding or sub-delims), which only matter for non-DNS names.
// The port must be 1-65535. False on anything else, including an empty host or "@" userinfo.
bool parseAuthority(std::string_view authority, std::string_view& host, uint16_t& port,
                    bool& has_port);

namespace detail {

// Byte classes for the parsers, one table lookup per byte.
inline constexpr uint8_t kTchar = 1;     // RFC 9110 token
inline constexpr uint8_t kValue = 2;     // field-vchar / SP / HTAB
inline constexpr uint8_t kTarget = 4;    // request-target: VCHAR except '#'
inline constexpr uint8_t kHost = 8;      // ALPHA / DIGIT / "-" / "." / "_" / "~"
inline constexpr uint8_t kHex = 16;      // HEXDIG
inline constexpr uint8_t kDigit = 32;    // DIGIT
inline constexpr uint8_t kScheme = 64;   // ALPHA / DIGIT / "+" / "-" / "."
inline constexpr uint8_t kQdtext = 128;  // quoted-string text: HTAB / SP / VCHAR except '"' '\'

constexpr std::array<uint8_t, 256> makeCharClasses() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool digit = c >= '0' && c <= '9';
    const bool vchar = c >= 0x21 && c <= 0x7e;
    const bool obs_text = c >= 0x80;
    uint8_t v = 0;
    if (alpha || digit) {
      v |= kTchar | kHost | kScheme;
    }
    if (std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos) {
      v |= kTchar;
    }
    if (c == '-' || c == '.' || c == '_' || c == '~') {
      v |= kHost;
    }
    if (c == '+' || c == '-' || c == '.') {
      v |= kScheme;
    }
    if (vchar || obs_text || c == ' ' || c == '\t') {
      v |= kValue;
      if (c != '"' && c != '\\') {
        v |= kQdtext;
      }
    }
    if (vchar && c != '#') {
      v |= kTarget;
    }
    if (digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) {
      v |= kHex;
    }
    if (digit) {
      v |= kDigit;
    }
    t[c] = v;
  }
  return t;
}

inline constexpr std::array<uint8_t, 256> kCharClasses = makeCharClasses();

inline bool is(char c, uint8_t cls) {
  return (kCharClasses[static_cast<unsigned char>(c)] & cls) != 0;
}

}  // namespace detail
}  // namespace sluice::http1
