#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// The PROXY protocol header a load balancer puts in front of a connection (HAProxy's
// specification, versions 1 and 2) to say whose connection it is.

// The longest version 1 header, CRLF included.
inline constexpr size_t kProxyV1MaxBytes = 107;
// Version 2: the signature, command, family and length before the addresses.
inline constexpr size_t kProxyV2FixedBytes = 16;

struct ProxyHeader {
  // LOCAL (v2) or UNKNOWN (v1): the balancer's own connection (a health check); the socket's
  // addresses stand.
  bool local = false;
  Address source;       // the client's address and port
  Address destination;  // the address the client connected to
  size_t length = 0;    // bytes of the header, TLVs included: what to consume from the socket
};

enum class ProxyParse : uint8_t {
  Incomplete,  // a prefix of a header: more bytes needed
  Header,      // a whole, valid header (in `out`)
  NotProxy,    // the bytes do not begin with a PROXY header
  Malformed,   // they begin like one but break the rules, or it is longer than `max_bytes`
};

// Reads the header at the start of `data`. `max_bytes` bounds a version 2 header (a longer one
// is Malformed, never waited for). On Malformed, `error` says what was wrong (a static string).
ProxyParse parseProxyHeader(std::string_view data, size_t max_bytes, ProxyHeader& out,
                            std::string_view& error);

// The header sluice sends a parent proxy that asks for one (`version` 1 or 2): `source`
// connected to `destination`. Both are written in one family, as the protocol requires: IPv4
// when both are IPv4 (or IPv4-mapped IPv6), else IPv6 with IPv4 ones mapped. An invalid
// `destination` is written as the unspecified address of that family, port 0; an invalid
// `source` makes an UNKNOWN (v1) or LOCAL (v2) header, which tells the parent nothing.
std::string writeProxyHeader(int version, const Address& source, const Address& destination);

}  // namespace network
}  // namespace sluice
