#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "source/common/network/address.h"

namespace sluice {
namespace socks5 {

// The SOCKS5 wire format (RFC 1928, RFC 1929), both sides: the SOCKS5 port parses what clients
// send, the upstream layer what a SOCKS5 parent answers. Pure functions over bytes: no I/O, no
// allocation, so the parsers can be fuzzed and unit tested on their own. Every parser reads only
// `in` and reports how many bytes the message took.

inline constexpr uint8_t kVersion = 0x05;
inline constexpr uint8_t kAuthVersion = 0x01;  // RFC 1929 subnegotiation version

inline constexpr uint8_t kMethodNoAuth = 0x00;
inline constexpr uint8_t kMethodUserPass = 0x02;
inline constexpr uint8_t kMethodNoneAcceptable = 0xff;

// Largest message of each kind the protocol allows; nothing longer is ever buffered.
inline constexpr size_t kMaxGreetingBytes = 2 + 255;
inline constexpr size_t kMaxAuthBytes = 3 + 255 + 255;
inline constexpr size_t kMaxRequestBytes = 4 + 1 + 255 + 2;
inline constexpr size_t kMaxReplyBytes = 4 + 16 + 2;
inline constexpr size_t kMaxUdpHeaderBytes = 4 + 1 + 255 + 2;

enum class Command : uint8_t { Connect = 0x01, Bind = 0x02, UdpAssociate = 0x03 };
enum class AddressType : uint8_t { IPv4 = 0x01, Domain = 0x03, IPv6 = 0x04 };

enum class Reply : uint8_t {
  Succeeded = 0x00,
  GeneralFailure = 0x01,
  NotAllowed = 0x02,
  NetworkUnreachable = 0x03,
  HostUnreachable = 0x04,
  ConnectionRefused = 0x05,
  TtlExpired = 0x06,
  CommandNotSupported = 0x07,
  AddressTypeNotSupported = 0x08,
};

// Stable lower-case names, for records and logs ("connect", "host_unreachable", ...).
const char* commandName(uint8_t command);
const char* replyName(Reply reply);

enum class ParseStatus : uint8_t { Incomplete, Ok, Error };

struct Greeting {
  bool offers_no_auth = false;
  bool offers_user_pass = false;
  size_t size = 0;
};
// VER NMETHODS METHODS. Error: a version other than 5, or no methods.
ParseStatus parseGreeting(std::string_view in, Greeting& out);

struct UserPass {
  std::string_view user;      // points into `in`
  std::string_view password;  // points into `in`
  size_t size = 0;
};
// VER(1) ULEN UNAME PLEN PASSWD. Error: a subnegotiation version other than 1.
ParseStatus parseUserPass(std::string_view in, UserPass& out);

// A destination as the client wrote it.
struct Target {
  AddressType type = AddressType::IPv4;
  uint8_t ip[16] = {};      // IPv4 (4 bytes) or IPv6 (16)
  std::string_view domain;  // AddressType::Domain: points into `in`, 1 to 255 bytes
  uint16_t port = 0;

  // The address of an IPv4/IPv6 target (port set); invalid for a domain.
  network::Address address() const;
  // True for 0.0.0.0 and :: (a client saying "any").
  bool unspecified() const;
  // The host as text for a ProxyRequest: the domain, or the literal IP (inet_ntop) written to
  // `buf` (at least 46 bytes).
  std::string_view hostText(char* buf, size_t buf_size) const;
};

struct Request {
  uint8_t command = 0;  // as received: may be none of Command
  Target target;
  size_t size = 0;
};
// VER CMD RSV ATYP DST.ADDR DST.PORT. On Error `reply` says what to answer:
// GeneralFailure (bad version, empty domain), AddressTypeNotSupported (unknown ATYP).
// An unknown command parses Ok (the caller answers CommandNotSupported), so the reply can
// be sent once the whole request is in.
ParseStatus parseRequest(std::string_view in, Request& out, Reply& reply);

// The header of a UDP datagram: RSV(2) FRAG ATYP DST.ADDR DST.PORT, then the payload.
struct UdpHeader {
  uint8_t frag = 0;
  Target target;
  size_t size = 0;  // header bytes; the payload follows
};
// Never Incomplete: a datagram is whole or nothing. Error on a short header, a bad ATYP or a
// non-zero RSV.
ParseStatus parseUdpHeader(std::string_view in, UdpHeader& out);

// Writes VER REP RSV ATYP BND.ADDR BND.PORT for `bound` (zeros when it is not valid; an
// IPv4-mapped IPv6 address is written as IPv4) to `out` (kMaxReplyBytes); returns its size.
size_t writeReply(uint8_t* out, Reply reply, const network::Address& bound);
// Writes the UDP header for a datagram from `from` (same rules); returns its size (at most
// 4 + 16 + 2).
size_t writeUdpHeader(uint8_t* out, const network::Address& from);

// The client side, as sluice speaks to a SOCKS5 parent.

// Most bytes writeGreeting, writeUserPass and writeConnect write.
inline constexpr size_t kMaxClientMessageBytes = kMaxAuthBytes;

// VER NMETHODS METHODS: no authentication, and username/password when `user_pass`.
size_t writeGreeting(uint8_t* out, bool user_pass);
// The server's VER METHOD. Error: a version other than 5.
ParseStatus parseMethodSelection(std::string_view in, uint8_t& method, size_t& size);
// VER(1) ULEN UNAME PLEN PASSWD; both at most 255 bytes (the caller checks).
size_t writeUserPass(uint8_t* out, std::string_view user, std::string_view password);
// The server's VER(1) STATUS; `accepted` when STATUS is 0. Error: a version other than 1.
ParseStatus parseUserPassStatus(std::string_view in, bool& accepted, size_t& size);
// VER CMD RSV ATYP DST.ADDR DST.PORT for a CONNECT to `address` (IPv4 or IPv6), or to the
// domain `host` (1 to 255 bytes) and `port` when `address` is not valid.
size_t writeConnect(uint8_t* out, const network::Address& address, std::string_view host,
                    uint16_t port);
// VER CMD RSV ATYP DST.ADDR DST.PORT for a UDP ASSOCIATE: `from` is where sluice's datagrams
// will come from, all zeros (IPv4) when it is not valid (RFC 1928: not known yet).
size_t writeUdpAssociate(uint8_t* out, const network::Address& from);
// The server's VER REP RSV ATYP BND.ADDR BND.PORT; `reply` is REP as sent (it may be none of
// Reply). Error: a version other than 5 or an unknown ATYP.
ParseStatus parseReply(std::string_view in, uint8_t& reply, Target& bound, size_t& size);

}  // namespace socks5
}  // namespace sluice
