#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/network/address.h"
#include "source/common/network/cidr.h"
#include "source/common/network/port_range.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace policy {

enum class Action : uint8_t { Allow, Deny };
const char* actionName(Action action);

// The kinds of request a rule can name (PolicyRule.kinds).
enum class Kind : uint8_t {
  Http,           // an http:// request relayed by HTTP/1.1 or HTTP/2
  Connect,        // an HTTP CONNECT tunnel (HTTP/1.1 or an HTTP/2 stream)
  Websocket,      // a WebSocket upgrade (HTTP/1.1 Upgrade, RFC 8441)
  Socks5Connect,  // SOCKS5 CONNECT
  Socks5Udp,      // a SOCKS5 UDP ASSOCIATE datagram's destination
  Socks5Bind,     // the peer of a SOCKS5 BIND
};
inline constexpr size_t kKinds = 6;
// "http", "connect", "websocket", "socks5-connect", "socks5-udp", "socks5-bind".
const char* kindName(Kind kind);
bool parseKind(std::string_view text, Kind& out);

// A destination name pattern (PolicyRule.hosts): "example.com" is that name only,
// "*.example.com" its subdomains (not the name itself), ".example.com" the name and its
// subdomains, "*" any name. Compared without case and without one trailing dot.
class HostPattern {
 public:
  enum class Form : uint8_t { Exact, Subdomains, NameAndSubdomains, Any };

  // Refuses malformed patterns ('*' anywhere but as the whole first label, empty labels, a label
  // over 63 characters, characters outside letters, digits, '-' and '_'), IP addresses (a host
  // pattern never matches one: cidrs do) and non-ASCII text (punycode is the form to write).
  static absl::StatusOr<HostPattern> parse(std::string_view text);

  // `host` is a name as the client wrote it (never an IP literal: the caller knows which).
  bool matches(std::string_view host) const;
  Form form() const { return form_; }
  // Lowercase, without the leading "*." or "." and the trailing dot; empty for "*".
  const std::string& domain() const { return domain_; }

 private:
  Form form_ = Form::Exact;
  std::string domain_;
};

// A destination as the rules see it. Views are the caller's.
struct Destination {
  // The name the client gave; empty when it gave an IP address (or, for a BIND, no peer).
  std::string_view name;
  uint16_t port = 0;
  Kind kind = Kind::Connect;
};

struct Rule {
  std::string name;    // "<group>.rules[<i>]" unless configured
  std::string reason;  // "policy rule <name>": a refusal's text (and Proxy-Status details)
  Action action = Action::Allow;
  std::vector<HostPattern> hosts;
  std::vector<network::CidrRange> cidrs;
  std::vector<network::PortRange> ports;
  uint32_t kinds = 0;  // one bit per Kind; 0 matches every kind

  // Whether every field but cidrs matches (an unset field matches anything).
  bool matchesDestination(const Destination& destination) const;
  // Whether one of the cidrs holds the address or an IPv4 address it carries (NAT64, 6to4,
  // Teredo, IPv4-compatible; IPv4-mapped addresses match IPv4 ranges). False without cidrs.
  bool matchesAddress(const network::Address& address) const;
};

// What the rules say about one address of a destination.
struct Decision {
  const Rule* rule = nullptr;  // the rule that decided; the group's default when none matched
  bool by_cidr = false;        // the rule matched the address by one of its cidrs
  bool allows() const { return rule->action == Action::Allow; }
  // An allow rule matched the address by its cidrs: they open what they hold to the destination
  // guard as its own `allow` ranges do, for this request (never its deny ranges, never sluice's
  // own sockets).
  bool opens() const { return by_cidr && allows(); }
};

// The rules' answer before any lookup.
struct NameCheck {
  // The rule (or default) that decides for every address of the destination; null when the first
  // rule that could match has cidrs, so the decision needs the addresses.
  const Rule* decided = nullptr;
  // The rule to start from for each address: the ones before it cannot match.
  uint32_t from = 0;
  bool needsAddresses() const { return decided == nullptr; }
};

struct RuleStats {
  stats::Counter allowed;      // requests the rules allowed
  stats::Counter denied;       // requests a rule (or the default) refused
  stats::Counter report_only;  // requests a rule would have refused, served (report_only)
};

// A group's rules, first match wins, then the default. Built once per config version and read
// only afterwards; checking allocates nothing.
class RuleSet {
 public:
  RuleSet();

  // Nothing to check: no rule and a default that allows (every group of a config without rules).
  // Such a group costs a request one branch.
  bool inactive() const { return rules_.empty() && default_.action == Action::Allow; }
  // Refusals are counted and logged, not enforced.
  bool reportOnly() const { return report_only_; }

  NameCheck checkName(const Destination& destination) const;
  // The decision for one address (its port is not looked at: Destination.port is).
  Decision checkAddress(const Destination& destination, const NameCheck& check,
                        const network::Address& address) const;

  const std::vector<Rule>& rules() const { return rules_; }
  // The group's default_action as a rule named "<group>.default".
  const Rule& defaultRule() const { return default_; }
  const RuleStats& stats() const { return stats_; }

 private:
  friend absl::Status buildRuleSet(const config::v1::Group& proto, std::string_view path,
                                   RuleSet& out);
  std::vector<Rule> rules_;
  Rule default_;
  bool report_only_ = false;
  RuleStats stats_;
};

// Checks the rules, default_action and report_only of `proto` (errors start with `path`, e.g.
// "policy.groups[0].rules[2].hosts[1]: ...") into `out`. Registers the group's counters
// (policy.group.<name>.*) when it has something to check.
absl::Status buildRuleSet(const config::v1::Group& proto, std::string_view path, RuleSet& out);

}  // namespace policy
}  // namespace sluice
