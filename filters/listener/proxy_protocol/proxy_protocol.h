#pragma once

#include <memory>
#include <vector>

#include "source/common/network/cidr.h"
#include "source/common/network/filter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace proxy_protocol {

struct ProxyProtocolStats {
  stats::Counter accepted;   // headers read from a trusted balancer
  stats::Counter local;      // LOCAL / UNKNOWN headers: the balancer's own connection
  stats::Counter missing;    // a trusted source sent no header: closed
  stats::Counter malformed;  // a header that breaks the rules, or is too long: closed
  stats::Counter untrusted;  // a header from a source not in trusted_cidrs: closed
};

struct ProxyProtocolConfig {
  std::vector<network::CidrRange> trusted;
  size_t max_header_bytes = 1024;
  ProxyProtocolStats stats;
};
using ProxyProtocolConfigSharedPtr = std::shared_ptr<const ProxyProtocolConfig>;

// "sluice.proxy_protocol": reads the PROXY protocol header from a trusted balancer's connection,
// takes it off the socket (the connection never sees it) and makes its source the client's
// address; refuses a header from anyone else. It peeks until it can decide, within the
// listener's filter timeout.
class ProxyProtocolFilter : public network::ListenerFilter {
 public:
  explicit ProxyProtocolFilter(ProxyProtocolConfigSharedPtr config) : config_(std::move(config)) {}
  network::FilterStatus onAccept(network::ListenerFilterCallbacks& callbacks) override;
  size_t maxReadBytes() const override;
  network::FilterStatus onData(std::string_view peeked,
                               network::ListenerFilterCallbacks& callbacks) override;

 private:
  // Reads `length` bytes (already peeked) off the socket. False if the socket failed.
  static bool consume(int fd, size_t length);

  ProxyProtocolConfigSharedPtr config_;
  bool trusted_ = false;
};

}  // namespace proxy_protocol
}  // namespace filters
}  // namespace sluice
