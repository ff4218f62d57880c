#pragma once

// Streaming HTTP/1.1 response parser for sluice-load: it keeps only what it needs (status,
// framing, remaining body) and never stores a body. A head split across reads is carried in a
// buffer reserved once per connection, so the steady state allocates nothing.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {
namespace load {

class ResponseParser {
 public:
  enum class Result { More, Done, Error };
  static constexpr size_t kMaxHead = 64 * 1024;

  // No buffer until a head spans reads: a held-open tunnel costs no memory here.
  ResponseParser() = default;

  // no_body: the request was HEAD or CONNECT (a 2xx CONNECT reply has no body either way).
  void reset(bool no_body) {
    no_body_ = no_body;
    state_ = State::Head;
    carry_.clear();
    status_ = 0;
    close_ = false;
    body_bytes_ = 0;
    accept_ok_ = false;
  }

  // Consumes from data; consumed says how much. Done leaves the rest of data unread (bytes
  // after a 101 or a CONNECT reply belong to the next protocol).
  Result feed(const char* data, size_t len, size_t& consumed);
  // The peer closed: a body delimited by the close is complete.
  bool finishOnClose() {
    if (state_ == State::UntilClose) {
      state_ = State::Complete;
      return true;
    }
    return false;
  }

  int status() const { return status_; }
  bool close() const { return close_; }
  uint64_t bodyBytes() const { return body_bytes_; }
  // A 101 carried the Sec-WebSocket-Accept for the fixed key sluice-load sends.
  bool websocketAccepted() const { return accept_ok_; }
  const char* error() const { return error_; }

 private:
  enum class State : uint8_t {
    Head,
    Length,
    UntilClose,
    ChunkSize,
    ChunkExt,
    ChunkSizeLf,
    ChunkData,
    ChunkDataCr,
    ChunkDataLf,
    TrailerStart,
    TrailerLine,
    FinalLf,
    Complete,
  };

  // head: the whole head, final CRLFCRLF included. Sets framing state.
  bool parseHead(std::string_view head);
  Result fail(const char* why) {
    error_ = why;
    return Result::Error;
  }

  std::string carry_;
  State state_ = State::Head;
  bool no_body_ = false;
  bool close_ = false;
  bool accept_ok_ = false;
  int status_ = 0;
  uint64_t remaining_ = 0;
  uint64_t body_bytes_ = 0;
  const char* error_ = "";
};

}  // namespace load
}  // namespace sluice
