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
struct io_uring_cqe;
struct io_uring_buf_ring;

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
// batch and answers at once, bytes or -EAGAIN, as the system call would have. None of them stays
// in flight after io_uring_enter returns, so an owner's buffers and the owner itself only have to
// live until then, and an owner that goes away before is simply left out (cancel()). Standing
// receives (reads by completion, below) are the one kind that stays.
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

  // ---- Reads by completion ----
  // A standing receive: a multishot receive armed on a socket in the batch's ring, filling
  // buffers the batch provides to the kernel (kStandingBuffers of kStandingBufferSize). The
  // kernel receives while the loop is elsewhere, the turn's wait (wait()) collects what came,
  // and deliverStanding() hands it to the owners, outside any other callback. A socket read this
  // way needs no look at the set and no receive call per message: one io_uring_enter(2) per turn
  // both waits and brings every socket's messages.
  //
  // A receive is known by its owner (the kernel's answers carry the owner's address), so an
  // owner keeps no more than a bit. Its life: arm() -> data()... -> ended(). disarm() ends it
  // (what the kernel took before is still delivered, then ended(-ECANCELED)); release() is for
  // an owner that goes away: it hears nothing more, and the cancellation reaches the kernel
  // before any close(2) the batch makes after it (the kernel holds the socket while the receive
  // stands). Until that receive's last answer is in, arm() refuses an owner at the same address.
  struct StandingHandler {
    // Bytes received for the owner, in a provided buffer valid during the call. `run`: 0 when
    // more of the owner's bytes follow in this delivery; otherwise the last of them, and `run`
    // is how many came in all (time to act on them).
    void (*data)(void* owner, const char* bytes, size_t len, size_t run);
    // The receive is over: 0 the peer's end of stream, -errno otherwise (-ECANCELED after
    // disarm(); -ENOBUFS when the provided buffers ran out; -EAGAIN when the kernel stopped it
    // for its own reasons). Not called after release().
    void (*ended)(void* owner, int result);
  };
  static constexpr unsigned kStandingBuffers = 256;
  static constexpr unsigned kStandingBufferSize = 4096;
  // What one receive takes at most (a read event's worth, Connection's kReadPerEvent): then it
  // ends (-EAGAIN) and its owner reads by readiness until the socket is empty and arms again.
  // Bounds what an owner that is not reading can be made to hold in one turn.
  static constexpr unsigned kStandingReceiveLimit = 64 * 1024;
  // Off by default (a worker turns it on with server.reads_by_completion), before the first batch.
  void allowStanding(bool allow) { standing_allowed_ = allow; }
  bool standingAllowed() const { return standing_allowed_ && !ring_failed_ && !standing_failed_; }
  // Arms a standing receive on `fd` and, in the same entry, changes the socket's registration in
  // the epoll set `epoll_fd` to `quiet` (no EPOLLIN: its reads come from here; -1: no change).
  // False when not armed (no ring or buffers, or an earlier receive of the same address not yet
  // over). Every owner has the same handler.
  bool arm(void* owner, const StandingHandler& handler, int fd, int epoll_fd,
           const epoll_event& quiet);
  void disarm(void* owner);
  void release(void* owner);
  // Standing receives armed, or answers of theirs not yet delivered.
  bool standing() const { return standing_live_ > 0 || !standing_answers_.empty(); }
  bool hasAnswers() const { return !standing_answers_.empty(); }
  uint32_t standingCount() const { return standing_live_; }
  // Turns that waited in the ring (wait()); not among ringEnters(), which counts the batch's.
  uint64_t ringWaits() const { return waits_; }
  // The ring's descriptor (readable when answers wait in it), -1 without a ring: a loop that
  // waits elsewhere (libevent) watches it.
  int ringFd() const;
  // The turn's wait while receives stand: submits what waits in the ring, waits up to
  // `timeout_ms` (-1: no limit; 0: not at all) for an answer or for the epoll set `epoll_fd` to
  // have something, and collects the answers. True when the set has something (look at it).
  bool wait(int epoll_fd, int timeout_ms);
  // Collects the answers already in the ring, without entering the kernel.
  void collect();
  // Hands the messages collected to their owners.
  void deliverStanding();
  // Entries prepared in the ring and not yet submitted go now (before a change of the epoll
  // set made by a system call, which must come after the ones they carry).
  void submitPending() {
    if (standing_allowed_) submitStanding();
  }
  // server.reads_standing, server.reads_completed (deliveries: a turn's bytes for one owner),
  // server.reads_out_of_buffers.
  void setStandingCounters(stats::Gauge armed, stats::Counter completed,
                           stats::Counter no_buffers) {
    standing_armed_gauge_ = armed;
    standing_completed_ = completed;
    standing_no_buffers_ = no_buffers;
    standing_counted_ = true;
  }

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
  // Sorts an answer that is not the running batch's: a standing receive's (kept for
  // deliverStanding()), a look's or a standing cancellation's.
  void takeForeign(const ::io_uring_cqe* cqe);
  bool setUpStanding();
  // Whether this kernel ends a multishot receive at its total (kStandingReceiveLimit).
  bool boundsStandingReceives();
  // Entries left in the ring between batches (only ever a standing receive's).
  bool sqPending() const { return standing_allowed_ && sqReady(); }
  bool sqReady() const;
  void submitStanding();
  // Released, its receive's last answer not in yet.
  bool isReleased(void* owner) const;
  // The receive of `owner` is over (its last answer).
  void standingOver(void* owner, int result);
  struct StandingAnswer {
    void* owner;
    int32_t result;
    uint32_t flags;
  };
  const StandingHandler* standing_handler_ = nullptr;
  std::vector<StandingAnswer> standing_answers_;
  std::vector<StandingAnswer> delivering_;
  // Owners released whose receive's last answer has not come yet (usually none).
  std::vector<void*> released_;
  // The registration each submission entry of an arm() carries (the kernel reads it when it
  // takes the entry; an entry's place is not reused before).
  std::unique_ptr<epoll_event[]> quiet_;
  uint32_t standing_live_ = 0;
  uint64_t waits_ = 0;
  bool standing_allowed_ = false;
  bool standing_failed_ = false;
  bool look_armed_ = false;
  bool look_due_ = false;
  bool standing_counted_ = false;
  char* buffer_memory_ = nullptr;
  ::io_uring_buf_ring* buffer_ring_ = nullptr;
  stats::Gauge standing_armed_gauge_;
  stats::Counter standing_completed_;
  stats::Counter standing_no_buffers_;
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
