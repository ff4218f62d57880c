#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <sys/epoll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "source/common/stats/stats.h"

struct io_uring;

namespace sluice {
namespace event {

// The sends and receives a worker's connections ask for during a turn of its loop, carried to
// the kernel together: one io_uring_enter(2) for the whole batch instead of a system call each.
// On this kind of machine entering the kernel is the largest part of a small message's cost, so
// at 64 keep-alive connections a request's two receives and two sends cost a fraction of a
// system call each instead of four. A new socket's registration in the loop's epoll set and a
// closed socket's close(2) go with the same batch (watch(), close()).
//
// Every operation is non-blocking (MSG_DONTWAIT): the kernel tries it once while it takes the
// batch and answers at once, bytes or -EAGAIN, as the system call would have. Nothing stays in
// flight after io_uring_enter returns, so an owner's buffers and the owner itself only have to
// live until then, and an owner that goes away before is simply left out (cancel()).
//
// An owner asks with add(); the batch runs at the end of the loop's turn (Dispatcher), before
// the loop waits again. For each send or receive, in three steps:
//   prepare  at the flush, the owner says what to send or where to receive, as it is now
//            (bytes written after add() go too), or that there is nothing to do any more;
//   apply    once the kernel has answered every operation, and before any owner hears anything,
//            each owner applies its answer to its buffers (drains what left, commits what came);
//   finish   then each owner acts on its answer (calls its callbacks, may ask again).
// A batch of one operation is made with the system call itself (a ring costs more for one), and
// without io_uring (an old kernel, a sandbox refusing it) every operation is.
class IoBatch {
 public:
  // Watch: EPOLL_CTL_ADD of a socket (watch()); Close: close(2) of one (close()).
  enum class Kind : uint8_t { Send, Recv, Watch, Close };
  // One set of functions per owner type; `owner` is what add() was given.
  struct Handler {
    // Fills up to `max` slices (Send: what to send; Recv: one region), returning how many; 0:
    // nothing to do any more (the owner closed, or stopped reading). `cookie` is kept for apply.
    unsigned (*prepare)(void* owner, Kind kind, iovec* iov, unsigned max, void** cookie);
    // The kernel's answer: bytes moved, or -errno. `asked` is what the slices held.
    void (*apply)(void* owner, Kind kind, ssize_t result, size_t asked, void* cookie);
    void (*finish)(void* owner, Kind kind, ssize_t result, size_t asked);
  };
  // A registration's owner (a socket event).
  struct WatchHandler {
    // The registration as it is at the flush: fills `ev` and returns the epoll set.
    int (*prepare)(void* owner, epoll_event* ev);
    // The kernel's answer, once every operation of the round is in: 0 or -errno (-EAGAIN: not
    // made; the owner registers with the system call).
    void (*finish)(void* owner, int result);
  };

  // Slices per send; a buffer with more sends them at the next flush.
  static constexpr unsigned kMaxSlices = 8;
  // Operations per io_uring_enter; more wait for the next round of the same flush.
  static constexpr unsigned kRingEntries = 256;

  IoBatch();
  ~IoBatch();
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  // Queues one operation on `fd` for the next flush. An owner has at most one of each kind
  // queued (it keeps the flag); it must cancel() what it queued before it goes away.
  void add(void* owner, const Handler& handler, int fd, Kind kind);
  // Drops every send and receive of `owner` not yet finished: nothing of it is prepared,
  // applied or finished from then on.
  void cancel(void* owner);
  // Adds `fd` to an epoll set with the next flush; at most one queued per owner.
  void watch(void* owner, const WatchHandler& handler, int fd);
  // Drops the registration `owner` queued, if not yet finished. It may have been made already
  // (the owner is told nothing more either way).
  void cancelWatch(void* owner);
  // Closes `fd` with the next flush. Never cancelled: a descriptor handed here is closed, at
  // the latest by runCloses() or the batch's destructor.
  void close(int fd);
  // Runs what is queued now (the loop does this at the end of each turn).
  void flush();
  // Closes at once, one system call each, what close() queued and no flush carried yet (the
  // loop does this before it looks at its sockets again: a closed socket leaves the epoll set
  // only when it is closed).
  void runCloses();
  // Something is queued for the next flush.
  bool pending() const { return !queued_.empty(); }

  // Counted on this thread's stats shard as well (server.io_batched, server.io_uring_enters).
  void setCounters(stats::Counter operations, stats::Counter ring_enters) {
    operations_counter_ = operations;
    ring_enters_counter_ = ring_enters;
    counted_ = true;
  }
  // What the batch has done, for tests and the benchmarks.
  uint64_t operations() const { return operations_; }
  uint64_t ringEnters() const { return ring_enters_; }
  // False once io_uring could not be set up: operations run one system call each.
  bool ringAvailable() const { return !ring_failed_; }

 private:
  struct Op {
    void* owner;  // null once cancelled; a close's is the batch itself
    union {
      const Handler* io;
      const WatchHandler* watch;
    } handler;
    int fd;
    Kind kind;
    uint8_t slices = 0;
    uint32_t first_slice = 0;
    int epoll_fd = -1;  // Watch: the set
    size_t asked = 0;
    ssize_t result = 0;
    void* cookie = nullptr;
    epoll_event event{};  // Watch: the registration
  };
  bool setUpRing();
  // Runs the prepared operations of running_: one system call for one, the ring for more.
  void execute(size_t prepared);
  static ssize_t callDirect(const Op& op, const iovec* iov);

  bool flushing_ = false;
  bool ring_failed_ = false;
  std::unique_ptr<io_uring> ring_;
  std::vector<Op> queued_;
  std::vector<Op> running_;
  std::vector<iovec> slices_;
  uint64_t operations_ = 0;
  uint64_t ring_enters_ = 0;
  bool counted_ = false;
  stats::Counter operations_counter_;
  stats::Counter ring_enters_counter_;
};

}  // namespace event
}  // namespace sluice
