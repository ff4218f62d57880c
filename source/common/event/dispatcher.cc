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
  // Sockets are in the dispatcher's own epoll set, not in libevent (FileEvent). When libevent
  // waits, it waits on that set and the few descriptors of its own (the DNS resolver's, the
  // admin endpoint's, signals) with poll(2). Not with epoll: an epoll set that another epoll set
  // watches makes every EPOLL_CTL_ADD to it take the kernel's global epoll mutex and walk the
  // nesting for loops, once per accepted or connected socket; polled, the set is a descriptor
  // like any other.
  event_config_avoid_method(cfg, "epoll");
  event_config_avoid_method(cfg, "select");
  base_ = event_base_new_with_config(cfg);
  event_config_free(cfg);
  SLUICE_ASSERT(base_ != nullptr, "event_base_new failed");
  evtimer_assign(&timer_event_, base_, &Dispatcher::onTimerEvent, this);
  sockets_fd_ = epoll_create1(EPOLL_CLOEXEC);
  SLUICE_ASSERT(sockets_fd_ >= 0, "epoll_create1 failed");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SLUICE_ASSERT(wake_fd_ >= 0, "eventfd failed");
  epoll_event wake{};
  wake.events = EPOLLIN | EPOLLET;
  wake.data.ptr = &wake_tag_;
  SLUICE_ASSERT(epoll_ctl(sockets_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) == 0,
                "epoll_ctl(ADD) of the wake eventfd failed");
  event_assign(&sockets_event_, base_, sockets_fd_, EV_READ | EV_PERSIST, &Dispatcher::onSockets,
               this);
  event_add(&sockets_event_, nullptr);
  io_batch_ = std::make_unique<IoBatch>();
}

void Dispatcher::setIoBatching(bool on) {
  if (on == (io_batch_ != nullptr)) return;
  if (on) {
    io_batch_ = std::make_unique<IoBatch>();
  } else {
    io_batch_->flush();
    io_batch_.reset();
  }
}

Dispatcher::~Dispatcher() {
  clearDeferred();
  if (ring_watched_) event_del(&ring_event_);
  io_batch_.reset();
  evtimer_del(&timer_event_);
  event_del(&sockets_event_);
  // Timers that outlive the dispatcher (destroyed after it) must not reach back into it.
  for (const ArmedTimer& armed : timers_) armed.timer->slot_ = Timer::kUnarmed;
  event_base_free(base_);
  close(wake_fd_);
  close(sockets_fd_);
}

void Dispatcher::run() {
  stopped_ = false;
  while (!stopped_) runOnce(true);
}

void Dispatcher::stop() {
  stopped_ = true;
  event_base_loopbreak(base_);
}

void Dispatcher::exit() {
  post([this] { stop(); });
}

bool Dispatcher::libeventIdle() const {
  // The sockets' set is always there; the timers' libevent timer while armed; the ring's
  // descriptor while libevent waits for standing receives too.
  const int ours = 1 + (evtimer_pending(&timer_event_, nullptr) ? 1 : 0) + (ring_watched_ ? 1 : 0);
  return event_base_get_num_events(base_, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE) == ours;
}

void Dispatcher::watchRing(bool on) {
  if (on == ring_watched_) return;
  if (on) {
    // A standing receive's messages make the ring's descriptor readable (once the kernel's task
    // work, which interrupts libevent's wait, has run): libevent wakes for them as for a socket.
    event_assign(
        &ring_event_, base_, io_batch_->ringFd(), EV_READ | EV_PERSIST,
        [](evutil_socket_t, short, void*) {}, nullptr);
    event_add(&ring_event_, nullptr);
  } else {
    event_del(&ring_event_);
  }
  ring_watched_ = on;
}

bool Dispatcher::workDue() const {
  return !activated_.empty() || !deferred_.empty() ||
         (io_batch_ != nullptr && io_batch_->pending());
}

int Dispatcher::timerWaitMs(MonotonicTime now) const {
  if (timers_.empty()) return -1;
  const MonotonicTime due = timers_.front().deadline;
  if (due <= now) return 0;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(due - now).count();
  return static_cast<int>(std::min<int64_t>(wait, 24 * 3600 * 1000));
}

