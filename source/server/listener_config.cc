#include "source/server/listener_config.h"

#include <algorithm>
#include <string_view>
#include <thread>

#include "absl/strings/str_format.h"

#include "source/common/ban/ban_config.h"
#include "source/common/common/duration.h"
#include "source/common/extensions/registry.h"
#include "source/common/http/proxy_status.h"

namespace sluice {
namespace server {

const FilterChainConfig* ListenerConfig::match(const network::SocketFacts& facts) const {
  for (const FilterChainConfig& chain : chains) {
    if (!chain.transport_protocol.empty() && chain.transport_protocol != facts.transport_protocol) {
      continue;
    }
    if (!chain.application_protocols.empty()) {
      bool found = false;
      for (const std::string& p : chain.application_protocols) {
        if (p == facts.application_protocol) found = true;
      }
      if (!found) continue;
    }
    return &chain;
  }
  return nullptr;
}

namespace {

ListenerStats makeListenerStats(const std::string& name) {
  const stats::Scope scope("listener", "listener", name);
  ListenerStats s;
  s.downstream_cx_total = scope.counter("downstream_cx_total", "Client connections accepted.");
  s.downstream_cx_active = scope.gauge("downstream_cx_active", "Client connections open.");
  s.downstream_cx_refused =
      scope.counter("downstream_cx_refused", "Client connections closed by a listener filter.");
  s.downstream_cx_no_chain =
      scope.counter("downstream_cx_no_chain", "Client connections no filter chain matched.");
  s.downstream_listener_filter_timeout =
      scope.counter("downstream_listener_filter_timeout",
                    "Client connections whose listener filters did not finish in time.");
  s.downstream_accept_error =
      scope.counter("downstream_accept_error", "accept(2) failures, EMFILE and ENFILE included.");
  s.downstream_cx_overflow = scope.counter(
      "downstream_cx_overflow", "Client connections refused at accept over max_connections.");
  s.downstream_cx_per_client_overflow =
      scope.counter("downstream_cx_per_client_overflow",
                    "Client connections refused at accept over max_connections_per_client.");
  s.downstream_bytes_rx = scope.counter("downstream_bytes_rx", "Bytes read from clients.");
  s.downstream_bytes_tx = scope.counter("downstream_bytes_tx", "Bytes written to clients.");
  return s;
}

// Far above the default process fd limit, low enough to catch a typo of a few extra zeros.
constexpr uint32_t kMaxConnectionsLimit = 10000000;
constexpr uint32_t kDefaultMaxConnections = 10000;
constexpr uint32_t kDefaultMaxConnectionsPerClient = 256;
// Worded like the codec's own replies.
constexpr std::string_view kOverflowBody = "503 Service Unavailable: too many connections\n";

absl::Status buildConnectionLimits(const config::v1::ConnectionLimits& proto,
                                   const std::string& path, const ListenerConfig* running,
                                   ListenerConfig& config) {
  uint32_t max = proto.max_connections() != 0 ? proto.max_connections() : kDefaultMaxConnections;
  uint32_t per_client = proto.max_connections_per_client() != 0 ? proto.max_connections_per_client()
                                                                : kDefaultMaxConnectionsPerClient;
  for (const auto& [field, value] : {std::pair<const char*, uint32_t>{"max_connections", max},
                                     {"max_connections_per_client", per_client}}) {
    if (value > kMaxConnectionsLimit) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.connection_limits.%s: %d is out of range [1, %d]", path, field, value,
                          kMaxConnectionsLimit));
    }
  }
  // A per-client limit above the listener's is the listener's.
  config.max_connections = max;
  config.max_connections_per_client = std::min(per_client, max);
  config.limiter = running != nullptr ? running->limiter
                                      : std::make_shared<network::ConnectionLimiter>(
                                            max, config.max_connections_per_client);
  if (proto.overflow_reply() == config::v1::ConnectionLimits::HTTP_503) {
    config.overflow_reply = absl::StrFormat(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Content-Length: %d\r\nProxy-Status: %s\r\nConnection: close\r\n\r\n%s",
        kOverflowBody.size(),
        http::proxyStatusValue(http::ProxyError::ConnectionLimitReached, "too many connections"),
        kOverflowBody);
  }
  return absl::OkStatus();
}

