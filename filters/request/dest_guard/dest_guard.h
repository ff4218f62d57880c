#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "api/sluice/filters/v1/dest_guard.pb.h"
#include "source/common/dns/resolver.h"
#include "source/common/network/address.h"
#include "source/common/network/cidr.h"
#include "source/common/network/local_host.h"
#include "source/common/network/port_range.h"
#include "source/common/policy/enforcement.h"
#include "source/common/policy/policy.h"
#include "source/common/policy/rules.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/routes.h"

namespace sluice {
namespace filters {
namespace dest_guard {

// The refusal texts: short, fixed, safe to show a client.
inline constexpr std::string_view kReasonPort = "destination port not allowed";
inline constexpr std::string_view kReasonPrivate = "destination is a private address";
inline constexpr std::string_view kReasonDenied = "destination is in a denied range";
inline constexpr std::string_view kReasonSelf = "destination is sluice itself";
inline constexpr std::string_view kReasonParentResolves =
    "the group's policy rules need the destination's addresses, and its route's parent "
    "resolves it";

struct DestGuardStats {
  stats::Counter allowed;          // requests passed on, with their addresses pinned
  stats::Counter blocked_private;  // an address in an internal range not opened by config
  stats::Counter blocked_denied;   // an address in a `deny` range
  stats::Counter blocked_port;     // a port outside allowed_ports
  stats::Counter blocked_self;     // sluice's own sockets, or an address of its host
  stats::Counter resolve_failed;   // the name did not resolve (or a zone id names no interface)
  stats::Counter blocked_policy;   // a rule of the request's policy group
};

// What the check says about one destination address.
enum class Verdict : uint8_t { Allowed, Private, Denied, Self };

struct DestGuardConfig : public policy::DestinationGuard {
  bool allow_private = false;
  std::vector<network::CidrRange> allow;
  std::vector<network::CidrRange> deny;
  std::vector<network::PortRange> allowed_ports;
  // sluice's listen sockets (listeners and admin) bound to one address, as ip:port.
  std::vector<network::Address> self_addresses;
  // Ports of every listen socket, and those bound on a wildcard address (0.0.0.0, ::): those
  // are sluice on every local address.
  std::vector<uint16_t> self_ports;
  std::vector<uint16_t> self_wildcard_ports;
  // This host's interface addresses (the process's set; a test's own).
  const network::HostAddresses* host_addresses = &network::HostAddresses::get();
  // The ports sluice holds for its clients (SOCKS5 BIND and UDP relays).
  const network::OwnPorts* own_ports = &network::OwnPorts::get();
  DestGuardStats stats;
  // The groups of keys: a request without one (no Authenticate filter ran) is in the default
  // group, whose rules apply to it.
  policy::PolicySharedPtr policy = policy::Policy::empty();
  const policy::Group* default_group = &policy->defaultGroup();
  // The routes: a destination whose route has `resolve: parent` is not looked up here (its
  // parent resolves it); its name and port are still checked.
  upstream::RoutesSharedPtr routes = upstream::Routes::none();

  bool portAllowed(uint16_t port) const;
  // `address` carries the destination port (it matters for the self check); `transport` is
  // how it will be reached (UDP for a SOCKS5 relay's datagrams). `opening`: the cidrs of an
  // allow rule of the request's policy group that matched the address; they open what they
  // hold as `allow` ranges do, for this request only (never a deny range, never sluice itself).
  Verdict check(const network::Address& address,
                network::OwnPorts::Transport transport = network::OwnPorts::Transport::Tcp,
                const std::vector<network::CidrRange>* opening = nullptr) const;

  // policy::DestinationGuard
  std::string_view portRefusal(uint16_t port) const override;
  std::string_view addressRefusal(const network::Address& address, bool datagram,
                                  const std::vector<network::CidrRange>* opening) const override;

