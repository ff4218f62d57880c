#include "source/common/network/proxy_protocol.h"

#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>

namespace sluice {
namespace network {

namespace {

constexpr char kV2Signature[12] = {'\r', '\n', '\r', '\n', '\0', '\r',
                                   '\n', 'Q',  'U',  'I',  'T',  '\n'};
constexpr std::string_view kV1Prefix = "PROXY ";

ProxyParse malformed(std::string_view& error, std::string_view why) {
  error = why;
  return ProxyParse::Malformed;
}

// A port of version 1: 1 to 5 digits, no leading zero, at most 65535.
bool parsePort(std::string_view text, uint16_t& out) {
  if (text.empty() || text.size() > 5 || (text.size() > 1 && text[0] == '0')) return false;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) return false;
  out = static_cast<uint16_t>(value);
  return true;
}

ProxyParse parseV1(std::string_view data, ProxyHeader& out, std::string_view& error) {
  const size_t end = data.substr(0, kProxyV1MaxBytes).find("\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kProxyV1MaxBytes) return malformed(error, "v1 header without CRLF");
    // A stray LF or CR elsewhere cannot become valid.
    const size_t bad = data.find_first_of("\n");
    if (bad != std::string_view::npos) return malformed(error, "v1 header with a bare LF");
    return ProxyParse::Incomplete;
  }
  std::string_view line = data.substr(kV1Prefix.size(), end - kV1Prefix.size());
  if (line.find_first_of("\r\n") != std::string_view::npos) {
    return malformed(error, "v1 header with a bare CR or LF");
  }
  out = ProxyHeader();
  out.length = end + 2;
  // Fields are separated by exactly one space.
  std::string_view fields[5];
  size_t count = 0;
  while (count < 5) {
    const size_t space = line.find(' ');
    fields[count++] = line.substr(0, space);
    if (space == std::string_view::npos) {
      line = {};
      break;
    }
    line.remove_prefix(space + 1);
  }
  if (fields[0] == "UNKNOWN") {
    // Anything may follow; the addresses are not to be trusted.
    out.local = true;
    return ProxyParse::Header;
  }
  if (count != 5 || !line.empty()) return malformed(error, "v1 header without its five fields");
  int family;
  if (fields[0] == "TCP4") {
    family = AF_INET;
  } else if (fields[0] == "TCP6") {
    family = AF_INET6;
  } else {
    return malformed(error, "v1 header with an unknown protocol");
  }
  uint16_t sport, dport;
  if (!parsePort(fields[3], sport) || !parsePort(fields[4], dport)) {
    return malformed(error, "v1 header with a bad port");
  }
  for (int i = 1; i <= 2; ++i) {
    // inet_pton wants a NUL-terminated string; an address is at most 45 characters.
    char text[64];
    if (fields[i].empty() || fields[i].size() >= sizeof(text)) {
      return malformed(error, "v1 header with a bad address");
    }
    memcpy(text, fields[i].data(), fields[i].size());
    text[fields[i].size()] = '\0';
    const uint16_t port = i == 1 ? sport : dport;
    Address& address = i == 1 ? out.source : out.destination;
    if (family == AF_INET) {
      in_addr a;
      if (inet_pton(AF_INET, text, &a) != 1) {
        return malformed(error, "v1 header with a bad address");
      }
      address = Address::ipv4(ntohl(a.s_addr), port);
    } else {
      sockaddr_in6 sa{};
      sa.sin6_family = AF_INET6;
      sa.sin6_port = htons(port);
      if (inet_pton(AF_INET6, text, &sa.sin6_addr) != 1) {
        return malformed(error, "v1 header with a bad address");
      }
      address = Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&sa), sizeof(sa));
    }
  }
  return ProxyParse::Header;
}

ProxyParse parseV2(std::string_view data, size_t max_bytes, ProxyHeader& out,
                   std::string_view& error) {
  if (data.size() < kProxyV2FixedBytes) return ProxyParse::Incomplete;
  const auto* b = reinterpret_cast<const uint8_t*>(data.data());
  const uint8_t version = b[12] >> 4;
  const uint8_t command = b[12] & 0x0f;
  if (version != 2) return malformed(error, "v2 header with another version");
  if (command > 1) return malformed(error, "v2 header with an unknown command");
  const size_t length = (size_t{b[14]} << 8) | b[15];
  if (kProxyV2FixedBytes + length > max_bytes) {
    return malformed(error, "v2 header longer than the filter allows");
  }
  const uint8_t family = b[13] >> 4;
  const uint8_t transport = b[13] & 0x0f;
  // Addresses first, then TLVs to the end (skipped: the length bounds them).
  size_t need = 0;
  if (command == 1) {
    if (family == 1) {
      need = 12;
    } else if (family == 2) {
      need = 36;
    } else if (family == 0 || family == 3) {
      need = 0;  // unspecified, or a Unix socket: no address for us
    } else {
      return malformed(error, "v2 header with an unknown address family");
    }
    if (transport > 2) return malformed(error, "v2 header with an unknown transport");
    if (length < need) return malformed(error, "v2 header shorter than its addresses");
  }
  if (data.size() < kProxyV2FixedBytes + length) return ProxyParse::Incomplete;
  out = ProxyHeader();
  out.length = kProxyV2FixedBytes + length;
  // LOCAL, or an address that is not an IP socket's: the socket's own addresses stand.
  if (command == 0 || need == 0 || transport != 1) {
    out.local = true;
    return ProxyParse::Header;
  }
  const uint8_t* a = b + kProxyV2FixedBytes;
  if (family == 1) {
    uint32_t src, dst;
    memcpy(&src, a, 4);
    memcpy(&dst, a + 4, 4);
    out.source = Address::ipv4(ntohl(src), static_cast<uint16_t>((a[8] << 8) | a[9]));
    out.destination = Address::ipv4(ntohl(dst), static_cast<uint16_t>((a[10] << 8) | a[11]));
  } else {
    sockaddr_in6 src{}, dst{};
    src.sin6_family = dst.sin6_family = AF_INET6;
    memcpy(&src.sin6_addr, a, 16);
    memcpy(&dst.sin6_addr, a + 16, 16);
    src.sin6_port = htons(static_cast<uint16_t>((a[32] << 8) | a[33]));
    dst.sin6_port = htons(static_cast<uint16_t>((a[34] << 8) | a[35]));
    out.source = Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&src), sizeof(src));
    out.destination = Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&dst), sizeof(dst));
  }
  return ProxyParse::Header;
}

