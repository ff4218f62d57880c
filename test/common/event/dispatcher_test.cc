#include "source/common/event/dispatcher.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace sluice {
namespace event {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Runs the loop until done() or the timeout; false on timeout. A short guard timer makes each
// pass return even when nothing else is ready.
bool runUntil(Dispatcher& d, const std::function<bool()>& done,
              milliseconds timeout = milliseconds(5000)) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    Timer guard(d, [] {});
    guard.enable(milliseconds(5));
    event_base_loop(d.base(), EVLOOP_ONCE);
  }
  return true;
}

void runFor(Dispatcher& d, milliseconds duration) {
  runUntil(
      d, [] { return false; }, duration);
}

TEST(TimerTest, FiresOnceAfterTimeout) {
  Dispatcher d;
  int fired = 0;
  Clock::time_point fired_at;
  Timer timer(d, [&] {
    ++fired;
    fired_at = Clock::now();
  });
  EXPECT_FALSE(timer.enabled());
  const auto start = Clock::now();
  timer.enable(milliseconds(30));
  EXPECT_TRUE(timer.enabled());
  ASSERT_TRUE(runUntil(d, [&] { return fired == 1; }));
  // libevent's timer clock is CLOCK_MONOTONIC_COARSE (one jiffy, up to 4 ms): allow for it.
  EXPECT_GE(fired_at - start, milliseconds(25));
  EXPECT_FALSE(timer.enabled());  // one-shot
  runFor(d, milliseconds(60));
  EXPECT_EQ(1, fired);
}

TEST(TimerTest, DisablePreventsFiring) {
  Dispatcher d;
  int fired = 0;
  Timer timer(d, [&] { ++fired; });
  timer.enable(milliseconds(10));
  timer.disable();
  EXPECT_FALSE(timer.enabled());
  runFor(d, milliseconds(50));
  EXPECT_EQ(0, fired);
  timer.disable();  // disabling a disabled timer is harmless
}

TEST(TimerTest, ReenableRestartsTheCountdown) {
  Dispatcher d;
  int fired = 0;
  Timer timer(d, [&] { ++fired; });
  timer.enable(milliseconds(20));
  timer.enable(milliseconds(200));  // replaces the first deadline
  runFor(d, milliseconds(80));
  EXPECT_EQ(0, fired);
  timer.enable(milliseconds(5));
  ASSERT_TRUE(runUntil(d, [&] { return fired == 1; }));
  // Re-armed from inside its own callback.
  std::unique_ptr<Timer> again;
  again = std::make_unique<Timer>(d, [&] {
    ++fired;
    if (fired < 4) again->enable(milliseconds(1));
  });
  again->enable(milliseconds(1));
  ASSERT_TRUE(runUntil(d, [&] { return fired == 4; }));
  runFor(d, milliseconds(20));
  EXPECT_EQ(4, fired);
  EXPECT_FALSE(again->enabled());
}

TEST(TimerTest, ZeroTimeoutFiresOnNextIteration) {
  Dispatcher d;
  bool fired = false;
  Timer timer(d, [&] { fired = true; });
  timer.enable(milliseconds(0));
  EXPECT_FALSE(fired);
  ASSERT_TRUE(runUntil(d, [&] { return fired; }));
}

TEST(TimerTest, DestroyedArmedTimerNeverFires) {
  Dispatcher d;
  int fired = 0;
  {
    Timer timer(d, [&] { ++fired; });
    timer.enable(milliseconds(5));
  }
  runFor(d, milliseconds(30));
  EXPECT_EQ(0, fired);
}

TEST(DispatcherTest, PostFromAnotherThreadRunsOnTheLoop) {
  Dispatcher d;
  std::atomic<int> ran{0};
  std::thread::id loop_thread = std::this_thread::get_id();
  std::vector<std::thread::id> seen;
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      d.post([&, i] {
        EXPECT_EQ(ran.load(), i);  // in order
        seen.push_back(std::this_thread::get_id());
        ++ran;
      });
    }
  });
  poster.join();
  EXPECT_EQ(0, ran.load());  // nothing runs until the loop does
  ASSERT_TRUE(runUntil(d, [&] { return ran.load() == 100; }));
  for (auto id : seen) EXPECT_EQ(loop_thread, id);
}

TEST(DispatcherTest, PostWakesABlockedLoop) {
  Dispatcher d;
  std::atomic<bool> ran{false};
  std::thread poster([&] {
    std::this_thread::sleep_for(milliseconds(30));
    d.post([&] {
      ran = true;
      d.exit();
    });
  });
  // run() blocks in the kernel: only the post's wake-up can end it.
  const auto start = Clock::now();
  d.run();
  poster.join();
  EXPECT_TRUE(ran.load());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(DispatcherTest, ManyThreadsPostingLoseNothing) {
  Dispatcher d;
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  int ran = 0;  // only touched on the loop thread
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kEach; ++i) d.post([&] { ++ran; });
    });
  }
  go = true;
  // The loop runs concurrently with the posters: a wake-up must never be lost.
  const bool done = runUntil(
      d, [&] { return ran == kThreads * kEach; }, milliseconds(10000));
  for (auto& t : threads) t.join();
  ASSERT_TRUE(done || runUntil(d, [&] { return ran == kThreads * kEach; }));
  EXPECT_EQ(kThreads * kEach, ran);
}

