#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <sys/epoll.h>

#include "source/common/event/io_batch.h"

namespace sluice {
namespace event {

using MonotonicTime = std::chrono::steady_clock::time_point;

// Something whose destruction must wait until the current event callback has returned.
class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};
using DeferredDeletablePtr = std::unique_ptr<DeferredDeletable>;

class Timer;
class FileEvent;

// The loop of one thread: the epoll set of its sockets (FileEvent), its timers, and one libevent
// event_base for what libevent runs itself (the DNS resolver, the admin endpoint, signals).
// Everything created on a dispatcher is used only from its thread; post() is the one way in
// from other threads.
//
// A turn of the loop waits once, then runs what became due. While libevent has nothing of its
// own to watch (a worker whose resolver is idle: the usual case), the turn waits in one
// epoll_wait(2) on the sockets' set, whose timeout is the earliest timer. Otherwise libevent
// waits, with the sockets' set as one of its descriptors, and the turn takes what is ready from
// the set after it. Either way the turn ends with the events activated meanwhile, the batch of
// sends and receives (IoBatch) and the deferred deletions.
class Dispatcher {
 public:
  Dispatcher();
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  event_base* base() { return base_; }
  // Runs turns until exit() or stop().
  void run();
  // One turn: waits (not when `may_wait` is false, nor when work is already due), then runs what
  // is ready and due. Tests drive the loop with it.
  void runOnce(bool may_wait = true);
  // Thread-safe: the loop stops after the turn that runs it.
  void exit();
  // On the dispatcher's thread: run() returns after the current turn.
  void stop();
  // Turns begun so far (the current one included).
  uint64_t turns() const { return turns_; }
  // Timers armed now (each one armed once, however often it was re-armed).
  size_t armedTimers() const { return timers_.size(); }
  // True while libevent watches nothing but the sockets' set and the timers' deadline: a turn
  // waits in one epoll_wait on the set itself.
  bool libeventIdle() const;
  // Thread-safe: runs fn on the dispatcher's thread, soon.
  void post(std::function<void()> fn);
  // Deletes the object after the current callback returns (safe from inside its own callbacks).
  void deferredDelete(DeferredDeletablePtr object);
  // Monotonic time (unaffected by changes to the wall clock). In a turn that waited on the
  // sockets, the time its wait returned: one reading of the clock serves the turn.
  MonotonicTime now();
  // Where this loop's connections queue their sends and receives to reach the kernel together
  // (server.disable_io_uring turns it off): null when off.
  IoBatch* ioBatch() { return io_batch_.get(); }
  // On by default; turned off or on only while nothing is queued (before any connection).
  void setIoBatching(bool on);
  // What runs this loop (a worker), for the objects on it that need their owner without
  // holding a pointer each: set once by the owner, null by default.
  void setContext(void* context) { context_ = context; }
  void* context() const { return context_; }
  // Closes a socket whose event went with FileEvent::removeBeforeClose(): with the batch, at
  // the end of the turn (before the loop looks at its sockets again); at once without one.
  void closeSocket(int fd);

 private:
  friend class Timer;
  void onPosted();
  static void onTimerEvent(evutil_socket_t, short, void* arg);
  friend class FileEvent;
  static void onSockets(evutil_socket_t, short, void* arg);
  // Looks at the sockets' set (waiting up to timeout_ms) and calls the owner of each ready one.
  void takeReady(int timeout_ms);
  // Calls the owner of each of the first n events in ready_.
  void deliverReady(int n);
  // The clock's reading for the rest of the turn (now() returns it until the turn ends).
  void beginTurnTime();
  // Activated events, the batch, deferred deletions: something to run before the next wait.
  bool workDue() const;
  void runWork();
  void onActivated();
  // Adds the ring's descriptor to what libevent watches, or takes it out.
  void watchRing(bool on);
  // Milliseconds to the earliest timer (rounded up; -1 without one).
  int timerWaitMs(MonotonicTime now) const;
  // A socket event went away: nothing still queued for it (ready or activated) reaches it.
  void forget(FileEvent* event);
  void clearDeferred();
  // The heap of armed timers, earliest deadline first. Each entry holds its timer's deadline, so
  // keeping the heap in order reads the heap alone, not the timers (one or two per connection,
  // wherever their connections are), but for equal deadlines. An armed timer costs what it did
  // when the heap held pointers: 32 + 16 bytes, against 40 + 8.
  struct ArmedTimer {
    MonotonicTime deadline;
    Timer* timer;
  };
  static bool before(const ArmedTimer& a, const ArmedTimer& b);
  void armTimer(Timer& timer, MonotonicTime deadline, MonotonicTime now);
  void disarmTimer(Timer& timer);
  void placeTimer(uint32_t slot, const ArmedTimer& armed);
  void siftUp(uint32_t slot);
  void siftDown(uint32_t slot);
  // Moves the timer at `slot` up or down to where its deadline belongs.
  void resift(uint32_t slot);
  // Points the libevent timer at the earliest deadline when it is not already due before it.
  void scheduleTimers(MonotonicTime now);
  // Runs the due timers armed before `pass_end` (an order): one armed during the turn, even
  // with a zero timeout, waits for the next turn, after the next look at the sockets.
  void runTimers(uint32_t pass_end);

