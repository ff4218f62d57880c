#include "filters/listener/proxy_protocol/proxy_protocol.h"

#include <algorithm>
#include <cerrno>

#include <sys/socket.h>

#include "source/common/common/logger.h"
#include "source/common/network/proxy_protocol.h"

namespace sluice {
namespace filters {
namespace proxy_protocol {

network::FilterStatus ProxyProtocolFilter::onAccept(network::ListenerFilterCallbacks& callbacks) {
  trusted_ = std::any_of(
      config_->trusted.begin(), config_->trusted.end(),
      [&](const network::CidrRange& range) { return range.contains(callbacks.peer()); });
  return network::FilterStatus::Continue;
}

size_t ProxyProtocolFilter::maxReadBytes() const {
  // Enough for either version; a client of its own is told apart from a header within a few
  // bytes.
  return std::max(config_->max_header_bytes, network::kProxyV1MaxBytes);
}

network::FilterStatus ProxyProtocolFilter::onData(std::string_view peeked,
                                                  network::ListenerFilterCallbacks& callbacks) {
  network::ProxyHeader header;
  std::string_view error;
  const network::ProxyParse parse =
      network::parseProxyHeader(peeked, config_->max_header_bytes, header, error);
  auto refuse = [&callbacks](const stats::Counter& counter) {
    counter.inc();
    callbacks.continueFilterChain(false);
    return network::FilterStatus::StopIteration;
  };
  switch (parse) {
    case network::ProxyParse::Incomplete:
      return network::FilterStatus::StopIteration;
    case network::ProxyParse::NotProxy:
      // From a balancer, a connection without its header would pass as the balancer's own.
      if (trusted_) return refuse(config_->stats.missing);
      return network::FilterStatus::Continue;
    case network::ProxyParse::Malformed:
      SLUICE_LOG(Debug, "proxy protocol: %s from %s", error, callbacks.peer().asString());
      return refuse(trusted_ ? config_->stats.malformed : config_->stats.untrusted);
    case network::ProxyParse::Header:
      break;
  }
  // Only a balancer may say who the client is.
  if (!trusted_) return refuse(config_->stats.untrusted);
  if (!consume(callbacks.fd(), header.length)) {
    callbacks.continueFilterChain(false);
    return network::FilterStatus::StopIteration;
  }
  if (header.local) {
    config_->stats.local.inc();
  } else {
    config_->stats.accepted.inc();
    callbacks.setPeer(header.source);
  }
  return network::FilterStatus::Continue;
}

bool ProxyProtocolFilter::consume(int fd, size_t length) {
  char scratch[512];
  while (length > 0) {
    const ssize_t n = ::recv(fd, scratch, std::min(length, sizeof(scratch)), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    // The bytes were peeked, so they are there: anything else is a failed socket.
    if (n <= 0) return false;
    length -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace proxy_protocol
}  // namespace filters
}  // namespace sluice