TEST(DispatcherTest, PostFromInsideAPostedCallbackRuns) {
  Dispatcher d;
  int ran = 0;
  d.post([&] {
    ++ran;
    d.post([&] { ++ran; });
  });
  ASSERT_TRUE(runUntil(d, [&] { return ran == 2; }));
}

TEST(DispatcherTest, ExitStopsRun) {
  Dispatcher d;
  int ticks = 0;
  std::unique_ptr<Timer> tick;
  // A repeating tick: each firing re-arms until the third calls exit().
  tick = std::make_unique<Timer>(d, [&] {
    if (++ticks == 3) {
      d.exit();
    } else {
      tick->enable(milliseconds(1));
    }
  });
  tick->enable(milliseconds(1));
  d.run();
  EXPECT_EQ(3, ticks);
  // exit() before run(): run() returns at once, and the dispatcher can run again.
  d.exit();
  d.run();
  EXPECT_EQ(3, ticks);
}

class Tracked : public DeferredDeletable {
 public:
  Tracked(int& deleted, std::function<void()> on_delete = nullptr)
      : deleted_(deleted), on_delete_(std::move(on_delete)) {}
  ~Tracked() override {
    ++deleted_;
    if (on_delete_) on_delete_();
  }

 private:
  int& deleted_;
  std::function<void()> on_delete_;
};

TEST(DispatcherTest, DeferredDeleteWaitsForTheCallbackToReturn) {
  Dispatcher d;
  int deleted = 0;
  bool checked = false;
  Timer timer(d, [&] {
    d.deferredDelete(std::make_unique<Tracked>(deleted));
    d.deferredDelete(std::make_unique<Tracked>(deleted));
    EXPECT_EQ(0, deleted);  // still alive inside the callback that deferred it
    checked = true;
  });
  timer.enable(milliseconds(0));
  ASSERT_TRUE(runUntil(d, [&] { return checked; }));
  ASSERT_TRUE(runUntil(d, [&] { return deleted == 2; }));
}

TEST(DispatcherTest, DeferredDeleteFromADestructorIsAlsoDeleted) {
  Dispatcher d;
  int deleted = 0;
  d.deferredDelete(std::make_unique<Tracked>(
      deleted, [&] { d.deferredDelete(std::make_unique<Tracked>(deleted)); }));
  EXPECT_EQ(0, deleted);
  ASSERT_TRUE(runUntil(d, [&] { return deleted == 2; }));
  // And the dispatcher keeps working for later deferrals.
  d.deferredDelete(std::make_unique<Tracked>(deleted));
  ASSERT_TRUE(runUntil(d, [&] { return deleted == 3; }));
}

TEST(DispatcherTest, DestructorDeletesPendingDeferred) {
  int deleted = 0;
  {
    Dispatcher d;
    d.deferredDelete(std::make_unique<Tracked>(deleted));
    EXPECT_EQ(0, deleted);
  }
  EXPECT_EQ(1, deleted);
}

TEST(DispatcherTest, NowIsSteadyClockTime) {
  Dispatcher d;
  // Compared with steady_clock::now(): the type promises the same clock.
  auto diff = Clock::now() - d.now();
  EXPECT_LT(std::chrono::abs(diff), std::chrono::seconds(1));
  MonotonicTime before;
  MonotonicTime inside;
  Timer timer(d, [&] { inside = d.now(); });
  before = d.now();
  timer.enable(milliseconds(20));
  ASSERT_TRUE(runUntil(d, [&] { return inside != MonotonicTime(); }));
  EXPECT_GE(inside - before, milliseconds(15));
  EXPECT_LT(std::chrono::abs(Clock::now() - inside), std::chrono::seconds(1));
}

TEST(FileEventTest, ReadAndWriteReadinessEdgeTriggered) {
  Dispatcher d;
  int fds[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds));
  int reads = 0;
  int writes = 0;
  FileEvent ev(d, fds[0], [&](uint32_t events) {
    if (events & FileEvent::kRead) ++reads;
    if (events & FileEvent::kWrite) ++writes;
  });
  ASSERT_TRUE(runUntil(d, [&] { return writes >= 1; }));  // initially writable
  EXPECT_EQ(0, reads);
  ASSERT_EQ(1, ::write(fds[1], "x", 1));
  ASSERT_TRUE(runUntil(d, [&] { return reads == 1; }));
  runFor(d, milliseconds(20));
  EXPECT_EQ(1, reads);  // edge-triggered: not repeated although the byte is still unread
  ev.activate(FileEvent::kRead);
  ASSERT_TRUE(runUntil(d, [&] { return reads == 2; }));
  ev.remove();
  ASSERT_EQ(1, ::write(fds[1], "y", 1));
  runFor(d, milliseconds(20));
  EXPECT_EQ(2, reads);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(FileEventTest, PeerCloseReportsClosedAndRead) {
  Dispatcher d;
  int fds[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds));
  uint32_t seen = 0;
  FileEvent ev(d, fds[0], [&](uint32_t events) { seen |= events; });
  ::close(fds[1]);
  ASSERT_TRUE(runUntil(d, [&] { return (seen & FileEvent::kClosed) != 0; }));
  EXPECT_NE(0u, seen & FileEvent::kRead);
  ::close(fds[0]);
}

}  // namespace
}  // namespace event
}  // namespace sluice
