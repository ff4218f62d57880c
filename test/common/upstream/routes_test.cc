#include "source/common/upstream/routes.h"

#include <fstream>

#include "gtest/gtest.h"

#include "source/common/policy/policy.h"
#include "source/common/tls/context.h"
#include "source/common/tls/tls_socket.h"

namespace sluice {
namespace upstream {
namespace {

config::v1::Parent* addParent(config::v1::Bootstrap& b, const char* name, const char* address,
                              const char* protocol = "http") {
  config::v1::Parent* p = b.add_parents();
  p->set_name(name);
  p->set_address(address);
  p->set_protocol(protocol);
  return p;
}

config::v1::Route* addRoute(config::v1::Bootstrap& b, std::initializer_list<const char*> parents) {
  config::v1::Route* r = b.add_routes();
  for (const char* p : parents) r->add_parents(p);
  return r;
}

std::string error(const config::v1::Bootstrap& b) {
  auto routes = buildRoutes(b);
  return routes.ok() ? "" : std::string(routes.status().message());
}

proxy::ProxyRequest requestTo(const char* address) {
  proxy::ProxyRequest r;
  r.pinned[0] = *network::Address::parseHostPort(address);
  r.pinned_count = 1;
  r.port = r.pinned[0].port();
  return r;
}

TEST(RoutesTest, NoneRoutesNothing) {
  auto routes = buildRoutes(config::v1::Bootstrap());
  ASSERT_TRUE(routes.ok());
  EXPECT_TRUE((*routes)->empty());
  EXPECT_TRUE(Routes::none()->empty());
}

TEST(RoutesTest, ParentsAndTheirCredentials) {
  config::v1::Bootstrap b;
  config::v1::Parent* http = addParent(b, "squid", "127.0.0.1:3128");
  http->set_username("user");
  http->set_password("pass");
  addParent(b, "dante", "[::1]:1080", "socks5");
  addParent(b, "named", "parent.example:8080");
  addRoute(b, {"squid", "dante", "named"});
  auto routes = buildRoutes(b);
  ASSERT_TRUE(routes.ok()) << routes.status();
  const auto& parents = (*routes)->parents();
  ASSERT_EQ(parents.size(), 3u);
  EXPECT_EQ(parents[0]->auth.proxy_authorization, "Basic dXNlcjpwYXNz");
  EXPECT_EQ(parents[0]->literal.asString(), "127.0.0.1:3128");
  EXPECT_EQ(parents[1]->protocol, ParentProtocol::Socks5);
  EXPECT_TRUE(parents[1]->auth.proxy_authorization.empty());
  EXPECT_EQ(parents[1]->literal.asString(), "[::1]:1080");
  EXPECT_FALSE(parents[2]->literal.valid());
  EXPECT_EQ(parents[2]->host, "parent.example");
  EXPECT_EQ(parents[2]->port, 8080);
  EXPECT_EQ(parents[2]->max_failures, 3u);
  EXPECT_EQ(parents[2]->unhealthy_for, std::chrono::seconds(30));
}

TEST(RoutesTest, CredentialsFromAFile) {
  const std::string path = testing::TempDir() + "/parent-credentials";
  std::ofstream(path) << "fileuser:file:pass\r\n";
  config::v1::Bootstrap b;
  addParent(b, "p", "127.0.0.1:1080", "socks5")->set_credentials_file(path);
  addRoute(b, {"p"});
  auto routes = buildRoutes(b);
  ASSERT_TRUE(routes.ok()) << routes.status();
  EXPECT_EQ((*routes)->parents()[0]->auth.user, "fileuser");
  EXPECT_EQ((*routes)->parents()[0]->auth.password, "file:pass");

  std::ofstream(path) << "no-colon-secret\n";
  auto bad = buildRoutes(b);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("parents[0].credentials_file"), std::string::npos);
  EXPECT_EQ(bad.status().message().find("no-colon-secret"), std::string::npos)
      << "the line may be a secret: never quoted";
}

TEST(RoutesTest, ErrorsNameTheirPathAndNeverTheSecret) {
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1", "ftp");
    addRoute(b, {"p"});
    EXPECT_EQ(error(b), "parents[0].protocol: \"ftp\" is not one of http, https, socks5");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    addParent(b, "p", "127.0.0.1:2");
    addRoute(b, {"p"});
    EXPECT_EQ(error(b), "parents[1].name: \"p\" is used twice");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    EXPECT_EQ(error(b), "parents[0]: \"p\" is in no route");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    addRoute(b, {"p", "p"});
    EXPECT_EQ(error(b), "routes[0].parents[1]: \"p\" is listed twice");
  }
  {
    config::v1::Bootstrap b;
    config::v1::Parent* p = addParent(b, "p", "127.0.0.1:1");
    p->set_username("a:b");
    p->set_password("Secret-1");
    addRoute(b, {"p"});
    EXPECT_EQ(error(b), "parents[0].username: an HTTP parent's username cannot hold ':' (Basic)");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1", "socks5")->set_password(std::string(256, 'x'));
    addRoute(b, {"p"});
    EXPECT_EQ(error(b), "parents[0]: username and password are at most 255 bytes each");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    addRoute(b, {"p"})->add_cidrs("10.0.0.1/8");
    EXPECT_NE(error(b).find("routes[0].cidrs[0]"), std::string::npos);
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    addRoute(b, {"p"})->set_resolve("maybe");
    EXPECT_EQ(error(b), "routes[0].resolve: \"maybe\" is not one of local, parent");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    config::v1::Route* r = addRoute(b, {"p"});
    r->set_resolve("parent");
    r->add_cidrs("10.0.0.0/8");
    EXPECT_EQ(
        error(b),
        "routes[0].resolve: \"parent\" cannot go with cidrs: sluice does not resolve the name");
  }
  {
    config::v1::Bootstrap b;
    addParent(b, "p", "127.0.0.1:1");
    addRoute(b, {"p"})->add_hosts("exa*mple.com");
    EXPECT_NE(error(b).find("routes[0].hosts[0]: "), std::string::npos) << error(b);
  }
}

TEST(RoutesTest, HttpsParentsSpeakHttpInsideTls) {
  const std::string ca = testing::TempDir() + "/parent-ca.pem";
  {
    // Any PEM certificate will do as a CA here: the context only loads it.
    std::ifstream system(tls::kSystemCaFile);
    std::ofstream(ca) << system.rdbuf();
  }
  config::v1::Bootstrap b;
  addParent(b, "plain", "127.0.0.1:3128");
  addParent(b, "byname", "parent.example:8443", "https")->set_ca_file(ca);
  config::v1::Parent* byip = addParent(b, "byip", "[::1]:8443", "https");
  byip->set_server_name("parent.example");
  addParent(b, "system", "127.0.0.1:8443", "https");
  addParent(b, "system6", "[::1]:8443", "https");
  addRoute(b, {"plain", "byname", "byip", "system", "system6"});
  auto routes = buildRoutes(b);
  ASSERT_TRUE(routes.ok()) << routes.status();
  const auto& parents = (*routes)->parents();
  EXPECT_EQ(parents[0]->transport, nullptr);
  for (size_t i = 1; i < parents.size(); ++i) {
    EXPECT_EQ(parents[i]->protocol, ParentProtocol::Http) << i;
    ASSERT_NE(parents[i]->transport, nullptr) << i;
  }
  auto context = [&](size_t i) {
    return static_cast<const tls::ClientTlsSocketFactory&>(*parents[i]->transport).context();
  };
  EXPECT_EQ(context(1)->config().ca_file, ca);
  EXPECT_EQ(context(1)->config().server_name, "parent.example");
  EXPECT_EQ(context(2)->config().server_name, "parent.example");
  EXPECT_EQ(context(3)->config().server_name, "127.0.0.1");  // checked as an address
  EXPECT_EQ(context(3)->config().ca_file, tls::kSystemCaFile);
  EXPECT_EQ(context(3)->config().alpn, std::vector<std::string>{"http/1.1"});
  EXPECT_EQ(context(4)->config().server_name, "::1");

  // A reload that makes an http parent https (same name and address) starts its health over.
  b.mutable_parents(0)->set_protocol("https");
  auto second = buildRoutes(b, routes->get());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*second)->parents()[0]->health, parents[0]->health);
  EXPECT_EQ((*second)->parents()[1]->health, parents[1]->health);
  // So does one that changes what an https parent's certificate is checked against.
  b.mutable_parents(1)->set_server_name("other.example");
  b.mutable_parents(2)->set_ca_file(ca);
  auto third = buildRoutes(b, second->get());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NE((*third)->parents()[1]->health, (*second)->parents()[1]->health);
  EXPECT_NE((*third)->parents()[2]->health, (*second)->parents()[2]->health);
  EXPECT_EQ((*third)->parents()[3]->health, (*second)->parents()[3]->health);
}

