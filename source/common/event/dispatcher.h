#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <event2/event.h>
#include <event2/event_struct.h>

namespace sluice {
namespace event {

using MonotonicTime = std::chrono::steady_clock::time_point;

// Something whose destruction must wait until the current event callback has returned.
class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};
using DeferredDeletablePtr = std::unique_ptr<DeferredDeletable>;

// One libevent event_base and the thread that runs it. Everything created on a dispatcher is
// used only from its thread; post() is the one way in from other threads.
class Dispatcher {
 public:
  Dispatcher();
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  event_base* base() { return base_; }
  // Runs until exit() or until nothing is left to wait for.
  void run();
  void exit();
  // Thread-safe: runs fn on the dispatcher's thread, soon.
  void post(std::function<void()> fn);
  // Deletes the object after the current callback returns (safe from inside its own callbacks).
  void deferredDelete(DeferredDeletablePtr object);
  // Monotonic time (unaffected by changes to the wall clock).
  MonotonicTime now();

 private:
  static void onPosted(evutil_socket_t, short, void* arg);
  static void onDeferredDelete(evutil_socket_t, short, void* arg);
  void clearDeferred();

  event_base* base_;
  // post() wakes the loop through this eventfd, so the base itself needs no lock.
  int wake_fd_;
  struct event post_event_;
  struct event deferred_event_;
  std::mutex post_lock_;
  std::vector<std::function<void()>> posted_;
  std::vector<DeferredDeletablePtr> deferred_;
  bool deferred_scheduled_ = false;
};

// A one-shot timer; embedded in its owner, no allocation when armed.
class Timer {
 public:
  Timer(Dispatcher& dispatcher, std::function<void()> cb);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void enable(std::chrono::milliseconds timeout);
  void disable();
  bool enabled() const;

 private:
  static void onFire(evutil_socket_t, short, void* arg);
  struct event event_;
  std::function<void()> cb_;
};

// Readiness of one socket, edge-triggered: the owner reads or writes until EAGAIN and is told
// again only when more becomes possible. Registered once; nothing to re-arm per operation.
class FileEvent {
 public:
  static constexpr uint32_t kRead = 1;
  static constexpr uint32_t kWrite = 2;
  static constexpr uint32_t kClosed = 4;

  FileEvent(Dispatcher& dispatcher, int fd, std::function<void(uint32_t)> cb);
  ~FileEvent();
  FileEvent(const FileEvent&) = delete;
  FileEvent& operator=(const FileEvent&) = delete;

  // Runs the callback with these events on the next loop iteration, as if the kernel said so.
  void activate(uint32_t events);
  // Stops all notifications (before the socket is closed); the callback never runs again.
  void remove();

 private:
  static void onReady(evutil_socket_t, short what, void* arg);
  struct event event_;
  std::function<void(uint32_t)> cb_;
};

}  // namespace event
}  // namespace sluice
