#include "source/common/http/dechunker.h"

#include <algorithm>

namespace sluice::http1 {

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
    ChunkedDecoder::Status st = validator_.consume(piece, used);
    if (st == ChunkedDecoder::Status::Error) return Status::Error;
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
          } else if (!in_extension_ && detail::is(c, detail::kHex)) {
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
    if (st == ChunkedDecoder::Status::Done) {
      state_ = State::Done;
      return Status::Done;
    }
  }
  return state_ == State::Done ? Status::Done : Status::NeedMore;
}

Dechunker::Status Dechunker::pass(buffer::Buffer& in, buffer::Buffer& out) {
  while (!in.empty()) {
    std::string_view piece = in.front();
    size_t used = 0;
    const ChunkedDecoder::Status st = validator_.consume(piece, used);
    out.move(in, used);
    if (st == ChunkedDecoder::Status::Error) return Status::Error;
    if (st == ChunkedDecoder::Status::Done) {
      state_ = State::Done;
      return Status::Done;
    }
  }
  return Status::NeedMore;
}

}  // namespace sluice::http1
