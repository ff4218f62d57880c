#include "test/fuzz/h1_parser_fuzz_checks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

bool within(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

bool sameError(const ParseError& a, const ParseError& b) {
  return a.status == b.status && std::strcmp(a.reason, b.reason) == 0;
}

void checkHeaders(const HeaderField* headers, uint32_t count, std::string_view in) {
  for (uint32_t i = 0; i < count; ++i) {
    const HeaderField& h = headers[i];
    FUZZ_CHECK(!h.name.empty());
    FUZZ_CHECK(within(h.name, in));
    FUZZ_CHECK(within(h.value, in));
    FUZZ_CHECK((h.flags & HeaderField::kRemoved) == 0);
    for (char c : h.name) {
      FUZZ_CHECK(detail::is(c, detail::kTchar));
    }
    for (char c : h.value) {
      FUZZ_CHECK(detail::is(c, detail::kValue));
    }
    if (!h.value.empty()) {
      FUZZ_CHECK(h.value.front() != ' ' && h.value.front() != '\t');
      FUZZ_CHECK(h.value.back() != ' ' && h.value.back() != '\t');
    }
    if (equalsIgnoreCase(h.name, "content-length") ||
        equalsIgnoreCase(h.name, "transfer-encoding") || equalsIgnoreCase(h.name, "host")) {
      FUZZ_CHECK((h.flags & HeaderField::kHopByHop) == 0);
    }
    if (equalsIgnoreCase(h.name, "connection") || equalsIgnoreCase(h.name, "upgrade")) {
      FUZZ_CHECK((h.flags & HeaderField::kHopByHop) != 0);
    }
  }
}

// The result for a prefix of `in` must be Incomplete, or exactly the result for `in`.
template <class Parse>
void checkPrefix(std::string_view in, size_t k, ParseStatus whole, const ParseError& whole_err,
                 uint32_t whole_head_size, Parse parse) {
  ParseError err;
  uint32_t head_size = 0;
  const ParseStatus s = parse(in.substr(0, k), err, head_size);
  if (whole == ParseStatus::Complete) {
    if (k < whole_head_size) {
      FUZZ_CHECK(s == ParseStatus::Incomplete);
    } else {
      FUZZ_CHECK(s == ParseStatus::Complete);
      FUZZ_CHECK(head_size == whole_head_size);
    }
  } else if (whole == ParseStatus::Incomplete) {
    FUZZ_CHECK(s == ParseStatus::Incomplete);
  } else {
    FUZZ_CHECK(s == ParseStatus::Incomplete ||
               (s == ParseStatus::Error && sameError(err, whole_err)));
  }
}

template <class Parse>
void checkPrefixes(std::string_view in, ParseStatus whole, const ParseError& whole_err,
                   uint32_t whole_head_size, Parse parse) {
  const size_t n = in.size();
  for (size_t k : {n / 2, n > 0 ? n - 1 : 0, static_cast<size_t>(whole_head_size) - 1,
                   static_cast<size_t>(whole_head_size)}) {
    if (k <= n) {
      checkPrefix(in, k, whole, whole_err, whole_head_size, parse);
    }
  }
}

void checkRequest(std::string_view in, const ParseLimits& limits) {
  static RequestHead head;
  const auto parse = [&](std::string_view d, ParseError& e, uint32_t& size) {
    const ParseStatus s = parseRequestHead(d, limits, head, e);
    size = head.head_size;
    return s;
  };
  ParseError err;
  uint32_t head_size = 0;
  const ParseStatus s = parse(in, err, head_size);
  if (s == ParseStatus::Complete) {
    FUZZ_CHECK(head.head_size >= 4 && head.head_size <= in.size());
    FUZZ_CHECK(head.head_size <= limits.max_head_bytes);
    FUZZ_CHECK(in.substr(head.head_size - 4, 4) == "\r\n\r\n");
    FUZZ_CHECK(head.headers.size() <= std::min(limits.max_headers, kMaxHeaderCapacity));
    FUZZ_CHECK(!head.method_text.empty() && within(head.method_text, in));
    FUZZ_CHECK(!head.target.empty() && within(head.target, in));
    FUZZ_CHECK(within(head.scheme, in) && within(head.host, in));
    FUZZ_CHECK(within(head.path, in) || head.path == "/");
    FUZZ_CHECK(head.version_minor <= 1);
    FUZZ_CHECK(head.framing != BodyFraming::UntilClose);
    FUZZ_CHECK((head.method == Method::Connect) == (head.form == TargetForm::Authority));
    if (head.form == TargetForm::Authority) {
      FUZZ_CHECK(head.port != 0 && !head.host.empty() && head.path.empty());
    }
    if (head.form == TargetForm::Asterisk) {
      FUZZ_CHECK(head.method == Method::Options);
    }
    if (head.form == TargetForm::Absolute) {
      FUZZ_CHECK(!head.scheme.empty() && !head.host.empty() && head.path[0] == '/');
    }
    if (head.form == TargetForm::Origin) {
      FUZZ_CHECK(head.path == head.target && head.target[0] == '/');
    }
    if (head.version_minor == 1) {
      FUZZ_CHECK(head.host_header >= 0);
    }
    if (head.host_header >= 0) {
      FUZZ_CHECK(static_cast<uint32_t>(head.host_header) < head.headers.size());
      FUZZ_CHECK(equalsIgnoreCase(head.headers[head.host_header].name, "host"));
    }
    if (head.proxy_authorization >= 0) {
      FUZZ_CHECK(static_cast<uint32_t>(head.proxy_authorization) < head.headers.size());
    }
    checkHeaders(head.headers.data(), head.headers.size(), in);
    const int32_t te = findHeader(head.headers.data(), head.headers.size(), "transfer-encoding");
    const int32_t cl = findHeader(head.headers.data(), head.headers.size(), "content-length");
    FUZZ_CHECK(te < 0 || cl < 0);
    FUZZ_CHECK((te >= 0) == (head.framing == BodyFraming::Chunked));
    FUZZ_CHECK((cl >= 0) == (head.framing == BodyFraming::ContentLength));
  } else if (s == ParseStatus::Error) {
    FUZZ_CHECK(err.status == 400 || err.status == 431 || err.status == 501 || err.status == 505);
    FUZZ_CHECK(err.reason != nullptr && err.reason[0] != '\0');
  } else {
    FUZZ_CHECK(in.size() <= limits.max_head_bytes);
  }
  // Determinism, then consistency of prefixes (the head's own spans are reused by the calls).
  ParseError again_err;
  uint32_t again_size = 0;
  FUZZ_CHECK(parse(in, again_err, again_size) == s && again_size == head_size);
  checkPrefixes(in, s, err, head_size, parse);
}

void checkResponse(std::string_view in, const ParseLimits& limits, Method method) {
  static ResponseHead head;
  const auto parse = [&](std::string_view d, ParseError& e, uint32_t& size) {
    const ParseStatus s = parseResponseHead(d, limits, method, head, e);
    size = head.head_size;
    return s;
  };
  ParseError err;
  uint32_t head_size = 0;
  const ParseStatus s = parse(in, err, head_size);
  if (s == ParseStatus::Complete) {
    FUZZ_CHECK(head.head_size >= 4 && head.head_size <= in.size());
    FUZZ_CHECK(in.substr(head.head_size - 4, 4) == "\r\n\r\n");
    FUZZ_CHECK(head.status >= 100 && head.status <= 999);
    FUZZ_CHECK(within(head.reason, in));
    FUZZ_CHECK(head.headers.size() <= std::min(limits.max_headers, kMaxHeaderCapacity));
    checkHeaders(head.headers.data(), head.headers.size(), in);
    if (method == Method::Head || head.status < 200 || head.status == 204 || head.status == 304) {
      FUZZ_CHECK(head.framing == BodyFraming::None);
    }
    if (head.framing == BodyFraming::UntilClose) {
      FUZZ_CHECK(!head.keep_alive);
    }
  } else if (s == ParseStatus::Error) {
    FUZZ_CHECK(err.status == 502);
    FUZZ_CHECK(err.reason != nullptr && err.reason[0] != '\0');
  }
  ParseError again_err;
  uint32_t again_size = 0;
  FUZZ_CHECK(parse(in, again_err, again_size) == s && again_size == head_size);
  checkPrefixes(in, s, err, head_size, parse);
}

struct ChunkedOutcome {
  ChunkedDecoder::Status status;
  size_t consumed;
  uint64_t payload;
  const char* error;
};

// Feeds `in` in pieces of at most `piece` bytes (0: all at once).
ChunkedOutcome runChunked(std::string_view in, size_t piece, ChunkedDecoder::Limits limits) {
  ChunkedDecoder decoder(limits);
  ChunkedOutcome out{ChunkedDecoder::Status::NeedMore, 0, 0, ""};
  size_t pos = 0;
  do {
    const size_t len = piece == 0 ? in.size() : std::min(piece, in.size() - pos);
    size_t consumed = 0;
    out.status = decoder.consume(in.substr(pos, len), consumed);
    FUZZ_CHECK(consumed <= len);
    if (out.status == ChunkedDecoder::Status::NeedMore) {
      FUZZ_CHECK(consumed == len);
    }
    out.consumed += consumed;
    pos += len;
  } while (out.status == ChunkedDecoder::Status::NeedMore && pos < in.size());
  out.payload = decoder.payloadBytes();
  out.error = decoder.error();
  return out;
}

void checkChunked(std::string_view in, ChunkedDecoder::Limits limits) {
  const ChunkedOutcome whole = runChunked(in, 0, limits);
  FUZZ_CHECK(whole.payload <= whole.consumed);
  if (whole.status == ChunkedDecoder::Status::Done) {
    FUZZ_CHECK(whole.consumed >= 5 && in.substr(whole.consumed - 2, 2) == "\r\n");
  }
  if (whole.status == ChunkedDecoder::Status::Error) {
    FUZZ_CHECK(whole.error[0] != '\0');
  }
  const size_t pieces[] = {1, 2, 3, 7, in.size() / 2 + 1};
  for (size_t piece : pieces) {
    if (piece == 1 && in.size() > 4096) {
      continue;
    }
    const ChunkedOutcome split = runChunked(in, piece, limits);
    FUZZ_CHECK(split.status == whole.status);
    FUZZ_CHECK(split.consumed == whole.consumed);
    FUZZ_CHECK(split.payload == whole.payload);
    FUZZ_CHECK(std::strcmp(split.error, whole.error) == 0);
  }
}

}  // namespace

void checkOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const ParseLimits defaults;
  ParseLimits tight;
  tight.max_head_bytes = 96;
  tight.max_headers = 3;
  checkRequest(in, defaults);
  checkRequest(in, tight);
  for (Method m : {Method::Get, Method::Head, Method::Connect}) {
    checkResponse(in, defaults, m);
  }
  checkResponse(in, tight, Method::Get);

  ChunkedDecoder::Limits chunk_tight;
  chunk_tight.max_chunk_line = 16;
  chunk_tight.max_trailer_bytes = 32;
  checkChunked(in, {});
  checkChunked(in, chunk_tight);

  // A request with a chunked body: the body decoder picks up where the head ends.
  static RequestHead head;
  ParseError err;
  if (parseRequestHead(in, defaults, head, err) == ParseStatus::Complete &&
      head.framing == BodyFraming::Chunked) {
    checkChunked(in.substr(head.head_size), {});
  }
}

}  // namespace sluice::http1::fuzz
