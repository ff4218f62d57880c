#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::http1 {

// Declared outside ChunkedDecoder so that `Limits limits = {}` can be a default argument (a
// nested struct's member initializers are not usable until the enclosing class is complete).
struct ChunkedDecoderLimits {
  uint32_t max_chunk_line = 4096;      // bytes of one chunk-size line, extensions and CRLF included
  uint32_t max_trailer_bytes = 65536;  // bytes of the trailer section, final CRLF included
};

// Follows a chunked body (RFC 9112 §7.1) as it streams by, unmodified, to find where it ends.
// Validates the framing strictly: chunk-size = 1*16 HEXDIG (no overflow, no sign, no leading or
// trailing space), chunk extensions `;name[=token|quoted-string]` with BWS allowed around ';'
// and '=', CRLF only, the CRLF after each chunk's data, the trailer section (field lines with the
// head's syntax rules) and the final CRLF. A byte-at-a-time state machine: it keeps no buffer,
// so data may be split anywhere across calls.
class ChunkedDecoder {
 public:
  enum class Status : uint8_t { NeedMore, Done, Error };
  using Limits = ChunkedDecoderLimits;

  explicit ChunkedDecoder(Limits limits = {});

  // Consumes a prefix of data. consumed = number of bytes that belong to the body (== data.size()
  // while NeedMore; <= when Done, the rest belongs to the next message; on Error, the bytes before
  // the offending one). After Done or Error, further calls consume nothing until reset().
  Status consume(std::string_view data, size_t& consumed);
  void reset();
  uint64_t payloadBytes() const { return payload_bytes_; }  // chunk data bytes (without framing)
  const char* error() const { return error_; }              // static reason after Error

 private:
  // Size-line states come first so that one compare tells whether a byte counts against
  // max_chunk_line.
  enum class State : uint8_t {
    Size,           // 1*16 HEXDIG
    SizeWs,         // BWS after the size or a value, before ';'
    ExtStart,       // after ';': BWS then the extension name
    ExtName,        // in the extension name
    ExtNameWs,      // BWS after the name: '=' or ';' must follow
    ExtValueStart,  // after '=': BWS then token or quoted-string
    ExtToken,       // in a token value
    ExtQuoted,      // in a quoted-string
    ExtQuotedPair,  // after '\' in a quoted-string
    ExtAfterQuote,  // right after the closing quote
    SizeLf,         // CR seen, LF must follow
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    FinalLf,
    Done,
    Error,
  };

  Status fail(const char* reason);

  Limits limits_;
  State state_ = State::Size;
  uint8_t size_digits_ = 0;
  uint64_t chunk_size_ = 0;  // size being parsed, then the data bytes left of the current chunk
  uint64_t payload_bytes_ = 0;
  uint32_t line_bytes_ = 0;
  uint32_t trailer_bytes_ = 0;
  const char* error_ = "";
};

}  // namespace sluice::http1
