#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "source/common/event/dispatcher.h"

namespace sluice {
namespace upstream {

// The pauses a bandwidth limit puts on the two ways of an origin exchange or a tunnel, and the
// one timer that ends them, made on the first pause: what is never slowed holds none. What a
// pause stops and a resume restarts is the owner's.
class ShapedWays {
 public:
  struct Way {
    bool paused = false;
    bool read_disabled = false;  // for the owner: paused with a readDisable to undo on resume
    int64_t resume_at = 0;       // policy::monotonicNanos()
  };

  Way& operator[](size_t way) { return ways_[way]; }
  const Way& operator[](size_t way) const { return ways_[way]; }

  // Holds `way` until at least now + wait (nanoseconds). True when it was not paused: the owner
  // stops it now.
  bool pause(size_t way, int64_t now, int64_t wait) {
    Way& w = ways_[way];
    w.resume_at = std::max(w.resume_at, now + wait);
    if (w.paused) return false;
    w.paused = true;
    return true;
  }

  // Arms the timer for the earliest resume among the paused ways (nothing when none is);
  // on_fire runs then, and is kept from the first call on.
  template <class F>
  void arm(event::Dispatcher& dispatcher, int64_t now, F&& on_fire) {
    int64_t at = INT64_MAX;
    for (const Way& w : ways_) {
      if (w.paused) at = std::min(at, w.resume_at);
    }
    if (at == INT64_MAX) return;
    if (!timer_) timer_ = std::make_unique<event::Timer>(dispatcher, std::forward<F>(on_fire));
    // Rounded up to the timer's millisecond: never resumed before the bucket has room.
    const int64_t ms = std::max<int64_t>(1, (at - now + 999'999) / 1'000'000);
    timer_->enable(std::chrono::milliseconds(ms));
  }

  void disarm() {
    if (timer_) timer_->disable();
  }

 private:
  Way ways_[2];
  std::unique_ptr<event::Timer> timer_;
};

}  // namespace upstream
}  // namespace sluice