  event_base* base_;
  bool stopped_ = false;
  uint64_t turns_ = 0;
  // post() wakes the loop through this eventfd, a member of the sockets' set, so the loop itself
  // needs no lock.
  int wake_fd_;
  std::mutex post_lock_;
  std::vector<std::function<void()>> posted_;
  std::vector<DeferredDeletablePtr> deferred_;
  std::vector<DeferredDeletablePtr> deleting_;  // the ones clearDeferred() is deleting
  bool clearing_deferred_ = false;
  std::vector<ArmedTimer> timers_;
  struct event timer_event_;
  MonotonicTime timer_event_at_{};  // when timer_event_ fires, while timer_event_armed_
  bool timer_event_armed_ = false;
  uint32_t next_timer_order_ = 0;
  // The sockets' epoll set; libevent watches it as one descriptor when libevent waits.
  int sockets_fd_;
  struct event sockets_event_;
  // The set's entry for wake_fd_ points here (a socket's points to its FileEvent).
  char wake_tag_ = 0;
  // What one look at the set found; an entry is cleared when its event goes away meanwhile.
  static constexpr int kReadyBatch = 256;
  epoll_event ready_[kReadyBatch];
  int ready_count_ = 0;
  int ready_next_ = 0;
  // Events activate() queued, and those being delivered now (cleared the same way).
  std::vector<FileEvent*> activated_;
  std::vector<FileEvent*> delivering_;
  std::unique_ptr<IoBatch> io_batch_;
  void* context_ = nullptr;
  // The batch's ring as a libevent event, while libevent waits and receives stand in the ring.
  struct event ring_event_;
  bool ring_watched_ = false;
  bool turn_now_valid_ = false;
  MonotonicTime turn_now_{};
};

// How early a timer may fire: libevent measures its own timeout on a coarser clock, so it can
// wake the loop slightly before a deadline; a timer that close is run then, not re-armed.
inline constexpr std::chrono::milliseconds kTimerSlack{1};

// A one-shot timer; embedded in its owner, no allocation when armed. A timer is a slot in its
// dispatcher's heap of deadlines (32 bytes, not a libevent event of 128 plus its callback): the
// dispatcher keeps one libevent timer for the earliest of them. Its timeout runs from the
// dispatcher's now() (in a turn, when the turn's wait returned); it fires at most kTimerSlack
// early, never late by more than the loop's own latency.
//
// The callback is kept in the timer itself when it fits a pointer and copies as bytes (a lambda
// that captures `this`, as nearly every owner's does), on the heap otherwise.
class Timer {
 public:
  template <class F>
  Timer(Dispatcher& dispatcher, F cb) : dispatcher_(dispatcher) {
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= sizeof(callback_) && alignof(Fn) <= alignof(void*) &&
                  std::is_trivially_copyable_v<Fn>) {
      new (callback_) Fn(std::move(cb));
      thunk_ = [](void* callback, bool destroy) {
        if (!destroy) (*std::launder(static_cast<Fn*>(callback)))();
      };
    } else {
      Fn* on_heap = new Fn(std::move(cb));
      std::memcpy(callback_, &on_heap, sizeof(on_heap));
      thunk_ = [](void* callback, bool destroy) {
        Fn* f;
        std::memcpy(&f, callback, sizeof(f));
        if (destroy) {
          delete f;
        } else {
          (*f)();
        }
      };
    }
  }
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void enable(std::chrono::milliseconds timeout);
  void disable();
  bool enabled() const { return slot_ != kUnarmed; }
  Dispatcher& dispatcher() const { return dispatcher_; }

 private:
  friend class Dispatcher;
  static constexpr uint32_t kUnarmed = UINT32_MAX;
  void fire() { thunk_(callback_, false); }

