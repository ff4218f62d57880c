#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// An IPv4 or IPv6 address range. IPv4-mapped IPv6 peers (::ffff:a.b.c.d) match IPv4 ranges.
class CidrRange {
 public:
  // "10.0.0.0/8", "2001:db8::/32", or a single address (a /32 or /128). Host bits set below the
  // prefix are an error: "10.1.2.3/8" is almost always a typo.
  static absl::StatusOr<CidrRange> parse(std::string_view text);

  bool contains(const Address& address) const;
  int family() const { return family_; }
  uint32_t prefixLength() const { return prefix_; }
  std::string asString() const;

 private:
  int family_ = 0;
  uint32_t prefix_ = 0;
  uint8_t bytes_[16] = {};
};

// The IPv4 addresses an IPv6 address carries to an IPv4 host through a translator or tunnel:
// NAT64 (64:ff9b::/96; 64:ff9b:1::/48 in each RFC 6052 layout it may use), 6to4 (2002::/16),
// IPv4-compatible (::/96) and Teredo (2001::/32: the client address, obfuscated). IPv4-mapped
// addresses (::ffff:0:0/96) are not here: CidrRange::contains already treats them as IPv4.
// Writes up to kMaxEmbeddedIpv4 addresses (port kept) to `out` and returns how many.
inline constexpr size_t kMaxEmbeddedIpv4 = 3;
size_t embeddedIpv4(const Address& address, Address out[kMaxEmbeddedIpv4]);

}  // namespace network
}  // namespace sluice
