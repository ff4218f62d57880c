#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "source/common/network/address.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace upstream {

// The descriptors clients may make sluice hold toward destinations. Each client (an IPv4
// address or an IPv6 /64, across every listener, protocol and stream) may hold at most
// perClient() upstream sockets at a time: origin connections and tunnels, connecting or open,
// SOCKS5 BIND listeners and UDP relay sockets. And no upstream socket takes one of the last
// reserve() descriptors of the open-files limit: those stay for accepts, the admin endpoint and
// pooled work, so one client at its limit (or many together) cannot stop the rest.
class UpstreamBudget {
 public:
  static constexpr uint32_t kDefaultPerClient = 512;
  static constexpr uint32_t kDefaultReserve = 128;

  // The process's budget (configured by the server at startup).
  static UpstreamBudget& get();

  UpstreamBudget();
  ~UpstreamBudget();
  UpstreamBudget(const UpstreamBudget&) = delete;
  UpstreamBudget& operator=(const UpstreamBudget&) = delete;

  // At startup, and again at a reload (the new limit holds for the next sockets). per_client 0:
  // kDefaultPerClient, or a quarter of the descriptors above the reserve when the open-files limit
  // leaves fewer; reserve 0: kDefaultReserve, at most a quarter of the limit. Registers the stats.
  void configure(uint32_t per_client, uint32_t reserve);
  // Re-reads the open-files limit (RLIMIT_NOFILE): the server's housekeeping timer calls it.
  void refreshDescriptorLimit();

  // A place for one upstream socket of `client`, held by `slot` until it is reset. False (and
  // counted) when the client holds perClient() already. Taken through the calling thread's
  // leases (network::LimiterLeases): a place given back stays with the thread as the client's
  // spare (LimiterLeases::kMaxSpares at most), so a keep-alive client's request after request
  // through pooled connections takes no lock shared with the other workers. A client may so be
  // refused up to kMaxSpares places per other worker early; the spares of clients with nothing
  // in use go back as the thread gives places back, and all of them when it ends.
  bool admit(const network::Address& client, network::ConnectionSlot& slot);
  // An upstream socket numbered at or above this is closed and refused: the kernel hands out
  // the lowest free descriptor, so every number below it is in use.
  int descriptorCeiling() const { return ceiling_.load(std::memory_order_relaxed); }
  // A socket refused for the reserve.
  void countReserveRefusal() const { stats_.reserve_refused.inc(); }

  uint32_t perClient() const { return per_client_; }
  uint32_t reserve() const { return reserve_; }
  // Places held, the threads' spares among them.
  uint32_t held() const { return limiter_ ? limiter_->active() : 0; }

 private:
  struct Stats {
    stats::Counter client_refused;   // upstream.client_limit_refused
    stats::Counter reserve_refused;  // upstream.descriptor_reserve_refused
  };
  bool configured_ = false;
  uint32_t configured_reserve_ = 0;
  uint32_t per_client_ = kDefaultPerClient;
  uint32_t reserve_ = kDefaultReserve;
  std::atomic<int> ceiling_{1 << 30};
  std::unique_ptr<network::ConnectionLimiter> limiter_;
  // The calling thread's leases of limiter_'s places (made on its first admission).
  network::LimiterLeases& threadLeases();
  // Tells a thread's leases of this budget from those of one destroyed before it.
  const uint64_t id_;
  std::mutex leases_mutex_;
  // Every thread's, kept for the budget's life (a thread holds its own too, to give its spares
  // back when it ends): a slot that outlives its thread still gives its place back through
  // them. One small table per thread that ever took a place.
  std::vector<std::shared_ptr<network::LimiterLeases>> leases_;
  Stats stats_;
};

}  // namespace upstream
}  // namespace sluice