// Whether `data` is (a prefix of) `signature`, or begins with it.
bool startsLike(std::string_view data, std::string_view signature) {
  const size_t n = std::min(data.size(), signature.size());
  return data.substr(0, n) == signature.substr(0, n);
}

bool isV4(const Address& a) {
  return a.family() == AF_INET ||
         (a.family() == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a.v6().sin6_addr));
}

// The address's 4 bytes (network order) when isV4().
void v4Bytes(const Address& a, uint8_t out[4]) {
  if (a.family() == AF_INET) {
    memcpy(out, &a.v4().sin_addr.s_addr, 4);
  } else {
    memcpy(out, a.v6().sin6_addr.s6_addr + 12, 4);
  }
}

// The address's 16 bytes, an IPv4 one mapped; zeros when invalid.
void v6Bytes(const Address& a, uint8_t out[16]) {
  memset(out, 0, 16);
  if (a.family() == AF_INET6) {
    memcpy(out, a.v6().sin6_addr.s6_addr, 16);
  } else if (a.family() == AF_INET) {
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &a.v4().sin_addr.s_addr, 4);
  }
}

}  // namespace

std::string writeProxyHeader(int version, const Address& source, const Address& destination) {
  if (!source.valid()) {
    if (version == 1) return "PROXY UNKNOWN\r\n";
    std::string out(kV2Signature, sizeof(kV2Signature));
    out += '\x20';  // version 2, LOCAL
    out += '\x00';  // unspecified family and transport
    out.append(2, '\0');
    return out;
  }
  const bool v4 = isV4(source) && (!destination.valid() || isV4(destination));
  const uint16_t sport = source.port();
  const uint16_t dport = destination.valid() ? destination.port() : 0;
  uint8_t src[16] = {}, dst[16] = {};
  if (v4) {
    v4Bytes(source, src);
    if (destination.valid()) v4Bytes(destination, dst);
  } else {
    v6Bytes(source, src);
    v6Bytes(destination, dst);
  }
  if (version == 1) {
    const int family = v4 ? AF_INET : AF_INET6;
    char src_text[INET6_ADDRSTRLEN], dst_text[INET6_ADDRSTRLEN];
    inet_ntop(family, src, src_text, sizeof(src_text));
    inet_ntop(family, dst, dst_text, sizeof(dst_text));
    std::string out = v4 ? "PROXY TCP4 " : "PROXY TCP6 ";
    out.append(src_text).append(" ").append(dst_text).append(" ");
    out.append(std::to_string(sport)).append(" ").append(std::to_string(dport)).append("\r\n");
    return out;
  }
  const size_t bytes = v4 ? 4 : 16;
  const size_t length = 2 * bytes + 4;
  std::string out(kV2Signature, sizeof(kV2Signature));
  out += '\x21';                // version 2, PROXY
  out += v4 ? '\x11' : '\x21';  // TCP over IPv4 / IPv6
  out += static_cast<char>(length >> 8);
  out += static_cast<char>(length & 0xff);
  out.append(reinterpret_cast<const char*>(src), bytes);
  out.append(reinterpret_cast<const char*>(dst), bytes);
  for (uint16_t port : {sport, dport}) {
    out += static_cast<char>(port >> 8);
    out += static_cast<char>(port & 0xff);
  }
  return out;
}

ProxyParse parseProxyHeader(std::string_view data, size_t max_bytes, ProxyHeader& out,
                            std::string_view& error) {
  if (data.empty()) return ProxyParse::Incomplete;
  const std::string_view v2(kV2Signature, sizeof(kV2Signature));
  if (startsLike(data, v2)) {
    if (data.size() < v2.size()) return ProxyParse::Incomplete;
    return parseV2(data, max_bytes, out, error);
  }
  if (startsLike(data, kV1Prefix)) {
    if (data.size() < kV1Prefix.size()) return ProxyParse::Incomplete;
    return parseV1(data, out, error);
  }
  return ProxyParse::NotProxy;
}

}  // namespace network
}  // namespace sluice