  Dispatcher& dispatcher_;
  // The callback's bytes, or a pointer to it on the heap; thunk_ calls it (destroy false) or
  // lets it go (destroy true).
  alignas(void*) unsigned char callback_[sizeof(void*)];
  void (*thunk_)(void* callback, bool destroy);
  uint32_t slot_ = kUnarmed;  // its index in the dispatcher's heap while armed
  uint32_t order_ = 0;        // among equal deadlines, the one armed first fires first
};

// Readiness of one socket, edge-triggered: the owner reads or writes until EAGAIN and is told
// again only when more is ready. A socket event is a registration in its dispatcher's own epoll
// set, not a libevent event: 32 bytes, and nothing kept per descriptor number. A turn of the
// loop waits on the set (or libevent does, with the set as one of its descriptors), then the
// dispatcher takes what is ready from it and calls each owner.
//
// Writability is watched only when asked for (Interest::ReadWrite, or watchWrites() once a
// write met a full socket): a new socket is writable at once, and an edge-triggered set reports
// that on registration, which for an accepted connection is one more turn of the loop with
// nothing to do.
class FileEvent {
 public:
  static constexpr uint32_t kRead = 1;
  static constexpr uint32_t kWrite = 2;
  static constexpr uint32_t kClosed = 4;

  // ReadLevel: reads only, level-triggered: reported at every look at the set while the socket
  // is readable, so the owner may take less than all of it (a listening socket that accepts one
  // connection per look instead of asking once more to hear EAGAIN).
  // Quiet and WriteOnly: the socket's reads come by completion (IoBatch::arm), so the set
  // watches for errors only, or for writability too.
  enum class Interest : uint8_t { Read, ReadWrite, ReadLevel, Quiet, WriteOnly };

  // Names the owner's method that hears the events: FileEvent(d, fd, this,
  // FileEvent::To<&Connection::onFileEvent>()). The dispatcher calls the method through a
  // function made for it, with the owner as its argument, so there is no callback object.
  template <auto Method>
  struct To {};

  template <class Owner, auto Method>
  FileEvent(Dispatcher& dispatcher, int fd, Owner* owner, To<Method>,
            Interest interest = Interest::Read)
      : dispatcher_(dispatcher),
        owner_(owner),
        deliver_(&FileEvent::deliver<Owner, Method>),
        fd_(fd),
        interest_(interest) {
    add();
  }
  ~FileEvent() { remove(); }
  FileEvent(const FileEvent&) = delete;
  FileEvent& operator=(const FileEvent&) = delete;

  // Runs the callback with these events at the end of this turn of the loop (or the next one,
  // when activated from an activated callback), as if the kernel said so.
  void activate(uint32_t events);
  // From now on writability is reported too (a write met a full socket). Once watched, it stays
  // watched: one change of the registration per socket at most. If the socket is writable
  // already, the next look at the set says so.
  void watchWrites();
  bool watchingWrites() const {
    return interest_ == Interest::ReadWrite || interest_ == Interest::WriteOnly;
  }
  // The socket's reads come by completion from now on: the registration drops EPOLLIN. Returns
  // the epoll set and fills `ev` with the registration for the caller to carry to the kernel
  // (IoBatch::arm); -1 when no change is to be made.
  int quietReads(epoll_event* ev);
  // Reads by readiness again (EPOLL_CTL_MOD now).
  void readsByReadiness();
  // Stops all notifications (before the socket is closed); the callback never runs again.
  void remove();
  // remove() for a socket about to be closed, whose descriptor is its only one (never
  // duplicated, never passed on): closing it takes the registration out of the set, so no
  // EPOLL_CTL_DEL is made. The close must come before the loop looks at the set again
  // (Dispatcher::closeSocket).
  void removeBeforeClose();
  Dispatcher& dispatcher() const { return dispatcher_; }

 private:
  friend class Dispatcher;
  using Deliver = void (*)(void* owner, uint32_t events);
  template <class Owner, auto Method>
  static void deliver(void* owner, uint32_t events) {
    (static_cast<Owner*>(owner)->*Method)(events);
  }
  // Registers with the loop's batch when it has one (FileEvent::kWatchHandler), else at once.
  void add();
  void addNow();
  // Applies interest_ to the registration (EPOLL_CTL_MOD).
  void modify();
  void addFailed(int err);
  // Withdraws a registration still queued in the batch.
  void dropRegistration();
  static const IoBatch::WatchHandler kWatchHandler;

  Dispatcher& dispatcher_;
  void* owner_;
  Deliver deliver_;
  int fd_;                    // -1 once removed
  uint8_t activated_ = 0;     // events activate() asked for, not yet delivered
  Interest interest_;         // what the registration watches
  bool registering_ = false;  // EPOLL_CTL_ADD queued in the batch, not yet made
};

}  // namespace event
}  // namespace sluice
