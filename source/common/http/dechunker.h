#pragma once

#include <cstdint>

#include "source/common/buffer/buffer.h"
#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"

namespace sluice::http1 {

// Follows a chunked response body as it streams by: the ChunkedDecoder checks the framing
// strictly, and this picks out the data bytes (decode) or passes the body on as it was framed
// (pass), so that one object serves an HTTP/2 stream (payload only) and an HTTP/1.1 client
// (chunks as the origin sent them).
class Dechunker {
 public:
  enum class Status : uint8_t { NeedMore, Done, Error };
  // Moves the chunk data in `in` to `out`, draining everything that belongs to the body.
  Status decode(buffer::Buffer& in, buffer::Buffer& out);
  // Moves the body bytes in `in` to `out` unchanged (framing included).
  Status pass(buffer::Buffer& in, buffer::Buffer& out);
  void reset();
  const char* error() const { return validator_.error(); }
  uint64_t payloadBytes() const { return validator_.payloadBytes(); }

 private:
  enum class State : uint8_t { Line, Data, DataEnd, Trailer, Done };
  ChunkedDecoder validator_;
  State state_ = State::Line;
  uint64_t left_ = 0;  // data bytes left in the current chunk
  bool in_extension_ = false;
  bool trailer_line_empty_ = true;
};

}  // namespace sluice::http1
