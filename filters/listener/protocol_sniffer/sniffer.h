#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "source/common/network/filter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace protocol_sniffer {

enum class Protocol : uint8_t { Tls, H2c, Socks5, Http1 };

struct SnifferStats {
  stats::Counter tls, h2c, socks5, http1;
  stats::Counter not_allowed;  // a known protocol this listener does not accept
  stats::Counter unknown;      // bytes that start no protocol sluice speaks
};

struct SnifferConfig {
  bool allow[4] = {false, false, false, false};  // indexed by Protocol
  SnifferStats stats;
  bool allowed(Protocol p) const { return allow[static_cast<int>(p)]; }
};
using SnifferConfigSharedPtr = std::shared_ptr<const SnifferConfig>;

enum class Verdict : uint8_t { NeedMore, Tls, H2c, Socks5, Http1, Unknown };

// Classifies the first bytes of a connection. For TLS, `offers_h2` reports the ClientHello's
// ALPN. Pure (no I/O), so it is unit-tested and fuzzed on its own.
Verdict classify(std::string_view peeked, bool& offers_h2);

class ProtocolSnifferFilter : public network::ListenerFilter {
 public:
  explicit ProtocolSnifferFilter(SnifferConfigSharedPtr config) : config_(std::move(config)) {}

  network::FilterStatus onAccept(network::ListenerFilterCallbacks& callbacks) override {
    return network::FilterStatus::Continue;
  }
  size_t maxReadBytes() const override;
  network::FilterStatus onData(std::string_view peeked,
                               network::ListenerFilterCallbacks& callbacks) override;

 private:
  SnifferConfigSharedPtr config_;
};

}  // namespace protocol_sniffer
}  // namespace filters
}  // namespace sluice
