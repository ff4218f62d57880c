#include "source/common/network/cidr.h"

#include <cstring>

#include <arpa/inet.h>

#include "absl/strings/str_format.h"

namespace sluice {
namespace network {

namespace {

bool prefixMatches(const uint8_t* a, const uint8_t* b, uint32_t bits) {
  uint32_t whole = bits / 8;
  if (memcmp(a, b, whole) != 0) return false;
  uint32_t rest = bits % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

Address ipv4At(const uint8_t* a, int i0, int i1, int i2, int i3, uint8_t mask, uint16_t port) {
  const uint32_t ip =
      static_cast<uint32_t>(a[i0] ^ mask) << 24 | static_cast<uint32_t>(a[i1] ^ mask) << 16 |
      static_cast<uint32_t>(a[i2] ^ mask) << 8 | static_cast<uint32_t>(a[i3] ^ mask);
  return Address::ipv4(ip, port);
}

bool allZero(const uint8_t* a, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (a[i] != 0) return false;
  }
  return true;
}

}  // namespace

size_t embeddedIpv4(const Address& address, Address out[kMaxEmbeddedIpv4]) {
  if (address.family() != AF_INET6) return 0;
  const uint8_t* a = address.v6().sin6_addr.s6_addr;
  const uint16_t port = address.port();
  static const uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  static const uint8_t kNat64Local[6] = {0, 0x64, 0xff, 0x9b, 0, 1};
  if (memcmp(a, kNat64, 12) == 0 || allZero(a, 0, 12)) {
    // 64:ff9b::a.b.c.d, or ::a.b.c.d (IPv4-compatible).
    out[0] = ipv4At(a, 12, 13, 14, 15, 0, port);
    return 1;
  }
  if (memcmp(a, kNat64Local, 6) == 0) {
    // RFC 6052 section 2.2: a /96 prefix puts the IPv4 address last; a /48, /56 or /64 one puts
    // it around the reserved octet 8. Which one a network uses is not visible in the address,
    // so every layout that could apply counts.
    if (allZero(a, 6, 12)) {
      out[0] = ipv4At(a, 12, 13, 14, 15, 0, port);
      return 1;
    }
    out[0] = ipv4At(a, 6, 7, 9, 10, 0, port);    // /48
    out[1] = ipv4At(a, 7, 9, 10, 11, 0, port);   // /56
    out[2] = ipv4At(a, 9, 10, 11, 12, 0, port);  // /64
    return 3;
  }
  if (a[0] == 0x20 && a[1] == 0x02) {
    out[0] = ipv4At(a, 2, 3, 4, 5, 0, port);  // 6to4: 2002:AABB:CCDD::/48
    return 1;
  }
  if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0) {
    out[0] = ipv4At(a, 12, 13, 14, 15, 0xff, port);  // Teredo: the client, bits inverted
    return 1;
  }
  return 0;
}

absl::StatusOr<CidrRange> CidrRange::parse(std::string_view text) {
  std::string_view ip = text;
  std::string_view len_text;
  size_t slash = text.find('/');
  if (slash != std::string_view::npos) {
    ip = text.substr(0, slash);
    len_text = text.substr(slash + 1);
    if (len_text.empty() || len_text.size() > 3) {
      return absl::InvalidArgumentError(absl::StrFormat("'%s': bad prefix length", text));
    }
  }
  auto address = Address::parseIp(ip, 0);
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s': not an IP address or range", text));
  }
  CidrRange range;
  range.family_ = address->family();
  uint32_t max = range.family_ == AF_INET ? 32 : 128;
  range.prefix_ = max;
  if (!len_text.empty()) {
    uint32_t n = 0;
    for (char c : len_text) {
      if (c < '0' || c > '9') {
        return absl::InvalidArgumentError(absl::StrFormat("'%s': bad prefix length", text));
      }
      n = n * 10 + static_cast<uint32_t>(c - '0');
    }
    if (n > max) {
      return absl::InvalidArgumentError(absl::StrFormat("'%s': prefix length above %d", text, max));
    }
    range.prefix_ = n;
  }
  if (range.family_ == AF_INET) {
    memcpy(range.bytes_, &address->v4().sin_addr, 4);
  } else {
    memcpy(range.bytes_, &address->v6().sin6_addr, 16);
  }
  // Host bits must be zero.
  uint32_t total = max;
  for (uint32_t bit = range.prefix_; bit < total; ++bit) {
    if (range.bytes_[bit / 8] & (0x80 >> (bit % 8))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s': address has bits set beyond the /%d prefix", text, range.prefix_));
    }
  }
  return range;
}

bool CidrRange::contains(const Address& address) const {
  if (address.family() == AF_INET && family_ == AF_INET) {
    return prefixMatches(bytes_, reinterpret_cast<const uint8_t*>(&address.v4().sin_addr), prefix_);
  }
  if (address.family() == AF_INET6) {
    const uint8_t* a = address.v6().sin6_addr.s6_addr;
    if (family_ == AF_INET6) return prefixMatches(bytes_, a, prefix_);
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, kMapped, 12) == 0) return prefixMatches(bytes_, a + 12, prefix_);
  }
  return false;
}

std::string CidrRange::asString() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family_, bytes_, buf, sizeof(buf));
  return absl::StrFormat("%s/%d", buf, prefix_);
}

}  // namespace network
}  // namespace sluice
