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
  const config::StatsScope scope("socks5", chain);
  Socks5Stats s;
  s.cx_total = scope.counter("cx_total");
  s.handshake_timeout = scope.counter("handshake_timeout");
  s.handshake_malformed = scope.counter("handshake_malformed");
  s.no_acceptable_method = scope.counter("no_acceptable_method");
  s.auth_ok = scope.counter("auth_ok");
  s.auth_failed = scope.counter("auth_failed");
  s.rq_connect = scope.counter("rq_connect");
  s.rq_bind = scope.counter("rq_bind");
  s.rq_udp_associate = scope.counter("rq_udp_associate");
  for (size_t i = 0; i < kReplyCodes; ++i) s.replies[i] = scope.counter(kReplyStatNames[i]);
  s.tunnels_active = scope.gauge("tunnels_active");
  s.tunnel_idle_timeout = scope.counter("tunnel_idle_timeout");
  s.upstream_reset = scope.counter("upstream_reset");
  s.downstream_reset = scope.counter("downstream_reset");
  s.rq_abandoned = scope.counter("rq_abandoned");
  s.bind_timeout = scope.counter("bind_timeout");
  s.bind_peer_rejected = scope.counter("bind_peer_rejected");
  s.udp_associations_active = scope.gauge("udp_associations_active");
  s.udp_idle_timeout = scope.counter("udp_idle_timeout");
  s.udp_client_rx = scope.counter("udp_client_rx");
  s.udp_client_tx = scope.counter("udp_client_tx");
  s.udp_dropped_source = scope.counter("udp_dropped_source");
  s.udp_dropped_fragment = scope.counter("udp_dropped_fragment");
  s.udp_dropped_malformed = scope.counter("udp_dropped_malformed");
  s.udp_dropped_too_large = scope.counter("udp_dropped_too_large");
  s.udp_dropped_denied = scope.counter("udp_dropped_denied");
  s.udp_dropped_pending = scope.counter("udp_dropped_pending");
  s.udp_send_error = scope.counter("udp_send_error");
  s.udp_bytes_rx = scope.counter("udp_bytes_rx");
  s.udp_bytes_tx = scope.counter("udp_bytes_tx");
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
