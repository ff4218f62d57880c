#include "source/common/event/io_batch.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <liburing.h>
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
}  // namespace

IoBatch::IoBatch() = default;

IoBatch::~IoBatch() {
  runCloses();
  if (ring_ != nullptr) io_uring_queue_exit(ring_.get());
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
  for (Op& op : queued_) {
    if (op.kind != Kind::Close) continue;
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
  // A submission that meets an error goes on with the rest; nothing here needs task work run
  // at once (every operation completes while it is submitted).
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
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
  if (prepared == 1 || ring_failed_ || (ring_ == nullptr && !setUpRing())) {
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
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    SLUICE_ASSERT(sqe != nullptr, "io_uring submission queue full");
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
      if (tag == kCancelTag) {
        --cancels;
        continue;
      }
      running_[tag].result = cqe->res;
      ++done;
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
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (sqe == nullptr) {
          io_uring_submit(ring);
          sqe = io_uring_get_sqe(ring);
        }
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