TEST(RoutesTest, HttpsErrorsNameTheirPath) {
  auto one = [](const char* address, const char* protocol, const char* ca_file,
                const char* server_name) {
    config::v1::Bootstrap b;
    config::v1::Parent* p = addParent(b, "p", address, protocol);
    p->set_ca_file(ca_file);
    p->set_server_name(server_name);
    p->set_password("Secret-1");
    addRoute(b, {"p"});
    return error(b);
  };
  EXPECT_EQ(one("127.0.0.1:1", "http", "/ca.pem", ""),
            "parents[0].ca_file: only for https parents");
  EXPECT_EQ(one("127.0.0.1:1", "socks5", "", "x.test"),
            "parents[0].server_name: only for https parents");
  EXPECT_EQ(one("127.0.0.1:1", "https", "/no/such/ca.pem", ""),
            "parents[0].ca_file: cannot read /no/such/ca.pem: No such file or directory");
  EXPECT_EQ(one("127.0.0.1:1", "https", "", "bad name"),
            "parents[0].server_name: \"bad name\" is not a host name or an IP address");
  EXPECT_EQ(one("under_score.test:1", "https", "", ""),
            "parents[0].address: \"under_score.test\" is no name a certificate can hold: set "
            "server_name");
  EXPECT_EQ(one("under_score.test:1", "https", "", "parent.test"), "");
}

