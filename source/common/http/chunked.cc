#include "source/common/http/chunked.h"

#include <algorithm>

#include "source/common/http/h1_parser.h"

namespace sluice::http1 {
namespace {

using detail::is;
using detail::kHex;
using detail::kQdtext;
using detail::kTchar;
using detail::kValue;

inline bool isWs(char c) { return c == ' ' || c == '\t'; }

inline uint8_t hexValue(char c) {
  if (c <= '9') return static_cast<uint8_t>(c - '0');
  return static_cast<uint8_t>((c | 0x20) - 'a' + 10);
}

}  // namespace

ChunkedDecoder::ChunkedDecoder(Limits limits) : limits_(limits) {}

void ChunkedDecoder::reset() {
  state_ = State::Size;
  size_digits_ = 0;
  chunk_size_ = 0;
  payload_bytes_ = 0;
  line_bytes_ = 0;
  trailer_bytes_ = 0;
  error_ = "";
}

ChunkedDecoder::Status ChunkedDecoder::fail(const char* reason) {
  state_ = State::Error;
  error_ = reason;
  return Status::Error;
}

ChunkedDecoder::Status ChunkedDecoder::consume(std::string_view data, size_t& consumed) {
  consumed = 0;
  if (state_ == State::Done) {
    return Status::Done;
  }
  if (state_ == State::Error) {
    return Status::Error;
  }
  const char* p = data.data();
  const size_t n = data.size();
  size_t i = 0;
  while (i < n) {
    if (state_ == State::Data) {
      // The only bulk step: chunk data is skipped, never looked at.
      const uint64_t take = std::min<uint64_t>(chunk_size_, n - i);
      i += take;
      chunk_size_ -= take;
      payload_bytes_ += take;
      if (chunk_size_ == 0) {
        state_ = State::DataCr;
      }
      continue;
    }
    const char c = p[i];
    consumed = i;  // reported on error: the bytes before the offending one
    if (state_ <= State::SizeLf) {
      if (++line_bytes_ > limits_.max_chunk_line) {
        return fail("chunk line too long");
      }
    } else if (state_ >= State::TrailerLineStart) {
      if (++trailer_bytes_ > limits_.max_trailer_bytes) {
        return fail("trailer section too large");
      }
    }
    switch (state_) {
      case State::Size:
        if (is(c, kHex)) {
          if (size_digits_ == 16) {
            return fail("chunk size too large");
          }
          chunk_size_ = (chunk_size_ << 4) | hexValue(c);
          ++size_digits_;
        } else if (size_digits_ == 0) {
          return fail("invalid chunk size");
        } else if (c == ';') {
          state_ = State::ExtStart;
        } else if (c == '\r') {
          state_ = State::SizeLf;
        } else if (isWs(c)) {
          state_ = State::SizeWs;
        } else {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid chunk size");
        }
        break;
      case State::SizeWs:
        // Whitespace is only allowed when an extension follows: no trailing space before CRLF.
        if (c == ';') {
          state_ = State::ExtStart;
        } else if (!isWs(c)) {
          return fail("invalid chunk extension");
        }
        break;
      case State::ExtStart:
        if (is(c, kTchar)) {
          state_ = State::ExtName;
        } else if (!isWs(c)) {
          return fail("invalid chunk extension");
        }
        break;
      case State::ExtName:
        if (is(c, kTchar)) {
          break;
        }
        if (c == '=') {
          state_ = State::ExtValueStart;
        } else if (c == ';') {
          state_ = State::ExtStart;
        } else if (c == '\r') {
          state_ = State::SizeLf;
        } else if (isWs(c)) {
          state_ = State::ExtNameWs;
        } else {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid chunk extension");
        }
        break;
      case State::ExtNameWs:
        if (c == '=') {
          state_ = State::ExtValueStart;
        } else if (c == ';') {
          state_ = State::ExtStart;
        } else if (!isWs(c)) {
          return fail("invalid chunk extension");
        }
        break;
      case State::ExtValueStart:
        if (c == '"') {
          state_ = State::ExtQuoted;
        } else if (is(c, kTchar)) {
          state_ = State::ExtToken;
        } else if (!isWs(c)) {
          return fail("invalid chunk extension");
        }
        break;
      case State::ExtToken:
        if (is(c, kTchar)) {
          break;
        }
        if (c == ';') {
          state_ = State::ExtStart;
        } else if (c == '\r') {
          state_ = State::SizeLf;
        } else if (isWs(c)) {
          state_ = State::SizeWs;
        } else {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid chunk extension");
        }
        break;
      case State::ExtQuoted:
        if (c == '"') {
          state_ = State::ExtAfterQuote;
        } else if (c == '\\') {
          state_ = State::ExtQuotedPair;
        } else if (!is(c, kQdtext)) {
          return fail("invalid chunk extension");
        }
        break;
      case State::ExtQuotedPair:
        if (!is(c, kValue)) {
          return fail("invalid chunk extension");
        }
        state_ = State::ExtQuoted;
        break;
      case State::ExtAfterQuote:
        if (c == ';') {
          state_ = State::ExtStart;
        } else if (c == '\r') {
          state_ = State::SizeLf;
        } else if (isWs(c)) {
          state_ = State::SizeWs;
        } else {
          return fail("invalid chunk extension");
        }
        break;
      case State::SizeLf:
        if (c != '\n') {
          return fail("bare cr in chunked body");
        }
        if (chunk_size_ == 0) {
          state_ = State::TrailerLineStart;
        } else {
          state_ = State::Data;
        }
        break;
      case State::DataCr:
        if (c != '\r') {
          return fail("missing crlf after chunk data");
        }
        state_ = State::DataLf;
        break;
      case State::DataLf:
        if (c != '\n') {
          return fail("missing crlf after chunk data");
        }
        state_ = State::Size;
        size_digits_ = 0;
        line_bytes_ = 0;
        break;
      case State::TrailerLineStart:
        if (c == '\r') {
          state_ = State::FinalLf;
        } else if (is(c, kTchar)) {
          state_ = State::TrailerName;
        } else if (isWs(c)) {
          return fail("obs-fold in trailer");
        } else {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid trailer field");
        }
        break;
      case State::TrailerName:
        if (c == ':') {
          state_ = State::TrailerValue;
        } else if (isWs(c)) {
          return fail("whitespace before colon in trailer");
        } else if (!is(c, kTchar)) {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid trailer field");
        }
        break;
      case State::TrailerValue:
        if (c == '\r') {
          state_ = State::TrailerLf;
        } else if (!is(c, kValue)) {
          return fail(c == '\n' ? "bare lf in chunked body" : "invalid trailer field");
        }
        break;
      case State::TrailerLf:
      case State::FinalLf:
        if (c != '\n') {
          return fail("bare cr in chunked body");
        }
        if (state_ == State::FinalLf) {
          state_ = State::Done;
          consumed = i + 1;
          return Status::Done;
        }
        state_ = State::TrailerLineStart;
        break;
      case State::Data:
      case State::Done:
      case State::Error:
        break;  // handled above the switch
    }
    ++i;
  }
  consumed = n;
  return Status::NeedMore;
}

}  // namespace sluice::http1
