#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "source/common/event/dispatcher.h"

namespace sluice {
namespace upstream {

// One way's pause under a bandwidth limit.
struct ShapedWay {
  bool paused = false;
  bool read_disabled = false;  // for the owner: paused with a readDisable to undo on resume
  int64_t resume_at = 0;       // policy::monotonicNanos()
};

// The pauses a bandwidth limit puts on the two ways of an origin exchange or a tunnel, and the
// one timer that ends them, made on the first pause: what is never slowed holds one pointer.
// What a pause stops and a resume restarts is the owner's.
class ShapedWays {
 public:
  using Way = ShapedWay;
  // A way that was never paused reads as not paused.
  const Way& operator[](size_t way) const { return state_ ? state_->ways[way] : kNeverPaused; }
  // For changing a way (made on first use).
  Way& at(size_t way) { return state()->ways[way]; }
  // Holds `way` until at least now + wait (nanoseconds). True when it was not paused: the owner
  // stops it now.
  bool pause(size_t way, int64_t now, int64_t wait) {
    Way& w = state()->ways[way];
    w.resume_at = std::max(w.resume_at, now + wait);
    if (w.paused) return false;
    w.paused = true;
    return true;
  }
  // Arms the timer for the earliest resume among the paused ways (nothing when none is);
  // on_fire runs then, and is kept from the first call on.
  template <class F>
  void arm(event::Dispatcher& dispatcher, int64_t now, F&& on_fire) {
    if (!state_) return;
    int64_t at = INT64_MAX;
    for (const Way& w : state_->ways) {
      if (w.paused) at = std::min(at, w.resume_at);
    }
    if (at == INT64_MAX) return;
    if (!state_->timer) {
      state_->timer = std::make_unique<event::Timer>(dispatcher, std::forward<F>(on_fire));
    }
    // Rounded up to the timer's millisecond: never resumed before the bucket has room.
    const int64_t ms = std::max<int64_t>(1, (at - now + 999'999) / 1'000'000);
    state_->timer->enable(std::chrono::milliseconds(ms));
  }
  void disarm() {
    if (state_ && state_->timer) state_->timer->disable();
  }
  // Both ways as never paused (the timer, if made, stays for the next pause).
  void clear() {
    if (state_) state_->ways[0] = state_->ways[1] = Way{};
  }

 private:
  struct State {
    Way ways[2];
    std::unique_ptr<event::Timer> timer;
  };
  State* state() {
    if (!state_) state_ = std::make_unique<State>();
    return state_.get();
  }
  static constexpr Way kNeverPaused{};
  std::unique_ptr<State> state_;
};

}  // namespace upstream
}  // namespace sluice
