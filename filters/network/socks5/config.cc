#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/socks5.pb.h"
#include "filters/network/socks5/socks5_proxy.h"
#include "source/common/common/duration.h"
#include "source/common/config/filter_config.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace socks5 {

namespace {

Socks5Stats makeStats(const std::string& chain) {
  const stats::Scope scope("socks5", "chain", chain);
  Socks5Stats s;
  s.cx_total = scope.counter("cx_total", "SOCKS5 connections handled.");
  s.handshake_timeout = scope.counter(
      "handshake_timeout",
      "Connections whose greeting, authentication or request was not in within the deadline.");
  s.handshake_malformed =
      scope.counter("handshake_malformed",
                    "Connections with a malformed greeting, method list or subnegotiation.");
  s.no_acceptable_method =
      scope.counter("no_acceptable_method", "Greetings answered 0xFF: no acceptable method.");
  s.auth_ok = scope.counter("auth_ok", "Connections the authentication request filters passed.");
  s.auth_failed = scope.counter(
      "auth_failed", "Connections the authentication request filters refused (RFC 1929 failure).");
  s.rq_connect = scope.counter("rq_connect", "CONNECT requests.");
  s.rq_bind = scope.counter("rq_bind", "BIND requests.");
  s.rq_udp_associate = scope.counter("rq_udp_associate", "UDP ASSOCIATE requests.");
  // One family for the reply codes, a label each ("reply_succeeded" is reply="succeeded").
  for (size_t i = 0; i < kReplyCodes; ++i) {
    const std::string_view stat = kReplyStatNames[i];
    s.replies[i] = scope.counter(
        stat, "reply", stats::Label{"reply", std::string(stat.substr(stat.find('_') + 1))},
        "Replies sent to SOCKS5 requests, by reply code.");
  }
  s.tunnels_active = scope.gauge("tunnels_active", "SOCKS5 tunnels open (CONNECT and BIND).");
  s.tunnel_idle_timeout =
      scope.counter("tunnel_idle_timeout", "Tunnels closed after tunnel_idle_timeout.");
  s.upstream_reset =
      scope.counter("upstream_reset", "Tunnels the destination (or BIND peer) closed.");
  s.downstream_reset =
      scope.counter("downstream_reset", "Clients that left while their request was being served.");
  s.rq_abandoned =
      scope.counter("rq_abandoned", "Clients that left while their lookup or connect was pending.");
  s.bind_timeout = scope.counter("bind_timeout",
                                 "BIND requests with no inbound connection within bind_timeout.");
  s.bind_peer_rejected = scope.counter("bind_peer_rejected",
                                       "Inbound BIND connections from another address (closed).");
  s.udp_associations_active = scope.gauge("udp_associations_active", "UDP associations open.");
  s.udp_idle_timeout =
      scope.counter("udp_idle_timeout", "UDP associations closed after their idle timeout.");
  s.udp_client_rx = scope.counter("udp_client_rx", "Datagrams from clients relayed on.");
  s.udp_client_tx = scope.counter("udp_client_tx", "Datagrams relayed to clients.");
  s.udp_dropped_bandwidth = scope.counter(
      "udp_dropped_bandwidth",
      "Datagrams dropped: over the key's or its group's bandwidth limit (they cannot wait).");
  s.udp_dropped_quota = scope.counter(
      "udp_dropped_quota", "Datagrams dropped: past a byte quota (the association then ends).");
  s.udp_dropped_source =
      scope.counter("udp_dropped_source",
                    "Datagrams dropped: from neither the client nor a destination it wrote to.");
  s.udp_dropped_fragment =
      scope.counter("udp_dropped_fragment", "Datagrams dropped: fragmented (FRAG not 0).");
  s.udp_dropped_malformed =
      scope.counter("udp_dropped_malformed", "Datagrams dropped: a bad SOCKS5 UDP header.");
  s.udp_dropped_too_large =
      scope.counter("udp_dropped_too_large", "Datagrams dropped: over max_udp_datagram_bytes.");
  s.udp_dropped_denied = scope.counter(
      "udp_dropped_denied", "Datagrams dropped: the request filters refused the destination.");
  s.udp_dropped_pending =
      scope.counter("udp_dropped_pending",
                    "Datagrams dropped: more than max_udp_pending_datagrams awaiting checks.");
  s.udp_send_error = scope.counter("udp_send_error", "Datagrams dropped: sendto failed.");
  s.udp_parent_tx =
      scope.counter("udp_parent_tx", "Datagrams from clients sent on through a SOCKS5 parent.");
  s.udp_parent_rx = scope.counter("udp_parent_rx",
                                  "Datagrams to clients that came back through a SOCKS5 parent.");
  s.udp_dropped_parent = scope.counter(
      "udp_dropped_parent",
      "Datagrams dropped: their parent UDP association could not be made, or its control "
      "connection closed.");
  s.udp_dropped_no_udp_parent = scope.counter(
      "udp_dropped_no_udp_parent",
      "Datagrams dropped: routed to parents none of which is SOCKS5 (HTTP cannot carry UDP).");
  s.udp_parent_associations =
      scope.counter("udp_parent_associations", "UDP associations made with SOCKS5 parents.");
  s.udp_bytes_rx = scope.counter("udp_bytes_rx", "UDP payload bytes from clients.");
  s.udp_bytes_tx = scope.counter("udp_bytes_tx", "UDP payload bytes to clients.");
  return s;
}

class Socks5Factory : public extensions::FactoryBase<extensions::NetworkFilterFactory,
                                                     sluice::filters::v1::Socks5Config> {
 public:
  std::string name() const override { return "sluice.socks5"; }
  absl::StatusOr<network::NetworkFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::Socks5Config& proto,
      extensions::FactoryContext& context) const override {
    absl::Status limits = config::checkLimits(
        context.path, {{"max_udp_datagram_bytes", proto.max_udp_datagram_bytes(), 512, 65507},
                       {"max_udp_pending_datagrams", proto.max_udp_pending_datagrams(), 1, 1024},
                       {"max_udp_destinations", proto.max_udp_destinations(), 1, 4096}});
    if (!limits.ok()) return limits;
    auto config = std::make_shared<Socks5ProxyConfig>();
    config->handshake_timeout = durationOr(proto.has_handshake_timeout(), proto.handshake_timeout(),
                                           config->handshake_timeout);
    config->bind_timeout =
        durationOr(proto.has_bind_timeout(), proto.bind_timeout(), config->bind_timeout);
    config->bind_idle_timeout = durationOr(proto.has_bind_idle_timeout(), proto.bind_idle_timeout(),
                                           config->bind_idle_timeout);
    config->udp_idle_timeout = durationOr(proto.has_udp_idle_timeout(), proto.udp_idle_timeout(),
                                          config->udp_idle_timeout);
    config::setIfNonZero(proto.max_udp_datagram_bytes(), config->max_udp_datagram_bytes);
    config::setIfNonZero(proto.max_udp_pending_datagrams(), config->max_udp_pending);
    config::setIfNonZero(proto.max_udp_destinations(), config->max_udp_destinations);
    config->allow_bind = !proto.disable_bind();
    config->allow_udp_associate = !proto.disable_udp_associate();
    config->bind_splice = !proto.disable_splice();
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    // With an authenticating filter that needs a key, "no authentication" is never offered: a
    // client must send one. That phase runs once, when the client authenticates.
    config->require_auth = proto.require_auth();
    for (const proxy::RequestFilterSpec& spec : config->request_filters) {
      if (spec.phase != proxy::RequestPhase::Authenticate) continue;
      config->has_authenticate_phase = true;
      if (spec.requires_credential) config->require_auth = true;
    }
    config->stats = makeStats(context.chain_name);
    config->tunnel_stats = upstream::listenerTunnelStats(context.listener_name);
    config->listener_name = context.listener_name;
    if (context.routes != nullptr) config->routes = context.routes;
    config->request_duration =
        upstream::requestDurationHistogram(context.listener_name, proxy::Protocol::Socks5);
    config->tunnel = upstream::connectionTunnelConfig(
        config->listener_name, config->request_duration, config->tunnel_stats, config->stats);
    Socks5ProxyConfigSharedPtr shared = std::move(config);
    return network::NetworkFilterFactoryCb([shared](network::FilterManager& manager) {
      manager.addReadFilter(std::make_unique<Socks5Filter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(Socks5Factory);

}  // namespace
}  // namespace socks5
}  // namespace filters
}  // namespace sluice
