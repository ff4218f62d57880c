#include "source/common/event/dispatcher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "source/common/common/logger.h"

namespace sluice {
namespace event {

Dispatcher::Dispatcher() {
  event_config* cfg = event_config_new();
  // Each base is used by one thread; post() takes its own lock.
  event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
  // No EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST: a socket is registered once for its whole life
  // (edge-triggered, read and write), so there is nothing to batch, and a deferred change list
  // applies the removal after the socket is closed (a failing EPOLL_CTL_DEL), then meets the
  // next socket with the same number as a modification (a failing EPOLL_CTL_MOD before the ADD).
  base_ = event_base_new_with_config(cfg);
  event_config_free(cfg);
  SLUICE_ASSERT(base_ != nullptr, "event_base_new failed");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SLUICE_ASSERT(wake_fd_ >= 0, "eventfd failed");
  event_assign(&post_event_, base_, wake_fd_, EV_READ | EV_PERSIST, &Dispatcher::onPosted, this);
  event_add(&post_event_, nullptr);
  event_assign(&deferred_event_, base_, -1, 0, &Dispatcher::onDeferredDelete, this);
}

Dispatcher::~Dispatcher() {
  clearDeferred();
  event_del(&post_event_);
  event_del(&deferred_event_);
  event_base_free(base_);
  close(wake_fd_);
}

void Dispatcher::run() { event_base_loop(base_, 0); }

void Dispatcher::exit() {
  post([this] { event_base_loopbreak(base_); });
}

void Dispatcher::post(std::function<void()> fn) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(post_lock_);
    first = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  if (first) {
    uint64_t one = 1;
    ssize_t unused = ::write(wake_fd_, &one, sizeof(one));
    (void)unused;
  }
}

void Dispatcher::onPosted(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Dispatcher*>(arg);
  uint64_t count;
  ssize_t unused = ::read(self->wake_fd_, &count, sizeof(count));
  (void)unused;
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(self->post_lock_);
    run.swap(self->posted_);
  }
  for (auto& fn : run) fn();
}

void Dispatcher::deferredDelete(DeferredDeletablePtr object) {
  deferred_.push_back(std::move(object));
  if (!deferred_scheduled_) {
    deferred_scheduled_ = true;
    event_active(&deferred_event_, EV_TIMEOUT, 0);
  }
}

void Dispatcher::onDeferredDelete(evutil_socket_t, short, void* arg) {
  static_cast<Dispatcher*>(arg)->clearDeferred();
}

void Dispatcher::clearDeferred() {
  deferred_scheduled_ = false;
  // Destructors may defer more objects; loop until none are left.
  while (!deferred_.empty()) {
    std::vector<DeferredDeletablePtr> batch;
    batch.swap(deferred_);
    batch.clear();
  }
}

MonotonicTime Dispatcher::now() {
  // steady_clock reads the vDSO: monotonic, and no system call.
  return std::chrono::steady_clock::now();
}

Timer::Timer(Dispatcher& dispatcher, std::function<void()> cb) : cb_(std::move(cb)) {
  evtimer_assign(&event_, dispatcher.base(), &Timer::onFire, this);
}

Timer::~Timer() { evtimer_del(&event_); }

void Timer::enable(std::chrono::milliseconds timeout) {
  struct timeval tv;
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  evtimer_add(&event_, &tv);
}

void Timer::disable() { evtimer_del(&event_); }

bool Timer::enabled() const { return evtimer_pending(&event_, nullptr) != 0; }

void Timer::onFire(evutil_socket_t, short, void* arg) { static_cast<Timer*>(arg)->cb_(); }

FileEvent::FileEvent(Dispatcher& dispatcher, int fd, std::function<void(uint32_t)> cb)
    : cb_(std::move(cb)) {
  event_assign(&event_, dispatcher.base(), fd, EV_READ | EV_WRITE | EV_PERSIST | EV_ET | EV_CLOSED,
               &FileEvent::onReady, this);
  event_add(&event_, nullptr);
}

FileEvent::~FileEvent() { event_del(&event_); }

void FileEvent::activate(uint32_t events) {
  short what = 0;
  if (events & kRead) what |= EV_READ;
  if (events & kWrite) what |= EV_WRITE;
  event_active(&event_, what, 0);
}

void FileEvent::remove() { event_del(&event_); }

void FileEvent::onReady(evutil_socket_t, short what, void* arg) {
  uint32_t events = 0;
  if (what & EV_READ) events |= kRead;
  if (what & EV_WRITE) events |= kWrite;
  if (what & EV_CLOSED) events |= kClosed | kRead;
  static_cast<FileEvent*>(arg)->cb_(events);
}

}  // namespace event
}  // namespace sluice
