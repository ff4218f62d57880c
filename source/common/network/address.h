#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/status/statusor.h"

namespace sluice {
namespace network {

// An IPv4 or IPv6 socket address held by value (no heap), cheap to copy and compare: 28 bytes,
// the size of a sockaddr_in6, not the 128 of a sockaddr_storage (connections hold several).
class Address {
 public:
  Address() { storage_.sa.sa_family = AF_UNSPEC; }
  static Address fromSockaddr(const sockaddr* sa, socklen_t len);
  static Address ipv4(uint32_t host_order_ip, uint16_t port);
  // Parses "1.2.3.4:80", "[::1]:80". Literal IPs only; names are for the resolver.
  static absl::StatusOr<Address> parseHostPort(std::string_view text);
  // Parses a literal IP (no port, no brackets) in canonical notation.
  static absl::StatusOr<Address> parseIp(std::string_view ip, uint16_t port);

  int family() const { return storage_.sa.sa_family; }
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  uint16_t port() const;
  void setPort(uint16_t port);
  const sockaddr* sockaddr_ptr() const { return &storage_.sa; }
  socklen_t length() const;
  // "1.2.3.4:80" or "[::1]:80".
  std::string asString() const;
  // "1.2.3.4" or "::1".
  std::string ipString() const;
  const sockaddr_in& v4() const { return storage_.v4; }
  const sockaddr_in6& v6() const { return storage_.v6; }

  bool operator==(const Address& other) const;
  bool operator!=(const Address& other) const { return !(*this == other); }
  template <typename H>
  friend H AbslHashValue(H h, const Address& a) {
    if (a.family() == AF_INET) {
      return H::combine(std::move(h), a.v4().sin_addr.s_addr, a.v4().sin_port);
    }
    return H::combine(H::combine_contiguous(std::move(h), a.v6().sin6_addr.s6_addr, 16),
                      a.v6().sin6_port);
  }

 private:
  union Storage {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } storage_;
};

// Splits "host:port" / "[v6]:port" / "host" (port = default_port) into host and port; the
// host keeps no brackets. Rejects empty hosts, bad or zero ports.
absl::Status splitHostPort(std::string_view text, uint16_t default_port, std::string_view& host,
                           uint16_t& port);

}  // namespace network
}  // namespace sluice