absl::StatusOr<ListenerConfigSharedPtr> buildListener(
    const config::v1::Listener& proto, int index,
    const std::vector<network::Address>& local_addresses,
    const std::shared_ptr<ban::BanTable>& bans, const policy::PolicySharedPtr& policy,
    const upstream::RoutesSharedPtr& routes, const ListenerConfig* running) {
  std::string path = absl::StrFormat("listeners[%d]", index);
  auto config = std::make_shared<ListenerConfig>();
  config->name = proto.name();
  auto address = network::Address::parseHostPort(proto.address());
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.address: %s", path, address.status().message()));
  }
  config->address = *address;
  if (proto.backlog() != 0) config->backlog = proto.backlog();
  config->listener_filters_timeout =
      durationOr(proto.has_listener_filters_timeout(), proto.listener_filters_timeout(),
                 config->listener_filters_timeout);
  absl::Status limits = buildConnectionLimits(proto.connection_limits(), path, running, *config);
  if (!limits.ok()) return limits;

  extensions::FactoryContext context;
  context.listener_name = proto.name();
  context.listener_address = config->address;
  context.local_addresses = local_addresses;
  context.bans = bans;
  context.policy = policy;
  context.filter_lists = &config->filter_lists;
  context.routes = routes;
  context.grants = &config->grants;
  context.running_grants = running != nullptr ? &running->grants : nullptr;
  for (int i = 0; i < proto.listener_filters_size(); ++i) {
    context.path = absl::StrFormat("%s.listener_filters[%d]", path, i);
    auto resolved = extensions::resolveFilter<extensions::ListenerFilterFactory>(
        proto.listener_filters(i), context.path);
    if (!resolved.ok()) return resolved.status();
    auto cb = resolved->factory->createFilterFactory(*resolved->config, context);
    if (!cb.ok()) return cb.status();
    config->listener_filters.push_back(std::move(*cb));
    if (context.sets_client_address) {
      // Every other filter, and the limits, must see the client it names.
      if (i != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s names the client for the filters after it: it must be the first listener "
            "filter",
            context.path, proto.listener_filters(i).name()));
      }
      config->client_address_from_filters = true;
      context.sets_client_address = false;
    }
  }
  if (proto.filter_chains_size() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s.filter_chains: empty", path));
  }
  for (int c = 0; c < proto.filter_chains_size(); ++c) {
    const auto& chain_proto = proto.filter_chains(c);
    std::string chain_path = absl::StrFormat("%s.filter_chains[%d]", path, c);
    FilterChainConfig chain;
    chain.name = chain_proto.name().empty() ? proto.name() : chain_proto.name();
    chain.transport_protocol = chain_proto.match().transport_protocol();
    for (const auto& p : chain_proto.match().application_protocols()) {
      chain.application_protocols.push_back(p);
    }
    if (chain_proto.filters_size() == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.filters: empty", chain_path));
    }
    context.chain_name = chain.name;
    if (chain_proto.has_transport_socket()) {
      context.path = chain_path + ".transport_socket";
      auto resolved = extensions::resolveFilter<extensions::TransportSocketConfigFactory>(
          chain_proto.transport_socket(), context.path);
      if (!resolved.ok()) return resolved.status();
      auto factory = resolved->factory->createTransportSocketFactory(*resolved->config, context);
      if (!factory.ok()) return factory.status();
      chain.transport_socket = std::move(*factory);
    }
    for (int f = 0; f < chain_proto.filters_size(); ++f) {
      context.path = absl::StrFormat("%s.filters[%d]", chain_path, f);
      auto resolved = extensions::resolveFilter<extensions::NetworkFilterFactory>(
          chain_proto.filters(f), context.path);
      if (!resolved.ok()) return resolved.status();
      auto cb = resolved->factory->createFilterFactory(*resolved->config, context);
      if (!cb.ok()) return cb.status();
      chain.filters.push_back(std::move(*cb));
    }
    config->chains.push_back(std::move(chain));
  }
  config->stats = makeListenerStats(proto.name());
  return ListenerConfigSharedPtr(std::move(config));
}

}  // namespace

