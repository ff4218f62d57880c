#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/network/connection.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace upstream {

// One worker's keep-alive connections to origins, keyed by the resolved destination address.
// Most recently used first (warm sockets). An idle connection that the origin closes or writes
// to is dropped at once; one idle longer than the idle timeout is closed.
class Pool {
 public:
  Pool(event::Dispatcher& dispatcher, uint32_t max_idle_per_destination,
       std::chrono::milliseconds idle_timeout);
  ~Pool();

  // An idle connection to `to`, or nullptr.
  network::ConnectionPtr acquire(const network::Address& to);
  // Takes back a connection whose last exchange ended cleanly; closes it when the pool for its
  // destination is full.
  void release(network::ConnectionPtr conn);
  size_t idleCount() const { return idle_count_; }
  // Closes every idle connection.
  void closeAll();
  // The worker is draining: idle connections are closed and none is taken back from now on.
  void drain();

 private:
  class Idle;
  using IdlePtr = std::unique_ptr<Idle>;
  void remove(Idle* idle);
  void sweepEmpty();
  static constexpr size_t kSweepDestinations = 1024;
  void close(network::ConnectionPtr conn);

  event::Dispatcher& dispatcher_;
  const uint32_t max_idle_per_destination_;
  const std::chrono::milliseconds idle_timeout_;
  absl::flat_hash_map<network::Address, std::vector<IdlePtr>> idle_;
  std::vector<IdlePtr> spare_;  // recycled wrappers: no allocation per release
  size_t idle_count_ = 0;
  bool draining_ = false;
  stats::Gauge idle_gauge_;  // upstream.pool_idle, summed over workers
};

}  // namespace upstream
}  // namespace sluice
