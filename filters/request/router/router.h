#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "source/common/dns/resolver.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/connection.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
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
  stats::Counter pool_reuse;  // requests served on a pooled connection
  stats::Counter dns_fail;    // names that did not resolve
  // Connects that succeeded, from the first attempt to established (the record's connect time).
  stats::Histogram cx_connect_duration;
};

struct RouterConfig {
  std::chrono::milliseconds connect_timeout{10000};
  proxy::UpstreamInfo upstream;  // response and tunnel timeouts the codec applies
  RouterStats stats;
  // Upstream sockets per client, and the descriptors kept back (the process's; a test's own).
  upstream::UpstreamBudget* budget = &upstream::UpstreamBudget::get();
};
using RouterConfigSharedPtr = std::shared_ptr<const RouterConfig>;

// The terminal request filter: finds the destination's addresses (those pinned by an earlier
// filter, or resolved here), takes a pooled connection for relayed requests when one is idle,
// otherwise connects (trying each address in turn within the connect timeout), and hands the
// connection to the codec.
class RouterFilter : public proxy::RequestFilter, public network::ConnectionCallbacks {
 public:
  explicit RouterFilter(RouterConfigSharedPtr config);
  ~RouterFilter() override;

  // proxy::RequestFilter
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;
  void onRequestEnd() override;

  // network::ConnectionCallbacks (of the connection being set up)
  void onData(buffer::Buffer& data, bool end_stream) override {}
  void onEvent(network::ConnectionEvent event) override;

 private:
  void onResolved(const absl::Status& status, const std::vector<network::Address>& addresses);
  void route();
  void connectNext();
  void dropConnecting();
  void onConnectTimeout();

  RouterConfigSharedPtr config_;
  proxy::ProxyRequest* request_ = nullptr;
  dns::Resolver::Query* query_ = nullptr;
  uint32_t next_address_ = 0;  // into request_->pinned
  network::ConnectionPtr connecting_;
  // The client's place in the upstream budget for this request's connection; it goes with the
  // connection to the codec.
  network::ConnectionSlot slot_;
  std::unique_ptr<event::Timer> timer_;
  std::string error_;  // detail of the last failure, for the refusal text
  // When the lookup or the connect began (the request's record takes their durations).
  event::MonotonicTime started_{};
};

}  // namespace router
}  // namespace filters
}  // namespace sluice
