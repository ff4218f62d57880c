#include "source/server/admin.h"

#include <atomic>
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "event2/event.h"
#include "gtest/gtest.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace server {
namespace {

struct Response {
  int status = 0;  // 0: no parsable answer (connection closed or timed out).
  std::map<std::string, std::string> headers;  // Names lowercased.
  std::string body;
  std::string raw;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Sends raw bytes and reads until the server closes (requests say "Connection: close").
std::string roundTrip(const network::Address& address, const std::string& request) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, address.sockaddr_ptr(), address.length()) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // The server may close early on oversized input; read what it said.
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Response parse(const std::string& raw) {
  Response r;
  r.raw = raw;
  size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  size_t line = raw.find("\r\n") + 2;
  while (line < end) {
    size_t next = raw.find("\r\n", line);
    std::string header = raw.substr(line, next - line);
    size_t colon = header.find(':');
    if (colon != std::string::npos) {
      size_t value = header.find_first_not_of(' ', colon + 1);
      r.headers[lower(header.substr(0, colon))] =
          value == std::string::npos ? "" : header.substr(value);
    }
    line = next + 2;
  }
  r.body = raw.substr(end + 4);
  return r;
}

class AdminTest : public testing::Test {
 protected:
  void SetUp() override {
    stats::Store::get().resetForTest();
    AdminHandlers handlers;
    handlers.ready = [this] { return ready_.load(); };
    handlers.config_dump = [] {
      return std::string("{\"listeners\":[],\"secret\":\"[redacted]\"}");
    };
    handlers.server_info = [] { return std::string("{\"version\":\"test\"}"); };
    handlers.listeners = [] { return std::string("[{\"name\":\"http\"}]"); };
    handlers.drain = [this] { drains_.fetch_add(1); };
    start(std::move(handlers));
  }

  void start(AdminHandlers handlers) {
    dispatcher_ = std::make_unique<event::Dispatcher>();
    admin_ = std::make_unique<Admin>(*dispatcher_, std::move(handlers));
    absl::Status status = admin_->bind(network::Address::ipv4(INADDR_LOOPBACK, 0));
    ASSERT_TRUE(status.ok()) << status;
    address_ = admin_->boundAddress();
    ASSERT_TRUE(address_.valid());
    ASSERT_NE(address_.port(), 0);
    loop_ = std::thread([this] { dispatcher_->run(); });
  }

  void stop() {
    if (loop_.joinable()) {
      dispatcher_->exit();
      loop_.join();
    }
    admin_.reset();
    dispatcher_.reset();
  }

  void TearDown() override { stop(); }

