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

}  // namespace network
}  // namespace sluice
