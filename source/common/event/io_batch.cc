#include "source/common/event/io_batch.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <liburing.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "source/common/common/logger.h"

namespace sluice {
namespace event {

namespace {
constexpr int kSendFlags = MSG_NOSIGNAL | MSG_DONTWAIT;
// Rounds of one flush: a receive's owner sends, a send's owner may send again. More wait for
// the loop's next pass, so one flush cannot hold the loop.
constexpr int kMaxRounds = 8;
// The user data of a cancellation's own completion (an operation's is its index).
constexpr uint64_t kCancelTag = UINT64_MAX;
// A look at the epoll set from the ring (a poll of its descriptor), and the answer to a standing
// receive's cancellation or registration change.
constexpr uint64_t kLookTag = UINT64_MAX - 1;
constexpr uint64_t kStandingQuietTag = UINT64_MAX - 2;
// A standing receive's answers carry its owner's address with this bit (user-space addresses
// leave it clear).
constexpr uint64_t kStandingBit = uint64_t{1} << 63;
constexpr uint16_t kBufferGroup = 1;
// Answers the ring can hold between two collections: standing receives fill it between turns.
constexpr unsigned kCompletionEntries = 4096;

uint64_t standingTag(void* owner) { return kStandingBit | reinterpret_cast<uintptr_t>(owner); }
void* standingOwner(uint64_t tag) { return reinterpret_cast<void*>(tag & ~kStandingBit); }
}  // namespace

IoBatch::IoBatch() = default;

IoBatch::~IoBatch() {
  runCloses();
  if (ring_ != nullptr) io_uring_queue_exit(ring_.get());
  if (buffer_ring_ != nullptr) munmap(buffer_ring_, kStandingBuffers * sizeof(io_uring_buf));
  free(buffer_memory_);
}

namespace {
// Inline: the batch takes one per operation.
[[gnu::always_inline]] inline io_uring_sqe* nextSqe(io_uring* ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) {
    io_uring_submit(ring);
    sqe = io_uring_get_sqe(ring);
  }
  SLUICE_ASSERT(sqe != nullptr, "io_uring submission queue full");
  return sqe;
}
}  // namespace

bool IoBatch::sqReady() const { return ring_ != nullptr && io_uring_sq_ready(ring_.get()) > 0; }

void IoBatch::submitStanding() {
  if (!sqReady()) return;
  io_uring_submit(ring_.get());
}

int IoBatch::ringFd() const { return ring_ != nullptr ? ring_->ring_fd : -1; }

bool IoBatch::setUpStanding() {
  // The provided buffers: registered once, touched only as messages fill them.
  void* br = mmap(nullptr, kStandingBuffers * sizeof(io_uring_buf), PROT_READ | PROT_WRITE,
                  MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  void* memory = aligned_alloc(4096, static_cast<size_t>(kStandingBuffers) * kStandingBufferSize);
  if (br != MAP_FAILED && memory != nullptr) {
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(br);
    reg.ring_entries = kStandingBuffers;
    reg.bgid = kBufferGroup;
    const int rc = io_uring_register_buf_ring(ring_.get(), &reg, 0);
    if (rc == 0) {
      buffer_ring_ = static_cast<io_uring_buf_ring*>(br);
      buffer_memory_ = static_cast<char*>(memory);
      io_uring_buf_ring_init(buffer_ring_);
      for (unsigned i = 0; i < kStandingBuffers; ++i) {
        io_uring_buf_ring_add(buffer_ring_,
                              buffer_memory_ + static_cast<size_t>(i) * kStandingBufferSize,
                              kStandingBufferSize, static_cast<unsigned short>(i),
                              io_uring_buf_ring_mask(kStandingBuffers), static_cast<int>(i));
      }
      io_uring_buf_ring_advance(buffer_ring_, kStandingBuffers);
      quiet_ = std::make_unique<epoll_event[]>(ring_->sq.ring_entries);
      if (boundsStandingReceives()) return true;
      SLUICE_LOG(Info, "io_uring cannot bound a standing receive here: reads by readiness");
      standing_failed_ = true;
      return false;
    }
    SLUICE_LOG(Info, "io_uring provided buffers are not available (%s): reads by readiness",
               strerror(-rc));
  }
  if (br != MAP_FAILED) munmap(br, kStandingBuffers * sizeof(io_uring_buf));
  free(memory);
  standing_failed_ = true;
  return false;
}

namespace {
// The next answer tagged `tag` (others, none expected this early, are dropped).
bool answerOf(io_uring* ring, uint64_t tag, int* res, unsigned* flags) {
  for (int tries = 0; tries < 16; ++tries) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(ring, &cqe) != 0 || cqe == nullptr) return false;
    const bool ours = io_uring_cqe_get_data64(cqe) == tag;
    *res = cqe->res;
    *flags = cqe->flags;
    io_uring_cqe_seen(ring, cqe);
    if (ours) return true;
  }
  return false;
}
}  // namespace

