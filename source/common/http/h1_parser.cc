#include "source/common/http/h1_parser.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::http1 {
namespace {

using detail::is;
using detail::kDigit;
using detail::kHex;
using detail::kHost;
using detail::kScheme;
using detail::kTarget;
using detail::kTchar;
using detail::kValue;

constexpr uint16_t kBadGateway = 502;

constexpr std::array<char, 256> makeLowerTable() {
  std::array<char, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = static_cast<char>((c >= 'A' && c <= 'Z') ? c + 32 : c);
  }
  return t;
}
constexpr std::array<char, 256> kLower = makeLowerTable();

inline char lower(char c) { return kLower[static_cast<unsigned char>(c)]; }
inline bool isOws(char c) { return c == ' ' || c == '\t'; }

// True when any of the 8 bytes at p is below 0x20 or is 0x7f (SWAR "has less than" and "has
// zero" tricks; exact for the any-byte question). Bytes >= 0x80 (obs-text) never match.
inline bool hasCtl(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, sizeof(x));
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  constexpr uint64_t kHigh = 0x8080808080808080ull;
  const uint64_t below_space = (x - kOnes * 0x20) & ~x & kHigh;
  const uint64_t del = x ^ (kOnes * 0x7f);
  const uint64_t is_del = (del - kOnes) & ~del & kHigh;
  return (below_space | is_del) != 0;
}

// Where the run of field-value text (field-vchar, SP, obs-text: no CTL) that starts at `i`
// ends: the first CTL at or after i, or `end`. HTAB is a CTL here; the caller decides about it.
inline size_t skipValueText(const char* d, size_t i, size_t end) {
#if defined(__SSE2__)
  const __m128i last_ctl = _mm_set1_epi8(0x1f);
  const __m128i del = _mm_set1_epi8(0x7f);
  for (; i + 16 <= end; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i));
    // Unsigned x <= 0x1f exactly when min(x, 0x1f) == x.
    const __m128i ctl =
        _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(x, last_ctl), x), _mm_cmpeq_epi8(x, del));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(ctl));
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(mask));
  }
#endif
  while (i + 8 <= end && !hasCtl(d + i)) {
    i += 8;
  }
  while (i < end && is(d[i], kValue) && d[i] != '\t') {
    ++i;
  }
  return i;
}

// Where the field value that starts at `i` ends: at its first byte that is neither value text
// nor HTAB (the line's CR when the line is well formed), or `end`.
inline size_t skipFieldValue(const char* d, size_t i, size_t end) {
  i = skipValueText(d, i, end);
  while (i < end && d[i] == '\t') {
    i = skipValueText(d, i + 1, end);
  }
  return i;
}

// Where the run of letters, digits and '-' that starts at `i` ends (or `end`): the bytes of
// nearly every field name, 16 at a time. The caller goes on with the full tchar rule.
inline size_t skipNameText(const char* d, size_t i, size_t end) {
#if defined(__SSE2__)
  const __m128i fold = _mm_set1_epi8(0x20);
  const __m128i a = _mm_set1_epi8('a');
  const __m128i zero = _mm_set1_epi8('0');
  const __m128i dash = _mm_set1_epi8('-');
  const __m128i letters = _mm_set1_epi8(25);
  const __m128i digits = _mm_set1_epi8(9);
  for (; i + 16 <= end; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i));
    // Unsigned range checks: (x | 0x20) - 'a' <= 25 for a letter, x - '0' <= 9 for a digit.
    const __m128i letter = _mm_sub_epi8(_mm_or_si128(x, fold), a);
    const __m128i digit = _mm_sub_epi8(x, zero);
    const __m128i ok =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(letter, letters), letter),
                                  _mm_cmpeq_epi8(_mm_min_epu8(digit, digits), digit)),
                     _mm_cmpeq_epi8(x, dash));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(ok)) ^ 0xffffu;
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(mask));
  }
#endif
  return i;
}

// Where the run of request-target bytes (VCHAR but '#') that starts at `i` ends, 16 at a time
// (or where fewer than 16 are left: the caller goes on byte by byte).
inline size_t skipTargetText(const char* d, size_t i, size_t end) {
#if defined(__SSE2__)
  const __m128i space = _mm_set1_epi8(0x21);
  const __m128i del = _mm_set1_epi8(0x7f);
  const __m128i hash = _mm_set1_epi8('#');
  for (; i + 16 <= end; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i));
    // Signed: bytes from 0x80 are negative, so below 0x21 covers CTLs, SP and those.
    const __m128i bad = _mm_or_si128(_mm_cmplt_epi8(x, space),
                                     _mm_or_si128(_mm_cmpeq_epi8(x, del), _mm_cmpeq_epi8(x, hash)));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(bad));
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(mask));
  }
#endif
  return i;
}

ParseStatus fail(ParseError& err, uint16_t status, const char* reason) {
  err.status = status;
  err.reason = reason;
  return ParseStatus::Error;
}

