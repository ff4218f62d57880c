#include "source/common/policy/rules.h"

#include "absl/strings/str_format.h"

namespace sluice {
namespace policy {
namespace {

constexpr const char* kKindNames[kKinds] = {"http",           "connect",    "websocket",
                                            "socks5-connect", "socks5-udp", "socks5-bind"};
// Rule names appear in Proxy-Status details, logs and `sluice policy explain`.
constexpr size_t kMaxRuleNameLength = 128;
constexpr size_t kMaxNameLength = 253;
constexpr size_t kMaxLabelLength = 63;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// `a` as written by a client against `lowered`, already lowercase.
bool equalsLowered(std::string_view a, std::string_view lowered) {
  if (a.size() != lowered.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lowered[i]) return false;
  }
  return true;
}

bool isLabelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

bool validRuleName(std::string_view name) {
  if (name.empty() || name.size() > kMaxRuleNameLength) return false;
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
  }
  return true;
}

}  // namespace

const char* actionName(Action action) { return action == Action::Allow ? "allow" : "deny"; }

const char* kindName(Kind kind) { return kKindNames[static_cast<size_t>(kind)]; }

bool parseKind(std::string_view text, Kind& out) {
  for (size_t i = 0; i < kKinds; ++i) {
    if (text == kKindNames[i]) {
      out = static_cast<Kind>(i);
      return true;
    }
  }
  return false;
}

absl::StatusOr<HostPattern> HostPattern::parse(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return absl::InvalidArgumentError(
          "not ASCII: write an internationalised name in punycode, as DNS carries it "
          "(\"xn--bcher-kva.example\" for \"b\xC3\xBC"
          "cher.example\"; `idn2` prints it)");
    }
  }
  HostPattern pattern;
  std::string_view rest = text;
  if (text == "*") {
    pattern.form_ = Form::Any;
    return pattern;
  }
  if (rest.substr(0, 2) == "*.") {
    pattern.form_ = Form::Subdomains;
    rest.remove_prefix(2);
  } else if (rest.substr(0, 1) == ".") {
    pattern.form_ = Form::NameAndSubdomains;
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest.back() == '.') rest.remove_suffix(1);
  if (rest.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" names no domain (\"example.com\", \"*.example.com\", \".example.com\" or \"*\")",
        text));
  }
  if (rest.find('*') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\": '*' stands only for a whole first label (\"*.example.com\": the subdomains of "
        "example.com) or alone (\"*\": any name)",
        text));
  }
  if (rest.find(':') != std::string_view::npos || rest.find('[') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is an IPv6 address: a host pattern never matches an address; use cidrs", text));
  }
  if (rest.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("\"%s\" is longer than a DNS name (253 characters)", text));
  }
  size_t label_start = 0;
  bool last_all_digits = true;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '.') {
      const size_t length = i - label_start;
      if (length == 0) {
        return absl::InvalidArgumentError(absl::StrFormat("\"%s\" has an empty label", text));
      }
      if (length > kMaxLabelLength) {
        return absl::InvalidArgumentError(
            absl::StrFormat("\"%s\" has a label longer than 63 characters", text));
      }
      label_start = i + 1;
      if (i < rest.size()) last_all_digits = true;
      continue;
    }
    if (!isLabelChar(rest[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "\"%s\": '%c' is not allowed in a name (letters, digits, '-', '_' and dots)", text,
          rest[i]));
    }
    if (rest[i] < '0' || rest[i] > '9') last_all_digits = false;
  }
  if (last_all_digits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is an IPv4 address (or ends like one): a host pattern never matches an address; "
        "use cidrs",
        text));
  }
  pattern.domain_.reserve(rest.size());
  for (char c : rest) pattern.domain_.push_back(lower(c));
  return pattern;
}

