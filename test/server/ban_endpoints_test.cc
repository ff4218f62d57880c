#include "source/server/ban_endpoints.h"

#include <map>
#include <memory>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/ban/ban_table.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/server/admin.h"

namespace sluice {
namespace server {
namespace {

struct Response {
  int status = 0;
  std::string head;
  std::string body;
};

// One request with "Connection: close"; reads until the server closes.
Response roundTrip(const network::Address& address, const std::string& request) {
  Response r;
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, address.sockaddr_ptr(), address.length()) != 0) {
    ::close(fd);
    return r;
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

class ExtraEndpointsTest : public testing::Test {
 protected:
  void start(AdminHandlers handlers) {
    dispatcher_ = std::make_unique<event::Dispatcher>();
    admin_ = std::make_unique<Admin>(*dispatcher_, std::move(handlers));
    ASSERT_TRUE(admin_->bind(network::Address::ipv4(INADDR_LOOPBACK, 0)).ok());
    address_ = admin_->boundAddress();
    loop_ = std::thread([this] { dispatcher_->run(); });
  }
  void TearDown() override {
    if (loop_.joinable()) {
      dispatcher_->exit();
      loop_.join();
    }
    admin_.reset();
    dispatcher_.reset();
  }
  Response request(const std::string& method, const std::string& target,
                   const std::string& extra_headers = "") {
    return roundTrip(address_, method + " " + target +
                                   " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                   "Content-Length: 0\r\n" +
                                   extra_headers + "\r\n");
  }

  std::unique_ptr<event::Dispatcher> dispatcher_;
  std::unique_ptr<Admin> admin_;
  network::Address address_;
  std::thread loop_;
};

TEST_F(ExtraEndpointsTest, ServedWithMethodRulesAndDecodedQuery) {
  AdminHandlers handlers;
  std::map<std::string, std::string> seen;
  AdminEndpoint get;
  get.help = "a getter";
  get.handler = [](const std::map<std::string, std::string>&) {
    return AdminEndpoint::Response{200, "{\"x\":1}\n", true};
  };
  handlers.extra["/thing"] = get;
  AdminEndpoint post;
  post.method = AdminEndpoint::Method::Post;
  post.help = "a poster";
  post.handler = [&seen](const std::map<std::string, std::string>& query) {
    seen = query;
    return AdminEndpoint::Response{404, "nope\n", false};
  };
  handlers.extra["/thing/do"] = post;
  // A built-in path cannot be taken over.
  AdminEndpoint health;
  health.handler = [](const std::map<std::string, std::string>&) {
    return AdminEndpoint::Response{500, "hijacked", false};
  };
  handlers.extra["/health"] = health;
  start(std::move(handlers));

  Response index = request("GET", "/");
  EXPECT_NE(std::string::npos, index.body.find("/thing "));
  EXPECT_NE(std::string::npos, index.body.find("/thing/do          POST: a poster"));

  Response r = request("GET", "/thing?ignored=1");
  EXPECT_EQ(200, r.status);
  EXPECT_EQ("{\"x\":1}\n", r.body);
  EXPECT_NE(std::string::npos, r.head.find("Content-Type: application/json"));
  Response head = request("HEAD", "/thing");
  EXPECT_EQ(200, head.status);
  EXPECT_EQ("", head.body);
  EXPECT_EQ(405, request("POST", "/thing").status);
  EXPECT_EQ(404, request("GET", "/thing/").status);
  EXPECT_EQ(404, request("GET", "/thingx").status);
  EXPECT_EQ(200, request("GET", "/health").status);

  EXPECT_EQ(405, request("GET", "/thing/do").status);
  EXPECT_EQ(403, request("POST", "/thing/do?addr=1", "Origin: http://evil.example\r\n").status);
  EXPECT_TRUE(seen.empty());
  Response p = request("POST", "/thing/do?addr=%3A%3A1&b=2&addr=second");
  EXPECT_EQ(404, p.status);
  EXPECT_EQ("nope\n", p.body);
  EXPECT_NE(std::string::npos, p.head.find("Content-Type: text/plain"));
  EXPECT_EQ("::1", seen["addr"]);  // decoded; the first of repeated names
  EXPECT_EQ("2", seen["b"]);
}

class BanEndpointsTest : public ExtraEndpointsTest {
 protected:
  void startWith(std::shared_ptr<ban::BanTable> table) {
    AdminHandlers handlers;
    addBanEndpoints([table] { return table; }, handlers.extra);
    start(std::move(handlers));
  }
  Response unban(const std::string& addr) { return request("POST", "/bans/unban?addr=" + addr); }
};

network::Address ip(const char* text) { return *network::Address::parseIp(text, 0); }

TEST_F(BanEndpointsTest, ListsAndLiftsBans) {
  ban::BanOptions options;
  options.max_failures = 1;
  auto table = std::make_shared<ban::BanTable>(options, ban::BanStats());
  table->recordFailure(ip("192.0.2.7"), "invalid proxy credentials");
  table->recordFailure(ip("2001:db8:1:2::5"), "invalid \"quoted\" reason");
  startWith(table);

  Response list = request("GET", "/bans");
  EXPECT_EQ(200, list.status);
  EXPECT_NE(std::string::npos, list.head.find("application/json"));
  EXPECT_EQ(0u, list.body.find("{\"enabled\":true,\"bans\":[{\"address\":\"192.0.2.7\","
                               "\"failures\":1,\"expires_in_seconds\":"))
      << list.body;
  EXPECT_NE(std::string::npos, list.body.find("\"address\":\"2001:db8:1:2::/64\""));
  EXPECT_NE(std::string::npos, list.body.find("\"reason\":\"invalid \\\"quoted\\\" reason\""));
  EXPECT_NE(std::string::npos, list.body.find("\"tracked\":2}"));
  EXPECT_EQ(405, request("POST", "/bans").status);

  EXPECT_EQ(400, request("POST", "/bans/unban").status);
  EXPECT_EQ(400, unban("").status);
  EXPECT_EQ(400, unban("example.com").status);
  EXPECT_EQ(400, unban("192.0.2.7:80").status);
  EXPECT_EQ(400, unban("192.0.2.7/24").status);
  EXPECT_EQ(400, unban("2001:db8:1:2::/56").status);
  EXPECT_EQ(400, unban("[2001:db8:1:2::5]").status);
  EXPECT_TRUE(table->isBanned(ip("192.0.2.7")));

  Response missing = unban("192.0.2.8");
  EXPECT_EQ(404, missing.status);
  EXPECT_EQ("{\"error\":\"192.0.2.8 is not banned\"}\n", missing.body);

  Response lifted = unban("192.0.2.7");
  EXPECT_EQ(200, lifted.status);
  EXPECT_EQ("{\"unbanned\":\"192.0.2.7\"}\n", lifted.body);
  EXPECT_FALSE(table->isBanned(ip("192.0.2.7")));
  EXPECT_EQ(404, unban("192.0.2.7").status);

  // Another address of the banned /64 lifts the prefix's ban; the printed form works too.
  Response v6 = unban("2001%3Adb8%3A1%3A2%3A%3Affff");
  EXPECT_EQ(200, v6.status) << v6.body;
  EXPECT_EQ("{\"unbanned\":\"2001:db8:1:2::/64\"}\n", v6.body);
  table->recordFailure(ip("2001:db8:1:2::5"), "x");
  EXPECT_EQ(200, unban("2001:db8:1:2::/64").status);
  EXPECT_FALSE(table->anyBanned());
  // The aggregate length names the range around the address: not banned here.
  Response range = unban("2001:db8:1:2::/48");
  EXPECT_EQ(404, range.status);
  EXPECT_EQ("{\"error\":\"2001:db8:1::/48 is not banned\"}\n", range.body);
  EXPECT_EQ("{\"enabled\":true,\"bans\":[],\"tracked\":0}\n", request("GET", "/bans").body);
}

TEST_F(BanEndpointsTest, AggregateBansAreListedAndLifted) {
  ban::BanOptions options;
  options.max_failures = 1;
  auto table = std::make_shared<ban::BanTable>(options, ban::BanStats());
  for (const char* block : {"2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"}) {
    table->recordFailure(ip(block), "invalid proxy credentials");
  }
  startWith(table);
  Response list = request("GET", "/bans");
  EXPECT_EQ(0u, list.body.find("{\"enabled\":true,\"bans\":[{\"address\":\"2001:db8:1::/48\","
                               "\"failures\":3,\"expires_in_seconds\":"))
      << list.body;
  EXPECT_NE(std::string::npos,
            list.body.find("\"reason\":\"3 of its /64 blocks banned: invalid proxy "
                           "credentials\"}],\"tracked\":1}"))
      << list.body;
  // The /64 of an address inside is not banned by itself...
  Response block = unban("2001:db8:1:7::/64");
  EXPECT_EQ(404, block.status);
  EXPECT_EQ("{\"error\":\"2001:db8:1:7::/64 is not banned\"}\n", block.body);
  // ...but the range around it is, by any address of it or by its own name.
  Response lifted = unban("2001:db8:1:7::1");
  EXPECT_EQ(200, lifted.status);
  EXPECT_EQ("{\"unbanned\":\"2001:db8:1::/48\"}\n", lifted.body);
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:1::1")));
  for (const char* b : {"2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"}) {
    table->recordFailure(ip(b), "x");
  }
  EXPECT_EQ(200, unban("2001:db8:1::/48").status);
  EXPECT_FALSE(table->anyBanned());
}

TEST_F(BanEndpointsTest, DisabledBans) {
  startWith(nullptr);
  Response list = request("GET", "/bans");
  EXPECT_EQ(200, list.status);
  EXPECT_EQ("{\"enabled\":false,\"bans\":[],\"tracked\":0}\n", list.body);
  EXPECT_EQ(404, unban("192.0.2.7").status);
  EXPECT_EQ(400, unban("nope").status);
}

}  // namespace
}  // namespace server
}  // namespace sluice
