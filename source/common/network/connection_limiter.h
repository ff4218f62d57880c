#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// Whose connections are counted together: an IPv4 address, or the /64 an IPv6 address is in
// (one host usually owns a whole /64, so counting single IPv6 addresses would be no limit).
// IPv4-mapped IPv6 peers (::ffff:a.b.c.d, from a dual-stack socket) count as their IPv4 address.
struct ClientKey {
  uint64_t high = 0;
  uint64_t low = 0;

  static ClientKey of(const Address& address);

  bool operator==(const ClientKey& other) const { return high == other.high && low == other.low; }
  template <typename H>
  friend H AbslHashValue(H h, const ClientKey& k) {
    return H::combine(std::move(h), k.high, k.low);
  }
};

// The open connections of one listener, across all its workers: a global count and a count per
// client. Touched once at accept and once at close, never per request; the per-client table is
// split into shards (each with its own mutex) so workers accepting at once rarely meet. Holds an
// entry only per client with an open connection, so its size is bounded by max_connections.
class ConnectionLimiter {
 public:
  enum class Admission : uint8_t {
    Admitted,
    ListenerFull,  // max_connections reached
    ClientFull,    // max_connections_per_client reached for this client
  };

  // Both limits are at least 1.
  ConnectionLimiter(uint32_t max_connections, uint32_t max_connections_per_client);

  // Thread-safe. On Admitted the caller holds a slot and must release() it exactly once.
  Admission tryAcquire(const ClientKey& client);
  // Thread-safe.
  void release(const ClientKey& client);
  // The two halves, for a listener that learns who the client is only after accept (a PROXY
  // protocol header): a place in the listener's count at accept, then the client's once it is
  // known. tryAcquireClient is only for a holder of a global place; ClientFull leaves it held.
  Admission tryAcquireGlobal();
  Admission tryAcquireClient(const ClientKey& client);
  void releaseGlobal();

  // Thread-safe. New limits for the next admissions (a reload): connections already over a
  // lowered limit stay; no new one is admitted until the count is below it.
  void setLimits(uint32_t max_connections, uint32_t max_connections_per_client);
  uint32_t maxConnections() const { return max_connections_.load(std::memory_order_relaxed); }
  uint32_t maxConnectionsPerClient() const {
    return max_per_client_.load(std::memory_order_relaxed);
  }
  uint32_t active() const { return active_.load(std::memory_order_relaxed); }
  uint32_t activeFor(const ClientKey& client) const;
  size_t trackedClients() const;

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mutex;
    absl::flat_hash_map<ClientKey, uint32_t> counts;
  };
  Shard& shardOf(const ClientKey& client);
  const Shard& shardOf(const ClientKey& client) const;

  std::atomic<uint32_t> max_connections_;
  std::atomic<uint32_t> max_per_client_;
  std::atomic<uint32_t> active_{0};
  std::array<Shard, kShards> shards_;
};

class ConnectionSlot;

// One thread's front for a limiter's per-client places, for places taken and given back at a
// high rate by the same clients (the upstream budget: a place for each request a keep-alive
// connection sends through a pooled origin connection). A place given back stays with the
// thread as one of its client's spares (kMaxSpares at most): the client's next place on the
// thread takes it without the limiter's lock. A spare counts in the limiter as held, so a
// client may be refused up to kMaxSpares places per other thread early; spares of clients with
// no place in use go back every kSweepEvery releases, and all of them when the thread ends
// (orphan()).
//
// Not thread-safe: one thread takes and gives back its places. After orphan() a place is given
// back straight to the limiter, from whichever thread destroys its slot.
class LimiterLeases {
 public:
  static constexpr uint32_t kMaxSpares = 8;
  static constexpr uint32_t kSweepEvery = 1024;

  explicit LimiterLeases(ConnectionLimiter& limiter) : limiter_(limiter) {}
  ~LimiterLeases() { orphan(); }
  LimiterLeases(const LimiterLeases&) = delete;
  LimiterLeases& operator=(const LimiterLeases&) = delete;