bool IoBatch::boundsStandingReceives() {
  // A receive of at most one byte on a socket pair holding two: a kernel that knows a multishot
  // receive's total ends it after the first answer; one that does not leaves it standing (or
  // refuses the entry). Made once per worker, before its first standing receive.
  constexpr uint64_t kProbeTag = UINT64_MAX - 3;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return false;
  bool bounded = false;
  if (::send(sv[1], "ab", 2, MSG_NOSIGNAL) == 2) {
    io_uring* ring = ring_.get();
    io_uring_sqe* sqe = nextSqe(ring);
    io_uring_prep_recv_multishot(sqe, sv[0], nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    sqe->file_index = 1;
    io_uring_sqe_set_data64(sqe, kProbeTag);
    io_uring_submit(ring);
    int res = 0;
    unsigned flags = 0;
    if (answerOf(ring, kProbeTag, &res, &flags)) {
      bounded = res > 0 && (flags & IORING_CQE_F_MORE) == 0;
      if ((flags & IORING_CQE_F_MORE) != 0) {
        // Still standing: withdrawn, and its last answer taken.
        sqe = nextSqe(ring);
        io_uring_prep_cancel64(sqe, kProbeTag, 0);
        io_uring_sqe_set_data64(sqe, kStandingQuietTag);
        io_uring_submit(ring);
        int last = 0;
        unsigned last_flags = IORING_CQE_F_MORE;
        while ((last_flags & IORING_CQE_F_MORE) != 0 &&
               answerOf(ring, kProbeTag, &last, &last_flags)) {
        }
      }
      if (res > 0 && (flags & IORING_CQE_F_BUFFER) != 0) {
        // The buffer goes back where it was: the ring's next entry.
        const unsigned id = flags >> IORING_CQE_BUFFER_SHIFT;
        io_uring_buf_ring_add(buffer_ring_,
                              buffer_memory_ + static_cast<size_t>(id) * kStandingBufferSize,
                              kStandingBufferSize, static_cast<unsigned short>(id),
                              io_uring_buf_ring_mask(kStandingBuffers), 0);
        io_uring_buf_ring_advance(buffer_ring_, 1);
      }
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return bounded;
}

bool IoBatch::arm(void* owner, const StandingHandler& handler, int fd, int epoll_fd,
                  const epoll_event& quiet) {
  if (!standingAllowed() || (ring_ == nullptr && !setUpRing())) return false;
  if (buffer_ring_ == nullptr && !setUpStanding()) return false;
  // An earlier owner at this address may still have answers on their way.
  if (isReleased(owner)) return false;
  SLUICE_ASSERT(standing_handler_ == nullptr || standing_handler_ == &handler,
                "one handler for every standing receive");
  standing_handler_ = &handler;
  ++standing_live_;
  if (standing_counted_) standing_armed_gauge_.inc();
  io_uring* ring = ring_.get();
  if (epoll_fd >= 0) {
    io_uring_sqe* sqe = nextSqe(ring);
    epoll_event* ev = &quiet_[static_cast<size_t>(sqe - ring->sq.sqes)];
    *ev = quiet;
    io_uring_prep_epoll_ctl(sqe, epoll_fd, fd, EPOLL_CTL_MOD, ev);
    io_uring_sqe_set_data64(sqe, kStandingQuietTag);
  }
  io_uring_sqe* sqe = nextSqe(ring);
  io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kBufferGroup;
  // The receive's total (the field is the entry's optlen for a multishot receive, Linux 6.16).
  sqe->file_index = kStandingReceiveLimit;
  io_uring_sqe_set_data64(sqe, standingTag(owner));
  return true;
}

void IoBatch::disarm(void* owner) {
  if (ring_ == nullptr) return;
  io_uring_sqe* sqe = nextSqe(ring_.get());
  io_uring_prep_cancel64(sqe, standingTag(owner), 0);
  io_uring_sqe_set_data64(sqe, kStandingQuietTag);
}

bool IoBatch::isReleased(void* owner) const {
  return !released_.empty() &&
         std::find(released_.begin(), released_.end(), owner) != released_.end();
}

void IoBatch::release(void* owner) {
  released_.push_back(owner);
  // Submitted with whatever enters the kernel next, before any close the batch makes.
  disarm(owner);
}

void IoBatch::takeForeign(const io_uring_cqe* cqe) {
  const uint64_t tag = io_uring_cqe_get_data64(cqe);
  if (tag == kLookTag) {
    look_armed_ = false;
    look_due_ = true;
    return;
  }
  if (tag == kStandingQuietTag) {
    if (cqe->res < 0 && cqe->res != -ENOENT && cqe->res != -EALREADY) {
      SLUICE_LOG(Debug, "standing receive: %s", strerror(-cqe->res));
    }
    return;
  }
  if (tag == kCancelTag || (tag & kStandingBit) == 0) return;
  standing_answers_.push_back({standingOwner(tag), cqe->res, cqe->flags});
}

void IoBatch::collect() {
  if (ring_ == nullptr) return;
  io_uring* ring = ring_.get();
  unsigned head;
  unsigned seen = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(ring, head, cqe) {
    ++seen;
    takeForeign(cqe);  // a batch's own answers are all taken inside its flush
  }
  io_uring_cq_advance(ring, seen);
}

bool IoBatch::wait(int epoll_fd, int timeout_ms) {
  io_uring* ring = ring_.get();
  if (!look_armed_) {
    io_uring_sqe* sqe = nextSqe(ring);
    io_uring_prep_poll_add(sqe, epoll_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, kLookTag);
    look_armed_ = true;
  }
  collect();
  if (look_due_ || !standing_answers_.empty()) timeout_ms = 0;
  if (timeout_ms == 0) {
    io_uring_submit_and_get_events(ring);
  } else if (timeout_ms < 0) {
    io_uring_submit_and_wait(ring, 1);
  } else {
    __kernel_timespec ts{};
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = static_cast<long long>(timeout_ms % 1000) * 1000000;
    io_uring_cqe* first = nullptr;
    io_uring_submit_and_wait_timeout(ring, &first, 1, &ts, nullptr);
  }
  ++waits_;
  collect();
  const bool look = look_due_;
  look_due_ = false;
  return look;
}

void IoBatch::standingOver(void* owner, int result) {
  --standing_live_;
  if (standing_counted_) standing_armed_gauge_.dec();
  if (result == -ENOBUFS && standing_counted_) standing_no_buffers_.inc();
}

void IoBatch::deliverStanding() {
  if (standing_answers_.empty()) return;
  delivering_.clear();
  delivering_.swap(standing_answers_);
  const size_t n = delivering_.size();
  const auto has_bytes = [](const StandingAnswer& a) {
    return a.result > 0 && (a.flags & IORING_CQE_F_BUFFER) != 0;
  };
  int returned = 0;
  size_t run = 0;
  uint64_t runs = 0;
  for (size_t i = 0; i < n; ++i) {
    // Callbacks may arm, disarm or release any owner: nothing is held across them.
    const StandingAnswer a = delivering_[i];
    const bool released = isReleased(a.owner);
    if (has_bytes(a)) {
      const unsigned id = a.flags >> IORING_CQE_BUFFER_SHIFT;
      char* bytes = buffer_memory_ + static_cast<size_t>(id) * kStandingBufferSize;
      if (!released) {
        // Bytes of the same receive next in line go with these before the owner acts.
        run += static_cast<size_t>(a.result);
        const bool last =
            i + 1 == n || delivering_[i + 1].owner != a.owner || !has_bytes(delivering_[i + 1]);
        const size_t told = last ? run : 0;
        if (last) {
          run = 0;
          ++runs;
        }
        standing_handler_->data(a.owner, bytes, static_cast<size_t>(a.result), told);
      }
      io_uring_buf_ring_add(buffer_ring_, bytes, kStandingBufferSize,
                            static_cast<unsigned short>(id),
                            io_uring_buf_ring_mask(kStandingBuffers), returned++);
    }
    if ((a.flags & IORING_CQE_F_MORE) != 0) continue;
    // The receive is over; its owner (if still there) hears why.
    const int result = a.result > 0 ? -EAGAIN : a.result;
    if (result == -EINVAL && !standing_failed_) {
      // A kernel without a multishot receive's total: reads stay by readiness, whose bound
      // holds (an owner that is not reading holds nothing more).
      standing_failed_ = true;
      SLUICE_LOG(Info, "io_uring cannot bound a standing receive here: reads by readiness");
    }
    standingOver(a.owner, result);
    if (released) {
      released_.erase(std::find(released_.begin(), released_.end(), a.owner));
      continue;
    }
    // Buffers handed back so far are the kernel's again before the owner reads anew.
    if (returned > 0) {
      io_uring_buf_ring_advance(buffer_ring_, returned);
      returned = 0;
    }
    standing_handler_->ended(a.owner, result);
  }
  if (returned > 0) io_uring_buf_ring_advance(buffer_ring_, returned);
  if (standing_counted_ && runs > 0) standing_completed_.add(runs);
  delivering_.clear();
}

void IoBatch::add(void* owner, const Handler& handler, int fd, Kind kind) {
  Op& op = queued_.emplace_back();
  op.owner = owner;
  op.handler.io = &handler;
  op.fd = fd;
  op.kind = kind;
}

void IoBatch::watch(void* owner, const WatchHandler& handler, int fd) {
  Op& op = queued_.emplace_back();
  op.owner = owner;
  op.handler.watch = &handler;
  op.fd = fd;
  op.kind = Kind::Watch;
}

void IoBatch::close(int fd) {
  Op& op = queued_.emplace_back();
  op.owner = this;
  op.fd = fd;
  op.kind = Kind::Close;
}

namespace {
bool isIo(IoBatch::Kind kind) { return kind == IoBatch::Kind::Send || kind == IoBatch::Kind::Recv; }
}  // namespace

void IoBatch::cancel(void* owner) {
  // A connection's socket event may share its address (its first member): kinds tell them apart.
  for (std::vector<Op>* ops : {&queued_, &running_}) {
    for (Op& op : *ops) {
      if (op.owner == owner && isIo(op.kind)) op.owner = nullptr;
    }
  }
}

void IoBatch::cancelWatch(void* owner) {
  for (std::vector<Op>* ops : {&queued_, &running_}) {
    for (Op& op : *ops) {
      if (op.owner == owner && op.kind == Kind::Watch) op.owner = nullptr;
    }
  }
}

void IoBatch::runCloses() {
  if (flushing_) return;  // the flush closes them itself
  bool submitted = false;
  for (Op& op : queued_) {
    if (op.kind != Kind::Close) continue;
    if (!submitted) {
      // A standing receive's cancellation waiting in the ring goes first: the kernel holds the
      // socket until then.
      submitPending();
      submitted = true;
    }
    ::close(op.fd);
    op.owner = nullptr;
  }
  // Only closes: what else is queued waits for the next flush.
  queued_.erase(std::remove_if(queued_.begin(), queued_.end(),
                               [](const Op& op) { return op.owner == nullptr; }),
                queued_.end());
}

void IoBatch::flush() {
  if (flushing_) return;
  flushing_ = true;
  for (int round = 0; round < kMaxRounds && !queued_.empty(); ++round) {
    const size_t take = std::min<size_t>(queued_.size(), kRingEntries);
    if (take == queued_.size()) {
      running_.swap(queued_);  // the usual case: no copy
    } else {
      running_.assign(queued_.begin(), queued_.begin() + static_cast<ptrdiff_t>(take));
      queued_.erase(queued_.begin(), queued_.begin() + static_cast<ptrdiff_t>(take));
    }
    if (slices_.size() < take * kMaxSlices) slices_.resize(take * kMaxSlices);
    size_t prepared = 0;
    for (size_t i = 0; i < take; ++i) {
      Op& op = running_[i];
      if (op.owner == nullptr) continue;
      if (op.kind == Kind::Close) {
        ++prepared;
        continue;
      }
      if (op.kind == Kind::Watch) {
        op.epoll_fd = op.handler.watch->prepare(op.owner, &op.event);
        ++prepared;
        continue;
      }
      op.first_slice = static_cast<uint32_t>(i * kMaxSlices);
      iovec* iov = &slices_[op.first_slice];
      const unsigned n = op.handler.io->prepare(op.owner, op.kind, iov,
                                                op.kind == Kind::Send ? kMaxSlices : 1, &op.cookie);
      if (n == 0) {
        op.owner = nullptr;
        continue;
      }
      op.slices = static_cast<uint8_t>(n);
      op.asked = 0;
      for (unsigned s = 0; s < n; ++s) op.asked += iov[s].iov_len;
      ++prepared;
    }
    if (prepared > 0) execute(prepared);
    // Every answer is in before any owner hears one: an owner acting on its own cannot meet
    // another whose bytes already arrived but are not yet in its buffer.
    for (Op& op : running_) {
      if (op.owner != nullptr && isIo(op.kind)) {
        op.handler.io->apply(op.owner, op.kind, op.result, op.asked, op.cookie);
      }
    }
    // finish() may queue (into queued_) and cancel (here too), never grow running_.
    for (Op& op : running_) {
      void* owner = op.owner;
      if (owner == nullptr) continue;
      op.owner = nullptr;
      switch (op.kind) {
        case Kind::Send:
        case Kind::Recv:
          op.handler.io->finish(owner, op.kind, op.result, op.asked);
          break;
        case Kind::Watch:
          op.handler.watch->finish(owner, static_cast<int>(op.result));
          break;
        case Kind::Close:
          if (op.result < 0) {
            SLUICE_LOG(Debug, "close(%d): %s", op.fd, strerror(static_cast<int>(-op.result)));
          }
          break;
      }
    }
    running_.clear();
  }
  flushing_ = false;
}

ssize_t IoBatch::callDirect(const Op& op, const iovec* iov) {
  ssize_t rc;
  if (op.kind == Kind::Close) {
    rc = ::close(op.fd);
  } else if (op.kind == Kind::Watch) {
    epoll_event ev = op.event;
    rc = epoll_ctl(op.epoll_fd, EPOLL_CTL_ADD, op.fd, &ev);
  } else if (op.kind == Kind::Recv) {
    rc = ::recv(op.fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT);
  } else if (op.slices == 1) {
    rc = ::send(op.fd, iov[0].iov_base, iov[0].iov_len, kSendFlags);
  } else {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = op.slices;
    rc = ::sendmsg(op.fd, &msg, kSendFlags);
  }
  return rc < 0 ? -errno : rc;
}

bool IoBatch::setUpRing() {
  auto ring = std::make_unique<io_uring>();
  io_uring_params params{};
  // A submission that meets an error goes on with the rest. The kernel's task work (a standing
  // receive's messages) runs at the loop's next entry into the kernel, whatever the call, and
  // wakes its wait. With standing receives, room for many answers between two collections (the
  // batch's own are all taken within its entry: the default twice the submissions is enough).
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  if (standing_allowed_) {
    params.flags |= IORING_SETUP_CQSIZE;
    params.cq_entries = kCompletionEntries;
  }
  int rc = io_uring_queue_init_params(kRingEntries, ring.get(), &params);
  if (rc == -EINVAL) {
    params = io_uring_params{};
    rc = io_uring_queue_init_params(kRingEntries, ring.get(), &params);
  }
  if (rc < 0) {
    ring_failed_ = true;
    SLUICE_LOG(Info, "io_uring is not available (%s): a system call per operation", strerror(-rc));
    return false;
  }
  ring_ = std::move(ring);
  return true;
}

void IoBatch::execute(size_t prepared) {
  operations_ += prepared;
  if (counted_) operations_counter_.add(prepared);
  // A batch of one is its system call, unless entries wait in the ring (a standing receive's
  // cancellation must reach the kernel before a close that follows it).
  if ((prepared == 1 && !sqPending()) || ring_failed_ || (ring_ == nullptr && !setUpRing())) {
    for (Op& op : running_) {
      if (op.owner != nullptr) op.result = callDirect(op, &slices_[op.first_slice]);
    }
    return;
  }
  io_uring* ring = ring_.get();
  const uint64_t enters_before = ring_enters_;
  msghdr msgs[kRingEntries];
  for (size_t i = 0; i < running_.size(); ++i) {
    Op& op = running_[i];
    if (op.owner == nullptr) continue;
    // The ring holds kRingEntries and every earlier batch was taken whole.
    io_uring_sqe* sqe = nextSqe(ring);
    iovec* iov = &slices_[op.first_slice];
    if (op.kind == Kind::Close) {
      io_uring_prep_close(sqe, op.fd);
    } else if (op.kind == Kind::Watch) {
      // The kernel copies the event while it takes the entry.
      io_uring_prep_epoll_ctl(sqe, op.epoll_fd, op.fd, EPOLL_CTL_ADD, &op.event);
    } else if (op.kind == Kind::Recv) {
      io_uring_prep_recv(sqe, op.fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT);
    } else if (op.slices == 1) {
      io_uring_prep_send(sqe, op.fd, iov[0].iov_base, iov[0].iov_len, kSendFlags);
    } else {
      msgs[i] = msghdr{};
      msgs[i].msg_iov = iov;
      msgs[i].msg_iovlen = op.slices;
      io_uring_prep_sendmsg(sqe, op.fd, &msgs[i], kSendFlags);
    }
    io_uring_sqe_set_data64(sqe, i);
    op.result = -ECANCELED;
  }
  // One entry into the kernel for the whole batch. An entry that fails goes on with the rest,
  // its error in its own answer (SUBMIT_ALL); a refusal of the whole call (no memory for the
  // requests) is tried again.
  int submitted;
  int tries = 0;
  do {
    submitted = io_uring_submit(ring);
    ++ring_enters_;
  } while (submitted < 0 && (submitted == -EINTR || submitted == -EAGAIN) && ++tries < 1000);
  SLUICE_ASSERT(submitted >= 0, "io_uring_submit failed");
  const uint64_t own_tags = running_.size();  // an operation's tag is its index
  size_t done = 0;
  bool cancelled = false;
  size_t cancels = 0;
  while (done < prepared || cancels > 0) {
    io_uring_cqe* cqe;
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      ++seen;
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag < own_tags) {
        running_[tag].result = cqe->res;
        ++done;
      } else if (tag == kCancelTag) {
        --cancels;
      } else {
        takeForeign(cqe);
      }
    }
    io_uring_cq_advance(ring, seen);
    if (done == prepared && cancels == 0) break;
    if (!cancelled && done < prepared) {
      // An operation the kernel did not finish while taking it (a kernel that waits for a
      // socket despite MSG_DONTWAIT): withdrawn, and its owner hears EAGAIN, as from the call.
      cancelled = true;
      for (size_t i = 0; i < running_.size(); ++i) {
        if (running_[i].owner == nullptr || running_[i].result != -ECANCELED) continue;
        // A close is waited for, never withdrawn: its descriptor would stay open.
        if (running_[i].kind == Kind::Close) continue;
        io_uring_sqe* sqe = nextSqe(ring);
        io_uring_prep_cancel64(sqe, i, 0);
        io_uring_sqe_set_data64(sqe, kCancelTag);
        ++cancels;
      }
      io_uring_submit(ring);
      ++ring_enters_;
      continue;
    }
    // Submits anything the kernel did not take yet, then waits for one more answer.
    io_uring_submit_and_wait(ring, 1);
    ++ring_enters_;
  }
  for (Op& op : running_) {
    if (op.owner != nullptr && op.result == -ECANCELED) op.result = -EAGAIN;
  }
  if (counted_) ring_enters_counter_.add(ring_enters_ - enters_before);
}

}  // namespace event
}  // namespace sluice
