#include "source/common/upstream/routes.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

#include "source/common/common/duration.h"
#include "source/common/network/ip_literal.h"
#include "source/common/policy/policy.h"
#include "source/common/tls/context.h"
#include "source/common/tls/tls_socket.h"

namespace sluice {
namespace upstream {
namespace {

absl::Status pathError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, what));
}

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The parent's credentials, from the config or its credentials_file ("username:password").
absl::Status loadCredentials(const config::v1::Parent& in, const std::string& path, Parent& out) {
  std::string user = in.username();
  std::string password = in.password();
  if (!in.credentials_file().empty()) {
    if (!user.empty() || !password.empty()) {
      return pathError(path + ".credentials_file",
                       "set either credentials_file or username and password, not both");
    }
    std::ifstream file(in.credentials_file());
    std::string line;
    if (!file || !std::getline(file, line)) {
      return pathError(path + ".credentials_file",
                       absl::StrFormat("%s: cannot be read", in.credentials_file()));
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      // Never quoted: the line may be a password.
      return pathError(path + ".credentials_file",
                       absl::StrFormat("%s: the first line is not \"username:password\"",
                                       in.credentials_file()));
    }
    user = line.substr(0, colon);
    password = line.substr(colon + 1);
  }
  if (user.size() > 255 || password.size() > 255) {
    return pathError(path, "username and password are at most 255 bytes each");
  }
  for (const std::string* field : {&user, &password}) {
    for (char c : *field) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return pathError(path, "username and password must not contain control characters");
      }
    }
  }
  if (!password.empty() && user.empty() && out.protocol == ParentProtocol::Socks5) {
    return pathError(path + ".username", "a SOCKS5 parent's password needs a username");
  }
  if (out.protocol == ParentProtocol::Http && user.find(':') != std::string::npos) {
    return pathError(path + ".username", "an HTTP parent's username cannot hold ':' (Basic)");
  }
  out.auth.user = std::move(user);
  out.auth.password = std::move(password);
  if (!out.auth.empty() && out.protocol == ParentProtocol::Http) {
    out.auth.proxy_authorization =
        "Basic " + absl::Base64Escape(out.auth.user + ":" + out.auth.password);
  }
  return absl::OkStatus();
}

// An https parent's TLS: its CAs, the name (or address) its certificate must hold, HTTP/1.1
// offered by ALPN (what sluice speaks to it).
absl::Status buildTls(const config::v1::Parent& in, const std::string& path,
                      const stats::Scope& scope, Parent& parent) {
  tls::ClientContextConfig config;
  if (!in.ca_file().empty()) config.ca_file = in.ca_file();
  config.server_name = !in.server_name().empty() ? in.server_name()
                       : parent.literal.valid()  ? parent.literal.ipString()
                                                 : parent.host;
  config.alpn = {"http/1.1"};
  config.stats_scope = scope.scope("tls");
  auto context = tls::ClientContext::create(config);
  if (!context.ok()) {
    const std::string message(context.status().message());
    if (in.server_name().empty() && absl::StartsWith(message, "server_name:")) {
      return pathError(path + ".address",
                       absl::StrFormat("\"%s\" is no name a certificate can hold: set server_name",
                                       absl::CHexEscape(parent.host)));
    }
    // Its errors start with the field they concern ("ca_file: ...").
    return absl::InvalidArgumentError(absl::StrFormat("%s.%s", path, message));
  }
  parent.ca_file = config.ca_file;
  parent.server_name = config.server_name;
  parent.transport = std::make_shared<tls::ClientTlsSocketFactory>(std::move(*context));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Parent>> buildParent(const config::v1::Parent& in,
                                                    const std::string& path) {
  auto parent = std::make_unique<Parent>();
  if (!validName(in.name())) {
    return pathError(
        path + ".name",
        absl::StrFormat("\"%s\" must be 1 to 64 letters, digits, '_' or '-'", in.name()));
  }
  parent->name = in.name();
  if (in.protocol() == "http") {
    parent->protocol = ParentProtocol::Http;
  } else if (in.protocol() == "socks5") {
    parent->protocol = ParentProtocol::Socks5;
  } else if (in.protocol() == "https") {
    parent->protocol = ParentProtocol::Http;  // inside TLS, made below
  } else {
    return pathError(path + ".protocol",
                     absl::StrFormat("\"%s\" is not one of http, https, socks5", in.protocol()));
  }
  const bool https = in.protocol() == "https";
  if (!https && !in.ca_file().empty())
    return pathError(path + ".ca_file", "only for https parents");
  if (!https && !in.server_name().empty()) {
    return pathError(path + ".server_name", "only for https parents");
  }
  std::string_view host;
  uint16_t port = 0;
  absl::Status split = network::splitHostPort(in.address(), 0, host, port);
  if (!split.ok() || host.empty() || port == 0) {
    return pathError(path + ".address", absl::StrFormat("\"%s\" is not host:port", in.address()));
  }
  parent->host = std::string(host);
  parent->port = port;
  if (network::parseIpLiteral(parent->host, parent->literal)) parent->literal.setPort(port);
  if (in.proxy_protocol() == "v1") {
    parent->proxy_protocol = 1;
  } else if (in.proxy_protocol() == "v2") {
    parent->proxy_protocol = 2;
  } else if (!in.proxy_protocol().empty() && in.proxy_protocol() != "none") {
    return pathError(path + ".proxy_protocol",
                     absl::StrFormat("\"%s\" is not one of none, v1, v2", in.proxy_protocol()));
  }
  absl::Status credentials = loadCredentials(in, path, *parent);
  if (!credentials.ok()) return credentials;
  if (in.max_failures() > 1000) return pathError(path + ".max_failures", "at most 1000");
  if (in.max_failures() != 0) parent->max_failures = in.max_failures();
  parent->unhealthy_for =
      durationOr(in.has_unhealthy_for(), in.unhealthy_for(), parent->unhealthy_for);
  const stats::Scope scope = stats::Scope("upstream").scope("parent", "parent", parent->name);
  parent->stats.requests = scope.counter("requests", "Requests sent through the parent proxy.");
  parent->stats.failures =
      scope.counter("failures", "Connects to the parent proxy, or its handshakes, that failed.");
  parent->stats.unhealthy = scope.counter(
      "unhealthy", "Times the parent proxy was skipped after max_failures failures in a row.");
  parent->stats.skipped =
      scope.counter("skipped", "Requests that passed the parent proxy by while it was unhealthy.");
  if (https) {
    absl::Status tls = buildTls(in, path, scope, *parent);
    if (!tls.ok()) return tls;
  }
  return parent;
}

}  // namespace