bool HostPattern::matches(std::string_view host) const {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty()) return false;
  switch (form_) {
    case Form::Any:
      return true;
    case Form::Exact:
      return equalsLowered(host, domain_);
    case Form::NameAndSubdomains:
      if (equalsLowered(host, domain_)) return true;
      [[fallthrough]];
    case Form::Subdomains: {
      // A label, a dot, then the domain: "a.example.com", never "aexample.com".
      if (host.size() <= domain_.size() + 1) return false;
      const size_t dot = host.size() - domain_.size() - 1;
      return host[dot] == '.' && equalsLowered(host.substr(dot + 1), domain_);
    }
  }
  return false;
}

bool Rule::matchesDestination(const Destination& d) const {
  if (kinds != 0 && (kinds & (1u << static_cast<uint32_t>(d.kind))) == 0) return false;
  if (!ports.empty()) {
    bool any = false;
    for (const network::PortRange& range : ports) any = any || range.contains(d.port);
    if (!any) return false;
  }
  if (!hosts.empty()) {
    // A host pattern never matches an address the client gave (cidrs do).
    if (d.name.empty()) return false;
    bool any = false;
    for (const HostPattern& pattern : hosts) {
      if (pattern.matches(d.name)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

bool Rule::matchesAddress(const network::Address& address) const {
  for (const network::CidrRange& range : cidrs) {
    if (range.contains(address)) return true;
  }
  // Only an IPv6 address carries another (IPv4-mapped ones matched above).
  if (cidrs.empty() || address.family() != AF_INET6) return false;
  network::Address embedded[network::kMaxEmbeddedIpv4];
  const size_t count = network::embeddedIpv4(address, embedded);
  for (size_t i = 0; i < count; ++i) {
    for (const network::CidrRange& range : cidrs) {
      if (range.contains(embedded[i])) return true;
    }
  }
  return false;
}

RuleSet::RuleSet() {
  default_.name = "default.default";
  default_.reason = "policy rule default.default";
}

NameCheck RuleSet::checkName(const Destination& destination) const {
  NameCheck check;
  for (uint32_t i = 0; i < rules_.size(); ++i) {
    const Rule& rule = rules_[i];
    if (!rule.matchesDestination(destination)) continue;
    if (!rule.cidrs.empty()) {
      check.from = i;
      return check;
    }
    check.decided = &rule;
    return check;
  }
  check.decided = &default_;
  return check;
}

Decision RuleSet::checkAddress(const Destination& destination, const NameCheck& check,
                               const network::Address& address) const {
  if (check.decided != nullptr) return Decision{check.decided, false};
  for (size_t i = check.from; i < rules_.size(); ++i) {
    const Rule& rule = rules_[i];
    if (!rule.matchesDestination(destination)) continue;
    if (rule.cidrs.empty()) return Decision{&rule, false};
    if (rule.matchesAddress(address)) return Decision{&rule, true};
  }
  return Decision{&default_, false};
}

absl::Status buildRuleSet(const config::v1::Group& proto, std::string_view path, RuleSet& out) {
  auto error = [](const std::string& where, absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, problem));
  };
  const std::string& group = proto.name();
  out.default_.name = group + ".default";
  out.default_.reason = "policy rule " + out.default_.name;
  if (proto.default_action().empty() || proto.default_action() == "allow") {
    out.default_.action = Action::Allow;
  } else if (proto.default_action() == "deny") {
    out.default_.action = Action::Deny;
  } else {
    return error(absl::StrFormat("%s.default_action", path),
                 absl::StrFormat("\"%s\" is neither allow nor deny", proto.default_action()));
  }
  out.report_only_ = proto.report_only();
  out.rules_.clear();
  out.rules_.reserve(static_cast<size_t>(proto.rules_size()));
  for (int i = 0; i < proto.rules_size(); ++i) {
    const config::v1::PolicyRule& in = proto.rules(i);
    const std::string where = absl::StrFormat("%s.rules[%d]", path, i);
    Rule rule;
    rule.name = in.name().empty() ? absl::StrFormat("%s.rules[%d]", group, i) : in.name();
    if (!validRuleName(rule.name)) {
      return error(where + ".name",
                   absl::StrFormat("\"%s\" must be 1 to %d printable characters without spaces, "
                                   "quotes or backslashes",
                                   in.name(), kMaxRuleNameLength));
    }
    if (rule.name == out.default_.name) {
      return error(where + ".name", absl::StrFormat("\"%s\" names the group's default_action "
                                                    "(what applies when no rule matches)",
                                                    rule.name));
    }
    for (const Rule& other : out.rules_) {
      if (other.name == rule.name) {
        return error(where + ".name", absl::StrFormat("\"%s\" is the name of an earlier rule "
                                                      "of the group",
                                                      rule.name));
      }
    }
    rule.reason = "policy rule " + rule.name;
    if (in.action() == "allow") {
      rule.action = Action::Allow;
    } else if (in.action() == "deny") {
      rule.action = Action::Deny;
    } else {
      return error(where + ".action",
                   in.action().empty()
                       ? std::string("required: allow or deny")
                       : absl::StrFormat("\"%s\" is neither allow nor deny", in.action()));
    }
    for (int j = 0; j < in.hosts_size(); ++j) {
      auto pattern = HostPattern::parse(in.hosts(j));
      if (!pattern.ok()) {
        return error(absl::StrFormat("%s.hosts[%d]", where, j), pattern.status().message());
      }
      rule.hosts.push_back(std::move(*pattern));
    }
    for (int j = 0; j < in.cidrs_size(); ++j) {
      auto range = network::CidrRange::parse(in.cidrs(j));
      if (!range.ok()) {
        return error(absl::StrFormat("%s.cidrs[%d]", where, j), range.status().message());
      }
      rule.cidrs.push_back(*range);
    }
    for (int j = 0; j < in.ports_size(); ++j) {
      auto range = network::parsePortRange(in.ports(j));
      if (!range.ok()) {
        return error(absl::StrFormat("%s.ports[%d]", where, j), range.status().message());
      }
      rule.ports.push_back(*range);
    }
    for (int j = 0; j < in.kinds_size(); ++j) {
      Kind kind;
      if (!parseKind(in.kinds(j), kind)) {
        return error(absl::StrFormat("%s.kinds[%d]", where, j),
                     absl::StrFormat("unknown kind \"%s\" (http, connect, websocket, "
                                     "socks5-connect, socks5-udp, socks5-bind)",
                                     in.kinds(j)));
      }
      rule.kinds |= 1u << static_cast<uint32_t>(kind);
    }
    out.rules_.push_back(std::move(rule));
  }
  if (out.inactive()) return absl::OkStatus();
  // Stats per user-supplied group: a config with thousands of groups shares one set past the
  // store's room, as keys do.
  constexpr uint32_t kStatsReserve = 2048;
  stats::Store& store = stats::Store::get();
  const stats::Scope scope = stats::Scope("policy").scope("group", "group", group);
  if (store.hasRoomFor(scope.name("allowed"), 3, kStatsReserve)) {
    out.stats_.allowed = scope.counter("allowed", "Requests the group's rules allowed.");
    out.stats_.denied = scope.counter("denied", "Requests the group's rules refused.");
    out.stats_.report_only = scope.counter(
        "report_only", "Requests a rule of a report-only group would have refused, served.");
  } else {
    out.stats_.allowed =
        store.counter("policy.group_overflow.allowed",
                      "Requests allowed by the rules of groups that have no stats of their own.");
    out.stats_.denied =
        store.counter("policy.group_overflow.denied",
                      "Requests refused by the rules of groups that have no stats of their own.");
    out.stats_.report_only =
        store.counter("policy.group_overflow.report_only",
                      "Report-only refusals of groups that have no stats of their own.");
  }
  return absl::OkStatus();
}

}  // namespace policy
}  // namespace sluice
