#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "source/common/dns/resolver.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/connection.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/network/egress.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/parent_handshake.h"
#include "source/common/upstream/routes.h"
#include "source/common/upstream/upstream_budget.h"

namespace sluice {
namespace filters {
namespace router {

inline constexpr std::string_view kClientUpstreamsFull =
    "too many upstream connections from this client";
inline constexpr std::string_view kDescriptorsLow = "sluice is short of file descriptors";

struct RouterStats {
  stats::Counter cx_connect_total;  // outbound connects attempted
  stats::Counter cx_connect_fail;   // refused, unreachable, reset during connect
  stats::Counter cx_connect_timeout;
  stats::Counter pool_reuse;        // requests served on a pooled connection
  stats::Counter dns_fail;          // names that did not resolve
  stats::Counter cx_connect_raced;  // second attempts the Happy Eyeballs delay started
  // Connects that succeeded, from the first attempt to established (the record's connect time).
  stats::Histogram cx_connect_duration;
};

// Which address families the router dials first (RFC 8305) or only.
enum class FamilyPreference : uint8_t { Ipv6, Ipv4 };

struct RouterConfig {
  std::chrono::milliseconds connect_timeout{10000};
  // Happy Eyeballs: a second connect attempt starts this long after the first if that one has
  // neither connected nor failed yet; the first to connect wins. 0: one attempt at a time.
  std::chrono::milliseconds happy_eyeballs_delay{250};
  FamilyPreference prefer = FamilyPreference::Ipv6;
  // Dial only this family (AF_INET or AF_INET6; 0: both).
  int only_family = 0;
  proxy::UpstreamInfo upstream;  // response and tunnel timeouts the codec applies
  RouterStats stats;
  // Upstream sockets per client, and the descriptors kept back (the process's; a test's own).
  upstream::UpstreamBudget* budget = &upstream::UpstreamBudget::get();
  // Parent proxies and the routes through them (Bootstrap.routes); none: everything direct.
  upstream::RoutesSharedPtr routes = upstream::Routes::none();
};
using RouterConfigSharedPtr = std::shared_ptr<const RouterConfig>;

// Puts the addresses in the order Happy Eyeballs dials them (RFC 8305 section 4): the preferred
// family first, then alternating, each family in the resolver's order; with `only_family`,
// drops the other family. Returns the count kept.
uint32_t orderAddresses(network::Address* addresses, uint32_t count, FamilyPreference prefer,
                        int only_family);
// Keeps, in order, the addresses of the families `egress` reaches (all of them without one).
// Returns the count kept.
uint32_t keepReachable(network::Address* addresses, uint32_t count, const network::Egress& egress);

// The terminal request filter: finds the destination's addresses (those pinned by an earlier
// filter, or resolved here), takes a pooled connection for relayed requests when one is idle,
// otherwise connects, and hands the connection to the codec. Connecting races (Happy Eyeballs,
// RFC 8305): addresses go in family-interleaved order, a failed attempt starts the next at
// once, and one still pending after happy_eyeballs_delay gets a second attempt beside it; the
// first to connect wins, within the connect timeout. At most two attempts at a time, each with
// its own place in the client's upstream budget.
//
// A request a route sends through parents dials the parent instead (its addresses raced the
// same way), and asks it for the destination: CONNECT or SOCKS5 for tunnels and through SOCKS5
// parents, absolute-form requests through HTTP parents. A parent that fails (connect,
// handshake) counts toward its health and the next one of the route is tried, within the same
// connect timeout.
class RouterFilter : public proxy::RequestFilter, public upstream::ParentHandshakeCallbacks {
 public:
  explicit RouterFilter(RouterConfigSharedPtr config);
  ~RouterFilter() override;

  // proxy::RequestFilter
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;
  void onRequestEnd() override;

 private:
  // One connect attempt: the connection being set up and its place in the budget.
  struct Attempt : network::ConnectionCallbacks {
    explicit Attempt(RouterFilter& router) : router(router) {}
    void onData(buffer::Buffer&, bool) override {}
    void onEvent(network::ConnectionEvent event) override { router.onAttemptEvent(*this, event); }
    RouterFilter& router;
    network::ConnectionPtr connection;
    network::ConnectionSlot slot;
  };