  // A place for `client` in `slot` (empty before): its spare, or one from the limiter.
  ConnectionLimiter::Admission tryAcquire(const ClientKey& client, ConnectionSlot& slot);
  // A slot of this thread's gives its place back.
  void release(const ClientKey& client);
  // The thread ends: every spare goes back, and places from now on go straight back.
  void orphan();
  // Spares held (for tests).
  size_t spares() const;

 private:
  struct Lease {
    uint32_t in_use = 0;
    uint32_t spares = 0;
  };
  // Gives back the spares of clients with no place in use.
  void sweep();

  ConnectionLimiter& limiter_;
  absl::flat_hash_map<ClientKey, Lease> leases_;
  uint32_t releases_ = 0;
  bool orphaned_ = false;
};

// One admitted connection's place in its listener's limits, given back when it is destroyed.
// Move-only; an empty slot (default or moved-from) releases nothing.
class ConnectionSlot {
 public:
  ConnectionSlot() = default;
  ConnectionSlot(ConnectionLimiter& limiter, const ClientKey& client)
      : limiter_(reinterpret_cast<uintptr_t>(&limiter) | kHasClient), client_(client) {}
  // A place taken through a thread's leases (LimiterLeases::tryAcquire), given back to them.
  ConnectionSlot(LimiterLeases& leases, const ClientKey& client)
      : limiter_(reinterpret_cast<uintptr_t>(&leases) | kHasClient | kLeased), client_(client) {}
  // A place in the listener's count only (tryAcquireGlobal succeeded); attachClient adds the
  // client's.
  explicit ConnectionSlot(ConnectionLimiter& limiter)
      : limiter_(reinterpret_cast<uintptr_t>(&limiter)) {}
  ~ConnectionSlot() { reset(); }
  ConnectionSlot(ConnectionSlot&& other) noexcept
      : limiter_(std::exchange(other.limiter_, 0)), client_(other.client_) {}
  ConnectionSlot& operator=(ConnectionSlot&& other) noexcept {
    if (this != &other) {
      reset();
      limiter_ = std::exchange(other.limiter_, 0);
      client_ = other.client_;
    }
    return *this;
  }
  // Counts the connection for `client` too. False (the slot unchanged) when the client is at
  // its limit.
  bool attachClient(const ClientKey& client) {
    if (limiter_ == 0 || hasClient()) return hasClient();
    if (limiter()->tryAcquireClient(client) != ConnectionLimiter::Admission::Admitted) return false;
    client_ = client;
    limiter_ |= kHasClient;
    return true;
  }
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;

  bool held() const { return limiter_ != 0; }
  void reset() {
    if (limiter_ != 0) {
      if ((limiter_ & kLeased) != 0) {
        reinterpret_cast<LimiterLeases*>(limiter_ & ~kTags)->release(client_);
      } else if (hasClient()) {
        limiter()->release(client_);
      } else {
        limiter()->releaseGlobal();
      }
    }
    limiter_ = 0;
  }

 private:
  // The limiter's (or the leases') address, and in its lowest bits (free: both are aligned)
  // whether the slot counts for client_ too and whether it came through leases. Every
  // connection and every tunnel's upstream holds a slot, so it is kept to 24 bytes.
  static constexpr uintptr_t kHasClient = 1;
  static constexpr uintptr_t kLeased = 2;
  static constexpr uintptr_t kTags = kHasClient | kLeased;
  static_assert(alignof(ConnectionLimiter) > kTags && alignof(LimiterLeases) > kTags);
  ConnectionLimiter* limiter() const {
    return reinterpret_cast<ConnectionLimiter*>(limiter_ & ~kTags);
  }
  bool hasClient() const { return (limiter_ & kHasClient) != 0; }

  uintptr_t limiter_ = 0;  // 0: empty
  ClientKey client_;
};

}  // namespace network
}  // namespace sluice
