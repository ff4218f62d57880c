#include "source/common/event/dispatcher.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
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
    d.runOnce();
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

TEST(TimerTest, ManyTimersFireInDeadlineOrderAndEqualDeadlinesInArmingOrder) {
  Dispatcher d;
  std::vector<int> order;
  std::vector<std::unique_ptr<Timer>> timers;
  // Armed out of order: 40, 10, 30, 20, 10, 0 ms... ten of each deadline.
  const int deadlines[] = {40, 10, 30, 20, 0};
  for (int round = 0; round < 10; ++round) {
    for (int ms : deadlines) {
      const int id = static_cast<int>(timers.size());
      timers.push_back(std::make_unique<Timer>(d, [&order, id] { order.push_back(id); }));
      timers.back()->enable(milliseconds(ms));
    }
  }
  ASSERT_TRUE(runUntil(d, [&] { return order.size() == timers.size(); }));
  ASSERT_EQ(timers.size(), order.size());
  for (size_t i = 1; i < order.size(); ++i) {
    const int a = deadlines[order[i - 1] % 5];
    const int b = deadlines[order[i] % 5];
    EXPECT_LE(a, b) << "at " << i;
    if (a == b) EXPECT_LT(order[i - 1], order[i]) << "at " << i;  // armed first, fired first
  }
  for (auto& t : timers) EXPECT_FALSE(t->enabled());
}

// Armed in one turn with one timeout, timers share the turn's reading of the clock, so their
// deadlines are equal to the nanosecond: the heap orders them by when they were armed, and a
// timer armed again goes behind the others.
TEST(TimerTest, EqualDeadlinesFromOneTurnFireInArmingOrder) {
  Dispatcher d;
  std::vector<int> order;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int id = 0; id < 40; ++id) {
    timers.push_back(std::make_unique<Timer>(d, [&order, id] { order.push_back(id); }));
  }
  // 0..39 in a shuffled order, then 5, 17 and 0 armed again.
  std::vector<int> armed;
  for (int i = 0; i < 40; ++i) armed.push_back((i * 17) % 40);
  Timer start(d, [&] {
    for (int id : armed) timers[id]->enable(milliseconds(5));
    for (int id : {5, 17, 0}) timers[id]->enable(milliseconds(5));
  });
  start.enable(milliseconds(0));
  ASSERT_TRUE(runUntil(d, [&] { return order.size() == timers.size(); }));
  std::vector<int> want;
  for (int id : armed) {
    if (id != 5 && id != 17 && id != 0) want.push_back(id);
  }
  for (int id : {5, 17, 0}) want.push_back(id);
  EXPECT_EQ(order, want);
}

TEST(TimerTest, DisarmingTheEarliestLetsTheNextFireOnTime) {
  Dispatcher d;
  bool early_fired = false;
  Clock::time_point later_at;
  Timer early(d, [&] { early_fired = true; });
  Timer later(d, [&] { later_at = Clock::now(); });
  const auto start = Clock::now();
  early.enable(milliseconds(5));
  later.enable(milliseconds(40));
  early.disable();
  ASSERT_TRUE(runUntil(d, [&] { return later_at != Clock::time_point(); }));
  EXPECT_FALSE(early_fired);
  EXPECT_GE(later_at - start, milliseconds(39));
  // Re-arming a later deadline earlier moves it up.
  Clock::time_point moved_at;
  Timer moved(d, [&] { moved_at = Clock::now(); });
  Timer other(d, [] {});
  other.enable(milliseconds(1000));
  moved.enable(milliseconds(2000));
  const auto moved_start = Clock::now();
  moved.enable(milliseconds(10));
  ASSERT_TRUE(runUntil(d, [&] { return moved_at != Clock::time_point(); }));
  EXPECT_LT(moved_at - moved_start, milliseconds(900));
  EXPECT_TRUE(other.enabled());
  // Re-arming the earliest later moves it down, behind the next one.
  std::vector<int> order;
  Timer a(d, [&] { order.push_back(1); });
  Timer b(d, [&] { order.push_back(2); });
  a.enable(milliseconds(5));
  b.enable(milliseconds(20));
  a.enable(milliseconds(60));
  ASSERT_TRUE(runUntil(d, [&] { return order.size() == 2; }));
  EXPECT_EQ((std::vector<int>{2, 1}), order);
}

TEST(TimerTest, ACallbackMayDestroyOrDisarmTimersDueInTheSamePass) {
  Dispatcher d;
  int fired = 0;
  auto second = std::make_unique<Timer>(d, [&] { ++fired; });
  Timer third(d, [&] { ++fired; });
  Timer first(d, [&] {
    ++fired;
    second.reset();   // due in this pass: destroyed before it runs
    third.disable();  // also due: disarmed
  });
  first.enable(milliseconds(0));
  second->enable(milliseconds(0));
  third.enable(milliseconds(0));
  runFor(d, milliseconds(30));
  EXPECT_EQ(1, fired);
}

