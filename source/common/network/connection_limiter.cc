#include "source/common/network/connection_limiter.h"

#include <arpa/inet.h>

#include "absl/hash/hash.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace network {

namespace {
// IPv4 keys live in the ::ffff:0:0/96 range, which no real IPv6 /64 key can equal because an
// IPv6 key's low half is always zero.
constexpr uint64_t kIpv4Marker = 0xffff00000000ULL;

uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

ClientKey ClientKey::of(const Address& address) {
  ClientKey key;
  if (address.family() == AF_INET) {
    key.low = kIpv4Marker | ntohl(address.v4().sin_addr.s_addr);
    return key;
  }
  if (address.family() == AF_INET6) {
    const uint8_t* b = address.v6().sin6_addr.s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&address.v6().sin6_addr)) {
      key.low = load64(b + 8);  // already ::ffff:a.b.c.d, the IPv4 form above
      return key;
    }
    key.high = load64(b);
    return key;
  }
  return key;
}

void ConnectionLimiter::setLimits(uint32_t max_connections, uint32_t max_connections_per_client) {
  SLUICE_ASSERT(max_connections >= 1 && max_connections_per_client >= 1,
                "connection limits must be >= 1");
  max_connections_.store(max_connections, std::memory_order_relaxed);
  max_per_client_.store(max_connections_per_client, std::memory_order_relaxed);
}

ConnectionLimiter::ConnectionLimiter(uint32_t max_connections, uint32_t max_connections_per_client)
    : max_connections_(max_connections), max_per_client_(max_connections_per_client) {
  SLUICE_ASSERT(max_connections >= 1 && max_connections_per_client >= 1,
                "connection limits must be >= 1");
}

ConnectionLimiter::Shard& ConnectionLimiter::shardOf(const ClientKey& client) {
  return shards_[absl::HashOf(client) % kShards];
}

const ConnectionLimiter::Shard& ConnectionLimiter::shardOf(const ClientKey& client) const {
  return shards_[absl::HashOf(client) % kShards];
}

ConnectionLimiter::Admission ConnectionLimiter::tryAcquire(const ClientKey& client) {
  // Take a global place first (lock-free); give it back if the client is over its own limit.
  if (tryAcquireGlobal() != Admission::Admitted) return Admission::ListenerFull;
  if (tryAcquireClient(client) == Admission::Admitted) return Admission::Admitted;
  releaseGlobal();
  return Admission::ClientFull;
}

ConnectionLimiter::Admission ConnectionLimiter::tryAcquireGlobal() {
  if (active_.fetch_add(1, std::memory_order_relaxed) >=
      max_connections_.load(std::memory_order_relaxed)) {
    active_.fetch_sub(1, std::memory_order_relaxed);
    return Admission::ListenerFull;
  }
  return Admission::Admitted;
}

ConnectionLimiter::Admission ConnectionLimiter::tryAcquireClient(const ClientKey& client) {
  Shard& shard = shardOf(client);
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.counts.find(client);
  if (it == shard.counts.end()) {
    shard.counts.emplace(client, 1);
    return Admission::Admitted;
  }
  if (it->second < max_per_client_.load(std::memory_order_relaxed)) {
    ++it->second;
    return Admission::Admitted;
  }
  return Admission::ClientFull;
}

void ConnectionLimiter::releaseGlobal() { active_.fetch_sub(1, std::memory_order_relaxed); }

void ConnectionLimiter::release(const ClientKey& client) {
  Shard& shard = shardOf(client);
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.counts.find(client);
    SLUICE_ASSERT(it != shard.counts.end(), "release without a slot");
    if (--it->second == 0) shard.counts.erase(it);
  }
  releaseGlobal();
}

uint32_t ConnectionLimiter::activeFor(const ClientKey& client) const {
  const Shard& shard = shardOf(client);
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.counts.find(client);
  return it == shard.counts.end() ? 0 : it->second;
}

size_t ConnectionLimiter::trackedClients() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    n += shard.counts.size();
  }
  return n;
}

ConnectionLimiter::Admission LimiterLeases::tryAcquire(const ClientKey& client,
                                                       ConnectionSlot& slot) {
  if (orphaned_) {
    const ConnectionLimiter::Admission admission = limiter_.tryAcquire(client);
    if (admission == ConnectionLimiter::Admission::Admitted)
      slot = ConnectionSlot(limiter_, client);
    return admission;
  }
  Lease& lease = leases_[client];
  if (lease.spares > 0) {
    --lease.spares;
  } else {
    const ConnectionLimiter::Admission admission = limiter_.tryAcquire(client);
    if (admission != ConnectionLimiter::Admission::Admitted) {
      if (lease.in_use == 0) leases_.erase(client);
      return admission;
    }
  }
  ++lease.in_use;
  slot = ConnectionSlot(*this, client);
  return ConnectionLimiter::Admission::Admitted;
}

void LimiterLeases::release(const ClientKey& client) {
  auto it = orphaned_ ? leases_.end() : leases_.find(client);
  if (it == leases_.end()) {
    limiter_.release(client);
    return;
  }
  Lease& lease = it->second;
  --lease.in_use;
  if (lease.spares < kMaxSpares) {
    ++lease.spares;
  } else {
    limiter_.release(client);
  }
  if (++releases_ >= kSweepEvery) sweep();
}

void LimiterLeases::sweep() {
  releases_ = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.in_use == 0) {
      for (uint32_t i = 0; i < it->second.spares; ++i) limiter_.release(it->first);
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
}

void LimiterLeases::orphan() {
  if (orphaned_) return;
  for (const auto& [client, lease] : leases_) {
    for (uint32_t i = 0; i < lease.spares; ++i) limiter_.release(client);
  }
  // Places still in use go back straight to the limiter from now on.
  leases_.clear();
  orphaned_ = true;
}

size_t LimiterLeases::spares() const {
  size_t n = 0;
  for (const auto& [client, lease] : leases_) n += lease.spares;
  return n;
}

}  // namespace network
}  // namespace sluice