ParentHealth::ParentHealth()
    : id_([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
      }()) {}

bool ParentHealth::recordFailure(event::MonotonicTime now, uint32_t max_failures,
                                 std::chrono::milliseconds skip_for) {
  const uint32_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures < max_failures) return false;
  failures_.store(0, std::memory_order_relaxed);
  const auto until = now + skip_for;
  unhealthy_until_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  return true;
}

bool Route::matchesName(const proxy::ProxyRequest& request) const {
  if (!ports.empty()) {
    bool any = false;
    for (const network::PortRange& range : ports) any |= range.contains(request.port);
    if (!any) return false;
  }
  if (!groups.empty()) {
    if (request.group == nullptr) return false;
    bool any = false;
    for (const std::string& group : groups) any |= group == request.group->name;
    if (!any) return false;
  }
  if (!hosts.empty()) {
    // A host pattern never matches a destination given as an address.
    network::Address literal;
    if (network::parseIpLiteral(request.host, literal)) return false;
    bool any = false;
    for (const policy::HostPattern& pattern : hosts) {
      if (pattern.matches(request.host)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

bool Route::matches(const proxy::ProxyRequest& request, uint32_t& address) const {
  address = 0;
  if (!matchesName(request)) return false;
  if (cidrs.empty()) return true;
  for (uint32_t i = 0; i < request.pinned_count; ++i) {
    for (const network::CidrRange& range : cidrs) {
      if (range.contains(request.pinned[i])) {
        address = i;
        return true;
      }
    }
  }
  return false;
}

const Route* Routes::match(const proxy::ProxyRequest& request, uint32_t& address) const {
  for (const std::unique_ptr<Route>& route : routes_) {
    if (route->matches(request, address)) return route.get();
  }
  return nullptr;
}

const Route* Routes::resolvedByParent(const proxy::ProxyRequest& request) const {
  for (const std::unique_ptr<Route>& route : routes_) {
    if (!route->matchesName(request)) continue;
    // A route that may match by address comes first: only a lookup can tell.
    if (!route->cidrs.empty()) return nullptr;
    return route->resolve_at_parent && !route->parents.empty() ? route.get() : nullptr;
  }
  return nullptr;
}

RoutesSharedPtr Routes::none() {
  static const RoutesSharedPtr* routes = new RoutesSharedPtr(std::make_shared<Routes>());
  return *routes;
}

absl::StatusOr<RoutesSharedPtr> buildRoutes(const config::v1::Bootstrap& bootstrap,
                                            const Routes* running) {
  auto routes = std::make_shared<Routes>();
  for (int i = 0; i < bootstrap.parents_size(); ++i) {
    const std::string path = absl::StrFormat("parents[%d]", i);
    auto parent = buildParent(bootstrap.parents(i), path);
    if (!parent.ok()) return parent.status();
    for (const std::unique_ptr<Parent>& other : routes->parents_) {
      if (other->name == (*parent)->name) {
        return pathError(path + ".name", absl::StrFormat("\"%s\" is used twice", (*parent)->name));
      }
    }
    if (running != nullptr) {
      for (const std::unique_ptr<Parent>& old : running->parents_) {
        if (old->name == (*parent)->name && old->host == (*parent)->host &&
            old->port == (*parent)->port && old->protocol == (*parent)->protocol &&
            (old->transport == nullptr) == ((*parent)->transport == nullptr) &&
            old->ca_file == (*parent)->ca_file && old->server_name == (*parent)->server_name) {
          (*parent)->health = old->health;
        }
      }
    }
    if ((*parent)->health == nullptr) (*parent)->health = std::make_shared<ParentHealth>();
    routes->parents_.push_back(std::move(*parent));
  }
  std::vector<bool> used(routes->parents_.size(), false);
  for (int i = 0; i < bootstrap.routes_size(); ++i) {
    const config::v1::Route& in = bootstrap.routes(i);
    const std::string path = absl::StrFormat("routes[%d]", i);
    auto route = std::make_unique<Route>();
    route->name = in.name().empty() ? path : in.name();
    if (!in.name().empty() && !validName(in.name())) {
      return pathError(
          path + ".name",
          absl::StrFormat("\"%s\" must be 1 to 64 letters, digits, '_' or '-'", in.name()));
    }
    for (int j = 0; j < in.hosts_size(); ++j) {
      auto pattern = policy::HostPattern::parse(in.hosts(j));
      if (!pattern.ok()) {
        return pathError(absl::StrFormat("%s.hosts[%d]", path, j),
                         std::string(pattern.status().message()));
      }
      route->hosts.push_back(std::move(*pattern));
    }
    for (int j = 0; j < in.cidrs_size(); ++j) {
      auto range = network::CidrRange::parse(in.cidrs(j));
      if (!range.ok()) {
        return pathError(absl::StrFormat("%s.cidrs[%d]", path, j),
                         std::string(range.status().message()));
      }
      route->cidrs.push_back(*range);
    }
    for (int j = 0; j < in.ports_size(); ++j) {
      auto range = network::parsePortRange(in.ports(j));
      if (!range.ok()) {
        return pathError(absl::StrFormat("%s.ports[%d]", path, j),
                         std::string(range.status().message()));
      }
      route->ports.push_back(*range);
    }
    for (int j = 0; j < in.groups_size(); ++j) {
      bool known = in.groups(j) == policy::kDefaultGroup;
      for (const config::v1::Group& group : bootstrap.policy().groups()) {
        known |= group.name() == in.groups(j);
      }
      if (!known) {
        return pathError(absl::StrFormat("%s.groups[%d]", path, j),
                         absl::StrFormat("\"%s\" is not a group of policy.groups", in.groups(j)));
      }
      route->groups.push_back(in.groups(j));
    }
    for (int j = 0; j < in.parents_size(); ++j) {
      const Parent* found = nullptr;
      for (size_t k = 0; k < routes->parents_.size(); ++k) {
        if (routes->parents_[k]->name == in.parents(j)) {
          found = routes->parents_[k].get();
          used[k] = true;
        }
      }
      if (found == nullptr) {
        return pathError(absl::StrFormat("%s.parents[%d]", path, j),
                         absl::StrFormat("\"%s\" is not one of parents", in.parents(j)));
      }
      for (const Parent* other : route->parents) {
        if (other == found) {
          return pathError(absl::StrFormat("%s.parents[%d]", path, j),
                           absl::StrFormat("\"%s\" is listed twice", in.parents(j)));
        }
      }
      route->parents.push_back(found);
    }
    if (in.balance().empty() || in.balance() == "failover") {
      route->balance = Balance::Failover;
    } else if (in.balance() == "round_robin") {
      route->balance = Balance::RoundRobin;
    } else {
      return pathError(path + ".balance",
                       absl::StrFormat("\"%s\" is not one of failover, round_robin", in.balance()));
    }
    if (in.resolve() == "parent") {
      if (!route->cidrs.empty()) {
        return pathError(path + ".resolve",
                         "\"parent\" cannot go with cidrs: sluice does not resolve the name");
      }
      if (route->parents.empty()) {
        return pathError(path + ".resolve", "\"parent\" needs parents");
      }
      route->resolve_at_parent = true;
    } else if (!in.resolve().empty() && in.resolve() != "local") {
      return pathError(path + ".resolve",
                       absl::StrFormat("\"%s\" is not one of local, parent", in.resolve()));
    }
    routes->routes_.push_back(std::move(route));
  }
  for (size_t k = 0; k < used.size(); ++k) {
    if (!used[k]) {
      return pathError(absl::StrFormat("parents[%d]", k),
                       absl::StrFormat("\"%s\" is in no route", routes->parents_[k]->name));
    }
  }
  return RoutesSharedPtr(std::move(routes));
}

}  // namespace upstream
}  // namespace sluice
