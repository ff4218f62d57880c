#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/proxy_protocol.pb.h"
#include "filters/listener/proxy_protocol/proxy_protocol.h"
#include "source/common/extensions/registry.h"
#include "source/common/network/proxy_protocol.h"

namespace sluice {
namespace filters {
namespace proxy_protocol {
namespace {

class ProxyProtocolFactory
    : public extensions::FactoryBase<extensions::ListenerFilterFactory,
                                     sluice::filters::v1::ProxyProtocolConfig> {
 public:
  std::string name() const override { return "sluice.proxy_protocol"; }
  absl::StatusOr<network::ListenerFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::ProxyProtocolConfig& proto,
      extensions::FactoryContext& context) const override {
    if (proto.trusted_cidrs().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.trusted_cidrs: empty (name the balancers allowed to send a PROXY "
          "header)",
          context.path));
    }
    auto config = std::make_shared<ProxyProtocolConfig>();
    for (int i = 0; i < proto.trusted_cidrs_size(); ++i) {
      auto range = network::CidrRange::parse(proto.trusted_cidrs(i));
      if (!range.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.typed_config.trusted_cidrs[%d]: %s", context.path, i, range.status().message()));
      }
      config->trusted.push_back(*range);
    }
    // The longest address block (a Unix socket's, 216 bytes) after the fixed part.
    constexpr uint32_t kMin = network::kProxyV2FixedBytes + 216;
    constexpr uint32_t kMax = network::kProxyV2FixedBytes + 65535;
    if (proto.max_header_bytes() != 0) {
      if (proto.max_header_bytes() < kMin || proto.max_header_bytes() > kMax) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.max_header_bytes: %d is out of range [%d, %d]",
                            context.path, proto.max_header_bytes(), kMin, kMax));
      }
      config->max_header_bytes = proto.max_header_bytes();
    }
    const stats::Scope scope =
        stats::Scope("listener", "listener", context.listener_name).scope("proxy_protocol");
    config->stats.accepted =
        scope.counter("accepted", "PROXY headers read from a trusted balancer.");
    config->stats.local =
        scope.counter("local", "LOCAL or UNKNOWN PROXY headers (the balancer's own connection).");
    config->stats.missing = scope.counter(
        "missing", "Connections from a trusted balancer without a PROXY header (closed).");
    config->stats.malformed =
        scope.counter("malformed", "Malformed or oversized PROXY headers (closed).");
    config->stats.untrusted =
        scope.counter("untrusted", "PROXY headers from a source outside trusted_cidrs (closed).");
    context.sets_client_address = true;
    ProxyProtocolConfigSharedPtr shared = std::move(config);
    return network::ListenerFilterFactoryCb([shared](network::ListenerFilterManager& manager) {
      manager.addListenerFilter(std::make_unique<ProxyProtocolFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(ProxyProtocolFactory);

}  // namespace
}  // namespace proxy_protocol
}  // namespace filters
}  // namespace sluice
