#include "tools/load/worker.h"

#include <algorithm>

#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

namespace sluice {
namespace load {

std::atomic<bool> g_interrupted{false};

void Worker::run() {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  const Options& o = opts();
  std::vector<epoll_event> events(512);
  for (auto& c : conns_) c->drive();
  runPending();
  uint64_t last_scan = nowNs();
  uint64_t drain_deadline = 0;
  const uint64_t timeout_ns = static_cast<uint64_t>(o.timeout_s * 1e9);
  for (;;) {
    uint64_t now = nowNs();
    if (!stopping_ && (g_interrupted.load(std::memory_order_relaxed) ||
                       (shared_.end_ns != 0 && now >= shared_.end_ns))) {
      stopping_ = true;
      // In-flight requests may finish (they are counted); after the timeout they are dropped.
      drain_deadline = now + std::min<uint64_t>(timeout_ns, 2000000000ull);
      if (g_interrupted.load() && o.workload == Workload::Hold) drain_deadline = now;
    }
    if (stopping_ || quota_ > 0) {
      bool any_busy = false;
      for (auto& c : conns_) {
        if (c->busy()) {
          any_busy = true;
          break;
        }
      }
      const bool quota_done = quota_ > 0 && issued_ >= quota_;
      if ((stopping_ || quota_done) && (!any_busy || (stopping_ && now >= drain_deadline))) break;
    }
    // Wait at most until the next timer, and at most 50 ms (timeouts, stop checks).
    uint64_t wait_ns = hasWork() ? 0 : 50000000;
    if (!timers_.empty()) {
      const uint64_t at = timers_.top().first;
      wait_ns = at > now ? std::min<uint64_t>(wait_ns, at - now) : 0;
    }
    timespec ts{static_cast<time_t>(wait_ns / 1000000000), static_cast<long>(wait_ns % 1000000000)};
    const int n = epoll_pwait2(ep_, events.data(), static_cast<int>(events.size()),
                               wait_ns == 0 ? &ts : &ts, nullptr);
    for (int i = 0; i < n; ++i)
      static_cast<Pollable*>(events[i].data.ptr)->onEvent(events[i].events);
    if (!timers_.empty()) {
      now = nowNs();
      while (!timers_.empty() && timers_.top().first <= now) {
        Conn* c = timers_.top().second;
        timers_.pop();
        c->onTimer();
      }
    }
    if (now - last_scan > 50000000) {
      now = nowNs();
      last_scan = now;
      for (auto& c : conns_) c->checkTimeout(now);
    }
    if (hasWork()) runPending();
  }
  results_.end_ns = nowNs();
  for (auto& c : conns_) c->abandon();
  flush_.clear();
  sessions_.clear();
  onDone();
  ::close(ep_);
  finished_.store(true);
}

}  // namespace load
}  // namespace sluice