// Hands out the head's lines in order without copying. Never looks past max_head_bytes, so a
// peer that never sends a line end costs one bounded memchr per call.
class LineReader {
 public:
  enum class Result : uint8_t { Line, Incomplete, TooLarge };

  LineReader(std::string_view data, uint32_t max_head_bytes)
      : data_(data),
        limit_(std::min<size_t>(data.size(), max_head_bytes)),
        over_limit_(data.size() > max_head_bytes) {}

  // raw: the line without its LF; a trailing CR is left for stripCr() to check.
  Result next(std::string_view& raw) {
    if (pos_ < limit_) {
      const void* lf = std::memchr(data_.data() + pos_, '\n', limit_ - pos_);
      if (lf != nullptr) {
        const size_t end = static_cast<const char*>(lf) - data_.data();
        raw = data_.substr(pos_, end - pos_);
        pos_ = end + 1;
        return Result::Line;
      }
    }
    return over_limit_ ? Result::TooLarge : Result::Incomplete;
  }

  // The empty line that ends a head, CRLF, when it is next: true and past it. next() finds it
  // too; this spares the search.
  bool takeEndOfHead() {
    if (pos_ + 1 < limit_ && data_[pos_] == '\r' && data_[pos_ + 1] == '\n') {
      pos_ += 2;
      return true;
    }
    return false;
  }

  // The next line when it is a well-formed field line ending in CRLF within max_head_bytes,
  // scanned once: its name, its OWS-trimmed value, and true, past the line. Anything else (a bad
  // byte, a bare LF or CR, the line not all here) is false with nothing consumed, for next() and
  // the checks that name the error: the result is what they would give, only sooner.
  bool takeFieldLine(std::string_view& name, std::string_view& value) {
    const char* d = data_.data();
    size_t i = skipNameText(d, pos_, limit_);
    while (i < limit_ && is(d[i], kTchar)) {
      ++i;
    }
    if (i == pos_ || i == limit_ || d[i] != ':') {
      return false;
    }
    size_t j = i + 1;
    while (j < limit_ && isOws(d[j])) {
      ++j;
    }
    const size_t start = j;
    j = skipFieldValue(d, j, limit_);
    if (j + 1 >= limit_ || d[j] != '\r' || d[j + 1] != '\n') {
      return false;
    }
    size_t end = j;
    while (end > start && isOws(d[end - 1])) {
      --end;
    }
    name = std::string_view(d + pos_, i - pos_);
    value = std::string_view(d + start, end - start);
    pos_ = j + 2;
    return true;
  }

  size_t pos() const { return pos_; }
  // The unterminated tail, up to max_head_bytes.
  std::string_view rest() const { return data_.substr(pos_, limit_ - pos_); }

 private:
  std::string_view data_;
  size_t limit_;
  bool over_limit_;
  size_t pos_ = 0;
};

// Drops the CR of a CRLF line end; false when the line ended in a bare LF. Callers validate the
// content before acting on false so that the first bad byte decides the reason.
bool stripCr(std::string_view raw, std::string_view& content) {
  if (!raw.empty() && raw.back() == '\r') {
    content = raw.substr(0, raw.size() - 1);
    return true;
  }
  content = raw;
  return false;
}

std::string_view trimOws(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && isOws(s[b])) {
    ++b;
  }
  while (e > b && isOws(s[e - 1])) {
    --e;
  }
  return s.substr(b, e - b);
}

// Iterates the elements of a comma-separated list, OWS-trimmed; empty elements are returned too.
bool nextListElement(std::string_view& rest, std::string_view& element, bool& more) {
  if (!more) {
    return false;
  }
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos) {
    element = trimOws(rest);
    more = false;
  } else {
    element = trimOws(rest.substr(0, comma));
    rest.remove_prefix(comma + 1);
  }
  return true;
}

Method methodFromText(std::string_view m) {
  switch (m.size()) {
    case 3:
      if (m == "GET") return Method::Get;
      if (m == "PUT") return Method::Put;
      break;
    case 4:
      if (m == "HEAD") return Method::Head;
      if (m == "POST") return Method::Post;
      break;
    case 5:
      if (m == "PATCH") return Method::Patch;
      if (m == "TRACE") return Method::Trace;
      break;
    case 6:
      if (m == "DELETE") return Method::Delete;
      break;
    case 7:
      if (m == "CONNECT") return Method::Connect;
      if (m == "OPTIONS") return Method::Options;
      break;
    default:
      break;
  }
  return Method::Other;
}

enum class HeaderId : uint8_t {
  Other,
  Host,
  ContentLength,
  TransferEncoding,
  Connection,
  ProxyConnection,
  KeepAlive,
  Te,
  Trailer,
  Upgrade,
  ProxyAuthorization,
  ProxyAuthenticate,
  Expect,
};

