#include "source/server/policy_command.h"

#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"

#include "source/common/dns/resolver.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/ip_literal.h"
#include "source/common/policy/enforcement.h"
#include "source/common/policy/rules.h"

namespace sluice {
namespace server {
namespace {

// HOST:PORT or [IPv6]:PORT; false when malformed.
bool splitTarget(std::string_view target, std::string& host, uint16_t& port) {
  size_t colon;
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    if (close == std::string_view::npos || close + 1 >= target.size() || target[close + 1] != ':') {
      return false;
    }
    host = std::string(target.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = target.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    host = std::string(target.substr(0, colon));
    if (host.find(':') != std::string::npos) return false;  // IPv6 needs brackets
  }
  const std::string_view digits = target.substr(colon + 1);
  if (digits.empty() || digits.size() > 5) return false;
  uint32_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value == 0 || value > 65535) return false;
  port = static_cast<uint16_t>(value);
  return !host.empty();
}

bool isUnspecified(const network::Address& a) {
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == 0;
  return IN6_IS_ADDR_UNSPECIFIED(&a.v6().sin6_addr);
}

// The config's resolver, as a worker has it (dns.*: the hosts file, then the name servers),
// run to one answer. `source` says where the answer came from.
absl::Status resolve(const ServerConfig& config, const std::string& host,
                     std::vector<network::Address>& out, std::string& source) {
  event::Dispatcher dispatcher;
  absl::Status status = absl::UnknownError("no answer");
  bool answered = false;
  {
    dns::Resolver resolver(dispatcher, config.bootstrap.dns());
    resolver.resolve(host, [&](const absl::Status& s, const std::vector<network::Address>& a) {
      status = s;
      out = a;
      answered = true;
      dispatcher.exit();
    });
    if (!answered) dispatcher.run();
    if (resolver.counters().hosts_hits > 0) {
      source = "the hosts file";
    } else if (config.bootstrap.dns().resolvers_size() > 0) {
      source = "the name servers of dns.resolvers";
    } else {
      source = "the name servers of /etc/resolv.conf";
    }
  }
  return status;
}

std::string ruleText(const policy::Rule& rule) {
  return absl::StrFormat("%s (%s)", rule.name, policy::actionName(rule.action));
}

}  // namespace

int explainPolicy(const ServerConfig& config, const PolicyExplainRequest& request,
                  std::string& out) {
  std::string host;
  uint16_t port = 0;
  if (!splitTarget(request.target, host, port)) {
    out += absl::StrFormat("sluice: \"%s\" is not HOST:PORT (IPv6 as [ADDRESS]:PORT)\n",
                           request.target);
    return kExplainUsage;
  }
  policy::Kind kind = policy::Kind::Connect;
  if (!request.kind.empty() && !policy::parseKind(request.kind, kind)) {
    out += absl::StrFormat(
        "sluice: --kind \"%s\": one of http, connect, websocket, socks5-connect, socks5-udp, "
        "socks5-bind\n",
        request.kind);
    return kExplainUsage;
  }

  // The first list of request filters (of the named listener) that accepts the key.
  const ListenerConfig* listener = nullptr;
  const policy::FilterListPolicy* list = nullptr;
  const policy::Group* group = nullptr;
  bool listener_found = false;
  for (const ListenerConfigSharedPtr& l : config.listeners) {
    if (!request.listener.empty() && l->name != request.listener) continue;
    listener_found = true;
    for (const policy::FilterListPolicySharedPtr& candidate : l->filter_lists) {
      for (const policy::KeyGroup& key : candidate->keys) {
        if (key.name != request.key_name) continue;
        listener = l.get();
        list = candidate.get();
        group = key.group;
        break;
      }
      if (list != nullptr) break;
    }
    if (list != nullptr) break;
  }
  if (!listener_found) {
    out += absl::StrFormat("sluice: no listener named \"%s\"\n", request.listener);
    return kExplainUsage;
  }
  if (list == nullptr) {
    out += absl::StrFormat(
        "sluice: no API key named \"%s\"%s (keys are named by "
        "auth.api_keys[].name, or key<N>)\n",
        request.key_name,
        request.listener.empty() ? std::string(" on any listener")
                                 : absl::StrFormat(" on listener \"%s\"", request.listener));
    return kExplainUsage;
  }
  if (group == nullptr) group = &config.policy->defaultGroup();
  const policy::RuleSet* rules = group->rules.inactive() ? nullptr : &group->rules;
  const policy::DestinationGuard* guard = list->guard.get();
  const bool datagram = kind == policy::Kind::Socks5Udp;

  network::Address literal;
  std::string_view zone;
  const bool is_literal = network::parseIpLiteral(host, literal, &zone);
  const policy::Destination destination{is_literal ? std::string_view() : std::string_view(host),
                                        port, kind};

  out += absl::StrFormat("key:         %s (group %s%s)\n", request.key_name, group->name,
                         rules == nullptr      ? ", no rules"
                         : rules->reportOnly() ? ", report-only"
                                               : "");
  out += absl::StrFormat("listener:    %s\n", listener->name);
  out += absl::StrFormat("destination: %s port %d, kind %s%s\n", host, port, policy::kindName(kind),
                         is_literal ? " (an IP address: host patterns do not match it)" : "");

  // What refuses, as sluice.dest_guard applies it: a rule (unless report-only), then the guard.
  std::string refused;
  std::string report_only;
  auto byRule = [&](const policy::Rule& rule) {
    if (rules->reportOnly()) {
      if (report_only.empty()) report_only = rule.name;
    } else if (refused.empty()) {
      refused = "policy rule " + rule.name;
    }
  };
  auto finish = [&]() {
    if (!refused.empty()) {
      out += absl::StrFormat("decision:    refused: %s (HTTP 403, SOCKS5 reply 0x02)\n", refused);
      return kExplainRefused;
    }
    if (!report_only.empty()) {
      out += absl::StrFormat(
          "decision:    allowed: report-only, rule %s would refuse it (counted in "
          "policy.group.%s.report_only and logged with the rule)\n",
          report_only, group->name);
    } else {
      out += "decision:    allowed\n";
    }
    return kExplainAllowed;
  };

  if (guard == nullptr) {
    out += "guard:       none (no sluice.dest_guard in the listener's request filters)\n";
  }
  const bool any_peer = kind == policy::Kind::Socks5Bind && is_literal && isUnspecified(literal);
  if (any_peer) {
    out += "             a BIND for any peer: the built-in guard has nothing to check\n";
  } else if (guard != nullptr && !guard->portRefusal(port).empty()) {
    out += absl::StrFormat("port:        %d refused by the guard: %s\n", port,
                           guard->portRefusal(port));
    refused = std::string(guard->portRefusal(port));
    return finish();
  }

  policy::NameCheck check;
  if (rules == nullptr) {
    out +=
        absl::StrFormat("rules:       none: group %s allows what the guard allows\n", group->name);
  } else {
    check = rules->checkName(destination);
    if (!check.needsAddresses()) {
      out += absl::StrFormat("rules:       %s decides for every address, before any lookup\n",
                             ruleText(*check.decided));
      if (check.decided->action == policy::Action::Deny) {
        byRule(*check.decided);
        if (!rules->reportOnly()) return finish();
      }
    } else {
      out += absl::StrFormat("rules:       %s has cidrs: each address decides\n",
                             ruleText(rules->rules()[check.from]));
    }
  }
  if (any_peer) {
    if (rules != nullptr && check.needsAddresses()) {
      out +=
          "             the rules that need an address are checked on the peer that "
          "connects\n";
    }
    return finish();
  }

  std::vector<network::Address> addresses;
  if (is_literal) {
    literal.setPort(port);
    addresses.push_back(literal);
  } else {
    std::string source;
    const absl::Status status = resolve(config, host, addresses, source);
    if (!status.ok() || addresses.empty()) {
      out += absl::StrFormat("addresses:   %s does not resolve: %s\n", host,
                             status.ok() ? "no addresses" : std::string(status.message()));
      refused = "the name does not resolve (HTTP 502, SOCKS5 reply 0x04)";
      out += absl::StrFormat("decision:    refused: %s\n", refused);
      return kExplainRefused;
    }
    out += absl::StrFormat("addresses:   %d, from %s\n", addresses.size(), source);
  }

  // The rules first, over every address (a refusal of any one refuses the request), then the
  // built-in guard on each, opened where an allow rule matched by cidrs.
  std::vector<policy::Decision> decisions;
  for (const network::Address& a : addresses) {
    if (rules != nullptr) decisions.push_back(rules->checkAddress(destination, check, a));
  }
  for (const policy::Decision& d : decisions) {
    if (!d.allows()) byRule(*d.rule);
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    network::Address a = addresses[i];
    a.setPort(port);
    std::string line = absl::StrFormat("  %s:", a.ipString());
    bool opened = false;
    if (rules != nullptr) {
      const policy::Decision& d = decisions[i];
      // A report-only group's rules open nothing.
      opened = d.opens() && !rules->reportOnly();
      line += absl::StrFormat(" rule %s%s%s;", ruleText(*d.rule), d.by_cidr ? " by cidr" : "",
                              opened ? ", opening its cidrs" : "");
    }
    if (guard != nullptr) {
      const std::string_view why =
          guard->addressRefusal(a, datagram, opened ? &decisions[i].rule->cidrs : nullptr);
      line += absl::StrFormat(" guard: %s", why.empty() ? std::string_view("allowed") : why);
      // A rule's refusal (set above) comes first, whatever the guard says.
      if (!why.empty() && refused.empty()) refused = std::string(why);
    }
    out += line + "\n";
  }
  return finish();
}

}  // namespace server
}  // namespace sluice
