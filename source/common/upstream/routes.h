#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/network/cidr.h"
#include "source/common/network/port_range.h"
#include "source/common/network/transport_socket.h"
#include "source/common/policy/rules.h"
#include "source/common/proxy/request.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/parent_handshake.h"

namespace sluice {
namespace upstream {

// A parent's health, shared by every worker, and kept by a reload while the parent keeps its
// name, address and protocol: consecutive failures, and until when it is skipped. Relaxed
// atomics: a worker that sees a failure count one request late skips the parent one request
// late.
class ParentHealth {
 public:
  ParentHealth();
  // Unique in the process, for as long as the health is kept: what the pool keeps the parent's
  // connections under.
  uint64_t id() const { return id_; }
  bool healthy(event::MonotonicTime now) const {
    return now.time_since_epoch().count() >= unhealthy_until_.load(std::memory_order_relaxed);
  }
  void recordSuccess() { failures_.store(0, std::memory_order_relaxed); }
  // True when this failure made the parent unhealthy (it is skipped until now + `skip_for`).
  bool recordFailure(event::MonotonicTime now, uint32_t max_failures,
                     std::chrono::milliseconds skip_for);

 private:
  const uint64_t id_;
  std::atomic<uint32_t> failures_{0};
  std::atomic<int64_t> unhealthy_until_{0};  // steady_clock ticks
};

struct ParentStats {
  stats::Counter requests;   // requests sent through the parent (each attempt)
  stats::Counter failures;   // connects to it or its handshakes that failed
  stats::Counter unhealthy;  // times it was marked unhealthy after max_failures in a row
  stats::Counter skipped;    // requests that passed it by because it was unhealthy
};

struct Parent {
  std::string name;
  std::string host;  // as configured: an IP literal or a name for sluice's resolver
  uint16_t port = 0;
  network::Address literal;  // set when `host` is an IP literal (port included)
  // https parents speak Http inside the TLS that `transport` makes.
  ParentProtocol protocol = ParentProtocol::Http;
  // TLS to the parent (its CA, its name), one socket per connection; null: plain TCP.
  network::TransportSocketFactorySharedPtr transport;
  // https: what its certificate is checked against (empty otherwise). A reload that changes
  // them starts the parent over, so no connection verified under the old ones is kept.
  std::string ca_file;
  std::string server_name;
  ParentAuth auth;
  // PROXY protocol version sent ahead of every connection to it (1 or 2); 0: none. Its
  // connections are never pooled: each carries its own client's header.
  int proxy_protocol = 0;
  uint32_t max_failures = 3;
  std::chrono::milliseconds unhealthy_for{30000};
  std::shared_ptr<ParentHealth> health;
  ParentStats stats;
};

enum class Balance : uint8_t { Failover, RoundRobin };

struct Route {
  std::string name;
  std::vector<policy::HostPattern> hosts;
  std::vector<network::CidrRange> cidrs;
  std::vector<network::PortRange> ports;
  std::vector<std::string> groups;
  std::vector<const Parent*> parents;  // empty: direct
  Balance balance = Balance::Failover;
  // resolve: parent: the parent gets the destination's name (and no cidrs are allowed).
  bool resolve_at_parent = false;
  // Round robin's next parent, shared by the workers (one relaxed increment per request).
  mutable std::atomic<uint32_t> next{0};

  // Whether the request matches; `address` is where its cidrs matched (the one to ask a parent
  // for), or the first address when the route has no cidrs.
  bool matches(const proxy::ProxyRequest& request, uint32_t& address) const;
  // Whether every field but cidrs matches: the route can be told apart before any lookup.
  bool matchesName(const proxy::ProxyRequest& request) const;
};

// The parents and routes of one config version, read-only on the workers (health and round
// robin aside).
class Routes {
 public:
  // The first route the request matches, or null (direct). `address` as in Route::matches.
  const Route* match(const proxy::ProxyRequest& request, uint32_t& address) const;
  // Before any lookup: the route of a request whose destination a parent resolves (the first
  // route that matches on the name has `resolve: parent`), or null when sluice must resolve it
  // (no such route, or a route with cidrs may match first).
  const Route* resolvedByParent(const proxy::ProxyRequest& request) const;
  bool empty() const { return routes_.empty(); }
  const std::vector<std::unique_ptr<Parent>>& parents() const { return parents_; }

  // No parents, no routes: everything direct.
  static std::shared_ptr<const Routes> none();

 private:
  friend absl::StatusOr<std::shared_ptr<const Routes>> buildRoutes(
      const config::v1::Bootstrap& bootstrap, const Routes* running);
  std::vector<std::unique_ptr<Parent>> parents_;
  std::vector<std::unique_ptr<Route>> routes_;
};
using RoutesSharedPtr = std::shared_ptr<const Routes>;

// Checks Bootstrap.parents and Bootstrap.routes (errors name their paths; credentials never
// appear in them) and builds them, registering each parent's stats and reading the CAs of its
// https parents. With `running` (a reload), a parent that keeps its name, address and protocol
// (and an https parent its ca_file and server_name) keeps its health, and with it the
// connections the pool keeps through it.
absl::StatusOr<RoutesSharedPtr> buildRoutes(const config::v1::Bootstrap& bootstrap,
                                            const Routes* running = nullptr);

}  // namespace upstream
}  // namespace sluice
