#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/socks5.pb.h"
#include "extensions/registry.h"
#include "filters/network/socks5/socks5_proxy.h"
#include "source/common/common/duration.h"

namespace sluice {
namespace filters {
namespace socks5 {

namespace {

Socks5Stats makeStats(const std::string& chain) {
  stats::Store& store = stats::Store::get();
  std::string p = absl::StrFormat("socks5.%s.", stats::sanitizeNamePart(chain));
  auto c = [&](const char* name) { return store.counter(p + name); };
  Socks5Stats s;
  s.cx_total = c("cx_total");
  s.handshake_timeout = c("handshake_timeout");
  s.handshake_malformed = c("handshake_malformed");
  s.no_acceptable_method = c("no_acceptable_method");
  s.auth_ok = c("auth_ok");
  s.auth_failed = c("auth_failed");
  s.rq_connect = c("rq_connect");
  s.rq_bind = c("rq_bind");
  s.rq_udp_associate = c("rq_udp_associate");
  s.reply_succeeded = c("reply_succeeded");
  s.reply_general_failure = c("reply_general_failure");
  s.reply_not_allowed = c("reply_not_allowed");
  s.reply_network_unreachable = c("reply_network_unreachable");
  s.reply_host_unreachable = c("reply_host_unreachable");
  s.reply_connection_refused = c("reply_connection_refused");
  s.reply_ttl_expired = c("reply_ttl_expired");
  s.reply_command_not_supported = c("reply_command_not_supported");
  s.reply_address_type_not_supported = c("reply_address_type_not_supported");
  s.tunnels_active = store.gauge(p + "tunnels_active");
  s.tunnel_idle_timeout = c("tunnel_idle_timeout");
  s.upstream_reset = c("upstream_reset");
  s.downstream_reset = c("downstream_reset");
  s.bytes_upstream_tx = c("upstream_bytes_tx");
  s.bytes_upstream_rx = c("upstream_bytes_rx");
  s.bind_timeout = c("bind_timeout");
  s.bind_peer_rejected = c("bind_peer_rejected");
  s.udp_associations_active = store.gauge(p + "udp_associations_active");
  s.udp_idle_timeout = c("udp_idle_timeout");
  s.udp_client_rx = c("udp_client_rx");
  s.udp_client_tx = c("udp_client_tx");
  s.udp_dropped_source = c("udp_dropped_source");
  s.udp_dropped_fragment = c("udp_dropped_fragment");
  s.udp_dropped_malformed = c("udp_dropped_malformed");
  s.udp_dropped_too_large = c("udp_dropped_too_large");
  s.udp_dropped_denied = c("udp_dropped_denied");
  s.udp_dropped_pending = c("udp_dropped_pending");
  s.udp_send_error = c("udp_send_error");
  s.udp_bytes_rx = c("udp_bytes_rx");
  s.udp_bytes_tx = c("udp_bytes_tx");
  return s;
}

absl::Status checkLimit(const std::string& path, const char* field, uint32_t value, uint32_t min,
                        uint32_t max) {
  if (value != 0 && (value < min || value > max)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.typed_config.%s: %d is out of range [%d, %d]", path, field, value, min, max));
  }
  return absl::OkStatus();
}

class Socks5Factory : public extensions::NetworkFilterFactory {
 public:
  using Category = extensions::NetworkFilterFactory;

  std::string name() const override { return "sluice.socks5"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::Socks5Config>();
  }

  absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& message,
      extensions::FactoryContext& context) const override {
    const auto& proto = static_cast<const sluice::filters::v1::Socks5Config&>(message);
    for (const auto& [field, value, min, max] :
         {std::tuple<const char*, uint32_t, uint32_t, uint32_t>{
              "max_udp_datagram_bytes", proto.max_udp_datagram_bytes(), 512, 65507},
          {"max_udp_pending_datagrams", proto.max_udp_pending_datagrams(), 1, 1024},
          {"max_udp_destinations", proto.max_udp_destinations(), 1, 4096}}) {
      absl::Status s = checkLimit(context.path, field, value, min, max);
      if (!s.ok()) return s;
    }
    auto config = std::make_shared<Socks5ProxyConfig>();
    config->require_auth = proto.require_auth();
    // Filters up to the last sluice.auth run once, when the client authenticates. With keys
    // there, "no authentication" is never offered: a client must send one.
    for (int i = 0; i < proto.request_filters_size(); ++i) {
      const std::string path =
          absl::StrFormat("%s.typed_config.request_filters[%d]", context.path, i);
      auto resolved = extensions::resolveFilter<extensions::RequestFilterFactory>(
          proto.request_filters(i), path);
      if (!resolved.ok()) return resolved.status();
      if (resolved->factory->name() != "sluice.auth") continue;
      config->auth_filters = static_cast<size_t>(i) + 1;
      const auto& auth = static_cast<const sluice::filters::v1::AuthConfig&>(*resolved->config);
      if (auth.api_keys_size() > 0 || !auth.api_keys_file().empty()) config->require_auth = true;
    }
    config->handshake_timeout = durationOr(proto.has_handshake_timeout(), proto.handshake_timeout(),
                                           config->handshake_timeout);
    config->bind_timeout =
        durationOr(proto.has_bind_timeout(), proto.bind_timeout(), config->bind_timeout);
    config->bind_idle_timeout = durationOr(proto.has_bind_idle_timeout(), proto.bind_idle_timeout(),
                                           config->bind_idle_timeout);
    config->udp_idle_timeout = durationOr(proto.has_udp_idle_timeout(), proto.udp_idle_timeout(),
                                          config->udp_idle_timeout);
    if (proto.max_udp_datagram_bytes() != 0) {
      config->max_udp_datagram_bytes = proto.max_udp_datagram_bytes();
    }
    if (proto.max_udp_pending_datagrams() != 0) {
      config->max_udp_pending = proto.max_udp_pending_datagrams();
    }
    if (proto.max_udp_destinations() != 0) {
      config->max_udp_destinations = proto.max_udp_destinations();
    }
    config->allow_bind = !proto.disable_bind();
    config->allow_udp_associate = !proto.disable_udp_associate();
    auto filters = extensions::createRequestFilterFactories(proto.request_filters(), context);
    if (!filters.ok()) return filters.status();
    config->request_filters = std::move(*filters);
    config->stats = makeStats(context.chain_name);
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