  Response request(const std::string& method, const std::string& target,
                   const std::string& extra_headers = "") {
    return parse(roundTrip(address_, method + " " + target +
                                         " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                                         extra_headers + "\r\n"));
  }
  Response get(const std::string& target) { return request("GET", target); }
  Response post(const std::string& target, const std::string& extra_headers = "") {
    return request("POST", target, "Content-Length: 0\r\n" + extra_headers);
  }

  std::atomic<bool> ready_{true};
  std::atomic<int> drains_{0};
  std::unique_ptr<event::Dispatcher> dispatcher_;
  std::unique_ptr<Admin> admin_;
  network::Address address_;
  std::thread loop_;
};

constexpr char kTextPlain[] = "text/plain; charset=utf-8";
constexpr char kJson[] = "application/json";
constexpr char kPrometheus[] = "text/plain; version=0.0.4; charset=utf-8";

TEST_F(AdminTest, IndexListsEndpoints) {
  Response r = get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], kTextPlain);
  for (const char* path : {"/ready", "/health", "/stats", "/stats/prometheus", "/config_dump",
                           "/server_info", "/listeners", "/drain"}) {
    EXPECT_NE(r.body.find(std::string(path) + " "), std::string::npos) << path;
  }
}

TEST_F(AdminTest, HealthAndReady) {
  Response health = get("/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  EXPECT_EQ(health.headers["content-type"], kTextPlain);

  Response ready = get("/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ready\n");
  ready_ = false;
  Response not_ready = get("/ready");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(not_ready.body, "not ready\n");
  // Health does not follow readiness.
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(AdminTest, StatsText) {
  stats::Store& store = stats::Store::get();
  stats::Counter cx = store.counter("listener.http.downstream_cx_total");
  stats::Gauge active = store.gauge("worker.0.downstream_cx_active");
  cx.add(7);
  // Updates from a worker thread's own shard are visible too.
  std::thread worker([&] {
    stats::Store::bindThreadShard(store.createShard());
    cx.add(5);
    active.add(-3);
  });
  worker.join();

  Response r = get("/stats");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], kTextPlain);
  EXPECT_EQ(r.body,
            "listener.http.downstream_cx_total: 12\n"
            "worker.0.downstream_cx_active: -3\n");
  EXPECT_EQ(get("/stats?format=text").body, r.body);
  EXPECT_EQ(r.headers["content-length"], std::to_string(r.body.size()));
}

TEST_F(AdminTest, StatsJsonAndFilter) {
  stats::Store& store = stats::Store::get();
  store.counter("auth.denied").add(2);
  store.counter("http1.http.rq_total").add(40);
  store.gauge("worker.1.downstream_cx_active").inc();

  Response json = get("/stats?format=json");
  EXPECT_EQ(json.status, 200);
  EXPECT_EQ(json.headers["content-type"], kJson);
  EXPECT_EQ(json.body,
            "{\"stats\":[{\"name\":\"auth.denied\",\"value\":2},"
            "{\"name\":\"http1.http.rq_total\",\"value\":40},"
            "{\"name\":\"worker.1.downstream_cx_active\",\"value\":1}],\"histograms\":[]}");

  EXPECT_EQ(get("/stats?filter=auth").body, "auth.denied: 2\n");
  // The filter is percent-decoded.
  EXPECT_EQ(get("/stats?filter=http%2Erq").body, "http1.http.rq_total: 40\n");
  EXPECT_EQ(get("/stats?format=json&filter=worker").body,
            "{\"stats\":[{\"name\":\"worker.1.downstream_cx_active\",\"value\":1}],"
            "\"histograms\":[]}");
  EXPECT_EQ(get("/stats?filter=nomatch").body, "");
  EXPECT_EQ(get("/stats?filter=nomatch").status, 200);
}

TEST_F(AdminTest, StatsBadQuery) {
  Response bad_format = get("/stats?format=xml");
  EXPECT_EQ(bad_format.status, 400);
  EXPECT_EQ(bad_format.headers["content-type"], kTextPlain);
  EXPECT_EQ(get("/stats?filter").status, 400);
  EXPECT_EQ(get("/stats?=x").status, 400);
}

TEST_F(AdminTest, Prometheus) {
  stats::Store& store = stats::Store::get();
  store.counter("auth.denied", "Requests denied.").add(3);
  stats::Scope("listener", "listener", "http").gauge("downstream_cx_active", "Open.").add(2);

  const std::string expected =
      "# HELP sluice_auth_denied_total Requests denied.\n"
      "# TYPE sluice_auth_denied_total counter\n"
      "sluice_auth_denied_total 3\n"
      "# HELP sluice_listener_downstream_cx_active Open.\n"
      "# TYPE sluice_listener_downstream_cx_active gauge\n"
      "sluice_listener_downstream_cx_active{listener=\"http\"} 2\n";
  Response r = get("/stats/prometheus");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], kPrometheus);
  EXPECT_EQ(r.body, expected);

  Response via_format = get("/stats?format=prometheus");
  EXPECT_EQ(via_format.headers["content-type"], kPrometheus);
  EXPECT_EQ(via_format.body, expected);
}

TEST_F(AdminTest, JsonHandlers) {
  Response config = get("/config_dump");
  EXPECT_EQ(config.status, 200);
  EXPECT_EQ(config.headers["content-type"], kJson);
  EXPECT_EQ(config.body, "{\"listeners\":[],\"secret\":\"[redacted]\"}");

  Response info = get("/server_info");
  EXPECT_EQ(info.status, 200);
  EXPECT_EQ(info.headers["content-type"], kJson);
  EXPECT_EQ(info.body, "{\"version\":\"test\"}");

  Response listeners = get("/listeners");
  EXPECT_EQ(listeners.status, 200);
  EXPECT_EQ(listeners.headers["content-type"], kJson);
  EXPECT_EQ(listeners.body, "[{\"name\":\"http\"}]");
}