TEST(RoutesTest, FirstMatchingRouteByPortCidrAndGroup) {
  config::v1::Bootstrap b;
  b.mutable_policy()->add_groups()->set_name("ci");
  addParent(b, "a", "127.0.0.1:1");
  addParent(b, "b", "127.0.0.1:2");
  addRoute(b, {})->add_cidrs("10.0.0.0/8");  // direct for 10/8
  config::v1::Route* by_group = addRoute(b, {"a"});
  by_group->add_groups("ci");
  by_group->add_ports("443");
  config::v1::Route* by_cidr = addRoute(b, {"b"});
  by_cidr->add_cidrs("192.0.2.0/24");
  auto routes = buildRoutes(b);
  ASSERT_TRUE(routes.ok()) << routes.status();
  auto policy = policy::buildPolicy(b.policy());
  ASSERT_TRUE(policy.ok());

  uint32_t at = 99;
  proxy::ProxyRequest r = requestTo("10.1.2.3:443");
  r.group = (*policy)->find("ci");
  const Route* route = (*routes)->match(r, at);
  ASSERT_NE(route, nullptr);
  EXPECT_TRUE(route->parents.empty());

  r = requestTo("198.51.100.1:443");
  r.group = (*policy)->find("ci");
  route = (*routes)->match(r, at);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->parents[0]->name, "a");

  r.group = &(*policy)->defaultGroup();
  EXPECT_EQ((*routes)->match(r, at), nullptr);

  // The cidrs match any of the addresses; that one is asked for.
  r = requestTo("198.51.100.1:80");
  r.pinned[1] = *network::Address::parseHostPort("192.0.2.5:80");
  r.pinned_count = 2;
  route = (*routes)->match(r, at);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->parents[0]->name, "b");
  EXPECT_EQ(at, 1u);
}

TEST(RoutesTest, HostsAndWhichRoutesTheParentResolves) {
  config::v1::Bootstrap b;
  addParent(b, "a", "127.0.0.1:1");
  addParent(b, "b", "127.0.0.1:2");
  config::v1::Route* internal = addRoute(b, {"a"});
  internal->add_hosts(".corp.example");
  internal->set_resolve("parent");
  config::v1::Route* by_range = addRoute(b, {"b"});
  by_range->add_cidrs("192.0.2.0/24");
  addRoute(b, {"a"})->set_resolve("parent");  // everything else, named
  auto routes = buildRoutes(b);
  ASSERT_TRUE(routes.ok()) << routes.status();
  proxy::ProxyRequest r;
  r.host = "git.corp.example";
  r.port = 443;
  uint32_t at = 0;
  const Route* route = (*routes)->resolvedByParent(r);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->parents[0]->name, "a");
  EXPECT_EQ((*routes)->match(r, at), route);
  // Past a route with cidrs the name cannot tell: sluice resolves.
  r.host = "www.example.org";
  EXPECT_EQ((*routes)->resolvedByParent(r), nullptr);
  // An address is never a host pattern's.
  r.host = "192.0.2.1";
  r.pinned[0] = *network::Address::parseHostPort("192.0.2.1:443");
  r.pinned_count = 1;
  route = (*routes)->match(r, at);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->parents[0]->name, "b");
}

TEST(RoutesTest, HealthSkipsAfterMaxFailuresAndAReloadKeepsIt) {
  ParentHealth health;
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(health.healthy(now));
  EXPECT_FALSE(health.recordFailure(now, 2, std::chrono::seconds(10)));
  health.recordSuccess();
  EXPECT_FALSE(health.recordFailure(now, 2, std::chrono::seconds(10)));
  EXPECT_TRUE(health.healthy(now));
  EXPECT_TRUE(health.recordFailure(now, 2, std::chrono::seconds(10)));
  EXPECT_FALSE(health.healthy(now + std::chrono::seconds(9)));
  EXPECT_TRUE(health.healthy(now + std::chrono::seconds(10)));

  config::v1::Bootstrap b;
  addParent(b, "a", "127.0.0.1:1");
  addParent(b, "b", "127.0.0.1:2");
  addRoute(b, {"a", "b"});
  auto first = buildRoutes(b);
  ASSERT_TRUE(first.ok());
  b.mutable_parents(1)->set_address("127.0.0.1:3");
  auto second = buildRoutes(b, first->get());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->parents()[0]->health, (*first)->parents()[0]->health);
  EXPECT_NE((*second)->parents()[1]->health, (*first)->parents()[1]->health)
      << "a parent at another address starts healthy";
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
