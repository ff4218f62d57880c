// One load thread: an epoll loop over its share of the connections (and, with HTTP/2 to the
// proxy, the sessions they share), its share of -n, its timers and its own counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "tools/load/conn.h"
#include "tools/load/h2_session.h"
#include "tools/load/options.h"
#include "tools/load/results.h"
#include "tools/load/shared.h"

namespace sluice {
namespace load {

// Set by SIGINT/SIGTERM: every worker stops issuing and drains.
extern std::atomic<bool> g_interrupted;

class Worker {
 public:
  // hold_window: this thread's share of --hold-window (0 = every slot opens at once).
  Worker(const Shared& shared, int index, int first_conn, int conns, uint64_t quota,
         uint64_t hold_window)
      : shared_(shared), index_(index), quota_(quota), hold_window_(hold_window) {
    const Options& o = *shared.opts;
    if (shared.h2) {
      // Held tunnels: proxies commonly allow 100 concurrent streams per connection. A new
      // connection per request: each Conn has a session of its own.
      const int fallback = o.workload == Workload::Hold ? (conns + 99) / 100 : 1;
      const int sessions =
          shared.h2_new_conn ? conns
                             : std::max(1, std::min(o.h2_conns > 0 ? o.h2_conns : fallback, conns));
      for (int i = 0; i < sessions; ++i) sessions_.push_back(std::make_unique<H2Session>(*this));
      flush_.reserve(sessions_.size());
      flushing_.reserve(sessions_.size());
    }
    pending_.reserve(static_cast<size_t>(conns));
    draining_.reserve(static_cast<size_t>(conns));
    for (int i = 0; i < conns; ++i) {
      H2Session* h2 = sessions_.empty() ? nullptr : sessions_[i % sessions_.size()].get();
      conns_.push_back(std::make_unique<Conn>(*this, first_conn + i, h2));
      if (h2 != nullptr) h2->attach(conns_.back().get());
    }
    if (o.rate > 0) {
      interval_ns_ = static_cast<uint64_t>(1e9 * o.connections / o.rate);
      for (int i = 0; i < conns; ++i) {
        conns_[i]->next_intended =
            shared.start_ns + static_cast<uint64_t>(1e9 * (first_conn + i) / o.rate);
      }
    }
    scratch_.resize(256 * 1024);
    std::vector<std::pair<uint64_t, Conn*>> storage;
    storage.reserve(static_cast<size_t>(conns) + 16);
    timers_ = TimerQueue(std::greater<>(), std::move(storage));
  }

  void run();
  const Shared& shared() const { return shared_; }
  const Options& opts() const { return *shared_.opts; }
  Results& results() { return results_; }
  char* scratch() { return scratch_.data(); }
  size_t scratchSize() const { return scratch_.size(); }
  int epollFd() const { return ep_; }
  bool stopping() const { return stopping_; }
  uint64_t intervalNs() const { return interval_ns_; }

  bool takeTicket() {
    if (stopping_) return false;
    if (quota_ > 0) {
      if (issued_ >= quota_) return false;
      ++issued_;
    }
    return true;
  }
  void schedule(Conn* c, uint64_t at) {
    if (c->timer_armed_) return;
    c->timer_armed_ = true;
    timers_.emplace(at, c);
  }
  // --hold: a slot may start opening (it then has a place in the window until holdOpened());
  // when the window is full it waits in holdWait()'s queue instead.
  bool holdMayOpen() {
    if (hold_window_ > 0 && hold_opening_ >= hold_window_) return false;
    ++hold_opening_;
    return true;
  }
  void holdWait(Conn* c) { hold_queue_.push_back(c); }
  // A slot has finished opening: its place goes to the first waiting slot, if any.
  void holdOpened() {
    if (hold_queue_.empty()) {
      --hold_opening_;
      return;
    }
    Conn* next = hold_queue_.front();
    hold_queue_.pop_front();
    next->holdTurn();
  }
  void onDone() { completed_.store(results_.ok + results_.failed, std::memory_order_relaxed); }
  void addPending(Conn* c) { pending_.push_back(c); }
  // A session has frames to send (H2Session::wantFlush).
  void addFlush(H2Session* h) { flush_.push_back(h); }
  bool hasWork() const { return !pending_.empty() || !flush_.empty(); }
  // Drives the connections HTTP/2 events woke, then writes what the sessions that asked framed
  // (only those: with a session per connection, a pass over all of them would cost more than
  // the requests).
  void runPending() {
    for (int round = 0; round < 8 && !pending_.empty(); ++round) {
      // Two lists swapped back and forth: driving may queue more, and nothing is allocated.
      draining_.swap(pending_);
      for (Conn* c : draining_) {
        c->pending = false;
        c->drive();
      }
      draining_.clear();
    }
    // The same for sessions: one that asks again while flushing is flushed on the next pass.
    flushing_.swap(flush_);
    for (H2Session* h : flushing_) {
      h->flush_queued = false;
      h->flush();
    }
    flushing_.clear();
  }

  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> finished_{false};

 private:
  using TimerQueue = std::priority_queue<std::pair<uint64_t, Conn*>,
                                         std::vector<std::pair<uint64_t, Conn*>>, std::greater<>>;
  const Shared& shared_;
  int index_;
  int ep_ = -1;
  uint64_t quota_;
  uint64_t issued_ = 0;
  uint64_t interval_ns_ = 0;
  uint64_t hold_window_;
  uint64_t hold_opening_ = 0;     // hold slots connecting, not yet held or failed
  std::deque<Conn*> hold_queue_;  // hold slots waiting for a place in the window
  bool stopping_ = false;
  std::vector<std::unique_ptr<H2Session>> sessions_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> pending_;
  std::vector<Conn*> draining_;
  std::vector<H2Session*> flush_;
  std::vector<H2Session*> flushing_;
  std::vector<char> scratch_;
  TimerQueue timers_;
  Results results_;
};

}  // namespace load
}  // namespace sluice
