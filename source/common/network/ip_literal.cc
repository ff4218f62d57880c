#include "source/common/network/ip_literal.h"

#include <cstdint>
#include <cstring>

#include <arpa/inet.h>
#include <net/if.h>

namespace sluice {
namespace network {
namespace {

// One inet_aton part: decimal, octal after a leading 0, hex after 0x. False on an empty part, a
// digit outside the base ("08", "0x"), or a value above 32 bits.
bool parsePart(std::string_view part, uint64_t& value) {
  if (part.empty()) return false;
  uint32_t base = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    base = 16;
    part.remove_prefix(2);
    if (part.empty()) return false;
  } else if (part.size() >= 2 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  value = 0;
  for (char c : part) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return false;
    }
    if (digit >= base) return false;
    value = value * base + digit;
    if (value > 0xffffffffu) return false;
  }
  return true;
}

// The usual spelling, four decimal bytes without leading zeros ("127.0.0.1"), in one pass.
// False for anything else, which parseIpv4 reads the long way (with the same result for these).
bool parseDottedQuad(std::string_view text, uint32_t& ip) {
  uint32_t result = 0;
  uint32_t part = 0;
  uint32_t digits = 0;
  uint32_t parts = 0;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      if (digits == 3 || (digits == 1 && part == 0)) return false;  // too long, or octal
      part = part * 10 + static_cast<uint32_t>(c - '0');
      ++digits;
    } else if (c == '.' && digits > 0 && parts < 3) {
      if (part > 0xff) return false;
      result = (result << 8) | part;
      part = 0;
      digits = 0;
      ++parts;
    } else {
      return false;
    }
  }
  if (parts != 3 || digits == 0 || part > 0xff) return false;
  ip = (result << 8) | part;
  return true;
}

bool parseIpv4(std::string_view text, uint32_t& ip) {
  if (parseDottedQuad(text, ip)) return true;
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (text.empty()) return false;
  uint64_t parts[4];
  size_t count = 0;
  while (true) {
    const size_t dot = text.find('.');
    if (count == 4) return false;
    if (!parsePart(text.substr(0, dot), parts[count++])) return false;
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  // Every part but the last is one byte; the last fills the bytes that remain.
  uint64_t result = 0;
  for (size_t i = 0; i + 1 < count; ++i) {
    if (parts[i] > 0xff) return false;
    result |= parts[i] << (8 * (3 - i));
  }
  const uint64_t last_max = 0xffffffffu >> (8 * (count - 1));
  if (parts[count - 1] > last_max) return false;
  ip = static_cast<uint32_t>(result | parts[count - 1]);
  return true;
}

bool isZoneChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool parseIpv6(std::string_view text, Address& out, std::string_view& zone) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  zone = {};
  const size_t percent = text.find('%');
  if (percent != std::string_view::npos) {
    zone = text.substr(percent + 1);
    text = text.substr(0, percent);
    if (zone.empty() || zone.size() >= IF_NAMESIZE) return false;
    for (char c : zone) {
      if (!isZoneChar(c)) return false;
    }
  }
  char buf[INET6_ADDRSTRLEN + 1];
  // inet_pton reads a C string: a NUL inside the text would end it early.
  if (text.empty() || text.size() >= sizeof(buf) || text.find(':') == std::string_view::npos ||
      memchr(text.data(), '\0', text.size()) != nullptr) {
    return false;
  }
  memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  sockaddr_in6 in6;
  memset(&in6, 0, sizeof(in6));
  if (inet_pton(AF_INET6, buf, &in6.sin6_addr) != 1) return false;
  in6.sin6_family = AF_INET6;
  out = Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
  return true;
}

}  // namespace

bool parseIpLiteral(std::string_view host, Address& out, std::string_view* zone) {
  if (zone != nullptr) *zone = {};
  uint32_t ip;
  if (parseIpv4(host, ip)) {
    out = Address::ipv4(ip, 0);
    return true;
  }
  std::string_view parsed_zone;
  Address v6;
  if (!parseIpv6(host, v6, parsed_zone)) return false;
  out = v6;
  if (zone != nullptr) *zone = parsed_zone;
  return true;
}

}  // namespace network
}  // namespace sluice
