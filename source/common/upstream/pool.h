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

// One worker's keep-alive connections to origins, keyed by the source address they were made
// from (a group's egress; invalid: the system's choice) and the resolved destination address:
// a connection is only handed to a request that would have dialled it from the same source.
// Most recently used first (warm sockets). An idle connection that the origin closes or writes
// to is dropped at once; one idle longer than the idle timeout is closed.
class Pool {
 public:
  Pool(event::Dispatcher& dispatcher, uint32_t max_idle_per_destination,
       std::chrono::milliseconds idle_timeout);
  ~Pool();

  // An idle connection to `to` made from `source` (through parent `via`, 0: direct), or nullptr.
  network::ConnectionPtr acquire(const network::Address& to,
                                 const network::Address& source = network::Address(),
                                 uint64_t via = 0);
  // Takes back a connection (made from `source`) whose last exchange ended cleanly; closes it
  // when the pool for its source and destination is full. A connection through a parent proxy
  // (`via`, the parent's ParentHealth::id()) is kept apart from direct ones: under the parent's
  // address for an HTTP parent, which takes requests for any destination, under `destination`
  // (the one its tunnel reaches) for a SOCKS5 parent. `destination` invalid: the peer.
  void release(network::ConnectionPtr conn, const network::Address& source = network::Address(),
               uint64_t via = 0, const network::Address& destination = network::Address());
  size_t idleCount() const { return idle_count_; }
  // Closes every idle connection.
  void closeAll();
  // The worker is draining: idle connections are closed and none is taken back from now on.
  void drain();

 private:
  class Idle;
  using IdlePtr = std::unique_ptr<Idle>;
  struct Key {
    network::Address source;  // invalid: the system's choice
    network::Address destination;
    uint64_t via = 0;  // the parent proxy it goes through; 0: direct
    bool operator==(const Key& other) const {
      return source == other.source && destination == other.destination && via == other.via;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      // An invalid address holds no initialised bytes: only its validity is hashed.
      if (key.source.valid()) h = H::combine(std::move(h), key.source);
      return H::combine(std::move(h), key.source.valid(), key.destination, key.via);
    }
  };
  void remove(Idle* idle);
  void sweepEmpty();
  static constexpr size_t kSweepDestinations = 1024;
  void close(network::ConnectionPtr conn);

  event::Dispatcher& dispatcher_;
  const uint32_t max_idle_per_destination_;
  const std::chrono::milliseconds idle_timeout_;
  absl::flat_hash_map<Key, std::vector<IdlePtr>> idle_;
  std::vector<IdlePtr> spare_;  // recycled wrappers: no allocation per release
  size_t idle_count_ = 0;
  bool draining_ = false;
  stats::Gauge idle_gauge_;  // upstream.pool_idle, summed over workers
};

}  // namespace upstream
}  // namespace sluice
