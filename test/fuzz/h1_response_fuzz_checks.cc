#include "test/fuzz/h1_response_fuzz_checks.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"

#define FUZZ_CHECK(COND)                                                                  \
  do {                                                                                    \
    if (!(COND)) {                                                                        \
      std::fprintf(stderr, "invariant failed: %s at %s:%d\n", #COND, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)

namespace sluice::http1::fuzz {
namespace {

// The codec skips at most this many interim heads per input here (each is >= 4 bytes anyway).
constexpr int kMaxInterim = 64;

bool within(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

bool isFraming(std::string_view name) {
  return equalsIgnoreCase(name, "content-length") || equalsIgnoreCase(name, "transfer-encoding");
}

void checkHead(const ResponseHead& head, std::string_view in, const ParseLimits& limits,
               Method method) {
  FUZZ_CHECK(head.head_size >= 4 && head.head_size <= in.size());
  FUZZ_CHECK(head.head_size <= limits.max_head_bytes);
  FUZZ_CHECK(in.substr(head.head_size - 4, 4) == "\r\n\r\n");
  FUZZ_CHECK(head.status >= 100 && head.status <= 999);
  FUZZ_CHECK(head.version_minor <= 1);
  FUZZ_CHECK(within(head.reason, in));
  FUZZ_CHECK(head.headers.size() <= std::min(limits.max_headers, kMaxHeaderCapacity));
  for (uint32_t i = 0; i < head.headers.size(); ++i) {
    const HeaderField& h = head.headers[i];
    FUZZ_CHECK(!h.name.empty() && within(h.name, in) && within(h.value, in));
    for (char c : h.name) FUZZ_CHECK(detail::is(c, detail::kTchar));
    for (char c : h.value) FUZZ_CHECK(detail::is(c, detail::kValue));
    if (!h.value.empty()) {
      FUZZ_CHECK(h.value.front() != ' ' && h.value.front() != '\t');
      FUZZ_CHECK(h.value.back() != ' ' && h.value.back() != '\t');
    }
    // A framing header is never dropped as hop-by-hop: the next hop must frame as we did.
    if (isFraming(h.name)) FUZZ_CHECK((h.flags & HeaderField::kHopByHop) == 0);
  }
  const int32_t te = findHeader(head.headers.data(), head.headers.size(), "transfer-encoding");
  const int32_t cl = findHeader(head.headers.data(), head.headers.size(), "content-length");
  FUZZ_CHECK(te < 0 || cl < 0);  // both is a 502, never a framing choice
  const bool no_body = method == Method::Head || head.status < 200 || head.status == 204 ||
                       head.status == 304 || (method == Method::Connect && head.status < 300);
  if (no_body) {
    FUZZ_CHECK(head.framing == BodyFraming::None);
  } else if (te >= 0) {
    FUZZ_CHECK(head.framing == BodyFraming::Chunked || head.framing == BodyFraming::UntilClose);
  } else if (cl >= 0) {
    FUZZ_CHECK(head.framing == BodyFraming::ContentLength);
  } else {
    FUZZ_CHECK(head.framing == BodyFraming::UntilClose);
  }
  if (head.framing == BodyFraming::UntilClose) FUZZ_CHECK(!head.keep_alive);
  if (cl >= 0) {
    // The length is the first list element, digits only.
    std::string_view v = head.headers[cl].value;
    v = v.substr(0, v.find(','));
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    uint64_t value = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), value);
    FUZZ_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size());
    FUZZ_CHECK(value == head.content_length);
  }
}

// Writes the head as the codec forwards it (status line, end-to-end fields, one canonical
// Content-Length) and parses it again: the next hop must see the same message.
void checkReserialized(const ResponseHead& head, Method method) {
  std::string out = "HTTP/1.1 ";
  // The codec's status line: three digits, whatever the reason phrase.
  out += static_cast<char>('0' + head.status / 100 % 10);
  out += static_cast<char>('0' + head.status / 10 % 10);
  out += static_cast<char>('0' + head.status % 10);
  out += ' ';
  out.append(head.reason);
  out += "\r\n";
  uint32_t forwarded = 0;
  bool length_sent = false;
  for (uint32_t i = 0; i < head.headers.size(); ++i) {
    const HeaderField& h = head.headers[i];
    if ((h.flags & HeaderField::kHopByHop) != 0) continue;
    std::string value(h.value);
    if (equalsIgnoreCase(h.name, "content-length")) {
      if (length_sent) continue;
      length_sent = true;
      value = std::to_string(head.content_length);
    }
    out.append(h.name);
    out += ": ";
    out += value;
    out += "\r\n";
    ++forwarded;
  }
  out += "\r\n";

  ParseLimits roomy;
  roomy.max_head_bytes = static_cast<uint32_t>(out.size()) + 1;
  roomy.max_headers = kMaxHeaderCapacity;
  static ResponseHead again;
  ParseError err;
  const ParseStatus s = parseResponseHead(out, roomy, method, again, err);
  if (s != ParseStatus::Complete) {
    std::fprintf(stderr, "forwarded head does not parse (%s): %s\n", err.reason, out.c_str());
  }
  FUZZ_CHECK(s == ParseStatus::Complete);
  FUZZ_CHECK(again.head_size == out.size());
  FUZZ_CHECK(again.status == head.status);
  FUZZ_CHECK(again.reason == head.reason);
  FUZZ_CHECK(again.content_length == head.content_length);
  FUZZ_CHECK(again.headers.size() == forwarded);
  // The version moves to 1.1, which changes only the keep-alive default, never the framing.
  FUZZ_CHECK(again.framing == head.framing);
}

struct BodyOutcome {
  ChunkedDecoder::Status status;
  size_t consumed;
  uint64_t payload;
  const char* error;
};

BodyOutcome decode(ChunkedDecoder& decoder, std::string_view in, size_t piece) {
  BodyOutcome out{ChunkedDecoder::Status::NeedMore, 0, 0, ""};
  size_t pos = 0;
  do {
    const size_t len = std::min(piece, in.size() - pos);
    size_t consumed = 0;
    out.status = decoder.consume(in.substr(pos, len), consumed);
    FUZZ_CHECK(consumed <= len);
    if (out.status == ChunkedDecoder::Status::NeedMore) FUZZ_CHECK(consumed == len);
    out.consumed += consumed;
    pos += len;
  } while (out.status == ChunkedDecoder::Status::NeedMore && pos < in.size());
  out.payload = decoder.payloadBytes();
  out.error = decoder.error();
  // Once finished, a decoder consumes nothing more until reset().
  if (out.status != ChunkedDecoder::Status::NeedMore) {
    size_t more = 0;
    FUZZ_CHECK(decoder.consume("0\r\n\r\n", more) == out.status && more == 0);
  }
  return out;
}

void checkSame(const BodyOutcome& a, const BodyOutcome& b) {
  FUZZ_CHECK(a.status == b.status);
  FUZZ_CHECK(a.consumed == b.consumed);
  FUZZ_CHECK(a.payload == b.payload);
  FUZZ_CHECK(std::strcmp(a.error, b.error) == 0);
}

void checkChunkedBody(std::string_view body, ChunkedDecoder::Limits limits, size_t piece) {
  ChunkedDecoder whole_decoder(limits);
  const BodyOutcome whole = decode(whole_decoder, body, body.size() + 1);
  FUZZ_CHECK(whole.payload <= whole.consumed && whole.consumed <= body.size());
  if (whole.status == ChunkedDecoder::Status::Done) {
    FUZZ_CHECK(whole.consumed >= 5 && body.substr(whole.consumed - 2, 2) == "\r\n");
  }
  if (whole.status == ChunkedDecoder::Status::Error) FUZZ_CHECK(whole.error[0] != '\0');

  // The codec feeds whatever each read returned: any split must frame the body the same.
  ChunkedDecoder split_decoder(limits);
  checkSame(decode(split_decoder, body, piece), whole);
  // Decoders are reused across responses: reset() must forget everything.
  split_decoder.reset();
  checkSame(decode(split_decoder, body, body.size() + 1), whole);
}

}  // namespace

void checkResponseStream(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t selector = data[0];
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr Method kMethods[] = {Method::Get, Method::Head, Method::Connect, Method::Post};
  const Method method = kMethods[selector & 3];
  ParseLimits limits;
  limits.max_headers = kMaxHeaderCapacity;  // what the codec uses for responses
  if ((selector & 4) != 0) {
    limits.max_head_bytes = 128;
    limits.max_headers = 4;
  }
  ChunkedDecoder::Limits chunk_limits;
  if ((selector & 8) != 0) {
    chunk_limits.max_chunk_line = 16;
    chunk_limits.max_trailer_bytes = 32;
  }
  const size_t piece = static_cast<size_t>(selector >> 4) + 1;

  static ResponseHead head;
  std::string_view rest = in;
  for (int interim = 0;; ++interim) {
    ParseError err;
    const ParseStatus s = parseResponseHead(rest, limits, method, head, err);
    if (s == ParseStatus::Incomplete) {
      FUZZ_CHECK(rest.size() <= limits.max_head_bytes);
      return;
    }
    if (s == ParseStatus::Error) {
      FUZZ_CHECK(err.status == 502 && err.reason != nullptr && err.reason[0] != '\0');
      return;
    }
    checkHead(head, rest, limits, method);
    checkReserialized(head, method);
    rest.remove_prefix(head.head_size);
    // The codec forwards interim heads and reads on; 101 it refuses.
    if (head.status >= 200 || head.status == 101 || interim == kMaxInterim) break;
  }
  if (head.framing == BodyFraming::Chunked) {
    checkChunkedBody(rest, chunk_limits, piece);
  }
}

}  // namespace sluice::http1::fuzz