TEST(TimerTest, AZeroTimerArmedByATimerWaitsForTheNextIteration) {
  Dispatcher d;
  int passes = 0;
  int fired = 0;
  std::unique_ptr<Timer> again;
  again = std::make_unique<Timer>(d, [&] {
    ++fired;
    again->enable(milliseconds(0));  // would spin forever if run in the same pass
  });
  again->enable(milliseconds(0));
  for (; passes < 5; ++passes) d.runOnce();
  EXPECT_EQ(5, fired);
}

TEST(TimerTest, ATimerMayOutliveItsDispatcher) {
  auto d = std::make_unique<Dispatcher>();
  Timer timer(*d, [] {});
  timer.enable(milliseconds(100));
  d.reset();
  EXPECT_FALSE(timer.enabled());
}

TEST(TimerTest, KeepsASmallCallbackInlineAndALargeOneOnTheHeap) {
  EXPECT_EQ(32u, sizeof(Timer));
  Dispatcher d;
  // One captured pointer: kept in the timer.
  int small_fired = 0;
  Timer small(d, [p = &small_fired] { ++*p; });
  // A callback that owns memory and is larger than a pointer: on the heap, freed with the timer
  // (ASan's leak check would fail the sanitized run otherwise).
  auto owned = std::make_shared<int>(0);
  std::weak_ptr<int> watch = owned;
  std::string label = "a label longer than the small-string buffer";
  {
    Timer large(d, [owned, label] { *owned += static_cast<int>(label.size()); });
    owned.reset();
    small.enable(milliseconds(0));
    large.enable(milliseconds(0));
    ASSERT_TRUE(runUntil(d, [&] { return small_fired == 1 && *watch.lock() == 43; }));
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired());
  // A std::function passed in goes the same way.
  int fn_fired = 0;
  std::function<void()> fn = [&fn_fired] { ++fn_fired; };
  Timer from_function(d, fn);
  from_function.enable(milliseconds(0));
  ASSERT_TRUE(runUntil(d, [&] { return fn_fired == 1; }));
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

// An owner of a FileEvent: the event calls its method with the events.
struct EventCounter {
  void onEvents(uint32_t events) {
    seen |= events;
    if (events & FileEvent::kRead) ++reads;
    if (events & FileEvent::kWrite) ++writes;
  }
  uint32_t seen = 0;
  int reads = 0;
  int writes = 0;
};

// A connected pair of non-blocking Unix sockets, closed when it goes (an end closed early is -1).
struct SocketPair {
  SocketPair() { EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds)); }
  ~SocketPair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void closePeer() {
    ::close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(FileEventTest, HoldsOnlyItsOwnerAndItsSocket) {
  // A registration in the dispatcher's epoll set, not a libevent event (128 bytes).
  static_assert(sizeof(FileEvent) <= 32);
  static_assert(sizeof(Timer) <= 56);
}

TEST(FileEventTest, ReadAndWriteReadinessEdgeTriggered) {
  Dispatcher d;
  SocketPair pair;
  int* fds = pair.fds;
  EventCounter counter;
  int& reads = counter.reads;
  int& writes = counter.writes;
  FileEvent ev(d, fds[0], &counter, FileEvent::To<&EventCounter::onEvents>(),
               FileEvent::Interest::ReadWrite);
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
}

// Watched for reads only (an accepted connection), a writable socket is not reported: no turn
// of the loop for it. Once a write found it full, writability is watched and reported.
TEST(FileEventTest, WritabilityIsWatchedOnlyOnceAsked) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>());
  EXPECT_FALSE(ev.watchingWrites());
  runFor(d, milliseconds(20));
  EXPECT_EQ(0, counter.writes);
  EXPECT_EQ(0, counter.reads);
  ASSERT_EQ(1, ::write(pair.fds[1], "x", 1));
  ASSERT_TRUE(runUntil(d, [&] { return counter.reads == 1; }));
  EXPECT_EQ(0, counter.writes);

  // Fill the socket, then ask for writability: nothing until the peer takes some bytes.
  char block[4096] = {};
  while (::write(pair.fds[0], block, sizeof(block)) > 0) {
  }
  ASSERT_EQ(EAGAIN, errno);
  ev.watchWrites();
  EXPECT_TRUE(ev.watchingWrites());
  runFor(d, milliseconds(20));
  EXPECT_EQ(0, counter.writes);
  while (::read(pair.fds[1], block, sizeof(block)) > 0) {
  }
  ASSERT_TRUE(runUntil(d, [&] { return counter.writes == 1; }));
  // Asked again, the registration stays as it is.
  ev.watchWrites();
  runFor(d, milliseconds(20));
  EXPECT_EQ(1, counter.writes);
}

