#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/ban/ban_table.h"
#include "source/common/network/address.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/network/filter.h"
#include "source/common/policy/enforcement.h"
#include "source/common/policy/policy.h"
#include "source/common/proxy/grants.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/access_log.h"
#include "source/common/upstream/routes.h"

namespace sluice {
namespace server {

struct ListenerStats {
  stats::Counter downstream_cx_total;
  stats::Gauge downstream_cx_active;
  stats::Counter downstream_cx_refused;               // closed by a listener filter
  stats::Counter downstream_cx_no_chain;              // no filter chain matched
  stats::Counter downstream_listener_filter_timeout;  // listener filters did not finish in time
  stats::Counter downstream_accept_error;             // accept(2) failures, EMFILE/ENFILE included
  stats::Counter downstream_cx_overflow;              // refused at accept: max_connections
  stats::Counter downstream_cx_per_client_overflow;   // refused: max_connections_per_client
  stats::Counter downstream_bytes_rx;
  stats::Counter downstream_bytes_tx;
};

struct FilterChainConfig {
  std::string name;
  std::string transport_protocol;                  // empty matches any
  std::vector<std::string> application_protocols;  // empty matches any
  std::vector<network::NetworkFilterFactoryCb> filters;
  // Null for plain TCP.
  network::TransportSocketFactorySharedPtr transport_socket;
};

// One listener's validated, immutable config, shared by every worker.
struct ListenerConfig {
  std::string name;
  network::Address address;
  uint32_t backlog = 1024;
  std::vector<network::ListenerFilterFactoryCb> listener_filters;
  // The first listener filter names the client (sluice.proxy_protocol): connections count
  // against the per-client limit once the listener filters are done, under that client.
  bool client_address_from_filters = false;
  std::chrono::milliseconds listener_filters_timeout{10000};
  std::vector<FilterChainConfig> chains;
  ListenerStats stats;
  // Shared by the listener's workers; the config is immutable, the counts in it are not. A
  // reload keeps a listener's limiter (its counts are the connections open now) and gives it
  // these limits when it takes the new config.
  std::shared_ptr<network::ConnectionLimiter> limiter;
  uint32_t max_connections = 0;
  uint32_t max_connections_per_client = 0;
  // The keys and client addresses the listener's filters let in.
  proxy::ListenerGrants grants;
  // What each of its lists of request filters does about the policy (the keys it admits, with
  // their groups, and the destination guard that enforces their rules): `sluice policy explain`.
  std::vector<policy::FilterListPolicySharedPtr> filter_lists;
  // Sent (best effort) to a client refused by the limiter before it is closed; may be empty.
  std::string overflow_reply;

  // The first chain that fits the socket's facts, or null.
  const FilterChainConfig* match(const network::SocketFacts& facts) const;
};
using ListenerConfigSharedPtr = std::shared_ptr<const ListenerConfig>;

// Everything the server runs with, built and checked from a Bootstrap before anything binds:
// `sluice check` stops here.
struct ServerConfig {
  config::v1::Bootstrap bootstrap;
  uint32_t workers = 1;
  bool pin_workers = false;
  // Sends and small receives go to the kernel in batches through io_uring (event::IoBatch).
  bool io_uring = true;
  // Plain connections read their messages by completion (event::IoBatch's standing receives).
  bool reads_by_completion = false;
  std::vector<ListenerConfigSharedPtr> listeners;
  std::chrono::milliseconds drain_timeout{10000};
  // A flushed close's wait for the peer to take the last bytes (network::Connection).
  std::chrono::milliseconds close_flush_timeout{10000};
  // 0: never hand free heap memory back to the system.
  std::chrono::milliseconds memory_release_interval{10000};
  // TLS handshakes each worker starts per turn of its loop (0: no bound).
  uint32_t tls_handshakes_per_turn = 16;
  uint32_t pool_max_idle = 256;
  // The upstream budget (0: automatic): see UpstreamLimits in bootstrap.proto.
  uint32_t upstream_per_client = 0;
  uint32_t descriptor_reserve = 0;
  upstream::AccessLogConfig access_log;
  std::chrono::milliseconds pool_idle_timeout{60000};
  network::Address admin_address;  // invalid when the admin endpoint is off
  // Shared by every listener's sluice.auth and sluice.ban; null when bans are disabled. A
  // reload keeps the running table when the ban options stay.
  std::shared_ptr<ban::BanTable> bans;
  // After a reload took a key or a client address away, what authenticated with it or came
  // from it gets this long to finish before it is closed.
  std::chrono::milliseconds revoke_grace{500};
  // Where the process writes its pid (empty: nowhere), for `sluice reload` without an admin
  // address.
  std::string pid_file;
  // The groups of keys (Bootstrap.policy) every listener's filters refer to.
  policy::PolicySharedPtr policy;
  // Parent proxies and the routes through them; a reload keeps a parent's health.
  upstream::RoutesSharedPtr routes;
};
using ServerConfigSharedPtr = std::shared_ptr<const ServerConfig>;

// Builds and checks everything before anything binds. With `running` (a reload), state that
// outlives a config version is carried over from it: the listeners' connection counts, the ban
// table, the grants of keys that stay.
absl::StatusOr<ServerConfigSharedPtr> buildServerConfig(const config::v1::Bootstrap& bootstrap,
                                                        const ServerConfig* running = nullptr);

}  // namespace server
}  // namespace sluice
