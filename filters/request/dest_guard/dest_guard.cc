#include "filters/request/dest_guard/dest_guard.h"

#include <algorithm>
#include <cstring>

#include <net/if.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/network/ip_literal.h"
#include "source/common/policy/policy.h"

namespace sluice {
namespace filters {
namespace dest_guard {
namespace {

// IANA special-purpose ranges (RFC 6890 and successors): nothing a forward proxy should reach
// on a client's behalf unless the operator says so.
constexpr const char* kInternalRanges[] = {
    "0.0.0.0/8",        // "this network"; connect() to 0.0.0.0 reaches the local host
    "10.0.0.0/8",       // RFC 1918
    "100.64.0.0/10",    // CGNAT shared space
    "127.0.0.0/8",      // loopback
    "169.254.0.0/16",   // link-local, cloud metadata (169.254.169.254)
    "172.16.0.0/12",    // RFC 1918
    "192.0.0.0/24",     // IETF protocol assignments
    "192.0.2.0/24",     // TEST-NET-1
    "192.88.99.0/24",   // 6to4 relay anycast
    "192.168.0.0/16",   // RFC 1918
    "198.18.0.0/15",    // benchmarking
    "198.51.100.0/24",  // TEST-NET-2
    "203.0.113.0/24",   // TEST-NET-3
    "224.0.0.0/4",      // multicast
    "240.0.0.0/4",      // reserved, and the broadcast 255.255.255.255
    "::/128",           // unspecified
    "::1/128",          // loopback
    "::/96",            // IPv4-compatible (deprecated); a tunnel may carry it to IPv4
    "::ffff:0:0/96",    // IPv4-mapped: reaches the embedded IPv4 address
    "64:ff9b::/96",     // NAT64 well-known prefix
    "64:ff9b:1::/48",   // local-use NAT64
    "100::/64",         // discard-only
    "2001::/32",        // Teredo
    "2001:db8::/32",    // documentation
    "2002::/16",        // 6to4
    "fc00::/7",         // unique local (ULA)
    "fe80::/10",        // link-local
    "fec0::/10",        // site-local (deprecated)
    "ff00::/8",         // multicast
};

bool isUnspecified(const network::Address& a) {
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == 0;
  return IN6_IS_ADDR_UNSPECIFIED(&a.v6().sin6_addr);
}

bool isLoopback(const network::Address& a) {
  if (a.family() == AF_INET) return (ntohl(a.v4().sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&a.v6().sin6_addr);
}

// ::ffff:a.b.c.d as the IPv4 address it reaches (same port); anything else unchanged.
network::Address unmapped(const network::Address& a) {
  if (a.family() != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&a.v6().sin6_addr)) return a;
  uint32_t ip;
  memcpy(&ip, a.v6().sin6_addr.s6_addr + 12, 4);
  return network::Address::ipv4(ntohl(ip), a.port());
}

bool sameIp(const network::Address& a, const network::Address& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == b.v4().sin_addr.s_addr;
  return memcmp(&a.v6().sin6_addr, &b.v6().sin6_addr, 16) == 0;
}

bool hasPort(const std::vector<uint16_t>& ports, uint16_t port) {
  return std::find(ports.begin(), ports.end(), port) != ports.end();
}

absl::Status parseRanges(const google::protobuf::RepeatedPtrField<std::string>& texts,
                         std::string_view path, std::vector<network::CidrRange>& out) {
  for (int i = 0; i < texts.size(); ++i) {
    auto range = network::CidrRange::parse(texts.Get(i));
    if (!range.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s[%d]: %s", path, i, range.status().message()));
    }
    out.push_back(*range);
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<network::CidrRange>& internalRanges() {
  static const std::vector<network::CidrRange>* ranges = [] {
    auto* list = new std::vector<network::CidrRange>();
    for (const char* text : kInternalRanges) {
      auto range = network::CidrRange::parse(text);
      SLUICE_ASSERT(range.ok(), "bad built-in range");
      list->push_back(*range);
    }
    return list;
  }();
  return *ranges;
}

bool DestGuardConfig::portAllowed(uint16_t port) const {
  for (const network::PortRange& range : allowed_ports) {
    if (range.contains(port)) return true;
  }
  return false;
}

bool DestGuardConfig::isLocal(const network::Address& a) const {
  return isUnspecified(a) || isLoopback(a) || host_addresses->contains(a);
}

bool DestGuardConfig::isSelf(const network::Address& a,
                             network::OwnPorts::Transport transport) const {
  const uint16_t port = a.port();
  if (own_ports->contains(transport, port) && isLocal(a)) return true;
  // Listen sockets are all TCP.
  if (transport != network::OwnPorts::Transport::Tcp || !hasPort(self_ports, port)) return false;
  if (isUnspecified(a)) return true;
  for (const network::Address& self : self_addresses) {
    if (self.port() == port && sameIp(self, a)) return true;
  }
  return hasPort(self_wildcard_ports, port) && isLocal(a);
}

Verdict DestGuardConfig::rangeVerdict(const network::Address& address,
                                      const std::vector<network::CidrRange>* opening) const {
  for (const network::CidrRange& range : deny) {
    if (range.contains(address)) return Verdict::Denied;
  }
  if (allow_private) return Verdict::Allowed;
  for (const network::CidrRange& range : allow) {
    if (range.contains(address)) return Verdict::Allowed;
  }
  if (opening != nullptr) {
    for (const network::CidrRange& range : *opening) {
      if (range.contains(address)) return Verdict::Allowed;
    }
  }
  for (const network::CidrRange& range : internalRanges()) {
    if (range.contains(address)) return Verdict::Private;
  }
  // A public address of this host reaches whatever listens on it (a database on 0.0.0.0).
  if (host_addresses->contains(address)) return Verdict::Self;
  return Verdict::Allowed;
}

Verdict DestGuardConfig::check(const network::Address& address,
                               network::OwnPorts::Transport transport,
                               const std::vector<network::CidrRange>* opening) const {
  const network::Address a = unmapped(address);
  // Whatever opens other ranges, a request must not loop back into sluice.
  if (isSelf(a, transport)) return Verdict::Self;
  // The ranges see the address as the client wrote it: ::ffff:0:0/96 is internal itself.
  const Verdict verdict = rangeVerdict(address, opening);
  if (verdict != Verdict::Allowed) return verdict;
  // An address a translator or tunnel turns into IPv4 is judged as that IPv4 address too.
  network::Address embedded[network::kMaxEmbeddedIpv4];
  const size_t count = network::embeddedIpv4(a, embedded);
  for (size_t i = 0; i < count; ++i) {
    const Verdict v = rangeVerdict(embedded[i], opening);
    if (v != Verdict::Allowed) return v;
  }
  return Verdict::Allowed;
}

std::string_view DestGuardConfig::portRefusal(uint16_t port) const {
  return portAllowed(port) ? std::string_view() : kReasonPort;
}

std::string_view DestGuardConfig::addressRefusal(
    const network::Address& address, bool datagram,
    const std::vector<network::CidrRange>* opening) const {
  return verdictReason(check(
      address, datagram ? network::OwnPorts::Transport::Udp : network::OwnPorts::Transport::Tcp,
      opening));
}

std::string_view verdictReason(Verdict verdict) {
  switch (verdict) {
    case Verdict::Allowed:
      return {};
    case Verdict::Private:
      return kReasonPrivate;
    case Verdict::Denied:
      return kReasonDenied;
    case Verdict::Self:
      return kReasonSelf;
  }
  return kReasonPrivate;
}

policy::Kind policyKind(const proxy::ProxyRequest& request) {
  switch (request.kind) {
    case proxy::RequestKind::Forward:
      return request.websocket ? policy::Kind::Websocket : policy::Kind::Http;
    case proxy::RequestKind::Tunnel:
      return request.protocol == proxy::Protocol::Socks5 ? policy::Kind::Socks5Connect
                                                         : policy::Kind::Connect;
    case proxy::RequestKind::Datagram:
      return policy::Kind::Socks5Udp;
    case proxy::RequestKind::Bind:
      return policy::Kind::Socks5Bind;
  }
  return policy::Kind::Connect;
}

absl::StatusOr<DestGuardConfigSharedPtr> buildConfig(
    const sluice::filters::v1::DestGuardConfig& proto,
    const std::vector<network::Address>& local_addresses, std::string_view path,
    const network::HostAddresses& host, policy::PolicySharedPtr policy,
    upstream::RoutesSharedPtr routes) {
  auto config = std::make_shared<DestGuardConfig>();
  if (routes != nullptr) config->routes = std::move(routes);
  config->host_addresses = &host;
  if (policy != nullptr) config->policy = std::move(policy);
  config->default_group = &config->policy->defaultGroup();
  config->allow_private = proto.allow_private();
  absl::Status status =
      parseRanges(proto.allow(), absl::StrFormat("%s.typed_config.allow", path), config->allow);
  if (!status.ok()) return status;
  status = parseRanges(proto.deny(), absl::StrFormat("%s.typed_config.deny", path), config->deny);
  if (!status.ok()) return status;
  for (int i = 0; i < proto.allowed_ports_size(); ++i) {
    auto range = network::parsePortRange(proto.allowed_ports(i));
    if (!range.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.typed_config.allowed_ports[%d]: %s",
                                                        path, i, range.status().message()));
    }
    config->allowed_ports.push_back(*range);
  }
  if (config->allowed_ports.empty()) {
    config->allowed_ports = {{80, 80}, {443, 443}, {1024, 65535}};
  }

  for (const network::Address& local : local_addresses) {
    if (!local.valid()) continue;
    const uint16_t port = local.port();
    if (!hasPort(config->self_ports, port)) config->self_ports.push_back(port);
    if (!isUnspecified(local)) {
      config->self_addresses.push_back(local);
      continue;
    }
    if (!hasPort(config->self_wildcard_ports, port)) config->self_wildcard_ports.push_back(port);
  }

  stats::Store& store = stats::Store::get();
  config->stats.allowed =
      store.counter("dest_guard.allowed", "Requests passed on by the destination guard.");
  config->stats.blocked_private = store.counter(
      "dest_guard.blocked_private", "Requests refused: an address in an internal range.");
  config->stats.blocked_denied =
      store.counter("dest_guard.blocked_denied", "Requests refused: an address in a deny range.");
  config->stats.blocked_port =
      store.counter("dest_guard.blocked_port", "Requests refused: a port outside allowed_ports.");
  config->stats.blocked_self =
      store.counter("dest_guard.blocked_self",
                    "Requests refused: sluice's own sockets or an address of its host.");
  config->stats.resolve_failed =
      store.counter("dest_guard.resolve_failed", "Requests refused: the name did not resolve.");
  config->stats.blocked_policy = store.counter(
      "dest_guard.blocked_policy", "Requests refused: a rule of the request's policy group.");
  return DestGuardConfigSharedPtr(std::move(config));
}

DestGuardFilter::~DestGuardFilter() { onRequestEnd(); }

proxy::RequestFilterStatus DestGuardFilter::onRequest(proxy::ProxyRequest& request) {
  request_ = &request;
  // A retried request comes back with the previous run's pins and verdicts: check afresh.
  request.pinned_count = 0;
  request.parent_route = nullptr;
  request.policy_rule = {};
  request.policy_report_only = false;
  if (request.group == nullptr) request.group = config_->default_group;
  rules_ = request.group->rules.inactive() ? nullptr : &request.group->rules;

  network::Address literal;
  std::string_view zone;
  const bool is_literal = network::parseIpLiteral(request.host, literal, &zone);
  if (request.kind == proxy::RequestKind::Bind && is_literal && isUnspecified(literal)) {
    // A SOCKS5 BIND for any peer: no destination to check, but the rules may refuse the BIND
    // itself (kind socks5-bind); those that need the peer's address are checked by the codec
    // on the peer that connects.
    if (rules_ != nullptr) {
      destination_ = policy::Destination{{}, request.port, policy::Kind::Socks5Bind};
      name_check_ = rules_->checkName(destination_);
      if (!name_check_.needsAddresses() && !enforce(policy::Decision{name_check_.decided, false})) {
        return proxy::RequestFilterStatus::StopIteration;
      }
    }
    return proxy::RequestFilterStatus::Continue;
  }
  if (!config_->portAllowed(request.port)) {
    config_->stats.blocked_port.inc();
    callbacks_->deny(proxy::Denial::Forbidden, kReasonPort);
    return proxy::RequestFilterStatus::StopIteration;
  }
  if (rules_ != nullptr) {
    // The name first: a rule that needs no address decides before any lookup.
    destination_ = policy::Destination{is_literal ? std::string_view() : request.host, request.port,
                                       policyKind(request)};
    name_check_ = rules_->checkName(destination_);
    if (!name_check_.needsAddresses() && !enforce(policy::Decision{name_check_.decided, false})) {
      return proxy::RequestFilterStatus::StopIteration;
    }
  }

  if (is_literal) {
    literal.setPort(request.port);
    // A refused address gets its own reason, whatever its zone says.
    if (!zone.empty() &&
        config_->check(literal, transport(), opening(literal)) == Verdict::Allowed &&
        !applyZone(zone, literal)) {
      return proxy::RequestFilterStatus::StopIteration;
    }
    return admit(&literal, 1) ? proxy::RequestFilterStatus::Continue
                              : proxy::RequestFilterStatus::StopIteration;
  }

  if (request.kind == proxy::RequestKind::Forward || request.kind == proxy::RequestKind::Tunnel) {
    if (const upstream::Route* route = config_->routes->resolvedByParent(request)) {
      // The parent resolves the name: the port and the name's rules are all there is to check
      // (routing.md says why that is weaker). Rules that need the addresses cannot be met.
      if (rules_ != nullptr && name_check_.needsAddresses()) {
        config_->stats.blocked_denied.inc();
        callbacks_->deny(proxy::Denial::Forbidden, kReasonParentResolves);
        return proxy::RequestFilterStatus::StopIteration;
      }
      request.parent_route = route;
      config_->stats.allowed.inc();
      return proxy::RequestFilterStatus::Continue;
    }
  }

  in_on_request_ = true;
  answered_ = false;
  lookup_started_ = callbacks_->worker().dispatcher().now();
  // The group's lookups leave from its egress address, as its connects will.
  query_ = callbacks_->worker()
               .resolver(policy::egressOf(request.group))
               .resolve(request.host,
                        [this](const absl::Status& status, const std::vector<network::Address>& a) {
                          query_ = nullptr;
                          onResolved(status, a);
                        });
  in_on_request_ = false;
  if (answered_ && admitted_) return proxy::RequestFilterStatus::Continue;
  return proxy::RequestFilterStatus::StopIteration;
}

void DestGuardFilter::onResolved(const absl::Status& status,
                                 const std::vector<network::Address>& addresses) {
  // Read first: a refusal may end the request and, on the async path, the connection.
  const bool synchronous = in_on_request_;
  bool admitted = false;
  request_->resolve_time = std::chrono::duration_cast<std::chrono::microseconds>(
      callbacks_->worker().dispatcher().now() - lookup_started_);
  if (!status.ok() || addresses.empty()) {
    config_->stats.resolve_failed.inc();
    error_ = status.ok() ? absl::StrFormat("%s: no addresses", request_->host)
                         : std::string(status.message());
    request_->failure = upstream::dnsFailure(absl::IsDeadlineExceeded(status));
    callbacks_->deny(proxy::Denial::BadGateway, error_);
  } else {
    admitted = admit(addresses.data(), addresses.size());
  }
  if (synchronous) {
    answered_ = true;
    admitted_ = admitted;
    return;
  }
  if (admitted) callbacks_->continueRequest();
}

const std::vector<network::CidrRange>* DestGuardFilter::opening(
    const network::Address& address) const {
  // A report-only group changes nothing about what is served: its rules open nothing.
  if (rules_ == nullptr || !name_check_.needsAddresses() || rules_->reportOnly()) return nullptr;
  const policy::Decision d = rules_->checkAddress(destination_, name_check_, address);
  return d.opens() ? &d.rule->cidrs : nullptr;
}

bool DestGuardFilter::enforce(const policy::Decision& decision) {
  const policy::RuleStats& stats = rules_->stats();
  if (decision.allows()) {
    stats.allowed.inc();
    return true;
  }
  request_->policy_rule = decision.rule->name;
  if (rules_->reportOnly()) {
    stats.report_only.inc();
    request_->policy_report_only = true;
    return true;
  }
  stats.denied.inc();
  config_->stats.blocked_policy.inc();
  // Refused for an address (by a rule's cidrs), or for what the request is.
  if (decision.by_cidr) request_->denial_cause = proxy::DenialCause::DestinationAddress;
  callbacks_->deny(proxy::Denial::Forbidden, decision.rule->reason);
  return false;
}

bool DestGuardFilter::admit(const network::Address* addresses, size_t count) {
  // The cidrs that open each address (a resolver answers at most kMaxAddresses; past them, an
  // address is looked up again).
  // Filled (and read) only when the rules need the addresses: a request of a group without
  // rules pays nothing for it.
  const std::vector<network::CidrRange>* opens[dns::Resolver::kMaxAddresses];
  const bool may_open = rules_ != nullptr && name_check_.needsAddresses() && !rules_->reportOnly();
  if (rules_ != nullptr && name_check_.needsAddresses()) {
    // Every address on its own: the request is refused if a rule refuses any of them.
    policy::Decision verdict;
    for (size_t i = 0; i < count; ++i) {
      const policy::Decision d = rules_->checkAddress(destination_, name_check_, addresses[i]);
      if (i < dns::Resolver::kMaxAddresses) opens[i] = d.opens() ? &d.rule->cidrs : nullptr;
      if (!d.allows()) {
        if (verdict.rule == nullptr || verdict.allows()) verdict = d;
        continue;
      }
      if (verdict.rule == nullptr) verdict = d;
    }
    if (verdict.rule != nullptr && !enforce(verdict)) return false;
  }
  for (size_t i = 0; i < count; ++i) {
    network::Address address = addresses[i];
    address.setPort(request_->port);
    const std::vector<network::CidrRange>* opening_ranges = !may_open ? nullptr
                                                            : i < dns::Resolver::kMaxAddresses
                                                                ? opens[i]
                                                                : opening(address);
    switch (config_->check(address, transport(), opening_ranges)) {
      case Verdict::Allowed:
        continue;
      case Verdict::Private:
        config_->stats.blocked_private.inc();
        request_->denial_cause = proxy::DenialCause::DestinationAddress;
        callbacks_->deny(proxy::Denial::Forbidden, kReasonPrivate);
        return false;
      case Verdict::Denied:
        config_->stats.blocked_denied.inc();
        request_->denial_cause = proxy::DenialCause::DestinationAddress;
        callbacks_->deny(proxy::Denial::Forbidden, kReasonDenied);
        return false;
      case Verdict::Self:
        config_->stats.blocked_self.inc();
        request_->denial_cause = proxy::DenialCause::DestinationAddress;
        callbacks_->deny(proxy::Denial::Forbidden, kReasonSelf);
        return false;
    }
  }
  const size_t pinned = std::min<size_t>(count, proxy::ProxyRequest::kMaxPinned);
  for (size_t i = 0; i < pinned; ++i) {
    request_->pinned[i] = addresses[i];
    request_->pinned[i].setPort(request_->port);
  }
  request_->pinned_count = static_cast<uint32_t>(pinned);
  config_->stats.allowed.inc();
  return true;
}

bool DestGuardFilter::applyZone(std::string_view zone, network::Address& address) {
  // parseIpLiteral bounds a zone to IF_NAMESIZE - 1 characters.
  char name[IF_NAMESIZE];
  memcpy(name, zone.data(), zone.size());
  name[zone.size()] = '\0';
  uint32_t index = if_nametoindex(name);
  if (index == 0) {
    uint32_t numeric = 0;
    bool digits = true;
    for (char c : zone) {
      if (c < '0' || c > '9' || numeric > 100000) {
        digits = false;
        break;
      }
      numeric = numeric * 10 + static_cast<uint32_t>(c - '0');
    }
    if (digits && numeric != 0 && if_indextoname(numeric, name) != nullptr) index = numeric;
  }
  if (index == 0) {
    config_->stats.resolve_failed.inc();
    request_->failure = {upstream::FailureKind::Unreachable, 0};
    callbacks_->deny(proxy::Denial::BadGateway, "no such interface in the address's zone id");
    return false;
  }
  sockaddr_in6 in6 = address.v6();
  in6.sin6_scope_id = index;
  address = network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
  return true;
}

void DestGuardFilter::onRequestEnd() {
  if (query_ != nullptr) {
    query_->cancel();
    query_ = nullptr;
  }
  request_ = nullptr;
}

}  // namespace dest_guard
}  // namespace filters
}  // namespace sluice