// Asked for while the socket already has room, writability is reported at once (the change of
// the registration looks at the socket as it is).
TEST(FileEventTest, WatchingWritesOfAWritableSocketReportsIt) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>());
  runFor(d, milliseconds(10));
  EXPECT_EQ(0, counter.writes);
  ev.watchWrites();
  ASSERT_TRUE(runUntil(d, [&] { return counter.writes == 1; }));
}

// Level-triggered reads (a listening socket): reported at every look while something is
// unread, so the owner may take part of it; never writability.
TEST(FileEventTest, LevelTriggeredReadsAreReportedAtEveryLookUntilTaken) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>(),
               FileEvent::Interest::ReadLevel);
  runFor(d, milliseconds(10));
  EXPECT_EQ(0, counter.reads + counter.writes);
  ASSERT_EQ(2, ::write(pair.fds[1], "xy", 2));
  for (int turn = 0; turn < 3; ++turn) d.runOnce();
  EXPECT_EQ(3, counter.reads);
  char c;
  ASSERT_EQ(1, ::read(pair.fds[0], &c, 1));
  d.runOnce();
  EXPECT_EQ(4, counter.reads);  // one byte left: still reported
  ASSERT_EQ(1, ::read(pair.fds[0], &c, 1));
  runFor(d, milliseconds(10));
  EXPECT_EQ(4, counter.reads);
  EXPECT_EQ(0, counter.writes);
  ev.watchWrites();  // no writability for a level-triggered read event
  EXPECT_FALSE(ev.watchingWrites());
}

// A turn of the loop waits in the sockets' set itself while libevent watches nothing of its
// own, and in libevent (which watches the set) while it does; both deliver sockets, timers and
// posted functions.
TEST(DispatcherTest, TurnsDeliverWithAndWithoutLibeventEvents) {
  for (bool with_libevent : {false, true}) {
    Dispatcher d;
    struct event* own = nullptr;
    if (with_libevent) {
      // Something of libevent's own to watch, as the DNS resolver's socket while it asks.
      own = event_new(
          d.base(), -1, EV_PERSIST, [](evutil_socket_t, short, void*) {}, nullptr);
      struct timeval hour = {3600, 0};
      event_add(own, &hour);
    }
    // Which of the two waits the turns take.
    EXPECT_EQ(!with_libevent, d.libeventIdle());
    SocketPair pair;
    EventCounter counter;
    FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>());
    ASSERT_EQ(1, ::write(pair.fds[1], "x", 1));
    ASSERT_TRUE(runUntil(d, [&] { return counter.reads == 1; }));
    bool fired = false;
    Timer timer(d, [&] { fired = true; });
    timer.enable(milliseconds(5));
    ASSERT_TRUE(runUntil(d, [&] { return fired; }));
    bool posted = false;
    std::thread other([&] { d.post([&] { posted = true; }); });
    other.join();
    ASSERT_TRUE(runUntil(d, [&] { return posted; }));
    const uint64_t before = d.turns();
    d.runOnce(false);
    EXPECT_EQ(before + 1, d.turns());
    if (own != nullptr) event_free(own);
  }
}

TEST(FileEventTest, PeerCloseReportsClosedAndRead) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  uint32_t& seen = counter.seen;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>());
  pair.closePeer();
  ASSERT_TRUE(runUntil(d, [&] { return (seen & FileEvent::kClosed) != 0; }));
  EXPECT_NE(0u, seen & FileEvent::kRead);
}

// Two sockets ready in the same look at the epoll set: whichever is called first destroys the
// other's event, which must then not be called (its entry in the batch is cleared).
TEST(FileEventTest, AnEventDestroyedEarlierInTheSameBatchIsNotCalled) {
  Dispatcher d;
  SocketPair a, b;
  struct Owner {
    void onEvents(uint32_t) {
      ++calls;
      other->reset();
    }
    std::unique_ptr<FileEvent>* other = nullptr;
    int calls = 0;
  };
  Owner oa, ob;
  std::unique_ptr<FileEvent> ea, eb;
  oa.other = &eb;
  ob.other = &ea;
  ea = std::make_unique<FileEvent>(d, a.fds[0], &oa, FileEvent::To<&Owner::onEvents>(),
                                   FileEvent::Interest::ReadWrite);
  eb = std::make_unique<FileEvent>(d, b.fds[0], &ob, FileEvent::To<&Owner::onEvents>(),
                                   FileEvent::Interest::ReadWrite);
  // Both are writable at once: one batch holds both.
  runFor(d, milliseconds(20));
  EXPECT_EQ(1, oa.calls + ob.calls);
  EXPECT_TRUE(ea == nullptr || eb == nullptr);
  ea.reset();
  eb.reset();
}

