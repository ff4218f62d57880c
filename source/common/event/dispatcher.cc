#include "source/common/event/dispatcher.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "source/common/common/logger.h"

namespace sluice {
namespace event {

Dispatcher::Dispatcher() {
  event_config* cfg = event_config_new();
  // Each base is used by one thread; post() takes its own lock.
  event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
  // Sockets are in the dispatcher's own epoll set, not in libevent (FileEvent): libevent waits on
  // that set, its wake eventfd and the few descriptors of its own (the DNS resolver's, the admin
  // endpoint's) with poll(2). Not with epoll: an epoll set that another epoll set watches makes
  // every EPOLL_CTL_ADD to it take the kernel's global epoll mutex and walk the nesting for loops,
  // once per accepted or connected socket; polled, the set is a descriptor like any other.
  event_config_avoid_method(cfg, "epoll");
  event_config_avoid_method(cfg, "select");
  base_ = event_base_new_with_config(cfg);
  event_config_free(cfg);
  SLUICE_ASSERT(base_ != nullptr, "event_base_new failed");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SLUICE_ASSERT(wake_fd_ >= 0, "eventfd failed");
  event_assign(&post_event_, base_, wake_fd_, EV_READ | EV_PERSIST, &Dispatcher::onPosted, this);
  event_add(&post_event_, nullptr);
  event_assign(&deferred_event_, base_, -1, 0, &Dispatcher::onDeferredDelete, this);
  evtimer_assign(&timer_event_, base_, &Dispatcher::onTimerEvent, this);
  sockets_fd_ = epoll_create1(EPOLL_CLOEXEC);
  SLUICE_ASSERT(sockets_fd_ >= 0, "epoll_create1 failed");
  event_assign(&sockets_event_, base_, sockets_fd_, EV_READ | EV_PERSIST, &Dispatcher::onSockets,
               this);
  event_add(&sockets_event_, nullptr);
  event_assign(&activated_event_, base_, -1, 0, &Dispatcher::onActivated, this);
  io_batch_ = std::make_unique<IoBatch>(base_);
}

void Dispatcher::setIoBatching(bool on) {
  if (on == (io_batch_ != nullptr)) return;
  if (on) {
    io_batch_ = std::make_unique<IoBatch>(base_);
  } else {
    io_batch_->flush();
    io_batch_.reset();
  }
}

Dispatcher::~Dispatcher() {
  clearDeferred();
  io_batch_.reset();
  event_del(&post_event_);
  event_del(&deferred_event_);
  evtimer_del(&timer_event_);
  event_del(&sockets_event_);
  event_del(&activated_event_);
  // Timers that outlive the dispatcher (destroyed after it) must not reach back into it.
  for (Timer* timer : timers_) timer->slot_ = Timer::kUnarmed;
  event_base_free(base_);
  close(wake_fd_);
  close(sockets_fd_);
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

bool Dispatcher::before(const Timer* a, const Timer* b) {
  if (a->deadline_ != b->deadline_) return a->deadline_ < b->deadline_;
  return static_cast<int32_t>(a->order_ - b->order_) < 0;  // wraps safely
}

void Dispatcher::placeTimer(uint32_t slot, Timer* timer) {
  timers_[slot] = timer;
  timer->slot_ = slot;
}

void Dispatcher::siftUp(uint32_t slot) {
  Timer* timer = timers_[slot];
  while (slot > 0) {
    const uint32_t parent = (slot - 1) / 2;
    if (!before(timer, timers_[parent])) break;
    placeTimer(slot, timers_[parent]);
    slot = parent;
  }
  placeTimer(slot, timer);
}

void Dispatcher::siftDown(uint32_t slot) {
  Timer* timer = timers_[slot];
  const uint32_t size = static_cast<uint32_t>(timers_.size());
  for (;;) {
    uint32_t child = 2 * slot + 1;
    if (child >= size) break;
    if (child + 1 < size && before(timers_[child + 1], timers_[child])) ++child;
    if (!before(timers_[child], timer)) break;
    placeTimer(slot, timers_[child]);
    slot = child;
  }
  placeTimer(slot, timer);
}

void Dispatcher::resift(uint32_t slot) {
  if (slot > 0 && before(timers_[slot], timers_[(slot - 1) / 2])) {
    siftUp(slot);
  } else {
    siftDown(slot);
  }
}

void Dispatcher::armTimer(Timer& timer, MonotonicTime deadline, MonotonicTime now) {
  timer.deadline_ = deadline;
  timer.order_ = next_timer_order_++;
  if (timer.slot_ == Timer::kUnarmed) {
    timers_.push_back(&timer);
    timer.slot_ = static_cast<uint32_t>(timers_.size() - 1);
  }
  // Re-arming an armed timer moves it in place (a keep-alive request re-arms its codec's).
  resift(timer.slot_);
  if (timers_.front() == &timer) scheduleTimers(now);
}

void Dispatcher::disarmTimer(Timer& timer) {
  const uint32_t slot = timer.slot_;
  timer.slot_ = Timer::kUnarmed;
  Timer* last = timers_.back();
  timers_.pop_back();
  if (last != &timer) {
    placeTimer(slot, last);
    resift(slot);
  }
  // With timers left, the libevent timer stays as it is: firing early, it finds nothing due
  // and points itself at the new earliest deadline (one wakeup, not one event_add per disable).
  if (timers_.empty() && timer_event_armed_) {
    evtimer_del(&timer_event_);
    timer_event_armed_ = false;
  }
}

void Dispatcher::scheduleTimers(MonotonicTime now) {
  if (timers_.empty()) return;
  const MonotonicTime due = timers_.front()->deadline_;
  if (timer_event_armed_ && timer_event_at_ <= due) return;
  const auto wait = std::max(std::chrono::duration_cast<std::chrono::microseconds>(due - now),
                             std::chrono::microseconds(0));
  struct timeval tv;
  tv.tv_sec = wait.count() / 1000000;
  tv.tv_usec = wait.count() % 1000000;
  evtimer_add(&timer_event_, &tv);
  timer_event_at_ = due;
  timer_event_armed_ = true;
}

void Dispatcher::onTimerEvent(evutil_socket_t, short, void* arg) {
  static_cast<Dispatcher*>(arg)->runTimers();
}

void Dispatcher::runTimers() {
  timer_event_armed_ = false;
  // One reading of the clock for the whole pass: a timer armed by a callback with a zero
  // timeout waits for the next pass (the next loop iteration), as with libevent's own timers.
  // Timers armed during the pass (order from pass_end on) wait for the next one too.
  const MonotonicTime now = this->now();
  const uint32_t pass_end = next_timer_order_;
  while (!timers_.empty()) {
    Timer& timer = *timers_.front();
    if (timer.deadline_ > now + kTimerSlack) break;
    if (static_cast<int32_t>(timer.order_ - pass_end) >= 0) break;
    disarmTimer(timer);
    timer.fire();  // may arm, disarm or destroy any timer, itself included
  }
  scheduleTimers(this->now());
}

Timer::~Timer() {
  if (slot_ != kUnarmed) dispatcher_.disarmTimer(*this);
  thunk_(callback_, true);
}

void Timer::enable(std::chrono::milliseconds timeout) {
  const MonotonicTime now = dispatcher_.now();
  dispatcher_.armTimer(*this, now + timeout, now);
}

void Timer::disable() {
  if (slot_ != kUnarmed) dispatcher_.disarmTimer(*this);
}

void Dispatcher::onSockets(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Dispatcher*>(arg);
  // Level-triggered in libevent: a full batch leaves the set ready, and the next loop iteration
  // takes the rest (after timers and other events had their turn).
  const int n = epoll_wait(self->sockets_fd_, self->ready_, kReadyBatch, 0);
  if (n <= 0) return;
  self->ready_count_ = n;
  for (int i = 0; i < n; ++i) {
    self->ready_next_ = i + 1;
    auto* event = static_cast<FileEvent*>(self->ready_[i].data.ptr);
    if (event == nullptr) continue;  // went away earlier in this batch
    const uint32_t what = self->ready_[i].events;
    uint32_t events = 0;
    if ((what & EPOLLERR) || ((what & EPOLLHUP) && !(what & EPOLLRDHUP))) {
      events = FileEvent::kRead | FileEvent::kWrite;
    } else {
      if (what & EPOLLIN) events |= FileEvent::kRead;
      if (what & EPOLLOUT) events |= FileEvent::kWrite;
      if (what & EPOLLRDHUP) events |= FileEvent::kClosed | FileEvent::kRead;
    }
    event->deliver_(event->owner_, events);
  }
  self->ready_count_ = 0;
  self->ready_next_ = 0;
}

void Dispatcher::onActivated(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Dispatcher*>(arg);
  // Events activated by these callbacks wait for the next turn.
  self->delivering_.swap(self->activated_);
  for (size_t i = 0; i < self->delivering_.size(); ++i) {
    FileEvent* event = self->delivering_[i];
    if (event == nullptr) continue;
    const uint32_t events = event->activated_;
    event->activated_ = 0;
    event->deliver_(event->owner_, events);
  }
  self->delivering_.clear();
}

void Dispatcher::forget(FileEvent* event) {
  for (int i = ready_next_; i < ready_count_; ++i) {
    if (ready_[i].data.ptr == event) ready_[i].data.ptr = nullptr;
  }
  if (event->activated_ != 0) {
    event->activated_ = 0;
    for (FileEvent*& e : activated_) {
      if (e == event) e = nullptr;
    }
  }
  for (FileEvent*& e : delivering_) {
    if (e == event) e = nullptr;
  }
}

void FileEvent::add() {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = this;
  if (epoll_ctl(dispatcher_.sockets_fd_, EPOLL_CTL_ADD, fd_, &ev) != 0) {
    // Not a socket epoll can watch, or one already watched: the owner hears an error on its
    // first read or write, so tell it now.
    SLUICE_LOG(Warn, "epoll_ctl(ADD, %d): %s", fd_, strerror(errno));
    fd_ = -1;
    activate(kRead | kWrite);
  }
}

void FileEvent::activate(uint32_t events) {
  if (events == 0) return;
  if (activated_ == 0) {
    if (dispatcher_.activated_.empty()) event_active(&dispatcher_.activated_event_, EV_TIMEOUT, 0);
    dispatcher_.activated_.push_back(this);
  }
  activated_ |= events;
}

void FileEvent::remove() {
  if (fd_ >= 0) {
    epoll_ctl(dispatcher_.sockets_fd_, EPOLL_CTL_DEL, fd_, nullptr);
    fd_ = -1;
  }
  dispatcher_.forget(this);
}

}  // namespace event
}  // namespace sluice
