#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/tls.pb.h"
#include "source/common/common/duration.h"
#include "source/common/extensions/registry.h"
#include "source/common/stats/stats.h"
#include "source/common/tls/context.h"
#include "source/common/tls/tls_socket.h"

namespace sluice {
namespace transport_sockets {
namespace tls {
namespace {

constexpr std::chrono::seconds kMinRotation{60};
constexpr std::chrono::seconds kMaxRotation{7 * 24 * 3600};

class TlsFactory : public extensions::TransportSocketConfigFactory {
 public:
  using Category = extensions::TransportSocketConfigFactory;

  std::string name() const override { return "sluice.tls"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::TlsConfig>();
  }

  absl::StatusOr<network::TransportSocketFactorySharedPtr> createTransportSocketFactory(
      const google::protobuf::Message& message,
      extensions::FactoryContext& context) const override {
    const auto& proto = static_cast<const sluice::filters::v1::TlsConfig&>(message);
    const std::string& path = context.path;
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.typed_config.%s", path, what));
    };
    sluice::tls::ServerContextConfig config;
    if (proto.certificates_size() == 0) return bad("certificates: at least one is needed");
    for (int i = 0; i < proto.certificates_size(); ++i) {
      const auto& c = proto.certificates(i);
      if (c.cert().empty() || c.key().empty()) {
        return bad(absl::StrFormat("certificates[%d]: both cert and key are needed", i));
      }
      config.certificates.push_back({c.cert(), c.key()});
    }
    for (const std::string& p : proto.alpn()) {
      if (p != "h2" && p != "http/1.1") {
        return bad(absl::StrFormat("alpn: '%s' is not one of h2, http/1.1", p));
      }
      config.alpn.push_back(p);
    }
    if (config.alpn.empty()) config.alpn.push_back("http/1.1");
    if (proto.min_version() == "1.3") {
      config.tls13_only = true;
    } else if (!proto.min_version().empty() && proto.min_version() != "1.2") {
      return bad(absl::StrFormat("min_version: '%s' is not 1.2 or 1.3", proto.min_version()));
    }
    auto rotation = std::chrono::duration_cast<std::chrono::seconds>(
        durationOr(proto.has_session_ticket_rotation(), proto.session_ticket_rotation(),
                   std::chrono::hours(1)));
    if (rotation < kMinRotation || rotation > kMaxRotation) {
      return bad("session_ticket_rotation: must be between 1m and 7d");
    }
    config.ticket_key_rotation = rotation;
    config.ticket_key_file = proto.session_ticket_key_file();
    if (proto.session_cache_size() != 0) config.session_cache_size = proto.session_cache_size();
    config.handshake_timeout = durationOr(proto.has_handshake_timeout(), proto.handshake_timeout(),
                                          config.handshake_timeout);
    if (proto.max_handshake_bytes() != 0) {
      if (proto.max_handshake_bytes() < 4096 || proto.max_handshake_bytes() > (1u << 20)) {
        return bad(absl::StrFormat("max_handshake_bytes: %d is out of range [4096, 1048576]",
                                   proto.max_handshake_bytes()));
      }
      config.max_handshake_bytes = proto.max_handshake_bytes();
    }
    config.stats_scope = stats::Scope("tls", "chain", context.chain_name);
    auto server = sluice::tls::ServerContext::create(config);
    // Its errors start with the field they concern ("certificates[0]: ...").
    if (!server.ok()) return bad(std::string(server.status().message()));
    const stats::Scope& scope = config.stats_scope;
    return network::TransportSocketFactorySharedPtr(std::make_shared<sluice::tls::TlsSocketFactory>(
        std::move(*server),
        scope.counter("certificate_reloads",
                      "Certificate re-reads of a running chain (POST /reload_certificates)."),
        scope.counter("certificate_reload_failures",
                      "Certificate reloads that failed (the previous certificates stay).")));
  }
};

SLUICE_REGISTER_FACTORY(TlsFactory);

}  // namespace
}  // namespace tls
}  // namespace transport_sockets
}  // namespace sluice
