#pragma once

#include <string_view>

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// Parses `host` as a literal IP address in every notation a resolver or URL parser accepts, so a
// destination check sees the address a connect would reach, never a name sent to DNS:
// - IPv4 as inet_aton(3) reads it: one to four parts, each decimal, octal (leading 0) or hex
//   (0x), the last part filling the remaining bytes: "127.1", "2130706433", "0x7f.1",
//   "0177.0.0.1", "0x7f000001"; one trailing dot is allowed, as URL parsers allow it;
// - IPv6 (inet_pton), with or without brackets, with an optional zone id ("fe80::1%eth0").
// Returns false, leaving `out` untouched, when `host` is not a literal ("1.2.3.4.5", "0x",
// "08.1", "4294967296", "1..2" are not). The port of `out` is 0. `zone` (when not null)
// receives the zone id without the '%', or is cleared. Never allocates.
bool parseIpLiteral(std::string_view host, Address& out, std::string_view* zone = nullptr);

}  // namespace network
}  // namespace sluice
