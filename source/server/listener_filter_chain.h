#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "source/common/event/dispatcher.h"
#include "source/common/network/filter.h"

namespace sluice {
namespace server {

// Runs the listener filters of one accepted socket, in order, before any connection exists:
// synchronous decisions, filters that pause (continueFilterChain later), and filters that peek
// at the first bytes. Calls `done` exactly once, with true when every filter passed the socket;
// `done` must not delete the chain synchronously (defer it). The socket stays owned by the
// caller; the chain never reads from it (it only peeks).
class ListenerFilterChain : public network::ListenerFilterCallbacks,
                            public network::ListenerFilterManager {
 public:
  using Done = std::function<void(bool success)>;
  // timeout bounds the whole chain (peeks included).
  ListenerFilterChain(event::Dispatcher& dispatcher, int fd, const network::Address& peer,
                      std::chrono::milliseconds timeout, Done done);
  ~ListenerFilterChain() override;

  // The filters the factories make for one socket. Often none (a ban filter while nobody is
  // banned): then the socket needs no chain at all.
  static std::vector<network::ListenerFilterPtr> makeFilters(
      const std::vector<network::ListenerFilterFactoryCb>& factories);
  void run(std::vector<network::ListenerFilterPtr> filters);
  void run(const std::vector<network::ListenerFilterFactoryCb>& factories) {
    run(makeFilters(factories));
  }
  bool timedOut() const { return timed_out_; }
  // Bytes were peeked: the connection must look at its socket at once (they are already there
  // and no new readiness edge will announce them).
  bool peeked() const { return peeked_; }

  // network::ListenerFilterManager
  void addListenerFilter(network::ListenerFilterPtr filter) override {
    filters_.push_back(std::move(filter));
  }
  // network::ListenerFilterCallbacks
  int fd() const override { return fd_; }
  const network::Address& peer() const override { return peer_; }
  void setPeer(const network::Address& client) override { peer_ = client; }
  network::SocketFacts& facts() override { return facts_; }
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  void continueFilterChain(bool success) override;

 private:
  void iterate();
  void onSocketEvent(uint32_t events);
  // Peeks for the current filter; returns true when it is satisfied (or the chain finished).
  bool peek();
  void finish(bool success);

  event::Dispatcher& dispatcher_;
  const int fd_;
  network::Address peer_;
  network::SocketFacts facts_;
  Done done_;
  const std::chrono::milliseconds timeout_;
  std::vector<network::ListenerFilterPtr> filters_;
  size_t next_ = 0;            // the filter to run next
  bool waiting_data_ = false;  // filters_[next_ - 1] waits for more bytes
  bool paused_ = false;        // filters_[next_ - 1] returned StopIteration from onAccept
  bool finished_ = false;
  bool timed_out_ = false;
  bool peeked_ = false;
  std::unique_ptr<event::FileEvent> readable_;
  event::Timer timer_;
};

}  // namespace server
}  // namespace sluice