void Dispatcher::runOnce(bool may_wait) {
  ++turns_;
  if (io_batch_ != nullptr && io_batch_->pending()) {
    // Queued outside a turn (a connection made or closed between turns): registrations and
    // closes precede the look at the set.
    io_batch_->flush();
    io_batch_->runCloses();
  }
  bool wait = may_wait && !workDue();
  IoBatch* batch = io_batch_.get();
  const bool standing = batch != nullptr && batch->standing();
  if (!standing && ring_watched_) watchRing(false);
  if (libeventIdle()) {
    // One system call for the turn: the set itself, as long as the earliest timer allows; with
    // receives standing in the ring, the ring's wait, which looks at the set from there.
    if (ring_watched_) watchRing(false);
    const uint32_t armed_before = next_timer_order_;
    if (standing) {
      const bool look = batch->wait(sockets_fd_, wait ? timerWaitMs(now()) : 0);
      beginTurnTime();
      if (look) takeReady(0);
      batch->deliverStanding();
    } else {
      const int timeout = wait ? timerWaitMs(now()) : 0;
      const int n = epoll_wait(sockets_fd_, ready_, kReadyBatch, timeout);
      beginTurnTime();
      if (n > 0) deliverReady(n);
    }
    if (!timers_.empty() && timers_.front().deadline <= now() + kTimerSlack) {
      runTimers(armed_before);
    }
  } else {
    if (standing) {
      // libevent waits (a DNS query in flight, the main thread's signals): the ring is one of
      // its descriptors, and what the ring holds already means no wait at all.
      watchRing(true);
      batch->submitPending();
      batch->collect();
      if (batch->hasAnswers()) wait = false;
    }
    event_base_loop(base_, wait ? EVLOOP_ONCE : EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (standing) {
      batch->collect();
      batch->deliverStanding();
    }
  }
  runWork();
  turn_now_valid_ = false;
}

void Dispatcher::beginTurnTime() {
  // One reading of the clock for what the turn does (nginx and libevent do the same): timers
  // armed and deadlines compared in it are measured from when its wait returned.
  turn_now_ = std::chrono::steady_clock::now();
  turn_now_valid_ = true;
}

void Dispatcher::runWork() {
  // Events activated by the batch's owners, and batch operations queued by activated owners,
  // run in the same turn, a few passes at most; the rest waits for the next turn (which then
  // does not wait).
  for (int pass = 0; pass < 4; ++pass) {
    const bool activated = !activated_.empty();
    if (activated) onActivated();
    const bool batched = io_batch_ != nullptr && io_batch_->pending();
    if (batched) io_batch_->flush();
    if (!activated && !batched) break;
  }
  // A closed socket leaves the set when it is closed: before the next look at the set.
  if (io_batch_ != nullptr) io_batch_->runCloses();
  clearDeferred();
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

void Dispatcher::onPosted() {
  uint64_t count;
  ssize_t unused = ::read(wake_fd_, &count, sizeof(count));
  (void)unused;
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(post_lock_);
    run.swap(posted_);
  }
  for (auto& fn : run) fn();
}

void Dispatcher::deferredDelete(DeferredDeletablePtr object) {
  deferred_.push_back(std::move(object));
}

void Dispatcher::clearDeferred() {
  // Destructors may defer more objects; loop until none are left. Both lists keep their
  // capacity: a turn that closes connections allocates nothing for it. A call from inside a
  // destructor leaves the rest to the loop it is in (deleting_ is being cleared).
  if (clearing_deferred_) return;
  clearing_deferred_ = true;
  while (!deferred_.empty()) {
    deleting_.swap(deferred_);
    deleting_.clear();
  }
  clearing_deferred_ = false;
}

MonotonicTime Dispatcher::now() {
  // steady_clock reads the vDSO: monotonic, and no system call. Within a turn that waited on
  // the sockets, the reading taken when the wait returned serves every caller.
  return turn_now_valid_ ? turn_now_ : std::chrono::steady_clock::now();
}

bool Dispatcher::before(const ArmedTimer& a, const ArmedTimer& b) {
  if (a.deadline != b.deadline) return a.deadline < b.deadline;
  // Equal deadlines (timers armed in one turn with one timeout): the only case that reads the
  // timers, which that turn just touched.
  return static_cast<int32_t>(a.timer->order_ - b.timer->order_) < 0;  // wraps safely
}

void Dispatcher::placeTimer(uint32_t slot, const ArmedTimer& armed) {
  timers_[slot] = armed;
  armed.timer->slot_ = slot;
}

void Dispatcher::siftUp(uint32_t slot) {
  const ArmedTimer armed = timers_[slot];
  while (slot > 0) {
    const uint32_t parent = (slot - 1) / 2;
    if (!before(armed, timers_[parent])) break;
    placeTimer(slot, timers_[parent]);
    slot = parent;
  }
  placeTimer(slot, armed);
}

void Dispatcher::siftDown(uint32_t slot) {
  const ArmedTimer armed = timers_[slot];
  const uint32_t size = static_cast<uint32_t>(timers_.size());
  for (;;) {
    uint32_t child = 2 * slot + 1;
    if (child >= size) break;
    if (child + 1 < size && before(timers_[child + 1], timers_[child])) ++child;
    if (!before(timers_[child], armed)) break;
    placeTimer(slot, timers_[child]);
    slot = child;
  }
  placeTimer(slot, armed);
}

void Dispatcher::resift(uint32_t slot) {
  if (slot > 0 && before(timers_[slot], timers_[(slot - 1) / 2])) {
    siftUp(slot);
  } else {
    siftDown(slot);
  }
}

void Dispatcher::armTimer(Timer& timer, MonotonicTime deadline, MonotonicTime now) {
  timer.order_ = next_timer_order_++;
  const ArmedTimer armed{deadline, &timer};
  if (timer.slot_ == Timer::kUnarmed) {
    timers_.push_back(armed);
    timer.slot_ = static_cast<uint32_t>(timers_.size() - 1);
  } else {
    timers_[timer.slot_] = armed;
  }
  // Re-arming an armed timer moves it in place (a keep-alive request re-arms its codec's).
  resift(timer.slot_);
  if (timers_.front().timer == &timer) scheduleTimers(now);
}

void Dispatcher::disarmTimer(Timer& timer) {
  const uint32_t slot = timer.slot_;
  timer.slot_ = Timer::kUnarmed;
  const ArmedTimer last = timers_.back();
  timers_.pop_back();
  if (last.timer != &timer) {
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
  const MonotonicTime due = timers_.front().deadline;
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
  auto* self = static_cast<Dispatcher*>(arg);
  self->runTimers(self->next_timer_order_);
}

void Dispatcher::runTimers(uint32_t pass_end) {
  timer_event_armed_ = false;
  // One reading of the clock for the whole pass: a timer armed by a callback with a zero
  // timeout waits for the next pass (the next loop iteration), as with libevent's own timers.
  // Timers armed during the pass (order from pass_end on) wait for the next one too.
  const MonotonicTime now = this->now();
  while (!timers_.empty()) {
    const ArmedTimer& first = timers_.front();
    if (first.deadline > now + kTimerSlack) break;
    if (static_cast<int32_t>(first.timer->order_ - pass_end) >= 0) break;
    Timer& timer = *first.timer;
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
  // Level-triggered in libevent: a full batch leaves the set ready, and the next look takes the
  // rest.
  static_cast<Dispatcher*>(arg)->takeReady(0);
}

void Dispatcher::takeReady(int timeout_ms) {
  const int n = epoll_wait(sockets_fd_, ready_, kReadyBatch, timeout_ms);
  if (n > 0) deliverReady(n);
}

void Dispatcher::deliverReady(int n) {
  ready_count_ = n;
  for (int i = 0; i < n; ++i) {
    ready_next_ = i + 1;
    void* tag = ready_[i].data.ptr;
    if (tag == nullptr) continue;  // went away earlier in this batch
    if (tag == &wake_tag_) {
      onPosted();
      continue;
    }
    auto* event = static_cast<FileEvent*>(tag);
    const uint32_t what = ready_[i].events;
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
  ready_count_ = 0;
  ready_next_ = 0;
}

void Dispatcher::onActivated() {
  // Events activated by these callbacks wait for the next pass.
  delivering_.swap(activated_);
  for (size_t i = 0; i < delivering_.size(); ++i) {
    FileEvent* event = delivering_[i];
    if (event == nullptr) continue;
    const uint32_t events = event->activated_;
    event->activated_ = 0;
    event->deliver_(event->owner_, events);
  }
  delivering_.clear();
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

namespace {
uint32_t epollEvents(FileEvent::Interest interest) {
  switch (interest) {
    case FileEvent::Interest::Read:
      return EPOLLIN | EPOLLRDHUP | EPOLLET;
    case FileEvent::Interest::ReadWrite:
      return EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    case FileEvent::Interest::ReadLevel:
      return EPOLLIN | EPOLLRDHUP;
    case FileEvent::Interest::Quiet:
      return EPOLLET;
    case FileEvent::Interest::WriteOnly:
      return EPOLLOUT | EPOLLET;
  }
  return EPOLLIN | EPOLLRDHUP | EPOLLET;
}
}  // namespace

void FileEvent::add() {
  IoBatch* batch = dispatcher_.ioBatch();
  if (batch != nullptr && batch->ringAvailable()) {
    // With the loop's batch at the end of the turn, before the next look at the set: a socket
    // that is ready by then is reported at that look (edge-triggered or not).
    registering_ = true;
    batch->watch(this, kWatchHandler, fd_);
    return;
  }
  addNow();
}

void FileEvent::addNow() {
  epoll_event ev{};
  ev.events = epollEvents(interest_);
  ev.data.ptr = this;
  if (epoll_ctl(dispatcher_.sockets_fd_, EPOLL_CTL_ADD, fd_, &ev) != 0) addFailed(errno);
}

void FileEvent::addFailed(int err) {
  // Not a socket epoll can watch, or one already watched: the owner hears an error on its
  // first read or write, so tell it now.
  SLUICE_LOG(Warn, "epoll_ctl(ADD, %d): %s", fd_, strerror(err));
  fd_ = -1;
  activate(kRead | kWrite);
}

const IoBatch::WatchHandler FileEvent::kWatchHandler = {
    [](void* self, epoll_event* ev) {
      FileEvent* event = static_cast<FileEvent*>(self);
      ev->events = epollEvents(event->interest_);  // watchWrites() meanwhile is carried
      ev->data.ptr = event;
      return event->dispatcher_.sockets_fd_;
    },
    [](void* self, int result) {
      FileEvent* event = static_cast<FileEvent*>(self);
      event->registering_ = false;
      if (result == -EAGAIN) {
        event->addNow();  // not made in the batch (the kernel would have had to wait)
      } else if (result < 0) {
        event->addFailed(-result);
      }
    },
};

int FileEvent::quietReads(epoll_event* ev) {
  Interest next = interest_;
  if (interest_ == Interest::Read) next = Interest::Quiet;
  if (interest_ == Interest::ReadWrite) next = Interest::WriteOnly;
  if (next == interest_) return -1;
  interest_ = next;
  if (fd_ < 0 || registering_) return -1;  // a queued registration takes the new interest
  ev->events = epollEvents(interest_);
  ev->data.ptr = this;
  return dispatcher_.sockets_fd_;
}

void FileEvent::readsByReadiness() {
  Interest next = interest_;
  if (interest_ == Interest::Quiet) next = Interest::Read;
  if (interest_ == Interest::WriteOnly) next = Interest::ReadWrite;
  if (next == interest_) return;
  interest_ = next;
  modify();
}

void FileEvent::watchWrites() {
  if (interest_ == Interest::Quiet) {
    interest_ = Interest::WriteOnly;
    modify();
    return;
  }
  if (interest_ != Interest::Read) return;  // watched already, or level-triggered reads only
  interest_ = Interest::ReadWrite;
  modify();
}

void FileEvent::modify() {
  if (fd_ < 0 || registering_) return;  // a queued registration takes the new interest
  // A change the ring carries (IoBatch::arm) reaches the kernel before this one.
  if (IoBatch* batch = dispatcher_.ioBatch()) batch->submitPending();
  epoll_event ev{};
  ev.events = epollEvents(interest_);
  ev.data.ptr = this;
  if (epoll_ctl(dispatcher_.sockets_fd_, EPOLL_CTL_MOD, fd_, &ev) != 0) {
    // The registration is gone (it cannot be, short of a closed descriptor): the owner hears
    // an error on its next write.
    SLUICE_LOG(Warn, "epoll_ctl(MOD, %d): %s", fd_, strerror(errno));
    activate(kWrite);
  }
}

void FileEvent::activate(uint32_t events) {
  if (events == 0) return;
  if (activated_ == 0) dispatcher_.activated_.push_back(this);
  activated_ = static_cast<uint8_t>(activated_ | events);
}

void FileEvent::dropRegistration() {
  if (!registering_) return;
  registering_ = false;
  if (IoBatch* batch = dispatcher_.ioBatch()) batch->cancelWatch(this);
}

void FileEvent::removeBeforeClose() {
  dropRegistration();
  fd_ = -1;
  dispatcher_.forget(this);
}

void FileEvent::remove() {
  if (fd_ >= 0) {
    // A registration still queued may have been made already (within the flush that runs now):
    // deleted either way (ENOENT when it was not).
    dropRegistration();
    epoll_ctl(dispatcher_.sockets_fd_, EPOLL_CTL_DEL, fd_, nullptr);
    fd_ = -1;
  }
  dispatcher_.forget(this);
}

void Dispatcher::closeSocket(int fd) {
  if (io_batch_ != nullptr && io_batch_->ringAvailable()) {
    io_batch_->close(fd);
  } else {
    ::close(fd);
  }
}

}  // namespace event
}  // namespace sluice