// Dispatch on length first: almost every header is rejected by one integer compare.
HeaderId classifyHeader(std::string_view name) {
  switch (name.size()) {
    case 2:
      if (isFieldName(name, "te")) return HeaderId::Te;
      break;
    case 4:
      if (isFieldName(name, "host")) return HeaderId::Host;
      break;
    case 6:
      if (isFieldName(name, "expect")) return HeaderId::Expect;
      break;
    case 7:
      if (isFieldName(name, "upgrade")) return HeaderId::Upgrade;
      if (isFieldName(name, "trailer")) return HeaderId::Trailer;
      break;
    case 10:
      if (isFieldName(name, "connection")) return HeaderId::Connection;
      if (isFieldName(name, "keep-alive")) return HeaderId::KeepAlive;
      break;
    case 14:
      if (isFieldName(name, "content-length")) return HeaderId::ContentLength;
      break;
    case 16:
      if (isFieldName(name, "proxy-connection")) return HeaderId::ProxyConnection;
      break;
    case 17:
      if (isFieldName(name, "transfer-encoding")) return HeaderId::TransferEncoding;
      break;
    case 18:
      if (isFieldName(name, "proxy-authenticate")) return HeaderId::ProxyAuthenticate;
      break;
    case 19:
      if (isFieldName(name, "proxy-authorization")) return HeaderId::ProxyAuthorization;
      break;
    default:
      break;
  }
  return HeaderId::Other;
}

// field-line = field-name ":" OWS field-value OWS. Returns the error reason, nullptr when valid.
const char* parseFieldLine(std::string_view line, std::string_view& name, std::string_view& value) {
  const char* p = line.data();
  const size_t n = line.size();
  if (isOws(p[0])) {
    // RFC 9112 §5.2: obs-fold is rejected; so is whitespace before the first field line.
    return "obs-fold";
  }
  size_t i = 0;
  while (i < n && is(p[i], kTchar)) {
    ++i;
  }
  if (i == n) {
    return "header without colon";
  }
  if (p[i] != ':') {
    if (isOws(p[i])) {
      return "whitespace before colon";
    }
    return p[i] == '\r' ? "bare cr" : "invalid header name";
  }
  if (i == 0) {
    return "empty header name";
  }
  name = std::string_view(p, i);
  size_t j = i + 1;
  while (j < n && isOws(p[j])) {
    ++j;
  }
  const size_t start = j;
  j = skipFieldValue(p, j, n);
  if (j < n) {
    return p[j] == '\r' ? "bare cr" : "invalid header value";
  }
  size_t end = n;
  while (end > start && isOws(p[end - 1])) {
    --end;
  }
  value = std::string_view(p + start, end - start);
  return nullptr;
}

enum class ClResult : uint8_t { Ok, Invalid, Conflict };