absl::StatusOr<ServerConfigSharedPtr> buildServerConfig(const config::v1::Bootstrap& bootstrap,
                                                        const ServerConfig* running) {
  auto config = std::make_shared<ServerConfig>();
  config->bootstrap = bootstrap;
  config->workers = bootstrap.workers();
  config->pin_workers = bootstrap.pin_workers();
  config->io_uring = !bootstrap.disable_io_uring();
  config->reads_by_completion = bootstrap.reads_by_completion();
  if (config->workers == 0) config->workers = std::max(1u, std::thread::hardware_concurrency());
  if (config->workers > 256) {
    return absl::InvalidArgumentError("workers: at most 256");
  }
  config->drain_timeout =
      durationOr(bootstrap.has_drain_timeout(), bootstrap.drain_timeout(), config->drain_timeout);
  config->close_flush_timeout =
      durationOr(bootstrap.has_close_flush_timeout(), bootstrap.close_flush_timeout(),
                 config->close_flush_timeout);
  if (config->close_flush_timeout > std::chrono::hours(1)) {
    return absl::InvalidArgumentError("close_flush_timeout: at most 1h");
  }
  // "0s" turns the releases off.
  config->memory_release_interval =
      durationOrOff(bootstrap.has_memory_release_interval(), bootstrap.memory_release_interval(),
                    config->memory_release_interval);
  if (bootstrap.has_tls_handshakes_per_turn()) {
    if (bootstrap.tls_handshakes_per_turn() > 4096) {
      return absl::InvalidArgumentError("tls_handshakes_per_turn: at most 4096 (0: no bound)");
    }
    config->tls_handshakes_per_turn = bootstrap.tls_handshakes_per_turn();
  }
  if (bootstrap.upstream_pool().max_idle_per_destination() != 0) {
    config->pool_max_idle = bootstrap.upstream_pool().max_idle_per_destination();
  }
  config->pool_idle_timeout =
      durationOr(bootstrap.upstream_pool().has_idle_timeout(),
                 bootstrap.upstream_pool().idle_timeout(), config->pool_idle_timeout);
  for (const auto& [key, value] :
       {std::pair<const char*, uint32_t>{"max_connections_per_client",
                                         bootstrap.upstream_limits().max_connections_per_client()},
        {"descriptor_reserve", bootstrap.upstream_limits().descriptor_reserve()}}) {
    if (value > 10000000) {
      return absl::InvalidArgumentError(
          absl::StrFormat("upstream_limits.%s: %d is above 10000000", key, value));
    }
  }
  const sluice::config::v1::AccessLog& log = bootstrap.access_log();
  if (!log.mode().empty() && !upstream::parseAccessLogMode(log.mode(), config->access_log.mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("access_log.mode: '%s' is not one of off, errors, all", log.mode()));
  }
  if (!log.format().empty() &&
      !upstream::parseAccessLogFormat(log.format(), config->access_log.format)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("access_log.format: '%s' is not one of json, squid", log.format()));
  }
  if (!log.path().empty()) config->access_log.path = log.path();
  for (const auto& [key, value, min, max] :
       {std::tuple<const char*, uint32_t, uint32_t, uint32_t>{"batch_bytes", log.batch_bytes(),
                                                              4096, 16u << 20},
        {"max_pending_bytes", log.max_pending_bytes(), 65536, 1u << 30}}) {
    if (value != 0 && (value < min || value > max)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("access_log.%s: %d is out of range [%d, %d]", key, value, min, max));
    }
  }
  if (log.batch_bytes() != 0) config->access_log.batch_bytes = log.batch_bytes();
  if (log.max_pending_bytes() != 0) config->access_log.max_pending_bytes = log.max_pending_bytes();
  config->upstream_per_client = bootstrap.upstream_limits().max_connections_per_client();
  config->descriptor_reserve = bootstrap.upstream_limits().descriptor_reserve();
  if (!bootstrap.admin().address().empty()) {
    auto admin = network::Address::parseHostPort(bootstrap.admin().address());
    if (!admin.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("admin.address: %s", admin.status().message()));
    }
    config->admin_address = *admin;
  }
  if (bootstrap.listeners_size() == 0) {
    return absl::InvalidArgumentError("listeners: at least one listener is needed");
  }
  // One table for the whole process: a client banned on one listener is banned on all. A
  // reload keeps the running table while the options stay; a new one takes its bans over when
  // the reload is applied.
  auto ban_options = ban::banOptionsFromProto(bootstrap.bans());
  if (!ban_options.ok()) return ban_options.status();
  if (running != nullptr && running->bans != nullptr && !bootstrap.bans().disabled() &&
      running->bans->options() == *ban_options) {
    config->bans = running->bans;
  } else {
    auto bans = ban::createBanTable(bootstrap.bans());
    if (!bans.ok()) return bans.status();
    config->bans = *bans;
  }
  config->revoke_grace = durationOr(bootstrap.reload().has_revoke_grace(),
                                    bootstrap.reload().revoke_grace(), config->revoke_grace);
  if (config->revoke_grace > std::chrono::minutes(10)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("reload.revoke_grace: %d ms is above 10m", config->revoke_grace.count()));
  }
  config->pid_file = bootstrap.pid_file();
  auto policy =
      policy::buildPolicy(bootstrap.policy(), running != nullptr ? running->policy.get() : nullptr);
  if (!policy.ok()) return policy.status();
  config->policy = std::move(*policy);
  auto routes =
      upstream::buildRoutes(bootstrap, running != nullptr ? running->routes.get() : nullptr);
  if (!routes.ok()) return routes.status();
  config->routes = std::move(*routes);
  // Every address sluice itself listens on, for filters that refuse to loop back into it
  // (sluice.dest_guard). A malformed one is reported by buildListener.
  std::vector<network::Address> local_addresses;
  if (config->admin_address.valid()) local_addresses.push_back(config->admin_address);
  for (const auto& listener : bootstrap.listeners()) {
    auto address = network::Address::parseHostPort(listener.address());
    if (address.ok()) local_addresses.push_back(*address);
  }
  for (int i = 0; i < bootstrap.listeners_size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (bootstrap.listeners(j).name() == bootstrap.listeners(i).name()) {
        return absl::InvalidArgumentError(absl::StrFormat("listeners[%d].name: '%s' is used twice",
                                                          i, bootstrap.listeners(i).name()));
      }
    }
    const ListenerConfig* running_listener = nullptr;
    if (running != nullptr) {
      for (const ListenerConfigSharedPtr& l : running->listeners) {
        if (l->name == bootstrap.listeners(i).name()) running_listener = l.get();
      }
    }
    auto listener = buildListener(bootstrap.listeners(i), i, local_addresses, config->bans,
                                  config->policy, config->routes, running_listener);
    if (!listener.ok()) return listener.status();
    config->listeners.push_back(std::move(*listener));
  }
  return ServerConfigSharedPtr(std::move(config));
}

}  // namespace server
}  // namespace sluice
