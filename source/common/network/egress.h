#pragma once

#include <cstdint>

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// The source addresses sluice binds before it reaches destinations (connects, datagrams, DNS
// queries): one per family, port 0. An invalid address: none for that family. An empty Egress
// is the system's choice, as without one.
struct Egress {
  Address ipv4;
  Address ipv6;

  bool empty() const { return !ipv4.valid() && !ipv6.valid(); }
  // The source for a destination of `family`, or null when there is none.
  const Address* sourceFor(int family) const {
    const Address& a = family == AF_INET ? ipv4 : ipv6;
    return (family == AF_INET || family == AF_INET6) && a.valid() ? &a : nullptr;
  }
  // Whether a destination of `family` may be reached: every family without an egress, only the
  // families it names with one (a group's traffic never leaves from an address not chosen
  // for it).
  bool reaches(int family) const { return empty() || sourceFor(family) != nullptr; }

  bool operator==(const Egress& other) const { return ipv4 == other.ipv4 && ipv6 == other.ipv6; }
  bool operator!=(const Egress& other) const { return !(*this == other); }
  template <typename H>
  friend H AbslHashValue(H h, const Egress& e) {
    // Only valid addresses are hashed: an invalid one holds no initialised bytes.
    if (e.ipv4.valid()) h = H::combine(std::move(h), e.ipv4);
    if (e.ipv6.valid()) h = H::combine(std::move(h), e.ipv6);
    return H::combine(std::move(h), e.ipv4.valid(), e.ipv6.valid());
  }
};

// Binds `fd` to `source` with port 0. `defer_port` (a socket that will connect) sets
// IP_BIND_ADDRESS_NO_PORT first, so the port is chosen by connect() for the 4-tuple: bound
// sockets do not use up the ephemeral ports. 0, or the errno of the failure.
int bindSource(int fd, const Address& source, bool defer_port);

}  // namespace network
}  // namespace sluice