// Content-Length = 1*DIGIT, as a list of identical values ("5, 5"). At most 19 digits, so the
// value always fits in uint64_t.
ClResult parseContentLength(std::string_view v, uint64_t& out) {
  bool have = false;
  uint64_t first = 0;
  std::string_view element;
  bool more = true;
  while (nextListElement(v, element, more)) {
    if (element.empty() || element.size() > 19) {
      return ClResult::Invalid;
    }
    uint64_t value = 0;
    for (char c : element) {
      if (!is(c, kDigit)) {
        return ClResult::Invalid;
      }
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    if (have && value != first) {
      return ClResult::Conflict;
    }
    have = true;
    first = value;
  }
  out = first;
  return ClResult::Ok;
}

struct TransferCodings {
  bool present = false;
  bool final_chunked = false;
  uint32_t chunked_count = 0;
};

// transfer-coding = token *( OWS ";" OWS token BWS "=" BWS ( token / quoted-string ) ).
// Returns the index after the parameters, or npos when they are malformed.
size_t skipCodingParameters(std::string_view v, size_t i) {
  const size_t n = v.size();
  while (i < n && v[i] == ';') {
    ++i;
    while (i < n && isOws(v[i])) ++i;
    const size_t name_start = i;
    while (i < n && is(v[i], kTchar)) ++i;
    if (i == name_start) return std::string_view::npos;
    while (i < n && isOws(v[i])) ++i;
    if (i == n || v[i] != '=') return std::string_view::npos;
    ++i;
    while (i < n && isOws(v[i])) ++i;
    if (i < n && v[i] == '"') {
      ++i;
      bool closed = false;
      while (i < n) {
        if (v[i] == '"') {
          closed = true;
          ++i;
          break;
        }
        if (v[i] == '\\') {
          ++i;
          if (i == n) return std::string_view::npos;
        }
        ++i;
      }
      if (!closed) return std::string_view::npos;
    } else {
      const size_t value_start = i;
      while (i < n && is(v[i], kTchar)) ++i;
      if (i == value_start) return std::string_view::npos;
    }
    while (i < n && isOws(v[i])) ++i;
  }
  return i;
}

// Adds one Transfer-Encoding field line to the codings seen so far. An empty list element
// ("chunked,") is malformed here: it is the classic way to hide the final coding from a parser.
bool scanTransferEncoding(std::string_view v, TransferCodings& tc) {
  const size_t n = v.size();
  size_t i = 0;
  for (;;) {
    while (i < n && isOws(v[i])) ++i;
    const size_t start = i;
    while (i < n && is(v[i], kTchar)) ++i;
    if (i == start) {
      return false;
    }
    const std::string_view coding = v.substr(start, i - start);
    while (i < n && isOws(v[i])) ++i;
    bool has_params = false;
    if (i < n && v[i] == ';') {
      has_params = true;
      i = skipCodingParameters(v, i);
      if (i == std::string_view::npos) {
        return false;
      }
    }
    if (i < n && v[i] != ',') {
      return false;
    }
    // chunked takes no parameters, so "chunked;x=y" is some other coding.
    const bool chunked = !has_params && isFieldName(coding, "chunked");
    tc.present = true;
    tc.final_chunked = chunked;
    tc.chunked_count += chunked ? 1 : 0;
    if (i == n) {
      return true;
    }
    ++i;
  }
}

struct ConnectionTokens {
  bool close = false;
  bool keep_alive = false;
  bool upgrade = false;
  bool names_other = false;  // lists a token that may name another header
};

void scanConnection(std::string_view v, ConnectionTokens& ct) {
  std::string_view element;
  bool more = true;
  while (nextListElement(v, element, more)) {
    if (element.empty()) {
      continue;
    }
    if (isFieldName(element, "close")) {
      ct.close = true;
    } else if (isFieldName(element, "keep-alive")) {
      ct.keep_alive = true;
    } else {
      ct.upgrade |= isFieldName(element, "upgrade");
      ct.names_other = true;
    }
  }
}

// Flags every header named by a Connection token as hop-by-hop (RFC 9110 §7.6.1). Host,
// Content-Length and Transfer-Encoding are exempt: "Connection: content-length" would otherwise
// make the codec strip the framing header and desynchronise the next hop.
void markConnectionNamed(HeaderField* headers, uint32_t count) {
  for (uint32_t c = 0; c < count; ++c) {
    if (classifyHeader(headers[c].name) != HeaderId::Connection) {
      continue;
    }
    std::string_view rest = headers[c].value;
    std::string_view token;
    bool more = true;
    while (nextListElement(rest, token, more)) {
      if (token.empty()) {
        continue;
      }
      for (uint32_t k = 0; k < count; ++k) {
        HeaderField& h = headers[k];
        if (h.name.size() != token.size() || !equalsIgnoreCase(h.name, token)) {
          continue;
        }
        const HeaderId id = classifyHeader(h.name);
        if (id != HeaderId::Host && id != HeaderId::ContentLength &&
            id != HeaderId::TransferEncoding) {
          h.flags |= HeaderField::kHopByHop;
        }
      }
    }
  }
}

uint16_t defaultPort(std::string_view scheme) {
  if (isFieldName(scheme, "http") || isFieldName(scheme, "ws")) return 80;
  if (isFieldName(scheme, "https") || isFieldName(scheme, "wss")) return 443;
  return 0;
}

// Returns nullptr on success, else the reason.
const char* splitAuthority(std::string_view a, std::string_view& host, uint16_t& port,
                           bool& has_port) {
  host = {};
  port = 0;
  has_port = false;
  if (a.empty()) {
    return "empty host";
  }
  if (a.find('@') != std::string_view::npos) {
    return "userinfo in authority";
  }
  std::string_view rest;
  if (a[0] == '[') {
    const size_t close = a.find(']');
    if (close == std::string_view::npos || close == 1) {
      return "invalid host";
    }
    host = a.substr(1, close - 1);
    bool colon = false;
    for (char c : host) {
      if (c == ':') {
        colon = true;
      } else if (!is(c, kHex) && c != '.') {
        return "invalid host";
      }
    }
    if (!colon) {
      return "invalid host";
    }
    rest = a.substr(close + 1);
  } else {
    size_t i = 0;
    while (i < a.size() && is(a[i], kHost)) {
      ++i;
    }
    host = a.substr(0, i);
    rest = a.substr(i);
    if (host.empty()) {
      return rest.empty() || rest[0] == ':' ? "empty host" : "invalid host";
    }
  }
  if (rest.empty()) {
    return nullptr;
  }
  if (rest[0] != ':') {
    return "invalid host";
  }
  const std::string_view digits = rest.substr(1);
  if (digits.empty() || digits.size() > 5) {
    return "invalid port";
  }
  uint32_t value = 0;
  for (char c : digits) {
    if (!is(c, kDigit)) {
      return "invalid port";
    }
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value == 0 || value > 65535) {
    return "invalid port";
  }
  port = static_cast<uint16_t>(value);
  has_port = true;
  return nullptr;
}

// The request line's method must be a token followed by SP. Checked on a line still arriving so
// that a peer speaking something else (a TLS ClientHello, binary junk) is refused at once.
ParseStatus checkPartialRequestLine(std::string_view rest, ParseError& err) {
  for (char c : rest) {
    if (is(c, kTchar)) {
      continue;
    }
    if (c == ' ' || c == '\r') {
      break;
    }
    return fail(err, 400, "invalid method");
  }
  return ParseStatus::Incomplete;
}

constexpr std::string_view kHttpName = "HTTP/";

ParseStatus checkPartialStatusLine(std::string_view rest, ParseError& err) {
  const size_t m = std::min(rest.size(), kHttpName.size());
  if (rest.substr(0, m) != kHttpName.substr(0, m)) {
    return fail(err, kBadGateway, "malformed status line");
  }
  return ParseStatus::Incomplete;
}

// "HTTP/1.0" / "HTTP/1.1" → 0 / 1; another HTTP/DIGIT.DIGIT → -2; anything else → -1.
int parseVersion(std::string_view v) {
  if (v.size() != 8 || v.substr(0, 5) != kHttpName || !is(v[5], kDigit) || v[6] != '.' ||
      !is(v[7], kDigit)) {
    return -1;
  }
  if (v[5] == '1' && (v[7] == '0' || v[7] == '1')) {
    return v[7] - '0';
  }
  return -2;
}

ParseStatus classifyTarget(RequestHead& out, ParseError& err) {
  const std::string_view t = out.target;
  bool has_port = false;
  if (out.method == Method::Connect) {
    const char* reason = splitAuthority(t, out.host, out.port, has_port);
    if (reason != nullptr) {
      return fail(err, 400, reason);
    }
    if (!has_port) {
      return fail(err, 400, "connect target without port");
    }
    out.form = TargetForm::Authority;
    return ParseStatus::Complete;
  }
  if (t[0] == '/') {
    out.form = TargetForm::Origin;
    out.path = t;
    return ParseStatus::Complete;
  }
  if (t == "*") {
    if (out.method != Method::Options) {
      return fail(err, 400, "asterisk-form only with options");
    }
    out.form = TargetForm::Asterisk;
    out.path = t;
    return ParseStatus::Complete;
  }
  size_t k = 0;
  if ((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z')) {
    while (k < t.size() && is(t[k], kScheme)) {
      ++k;
    }
  }
  if (k == 0 || t.substr(k, 3) != "://") {
    std::string_view h;
    uint16_t p;
    if (splitAuthority(t, h, p, has_port) == nullptr && has_port) {
      return fail(err, 400, "authority-form only with connect");
    }
    return fail(err, 400, "invalid request target");
  }
  out.scheme = t.substr(0, k);
  const std::string_view rest = t.substr(k + 3);
  // By hand: find_first_of searches its set once per byte of the authority.
  size_t authority_end = 0;
  while (authority_end < rest.size() && rest[authority_end] != '/' && rest[authority_end] != '?') {
    ++authority_end;
  }
  if (authority_end == rest.size()) {
    authority_end = std::string_view::npos;
  }
  const char* reason = splitAuthority(rest.substr(0, authority_end), out.host, out.port, has_port);
  if (reason != nullptr) {
    return fail(err, 400, reason);
  }
  if (!has_port) {
    out.port = defaultPort(out.scheme);
  }
  if (authority_end == std::string_view::npos) {
    out.path = "/";  // static storage, not the caller's buffer
  } else if (rest[authority_end] == '?') {
    // The origin-form would be "/?query", which cannot be made in place.
    return fail(err, 400, "absolute-form query without path");
  } else {
    out.path = rest.substr(authority_end);
  }
  out.form = TargetForm::Absolute;
  return ParseStatus::Complete;
}

// request-line = method SP request-target SP HTTP-version. The method is scanned first so that
// the result agrees with checkPartialRequestLine().
ParseStatus parseRequestLine(std::string_view line, RequestHead& out, ParseError& err) {
  const char* p = line.data();
  const size_t n = line.size();
  size_t i = 0;
  while (i < n && is(p[i], kTchar)) {
    ++i;
  }
  if (i < n && p[i] != ' ') {
    return fail(err, 400, "invalid method");
  }
  if (i == 0 || i == n) {
    return fail(err, 400, "malformed request line");
  }
  const size_t target_start = i + 1;
  size_t j = skipTargetText(p, target_start, n);
  while (j < n && is(p[j], kTarget)) {
    ++j;
  }
  if (j == n || j == target_start) {
    return fail(err, 400, "malformed request line");
  }
  if (p[j] != ' ') {
    return fail(err, 400, p[j] == '#' ? "fragment in request target" : "invalid request target");
  }
  const int version = parseVersion(line.substr(j + 1));
  if (version == -2) {
    return fail(err, 505, "unsupported http version");
  }
  if (version < 0) {
    return fail(err, 400, "malformed request line");
  }
  out.method_text = line.substr(0, i);
  out.method = methodFromText(out.method_text);
  out.target = line.substr(target_start, j - target_start);
  out.version_minor = static_cast<uint8_t>(version);
  return classifyTarget(out, err);
}

// status-line = HTTP-version SP 3DIGIT SP [ reason-phrase ]
ParseStatus parseStatusLine(std::string_view line, ResponseHead& out, ParseError& err) {
  if (line.substr(0, kHttpName.size()) != kHttpName || line.size() < 8) {
    return fail(err, kBadGateway, "malformed status line");
  }
  const int version = parseVersion(line.substr(0, 8));
  if (version == -2) {
    return fail(err, kBadGateway, "unsupported http version");
  }
  if (version < 0 || line.size() < 12 || line[8] != ' ') {
    return fail(err, kBadGateway, "malformed status line");
  }
  if (!is(line[9], kDigit) || !is(line[10], kDigit) || !is(line[11], kDigit) || line[9] == '0') {
    return fail(err, kBadGateway, "invalid status code");
  }
  out.version_minor = static_cast<uint8_t>(version);
  out.status =
      static_cast<uint16_t>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
  if (line.size() == 12) {
    return ParseStatus::Complete;  // no SP + reason: tolerated for old origins
  }
  if (line[12] != ' ') {
    return fail(err, kBadGateway, "malformed status line");
  }
  const std::string_view reason = line.substr(13);
  for (char c : reason) {
    if (!is(c, kValue)) {
      return fail(err, kBadGateway, "invalid reason phrase");
    }
  }
  out.reason = reason;
  return ParseStatus::Complete;
}

// The target's authority as written: host[:port].
std::string_view targetAuthority(const RequestHead& out) {
  if (out.form == TargetForm::Authority) {
    return out.target;
  }
  // The path is the target's tail, or a static "/" when the target has none.
  const std::string_view after_scheme = out.target.substr(out.scheme.size() + 3);
  const size_t authority_size =
      after_scheme.size() - std::min(after_scheme.size(), out.path.size());
  if (after_scheme.data() + authority_size == out.path.data()) {
    return after_scheme.substr(0, authority_size);
  }
  return after_scheme;
}

bool hostMatchesTarget(const RequestHead& out, std::string_view host_value) {
  if (host_value == targetAuthority(out)) {
    return true;  // what clients send: the target's own bytes, already checked
  }
  std::string_view host;
  uint16_t port = 0;
  bool has_port = false;
  if (splitAuthority(host_value, host, port, has_port) != nullptr ||
      !equalsIgnoreCase(host, out.host)) {
    return false;
  }
  if (out.form == TargetForm::Authority) {
    // CONNECT has no scheme to default the port from; a port-less Host names the same host.
    return !has_port || port == out.port;
  }
  return (has_port ? port : defaultPort(out.scheme)) == out.port;
}

// Facts gathered line by line that only decide something once the head is complete.
struct HeadFacts {
  TransferCodings te;
  ConnectionTokens connection;
  ConnectionTokens proxy_connection;
  bool has_content_length = false;
  bool has_upgrade = false;
};

// Field-line rules shared by requests and responses. Returns the status of the line's own checks.
ParseStatus processCommonHeader(HeaderId id, HeaderField& h, uint16_t status, HeadFacts& facts,
                                uint64_t& content_length, ParseError& err) {
  switch (id) {
    case HeaderId::ContentLength: {
      uint64_t value = 0;
      const ClResult r = parseContentLength(h.value, value);
      if (r == ClResult::Invalid) {
        return fail(err, status, "invalid content-length");
      }
      if (r == ClResult::Conflict || (facts.has_content_length && value != content_length)) {
        return fail(err, status, "conflicting content-length");
      }
      facts.has_content_length = true;
      content_length = value;
      break;
    }
    case HeaderId::TransferEncoding:
      if (!scanTransferEncoding(h.value, facts.te)) {
        return fail(err, status, "invalid transfer-encoding");
      }
      if (facts.te.chunked_count > 1) {
        return fail(err, status, "chunked applied twice");
      }
      break;
    case HeaderId::Connection:
      scanConnection(h.value, facts.connection);
      h.flags |= HeaderField::kHopByHop;
      break;
    case HeaderId::ProxyConnection:
      scanConnection(h.value, facts.proxy_connection);
      h.flags |= HeaderField::kHopByHop;
      break;
    case HeaderId::Upgrade:
      facts.has_upgrade = true;
      h.flags |= HeaderField::kHopByHop;
      break;
    case HeaderId::KeepAlive:
    case HeaderId::Te:
    case HeaderId::Trailer:
    case HeaderId::ProxyAuthorization:
    case HeaderId::ProxyAuthenticate:
      h.flags |= HeaderField::kHopByHop;
      break;
    case HeaderId::Host:
    case HeaderId::Expect:
    case HeaderId::Other:
      break;
  }
  return ParseStatus::Complete;
}

// Reads field lines up to the empty line. on_header runs for each one as it is parsed so that
// every error is reported in byte order, whatever prefix of the head is buffered.
template <class OnHeader>
ParseStatus parseFieldLines(LineReader& reader, uint32_t max_headers, uint16_t too_large,
                            uint16_t bad, HeaderFields& headers, ParseError& err,
                            OnHeader on_header) {
  const uint32_t cap = std::min(max_headers, kMaxHeaderCapacity);
  // Most heads have fewer: one allocation instead of a growth chain the first time.
  if (headers.capacity() == 0) headers.reserve(std::min<uint32_t>(cap, kInitialHeaderCapacity));
  std::string_view raw;
  std::string_view line;
  for (;;) {
    if (reader.takeEndOfHead()) {
      return ParseStatus::Complete;
    }
    const auto index = static_cast<int32_t>(headers.size());
    // Parsed straight into its place: the field's views are stored once, never copied.
    HeaderField* h = nullptr;
    if (headers.size() < cap) {
      h = &headers.emplace_back();
      if (!reader.takeFieldLine(h->name, h->value)) {
        headers.pop_back();
        h = nullptr;
      }
    }
    if (h == nullptr) {
      // The line by its LF, and the checks that say what is wrong with it, if anything.
      const LineReader::Result r = reader.next(raw);
      if (r == LineReader::Result::TooLarge) {
        return fail(err, too_large, "head too large");
      }
      if (r == LineReader::Result::Incomplete) {
        return ParseStatus::Incomplete;
      }
      const bool crlf = stripCr(raw, line);
      if (line.empty()) {
        return crlf ? ParseStatus::Complete : fail(err, bad, "bare lf");
      }
      if (headers.size() >= cap) {
        return fail(err, too_large, "too many headers");
      }
      h = &headers.emplace_back();
      const char* reason = parseFieldLine(line, h->name, h->value);
      if (reason != nullptr) {
        return fail(err, bad, reason);
      }
      if (!crlf) {
        return fail(err, bad, "bare lf");
      }
    }
    const ParseStatus s = on_header(classifyHeader(h->name), *h, index);
    if (s != ParseStatus::Complete) {
      return s;
    }
  }
}

void resetRequest(RequestHead& out) {
  // Field by field: the header vector keeps its capacity.
  out.method_text = {};
  out.method = Method::Other;
  out.target = {};
  out.form = TargetForm::Origin;
  out.version_minor = 1;
  out.scheme = {};
  out.host = {};
  out.port = 0;
  out.path = {};
  out.headers.clear();
  out.framing = BodyFraming::None;
  out.content_length = 0;
  out.keep_alive = true;
  out.expect_continue = false;
  out.upgrade = false;
  out.host_header = -1;
  out.proxy_authorization = -1;
  out.head_size = 0;
}

void resetResponse(ResponseHead& out) {
  out.version_minor = 1;
  out.status = 0;
  out.reason = {};
  out.headers.clear();
  out.framing = BodyFraming::None;
  out.content_length = 0;
  out.keep_alive = true;
  out.head_size = 0;
}

}  // namespace

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

int32_t findHeader(const HeaderField* headers, uint32_t count, std::string_view name) {
  for (uint32_t i = 0; i < count; ++i) {
    if ((headers[i].flags & HeaderField::kRemoved) == 0 &&
        equalsIgnoreCase(headers[i].name, name)) {
      return static_cast<int32_t>(i);
    }
  }
  return -1;
}

bool headerHasToken(std::string_view value, std::string_view token) {
  std::string_view element;
  bool more = true;
  while (nextListElement(value, element, more)) {
    if (equalsIgnoreCase(element, token)) {
      return true;
    }
  }
  return false;
}

bool parseAuthority(std::string_view authority, std::string_view& host, uint16_t& port,
                    bool& has_port) {
  return splitAuthority(authority, host, port, has_port) == nullptr;
}

ParseStatus parseRequestHead(std::string_view data, const ParseLimits& limits, RequestHead& out,
                             ParseError& err) {
  resetRequest(out);
  LineReader reader(data, limits.max_head_bytes);
  std::string_view raw;
  std::string_view line;
  bool crlf = false;
  // RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request line.
  for (uint32_t empty_lines = 0;;) {
    const LineReader::Result r = reader.next(raw);
    if (r != LineReader::Result::Line) {
      // The partial check goes first so that a prefix and the whole agree on the error.
      if (checkPartialRequestLine(reader.rest(), err) == ParseStatus::Error) {
        return ParseStatus::Error;
      }
      return r == LineReader::Result::TooLarge ? fail(err, 431, "head too large")
                                               : ParseStatus::Incomplete;
    }
    crlf = stripCr(raw, line);
    if (!line.empty()) {
      break;
    }
    if (!crlf) {
      return fail(err, 400, "bare lf");
    }
    if (++empty_lines > 2) {
      return fail(err, 400, "too many empty lines before request line");
    }
  }
  if (parseRequestLine(line, out, err) != ParseStatus::Complete) {
    return ParseStatus::Error;
  }
  if (!crlf) {
    return fail(err, 400, "bare lf");
  }

  HeadFacts facts;
  const ParseStatus s = parseFieldLines(
      reader, limits.max_headers, 431, 400, out.headers, err,
      [&](HeaderId id, HeaderField& h, int32_t index) {
        switch (id) {
          case HeaderId::Host:
            if (out.host_header >= 0) {
              return fail(err, 400, "multiple host headers");
            }
            out.host_header = index;
            if (out.form == TargetForm::Absolute || out.form == TargetForm::Authority) {
              if (!hostMatchesTarget(out, h.value)) {
                return fail(err, 400, "host header does not match target");
              }
            } else if (!h.value.empty()) {
              // An empty Host is valid for origin-form (RFC 9112 §3.2); a non-empty one must parse.
              std::string_view host;
              uint16_t port;
              bool has_port;
              if (splitAuthority(h.value, host, port, has_port) != nullptr) {
                return fail(err, 400, "invalid host header");
              }
            }
            return ParseStatus::Complete;
          case HeaderId::TransferEncoding:
            if (out.version_minor == 0) {
              return fail(err, 400, "transfer-encoding in http/1.0");
            }
            break;
          case HeaderId::ProxyAuthorization:
            if (out.proxy_authorization < 0) {
              out.proxy_authorization = index;
            }
            break;
          case HeaderId::Expect:
            out.expect_continue |= headerHasToken(h.value, "100-continue");
            return ParseStatus::Complete;
          default:
            break;
        }
        return processCommonHeader(id, h, 400, facts, out.content_length, err);
      });
  if (s != ParseStatus::Complete) {
    return s;
  }
  out.head_size = static_cast<uint32_t>(reader.pos());

  if (out.version_minor == 1 && out.host_header < 0) {
    return fail(err, 400, "missing host header");
  }
  if (facts.te.present) {
    if (facts.has_content_length) {
      return fail(err, 400, "content-length with transfer-encoding");
    }
    if (!facts.te.final_chunked) {
      return fail(err, 501, "unsupported transfer-encoding");
    }
    out.framing = BodyFraming::Chunked;
  } else if (facts.has_content_length) {
    out.framing = BodyFraming::ContentLength;
  }
  const bool close = facts.connection.close || facts.proxy_connection.close;
  const bool keep_alive = facts.connection.keep_alive || facts.proxy_connection.keep_alive;
  out.keep_alive = !close && (out.version_minor == 1 || keep_alive);
  out.upgrade = facts.connection.upgrade && facts.has_upgrade;
  if (facts.connection.names_other) {
    markConnectionNamed(out.headers.data(), static_cast<uint32_t>(out.headers.size()));
  }
  return ParseStatus::Complete;
}

ParseStatus parseResponseHead(std::string_view data, const ParseLimits& limits,
                              Method request_method, ResponseHead& out, ParseError& err) {
  resetResponse(out);
  LineReader reader(data, limits.max_head_bytes);
  std::string_view raw;
  std::string_view line;
  const LineReader::Result r = reader.next(raw);
  if (r != LineReader::Result::Line) {
    if (checkPartialStatusLine(reader.rest(), err) == ParseStatus::Error) {
      return ParseStatus::Error;
    }
    return r == LineReader::Result::TooLarge ? fail(err, kBadGateway, "head too large")
                                             : ParseStatus::Incomplete;
  }
  const bool crlf = stripCr(raw, line);
  if (parseStatusLine(line, out, err) != ParseStatus::Complete) {
    return ParseStatus::Error;
  }
  if (!crlf) {
    return fail(err, kBadGateway, "bare lf");
  }

  HeadFacts facts;
  const ParseStatus s = parseFieldLines(
      reader, limits.max_headers, kBadGateway, kBadGateway, out.headers, err,
      [&](HeaderId id, HeaderField& h, int32_t) {
        return processCommonHeader(id, h, kBadGateway, facts, out.content_length, err);
      });
  if (s != ParseStatus::Complete) {
    return s;
  }
  out.head_size = static_cast<uint32_t>(reader.pos());

  if (facts.te.present && facts.has_content_length) {
    // RFC 9112 §6.3 lets TE win, but a proxy relaying such a response invites desync.
    return fail(err, kBadGateway, "content-length with transfer-encoding");
  }
  // RFC 9112 §6.3, in order.
  const uint16_t st = out.status;
  if (request_method == Method::Head || st < 200 || st == 204 || st == 304 ||
      (request_method == Method::Connect && st < 300)) {
    out.framing = BodyFraming::None;
  } else if (facts.te.present) {
    // RFC 9112 6.3 would read such a body until the close; a client or cache behind sluice may
    // read it otherwise (decode the codings, or not), so it is not relayed at all.
    if (!facts.te.final_chunked) {
      return fail(err, kBadGateway, "transfer-encoding does not end in chunked");
    }
    out.framing = BodyFraming::Chunked;
  } else if (facts.has_content_length) {
    out.framing = BodyFraming::ContentLength;
  } else {
    out.framing = BodyFraming::UntilClose;
  }
  const bool close = facts.connection.close;
  out.keep_alive = !close && (out.version_minor == 1 || facts.connection.keep_alive);
  // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing; close after.
  if (out.framing == BodyFraming::UntilClose || (facts.te.present && out.version_minor == 0)) {
    out.keep_alive = false;
  }
  if (facts.connection.names_other) {
    markConnectionNamed(out.headers.data(), static_cast<uint32_t>(out.headers.size()));
  }
  return ParseStatus::Complete;
}

}  // namespace sluice::http1