 private:
  // Whether the address reaches this host: loopback, unspecified, or one of its interfaces.
  bool isLocal(const network::Address& address) const;
  bool isSelf(const network::Address& address, network::OwnPorts::Transport transport) const;
  // The ranges' verdict on one address, as it is (no embedded IPv4 considered).
  Verdict rangeVerdict(const network::Address& address,
                       const std::vector<network::CidrRange>* opening) const;
};

// The reason a verdict gives a client (empty for Allowed).
std::string_view verdictReason(Verdict verdict);
// What the rules call the kind of `request`.
policy::Kind policyKind(const proxy::ProxyRequest& request);
using DestGuardConfigSharedPtr = std::shared_ptr<const DestGuardConfig>;

// The ranges refused unless allow_private or an `allow` range opens them.
const std::vector<network::CidrRange>& internalRanges();

// Validates `proto` (errors name `path`) and builds the shared config; registers the stats.
// `local_addresses` are sluice's own listen addresses; `host` the host's interface addresses
// (it must outlive the config); `policy` the config's groups (null: only the implicit default).
absl::StatusOr<DestGuardConfigSharedPtr> buildConfig(
    const sluice::filters::v1::DestGuardConfig& proto,
    const std::vector<network::Address>& local_addresses, std::string_view path,
    const network::HostAddresses& host = network::HostAddresses::get(),
    policy::PolicySharedPtr policy = nullptr, upstream::RoutesSharedPtr routes = nullptr);

// "sluice.dest_guard": refuses a request whose port is not allowed or whose destination is, or
// resolves to, any refused address; otherwise pins the checked addresses for the router.
// Literal addresses in any notation are normalised first and never sent to DNS. It enforces
// the rules of the request's policy group too: on the name before the lookup, then on every
// address (a rule's refusal is a 403 naming it; in a report-only group it is counted and
// recorded, and the request goes on).
class DestGuardFilter : public proxy::RequestFilter {
 public:
  explicit DestGuardFilter(DestGuardConfigSharedPtr config) : config_(std::move(config)) {}
  ~DestGuardFilter() override;

  // proxy::RequestFilter
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;
  void onRequestEnd() override;

 private:
  void onResolved(const absl::Status& status, const std::vector<network::Address>& addresses);
  // Checks every address (the rules, then the built-in checks); pins them and returns true, or
  // denies and returns false.
  bool admit(const network::Address* addresses, size_t count);
  // The cidrs of the allow rule that matched `address` by them (null when none, or when the
  // group is report-only: its rules open nothing).
  const std::vector<network::CidrRange>* opening(const network::Address& address) const;
  // Applies the rules' decision for the whole request: counts it; a refusal denies the request
  // (false) unless the group is report-only, which records the rule and goes on (true).
  bool enforce(const policy::Decision& decision);
  // Sets the interface of a link-local literal; false (and denied) when there is none.
  bool applyZone(std::string_view zone, network::Address& address);
  network::OwnPorts::Transport transport() const {
    return request_->kind == proxy::RequestKind::Datagram ? network::OwnPorts::Transport::Udp
                                                          : network::OwnPorts::Transport::Tcp;
  }

  DestGuardConfigSharedPtr config_;
  proxy::ProxyRequest* request_ = nullptr;
  // The rules of the request's group (null when it has none to check), the destination as they
  // see it and their answer before the lookup.
  const policy::RuleSet* rules_ = nullptr;
  policy::Destination destination_;
  policy::NameCheck name_check_;
  dns::Resolver::Query* query_ = nullptr;
  // An answer that arrives while onRequest is still on the stack is returned from it instead of
  // resuming the chain.
  bool in_on_request_ = false;
  event::MonotonicTime lookup_started_{};  // for the request's record
  bool answered_ = false;
  bool admitted_ = false;
  std::string error_;  // a resolution failure's text; outlives the request for the reply
};

}  // namespace dest_guard
}  // namespace filters
}  // namespace sluice