  void onResolved(const absl::Status& status, const std::vector<network::Address>& addresses);
  void route();
  // Starts the next address in `attempt` (its slot held). False when none could start.
  bool startAttempt(Attempt& attempt);
  // After a failure, or at the start: keeps an attempt going, or refuses the request.
  void connectNext();
  void onRaceTimer();
  void onAttemptEvent(Attempt& attempt, network::ConnectionEvent event);
  void drop(Attempt& attempt);
  bool connecting() const { return attempts_[0].connection || attempts_[1].connection; }
  void onConnectTimeout();
  // Hands a connection (pooled or new) to the codec.
  void ready(network::ConnectionPtr connection, network::ConnectionSlot slot, bool reused);

  // Through parents: picks the next one to try (false when none is left), resolves it if it
  // is a name, and dials it.
  bool nextParent();
  // A request whose route's parent resolves the destination (no addresses): its parents.
  void routeToNamingParent();
  // Arms the connect deadline and moves the budget place to the first attempt.
  void beginConnecting();
  // Tries the route's parents from the first its balance picks (denies when none answers).
  void startParents();
  void onParentResolved(const absl::Status& status, const std::vector<network::Address>& addresses);
  void dialParent();
  // The parent could not be reached, or refused: counted in its health; the next one, or the
  // refusal.
  void parentFailed();
  void retireHandshake();
  // Where the client reached sluice (its connection's local address), looked up once per
  // request and only for a parent that wants a PROXY protocol header; invalid when unknown.
  const network::Address& clientLocal();
  // upstream::ParentHandshakeCallbacks
  void onParentReady() override;
  void onParentFailed(upstream::Failure failure, std::string_view reason) override;

  RouterConfigSharedPtr config_;
  proxy::ProxyRequest* request_ = nullptr;
  dns::Resolver::Query* query_ = nullptr;
  // What the attempts dial: the destination's addresses (request_->pinned), or a parent's.
  const network::Address* dial_ = nullptr;
  uint32_t dial_count_ = 0;
  uint32_t next_address_ = 0;  // into dial_
  // Through parents: the route, the parent being tried and how many were, the destination
  // address asked for, and the parent's own addresses (made for the first request through a
  // parent: a connection that never uses one does not carry them).
  const upstream::Route* route_ = nullptr;
  const upstream::Parent* parent_ = nullptr;
  uint32_t parents_tried_ = 0;
  uint32_t first_parent_ = 0;
  network::Address target_;
  using ParentAddresses = std::array<network::Address, proxy::ProxyRequest::kMaxPinned>;
  std::unique_ptr<ParentAddresses> parent_addresses_;
  ParentAddresses& parentAddresses() {
    if (parent_addresses_ == nullptr) parent_addresses_ = std::make_unique<ParentAddresses>();
    return *parent_addresses_;
  }
  // The connection to the parent while it answers, and its place in the budget.
  std::unique_ptr<upstream::ParentHandshake> handshake_;
  network::ConnectionPtr handshaking_;
  network::ConnectionSlot handshake_slot_;
  Attempt attempts_[2]{Attempt(*this), Attempt(*this)};
  // The client's place in the upstream budget for this request's connection; it goes with the
  // connection to the codec.
  network::ConnectionSlot slot_;
  std::unique_ptr<event::Timer> timer_;
  std::unique_ptr<event::Timer> race_timer_;
  bool descriptors_low_ = false;  // an attempt found no descriptor: 503, not 502
  // Families whose egress address failed to bind in this request: their other addresses are
  // not tried (the bind would fail alike).
  uint8_t unbindable_families_ = 0;
  static uint8_t familyBit(int family) { return family == AF_INET ? 1 : 2; }
  std::string error_;  // detail of the last failure, for the refusal text
  network::Address client_local_;
  bool client_local_known_ = false;
  // When the lookup or the connect began (the request's record takes their durations).
  event::MonotonicTime started_{};
};

}  // namespace router
}  // namespace filters
}  // namespace sluice