TEST(FileEventTest, RemovedWhileActivatedIsNotCalled) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>(),
               FileEvent::Interest::ReadWrite);
  ASSERT_TRUE(runUntil(d, [&] { return counter.writes >= 1; }));
  const int before = counter.reads + counter.writes;
  ev.activate(FileEvent::kRead);
  ev.remove();
  runFor(d, milliseconds(20));
  EXPECT_EQ(before, counter.reads + counter.writes);
}

// A socket event's registration goes with the loop's batch: one made between turns is in the
// set before the next look at it.
TEST(FileEventTest, ARegistrationQueuedBetweenTurnsIsMadeBeforeTheNextLook) {
  Dispatcher d;
  SocketPair pair;
  EventCounter counter;
  FileEvent ev(d, pair.fds[0], &counter, FileEvent::To<&EventCounter::onEvents>());
  ASSERT_EQ(1, ::write(pair.fds[1], "x", 1));
  d.runOnce(false);
  EXPECT_EQ(1, counter.reads);
}

// An event removed before its queued registration was made leaves nothing in the set: the same
// socket can be watched again at once, and the first owner hears nothing.
TEST(FileEventTest, AnEventRemovedBeforeItsRegistrationLeavesNothingBehind) {
  Dispatcher d;
  SocketPair pair;
  EventCounter first, second;
  { FileEvent gone(d, pair.fds[0], &first, FileEvent::To<&EventCounter::onEvents>()); }
  FileEvent kept(d, pair.fds[0], &second, FileEvent::To<&EventCounter::onEvents>());
  ASSERT_EQ(1, ::write(pair.fds[1], "x", 1));
  ASSERT_TRUE(runUntil(d, [&] { return second.reads == 1; }));
  EXPECT_EQ(0, first.reads + first.writes);
}

// A socket closed through the dispatcher after removeBeforeClose() is closed by the end of the
// turn: no EPOLL_CTL_DEL, yet its owner hears nothing more, in this turn or later.
TEST(FileEventTest, ASocketClosedWithoutDeletingItsRegistrationIsGoneBeforeTheNextLook) {
  Dispatcher d;
  SocketPair a, b;
  EventCounter second;
  auto closed =
      std::make_unique<FileEvent>(d, b.fds[0], &second, FileEvent::To<&EventCounter::onEvents>());
  struct Closer {
    void onEvents(uint32_t) {
      ++calls;
      if (*victim == nullptr) return;
      (*victim)->removeBeforeClose();
      d->closeSocket(fd);
      victim->reset();
    }
    Dispatcher* d;
    int fd;
    std::unique_ptr<FileEvent>* victim;
    int calls = 0;
  };
  Closer closer{&d, b.fds[0], &closed};
  FileEvent first(d, a.fds[0], &closer, FileEvent::To<&Closer::onEvents>());
  d.runOnce(false);  // both registered
  // Both readable in the same look; whichever comes first, b's owner is not called after the
  // close, and b's descriptor is closed when the turn ends.
  ASSERT_EQ(1, ::write(b.fds[1], "y", 1));
  ASSERT_EQ(1, ::write(a.fds[1], "x", 1));
  ASSERT_TRUE(runUntil(d, [&] { return closer.calls == 1; }));
  EXPECT_EQ(-1, fcntl(b.fds[0], F_GETFD));
  const int heard = second.reads;
  EXPECT_LE(heard, 1);
  b.fds[0] = -1;  // closed by the dispatcher
  runFor(d, milliseconds(20));
  EXPECT_EQ(heard, second.reads);
}

// A socket event made by another's callback is told of its readiness (the set is looked at
// again on the next loop iteration).
TEST(FileEventTest, AnEventMadeFromACallbackHearsItsSocket) {
  Dispatcher d;
  SocketPair a, b;
  ASSERT_EQ(1, ::write(b.fds[1], "x", 1));
  EventCounter second;
  std::unique_ptr<FileEvent> made;
  struct Maker {
    void onEvents(uint32_t) {
      if (*made == nullptr) {
        *made =
            std::make_unique<FileEvent>(*d, fd, counter, FileEvent::To<&EventCounter::onEvents>());
      }
    }
    Dispatcher* d;
    int fd;
    EventCounter* counter;
    std::unique_ptr<FileEvent>* made;
  };
  Maker maker{&d, b.fds[0], &second, &made};
  FileEvent first(d, a.fds[0], &maker, FileEvent::To<&Maker::onEvents>(),
                  FileEvent::Interest::ReadWrite);
  ASSERT_TRUE(runUntil(d, [&] { return second.reads == 1; }));
  made.reset();
}

}  // namespace
}  // namespace event
}  // namespace sluice
