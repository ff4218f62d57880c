#pragma once

#include <chrono>
#include <cstdint>

#include "filters/network/http2/codec.h"

namespace sluice {
namespace filters {
namespace http2 {

// Counts events in fixed windows: the count starts over when `window` has passed since the
// window began. Over `limit` within one window is a flood. A limit of 0 disables the check.
class WindowCounter {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // True when this event takes the count over the limit.
  bool add(Time now, std::chrono::milliseconds window, uint32_t limit) {
    if (limit == 0) return false;
    if (count_ == 0 || now - start_ >= window) {
      start_ = now;
      count_ = 0;
    }
    return ++count_ > limit;
  }
  uint32_t count() const { return count_; }

 private:
  Time start_{};
  uint32_t count_ = 0;
};

struct FloodLimits {
  std::chrono::milliseconds window{10000};
  uint32_t max_rapid_resets = 200;        // streams reset before their response completed
  uint32_t max_control_frames = 1000;     // SETTINGS, PING, PRIORITY, zero WINDOW_UPDATE
  uint32_t max_empty_data_frames = 100;   // DATA without payload or END_STREAM
  uint32_t max_continuation_frames = 16;  // per header block
  uint32_t max_protocol_errors = 100;     // stream errors the client caused
};

enum class Flood : uint8_t { None, RapidReset, Control, EmptyData, Continuation, ProtocolErrors };

// The per-connection flood accounting, separate from the filter so it can be tested alone.
class FloodGuard {
 public:
  explicit FloodGuard(const FloodLimits& limits) : limits_(limits) {}

  // A frame header arrived.
  Flood onFrameHeader(const FrameInfo& frame, WindowCounter::Time now) {
    switch (frame.type) {
      case FrameType::Headers:
        continuations_ = 0;
        return Flood::None;
      case FrameType::Continuation:
        if (limits_.max_continuation_frames != 0 &&
            ++continuations_ > limits_.max_continuation_frames) {
          return Flood::Continuation;
        }
        return Flood::None;
      case FrameType::Settings:
      case FrameType::Ping:
      case FrameType::Priority:
        return control_.add(now, limits_.window, limits_.max_control_frames) ? Flood::Control
                                                                             : Flood::None;
      case FrameType::WindowUpdate:
        // A zero increment is an error (counted by onProtocolError); real updates are normal.
        return Flood::None;
      default:
        return Flood::None;
    }
  }
  // A frame was accepted (DATA padding is known only now).
  Flood onFrame(const FrameInfo& frame, WindowCounter::Time now) {
    if (frame.type == FrameType::Data && frame.payload == 0 &&
        (frame.flags & kFlagEndStream) == 0) {
      return empty_data_.add(now, limits_.window, limits_.max_empty_data_frames) ? Flood::EmptyData
                                                                                 : Flood::None;
    }
    return Flood::None;
  }
  // A stream ended in a reset before its response was complete: reset by the client, or by
  // the proxy or its HTTP/2 library (a malformed stream), which a client can provoke as
  // cheaply ("MadeYouReset", CVE-2025-8671). Both spend one budget.
  Flood onStreamReset(WindowCounter::Time now) {
    return resets_.add(now, limits_.window, limits_.max_rapid_resets) ? Flood::RapidReset
                                                                      : Flood::None;
  }
  Flood onProtocolError(WindowCounter::Time now) {
    return errors_.add(now, limits_.window, limits_.max_protocol_errors) ? Flood::ProtocolErrors
                                                                         : Flood::None;
  }

 private:
  const FloodLimits& limits_;
  WindowCounter resets_;
  WindowCounter control_;
  WindowCounter empty_data_;
  WindowCounter errors_;
  uint32_t continuations_ = 0;
};

}  // namespace http2
}  // namespace filters
}  // namespace sluice
