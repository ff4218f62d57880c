#include "source/common/socks5/wire.h"

#include <cstring>

#include <arpa/inet.h>

namespace sluice {
namespace socks5 {

namespace {

// ATYP DST.ADDR DST.PORT at in[pos]. Incomplete when more bytes are needed.
ParseStatus parseTarget(std::string_view in, size_t pos, Target& out, size_t& end, bool& bad_type) {
  bad_type = false;
  if (in.size() < pos + 1) return ParseStatus::Incomplete;
  const uint8_t atyp = static_cast<uint8_t>(in[pos]);
  size_t addr_len = 0;
  size_t addr_pos = pos + 1;
  switch (atyp) {
    case static_cast<uint8_t>(AddressType::IPv4):
      addr_len = 4;
      break;
    case static_cast<uint8_t>(AddressType::IPv6):
      addr_len = 16;
      break;
    case static_cast<uint8_t>(AddressType::Domain):
      if (in.size() < pos + 2) return ParseStatus::Incomplete;
      addr_len = static_cast<uint8_t>(in[pos + 1]);
      addr_pos = pos + 2;
      if (addr_len == 0) return ParseStatus::Error;
      break;
    default:
      bad_type = true;
      return ParseStatus::Error;
  }
  if (in.size() < addr_pos + addr_len + 2) return ParseStatus::Incomplete;
  out.type = static_cast<AddressType>(atyp);
  if (out.type == AddressType::Domain) {
    out.domain = in.substr(addr_pos, addr_len);
  } else {
    out.domain = {};
    memcpy(out.ip, in.data() + addr_pos, addr_len);
  }
  const size_t port_pos = addr_pos + addr_len;
  out.port = static_cast<uint16_t>(static_cast<uint8_t>(in[port_pos]) << 8 |
                                   static_cast<uint8_t>(in[port_pos + 1]));
  end = port_pos + 2;
  return ParseStatus::Ok;
}

// ATYP ADDR PORT of `a` (IPv4-mapped IPv6 as IPv4; zeros for an invalid address).
size_t writeAddress(uint8_t* out, const network::Address& a) {
  uint8_t* p = out;
  if (a.family() == AF_INET6 && !IN6_IS_ADDR_V4MAPPED(&a.v6().sin6_addr)) {
    *p++ = static_cast<uint8_t>(AddressType::IPv6);
    memcpy(p, a.v6().sin6_addr.s6_addr, 16);
    p += 16;
  } else {
    *p++ = static_cast<uint8_t>(AddressType::IPv4);
    if (a.family() == AF_INET) {
      memcpy(p, &a.v4().sin_addr.s_addr, 4);
    } else if (a.family() == AF_INET6) {
      memcpy(p, a.v6().sin6_addr.s6_addr + 12, 4);
    } else {
      memset(p, 0, 4);
    }
    p += 4;
  }
  const uint16_t port = a.valid() ? a.port() : 0;
  *p++ = static_cast<uint8_t>(port >> 8);
  *p++ = static_cast<uint8_t>(port & 0xff);
  return static_cast<size_t>(p - out);
}

}  // namespace

network::Address Target::address() const {
  if (type == AddressType::IPv4) {
    uint32_t ip4;
    memcpy(&ip4, ip, 4);
    return network::Address::ipv4(ntohl(ip4), port);
  }
  if (type == AddressType::IPv6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    memcpy(in6.sin6_addr.s6_addr, ip, 16);
    in6.sin6_port = htons(port);
    return network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
  }
  return network::Address();
}

bool Target::unspecified() const {
  static constexpr uint8_t kZeros[16] = {};
  if (type == AddressType::IPv4) return memcmp(ip, kZeros, 4) == 0;
  if (type == AddressType::IPv6) return memcmp(ip, kZeros, 16) == 0;
  return false;
}

std::string_view Target::hostText(char* buf, size_t buf_size) const {
  if (type == AddressType::Domain) return domain;
  const int family = type == AddressType::IPv4 ? AF_INET : AF_INET6;
  if (inet_ntop(family, ip, buf, static_cast<socklen_t>(buf_size)) == nullptr) return {};
  return std::string_view(buf);
}

ParseStatus parseGreeting(std::string_view in, Greeting& out) {
  if (in.size() < 1) return ParseStatus::Incomplete;
  if (static_cast<uint8_t>(in[0]) != kVersion) return ParseStatus::Error;
  if (in.size() < 2) return ParseStatus::Incomplete;
  const size_t n = static_cast<uint8_t>(in[1]);
  if (n == 0) return ParseStatus::Error;
  if (in.size() < 2 + n) return ParseStatus::Incomplete;
  out = Greeting();
  for (size_t i = 0; i < n; ++i) {
    const uint8_t m = static_cast<uint8_t>(in[2 + i]);
    if (m == kMethodNoAuth) out.offers_no_auth = true;
    if (m == kMethodUserPass) out.offers_user_pass = true;
  }
  out.size = 2 + n;
  return ParseStatus::Ok;
}

ParseStatus parseUserPass(std::string_view in, UserPass& out) {
  if (in.size() < 1) return ParseStatus::Incomplete;
  if (static_cast<uint8_t>(in[0]) != kAuthVersion) return ParseStatus::Error;
  if (in.size() < 2) return ParseStatus::Incomplete;
  const size_t ulen = static_cast<uint8_t>(in[1]);
  if (in.size() < 2 + ulen + 1) return ParseStatus::Incomplete;
  const size_t plen = static_cast<uint8_t>(in[2 + ulen]);
  if (in.size() < 3 + ulen + plen) return ParseStatus::Incomplete;
  out.user = in.substr(2, ulen);
  out.password = in.substr(3 + ulen, plen);
  out.size = 3 + ulen + plen;
  return ParseStatus::Ok;
}

ParseStatus parseRequest(std::string_view in, Request& out, Reply& reply) {
  reply = Reply::GeneralFailure;
  if (in.size() < 1) return ParseStatus::Incomplete;
  if (static_cast<uint8_t>(in[0]) != kVersion) return ParseStatus::Error;
  if (in.size() < 4) return ParseStatus::Incomplete;
  // RSV (in[2]) must be 0 by the RFC; clients are not known to set it, but it is not worth a
  // refusal either.
  size_t end = 0;
  bool bad_type = false;
  ParseStatus st = parseTarget(in, 3, out.target, end, bad_type);
  if (st == ParseStatus::Error && bad_type) reply = Reply::AddressTypeNotSupported;
  if (st != ParseStatus::Ok) return st;
  out.command = static_cast<uint8_t>(in[1]);
  out.size = end;
  return ParseStatus::Ok;
}

ParseStatus parseUdpHeader(std::string_view in, UdpHeader& out) {
  if (in.size() < 4) return ParseStatus::Error;
  if (in[0] != 0 || in[1] != 0) return ParseStatus::Error;
  out.frag = static_cast<uint8_t>(in[2]);
  size_t end = 0;
  bool bad_type = false;
  if (parseTarget(in, 3, out.target, end, bad_type) != ParseStatus::Ok) return ParseStatus::Error;
  out.size = end;
  return ParseStatus::Ok;
}

size_t writeReply(uint8_t* out, Reply reply, const network::Address& bound) {
  out[0] = kVersion;
  out[1] = static_cast<uint8_t>(reply);
  out[2] = 0;
  return 3 + writeAddress(out + 3, bound);
}

size_t writeUdpHeader(uint8_t* out, const network::Address& from) {
  out[0] = 0;
  out[1] = 0;
  out[2] = 0;
  return 3 + writeAddress(out + 3, from);
}

size_t writeGreeting(uint8_t* out, bool user_pass) {
  out[0] = kVersion;
  out[1] = user_pass ? 2 : 1;
  out[2] = kMethodNoAuth;
  if (user_pass) out[3] = kMethodUserPass;
  return user_pass ? 4 : 3;
}

ParseStatus parseMethodSelection(std::string_view in, uint8_t& method, size_t& size) {
  if (in.size() < 1) return ParseStatus::Incomplete;
  if (static_cast<uint8_t>(in[0]) != kVersion) return ParseStatus::Error;
  if (in.size() < 2) return ParseStatus::Incomplete;
  method = static_cast<uint8_t>(in[1]);
  size = 2;
  return ParseStatus::Ok;
}

size_t writeUserPass(uint8_t* out, std::string_view user, std::string_view password) {
  uint8_t* p = out;
  *p++ = kAuthVersion;
  *p++ = static_cast<uint8_t>(user.size());
  memcpy(p, user.data(), user.size());
  p += user.size();
  *p++ = static_cast<uint8_t>(password.size());
  memcpy(p, password.data(), password.size());
  p += password.size();
  return static_cast<size_t>(p - out);
}

ParseStatus parseUserPassStatus(std::string_view in, bool& accepted, size_t& size) {
  if (in.size() < 1) return ParseStatus::Incomplete;
  if (static_cast<uint8_t>(in[0]) != kAuthVersion) return ParseStatus::Error;
  if (in.size() < 2) return ParseStatus::Incomplete;
  accepted = in[1] == 0;
  size = 2;
  return ParseStatus::Ok;
}

size_t writeConnect(uint8_t* out, const network::Address& address, std::string_view host,
                    uint16_t port) {
  out[0] = kVersion;
  out[1] = static_cast<uint8_t>(Command::Connect);
  out[2] = 0;
  if (address.valid()) return 3 + writeAddress(out + 3, address);
  uint8_t* p = out + 3;
  *p++ = static_cast<uint8_t>(AddressType::Domain);
  *p++ = static_cast<uint8_t>(host.size());
  memcpy(p, host.data(), host.size());
  p += host.size();
  *p++ = static_cast<uint8_t>(port >> 8);
  *p++ = static_cast<uint8_t>(port & 0xff);
  return static_cast<size_t>(p - out);
}

size_t writeUdpAssociate(uint8_t* out, const network::Address& from) {
  out[0] = kVersion;
  out[1] = static_cast<uint8_t>(Command::UdpAssociate);
  out[2] = 0;
  return 3 + writeAddress(out + 3, from);
}

ParseStatus parseReply(std::string_view in, uint8_t& reply, Target& bound, size_t& size) {
  Request parsed;
  Reply unused;
  const ParseStatus st = parseRequest(in, parsed, unused);
  if (st != ParseStatus::Ok) return st;
  reply = parsed.command;  // REP sits where a request's CMD does
  bound = parsed.target;
  size = parsed.size;
  return ParseStatus::Ok;
}

const char* commandName(uint8_t command) {
  switch (command) {
    case static_cast<uint8_t>(Command::Connect):
      return "connect";
    case static_cast<uint8_t>(Command::Bind):
      return "bind";
    case static_cast<uint8_t>(Command::UdpAssociate):
      return "udp_associate";
    default:
      return "unknown";
  }
}

const char* replyName(Reply reply) {
  switch (reply) {
    case Reply::Succeeded:
      return "succeeded";
    case Reply::GeneralFailure:
      return "general_failure";
    case Reply::NotAllowed:
      return "not_allowed";
    case Reply::NetworkUnreachable:
      return "network_unreachable";
    case Reply::HostUnreachable:
      return "host_unreachable";
    case Reply::ConnectionRefused:
      return "connection_refused";
    case Reply::TtlExpired:
      return "ttl_expired";
    case Reply::CommandNotSupported:
      return "command_not_supported";
    case Reply::AddressTypeNotSupported:
      return "address_type_not_supported";
  }
  return "unknown";
}

}  // namespace socks5
}  // namespace sluice
