#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/protocol_sniffer.pb.h"
#include "filters/listener/protocol_sniffer/sniffer.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace protocol_sniffer {
namespace {

class ProtocolSnifferFactory
    : public extensions::FactoryBase<extensions::ListenerFilterFactory,
                                     sluice::filters::v1::ProtocolSnifferConfig> {
 public:
  std::string name() const override { return "sluice.protocol_sniffer"; }
  absl::StatusOr<network::ListenerFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::ProtocolSnifferConfig& proto,
      extensions::FactoryContext& context) const override {
    if (proto.protocols().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.protocols: empty (list the protocols this listener accepts: tls, "
          "h2c, socks5, http1)",
          context.path));
    }
    auto config = std::make_shared<SnifferConfig>();
    for (int i = 0; i < proto.protocols_size(); ++i) {
      const std::string& p = proto.protocols(i);
      Protocol protocol;
      if (p == "tls") {
        protocol = Protocol::Tls;
      } else if (p == "h2c") {
        protocol = Protocol::H2c;
      } else if (p == "socks5") {
        protocol = Protocol::Socks5;
      } else if (p == "http1") {
        protocol = Protocol::Http1;
      } else {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.protocols[%d]: '%s' is not one of tls, h2c, "
                            "socks5, http1",
                            context.path, i, p));
      }
      config->allow[static_cast<int>(protocol)] = true;
    }
    const stats::Scope scope =
        stats::Scope("listener", "listener", context.listener_name).scope("sniffer");
    // One family for the admitted protocols, a label each.
    auto admitted = [&](const char* protocol) {
      return scope.counter(protocol, "admitted", stats::Label{"protocol", protocol},
                           "Client connections the protocol sniffer admitted, by protocol.");
    };
    config->stats.tls = admitted("tls");
    config->stats.h2c = admitted("h2c");
    config->stats.socks5 = admitted("socks5");
    config->stats.http1 = admitted("http1");
    config->stats.not_allowed = scope.counter(
        "not_allowed", "Client connections closed: a protocol this listener does not accept.");
    config->stats.unknown = scope.counter(
        "unknown", "Client connections closed: bytes that start no protocol sluice speaks.");
    SnifferConfigSharedPtr shared = std::move(config);
    return network::ListenerFilterFactoryCb([shared](network::ListenerFilterManager& manager) {
      manager.addListenerFilter(std::make_unique<ProtocolSnifferFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(ProtocolSnifferFactory);

}  // namespace
}  // namespace protocol_sniffer
}  // namespace filters
}  // namespace sluice