TEST_F(AdminTest, Drain) {
  Response get_drain = get("/drain");
  EXPECT_EQ(get_drain.status, 405);
  EXPECT_EQ(get_drain.headers["allow"], "POST");
  EXPECT_EQ(request("HEAD", "/drain").status, 405);
  EXPECT_EQ(request("PUT", "/drain", "Content-Length: 0\r\n").status, 405);
  EXPECT_EQ(drains_.load(), 0);

  // A browser's cross-site form post carries Origin and is refused.
  Response cross_site = post("/drain", "Origin: http://evil.example\r\n");
  EXPECT_EQ(cross_site.status, 403);
  EXPECT_EQ(drains_.load(), 0);

  Response r = post("/drain");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "draining\n");
  EXPECT_EQ(r.headers["content-type"], kTextPlain);
  EXPECT_EQ(drains_.load(), 1);
}

// A drain with nothing open stops the loop at once (sluice then exits): the answer must be
// written before the drain handler runs, or the client reads nothing.
TEST_F(AdminTest, DrainIsAnsweredBeforeItStarts) {
  stop();
  AdminHandlers handlers;
  handlers.drain = [this] {
    drains_.fetch_add(1);
    dispatcher_->stop();
  };
  start(std::move(handlers));
  // Keep-alive asked for: the drain answer closes the connection all the same.
  Response r = parse(
      roundTrip(address_, "POST /drain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_EQ(r.body, "draining\n");
  loop_.join();
  EXPECT_EQ(drains_.load(), 1);
}

// A client that resets its connection without reading the answer still gets its drain.
TEST_F(AdminTest, DrainStartsWhenTheClientLeavesFirst) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::connect(fd, address_.sockaddr_ptr(), address_.length()), 0);
  const std::string request =
      "POST /drain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  ::close(fd);
  for (int i = 0; i < 200 && drains_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(drains_.load(), 1);
}

TEST_F(AdminTest, ReadEndpointsRejectOtherMethods) {
  for (const char* path : {"/", "/ready", "/health", "/stats", "/stats/prometheus", "/config_dump",
                           "/server_info", "/listeners"}) {
    Response r = post(path);
    EXPECT_EQ(r.status, 405) << path;
    EXPECT_EQ(r.headers["allow"], "GET, HEAD") << path;
    EXPECT_EQ(request("DELETE", path).status, 405) << path;
    EXPECT_EQ(request("OPTIONS", path).status, 405) << path;
  }
  EXPECT_EQ(drains_.load(), 0);
}

TEST_F(AdminTest, UnknownPaths) {
  for (const char* path : {"/nope", "/stats/", "/statsx", "/ready/", "//health", "/drain/x"}) {
    Response r = get(path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.headers["content-type"], kTextPlain) << path;
  }
  // Unknown paths are 404 whatever the method, and never reach a handler.
  EXPECT_EQ(post("/drainx").status, 404);
  EXPECT_EQ(drains_.load(), 0);
}

TEST_F(AdminTest, HeadHasHeadersButNoBody) {
  stats::Store::get().counter("auth.denied").add(1);
  Response full = get("/stats");
  ASSERT_EQ(full.status, 200);
  Response head = request("HEAD", "/stats");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(head.headers["content-type"], kTextPlain);
  EXPECT_EQ(head.headers["content-length"], std::to_string(full.body.size()));
  // evhttp adds none of its own on top of ours.
  const std::string raw = lower(head.raw);
  EXPECT_EQ(raw.find("content-length:"), raw.rfind("content-length:"));
  EXPECT_EQ(raw.find("content-type:"), raw.rfind("content-type:"));
}

TEST_F(AdminTest, AbsoluteFormTarget) {
  Response r = get("http://127.0.0.1/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
}

TEST_F(AdminTest, KeepAliveServesSeveralRequests) {
  std::string raw = roundTrip(address_,
                              "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
                              "GET /ready HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  size_t first = raw.find("HTTP/1.1 200");
  ASSERT_NE(first, std::string::npos) << raw;
  EXPECT_NE(raw.find("HTTP/1.1 200", first + 1), std::string::npos) << raw;
  EXPECT_NE(raw.find("ok\n"), std::string::npos);
  EXPECT_NE(raw.find("ready\n"), std::string::npos);
}

TEST_F(AdminTest, HostileInputGetsAnErrorAndTheServerLives) {
  // Garbage request line.
  Response garbage = parse(roundTrip(address_, "\x01\x02 garbage\r\n\r\n"));
  EXPECT_EQ(garbage.status, 400);
  // A request line and headers beyond the limit.
  Response huge_header =
      request("GET", "/health", "X-Big: " + std::string(64 * 1024, 'a') + "\r\n");
  EXPECT_EQ(huge_header.status, 400);
  Response huge_target = get("/stats?filter=" + std::string(64 * 1024, 'b'));
  EXPECT_EQ(huge_target.status, 400);
  // A body beyond the limit never reaches the drain handler.
  Response huge_body = parse(roundTrip(
      address_,
      "POST /drain HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n" +
          std::string(100000, 'x')));
  EXPECT_EQ(huge_body.status, 413);
  EXPECT_EQ(drains_.load(), 0);
  // A method evhttp cannot parse is answered by evhttp itself.
  EXPECT_EQ(request("BREW", "/health").status, 501);
  // The server still answers afterwards.
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(AdminTest, BindFailures) {
  // Already bound.
  absl::Status again = admin_->bind(network::Address::ipv4(INADDR_LOOPBACK, 0));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  // Not an address.
  Admin other(*dispatcher_, AdminHandlers{});
  EXPECT_EQ(other.bind(network::Address()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(other.boundAddress().valid());
  // The port is taken by the running admin.
  absl::Status taken = other.bind(address_);
  EXPECT_EQ(taken.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(taken.message().find(address_.asString()), std::string::npos) << taken;
  EXPECT_NE(taken.message().find("Address already in use"), std::string::npos) << taken;
  EXPECT_FALSE(other.boundAddress().valid());
}

TEST_F(AdminTest, BindIpv6Loopback) {
  absl::StatusOr<network::Address> v6 = network::Address::parseIp("::1", 0);
  ASSERT_TRUE(v6.ok());
  event::Dispatcher dispatcher;
  Admin admin(dispatcher, AdminHandlers{});
  absl::Status status = admin.bind(*v6);
  if (!status.ok()) {
    GTEST_SKIP() << "no IPv6 loopback here: " << status;
  }
  EXPECT_EQ(admin.boundAddress().family(), AF_INET6);
  EXPECT_NE(admin.boundAddress().port(), 0);
  std::thread loop([&] { dispatcher.run(); });
  Response r = parse(roundTrip(admin.boundAddress(),
                               "GET /health HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n"));
  dispatcher.exit();
  loop.join();
  EXPECT_EQ(r.status, 200);
}

TEST_F(AdminTest, UnsetHandlersAreAbsent) {
  stop();
  start(AdminHandlers{});
  for (const char* path : {"/ready", "/config_dump", "/server_info", "/listeners"}) {
    EXPECT_EQ(get(path).status, 404) << path;
  }
  EXPECT_EQ(post("/drain").status, 404);
  Response index = get("/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body.find("/drain"), std::string::npos);
  EXPECT_EQ(index.body.find("/ready"), std::string::npos);
  EXPECT_NE(index.body.find("/health"), std::string::npos);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/stats").status, 200);
}

TEST_F(AdminTest, OnlyItsOwnHostIsAnswered) {
  const std::string port = std::to_string(address_.port());
  for (const std::string& host :
       {"evil.example:" + port, std::string("evil.example"), "127.0.0.2:" + port,
        std::string("127.0.0.1:1"), "localhost.evil:" + port, "[::1]:" + port,
        "127.0.0.1:" + port + "x"}) {
    Response r = parse(roundTrip(
        address_, "GET /config_dump HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"));
    EXPECT_EQ(r.status, 421) << host;
    EXPECT_EQ(r.body.find("secret"), std::string::npos) << host;
  }
  for (const std::string& host : {"127.0.0.1:" + port, std::string("127.0.0.1"),
                                  "localhost:" + port, std::string("LOCALHOST")}) {
    Response r = parse(roundTrip(
        address_, "GET /stats HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"));
    EXPECT_EQ(r.status, 200) << host;
  }
  // Liveness and readiness answer whatever name a balancer probes them under.
  Response health = parse(roundTrip(
      address_, "GET /health HTTP/1.1\r\nHost: lb.internal\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(stats::Store::get().counterValue("admin.host_refused"), 7u);
}

}  // namespace
}  // namespace server
}  // namespace sluice
