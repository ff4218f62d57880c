#include "source/common/policy/egress.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace policy {
namespace {

// Stat slots kept free for what registers after the policy (the listeners, keys, codecs).
constexpr uint32_t kStatsReserve = 4096;

// The address of one family's field, or why it cannot be a source address.
absl::StatusOr<network::Address> parseSource(const std::string& text, int family,
                                             std::string_view where) {
  const char* other_field = family == AF_INET ? "ipv6" : "ipv4";
  auto parsed = network::Address::parseIp(text, 0);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"%s\" is not an IPv%d address (a literal, no port, no name)", where,
                        text, family == AF_INET ? 4 : 6));
  }
  const network::Address& a = *parsed;
  if (a.family() != family) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"%s\" is an IPv%d address: it goes in egress.%s", where, text,
                        family == AF_INET ? 6 : 4, other_field));
  }
  if (family == AF_INET) {
    const uint32_t ip = ntohl(a.v4().sin_addr.s_addr);
    if (ip == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: \"%s\" is unspecified; leave egress.ipv4 out for the system's choice", where, text));
    }
    if ((ip >> 28) >= 0xe) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: \"%s\" is a multicast, reserved or broadcast address, not a source", where, text));
    }
    return a;
  }
  const in6_addr& ip6 = a.v6().sin6_addr;
  if (IN6_IS_ADDR_UNSPECIFIED(&ip6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: \"%s\" is unspecified; leave egress.ipv6 out for the system's choice", where, text));
  }
  if (IN6_IS_ADDR_V4MAPPED(&ip6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: \"%s\" is an IPv4-mapped address: its IPv4 address goes in egress.ipv4", where, text));
  }
  if (IN6_IS_ADDR_MULTICAST(&ip6)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"%s\" is a multicast address, not a source", where, text));
  }
  if (IN6_IS_ADDR_LINKLOCAL(&ip6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: \"%s\" is link-local (it needs an interface); use a global or unique local "
        "address",
        where, text));
  }
  return a;
}

}  // namespace

absl::StatusOr<GroupEgress> buildGroupEgress(const config::v1::Egress& proto, std::string_view path,
                                             std::string_view group) {
  GroupEgress egress;
  if (proto.ipv4().empty() && proto.ipv6().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: names no address (set ipv4, ipv6 or both)", path));
  }
  if (!proto.ipv4().empty()) {
    auto a = parseSource(proto.ipv4(), AF_INET, absl::StrFormat("%s.ipv4", path));
    if (!a.ok()) return a.status();
    egress.addresses.ipv4 = *a;
  }
  if (!proto.ipv6().empty()) {
    auto a = parseSource(proto.ipv6(), AF_INET6, absl::StrFormat("%s.ipv6", path));
    if (!a.ok()) return a.status();
    egress.addresses.ipv6 = *a;
  }
  stats::Store& store = stats::Store::get();
  const stats::Scope scope = stats::Scope("upstream").scope("egress", "group", group);
  if (store.hasRoomFor(scope.name("cx"), 2, kStatsReserve)) {
    egress.cx = scope.counter("cx", "Connects started from the group's egress address.");
    egress.bind_failed = scope.counter(
        "bind_failed", "Binds of the group's egress address that failed (answered 502).");
  } else {
    SLUICE_LOG(Warn,
               "%s: group '%s' counts in upstream.egress_overflow.* (the stats store has no "
               "room for its own)",
               path, group);
    egress.cx = store.counter("upstream.egress_overflow.cx",
                              "Connects started from the egress addresses of the groups that "
                              "have no stats of their own (the store was full).");
    egress.bind_failed =
        store.counter("upstream.egress_overflow.bind_failed",
                      "Egress binds that failed, of the groups that have no stats of their own.");
  }
  return egress;
}

}  // namespace policy
}  // namespace sluice
