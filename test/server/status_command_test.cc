#include "source/server/status_command.h"

#include "gtest/gtest.h"

namespace sluice {
namespace server {
namespace {

constexpr char kInfo[] =
    "{\"version\":\"1.2.3\",\"state\":\"live\",\"uptime_seconds\":3725,\"workers\":2,"
    "\"active_connections\":7,\"config_version\":4,\"extensions\":\"sluice.auth\"}\n";
constexpr char kListeners[] =
    "{\"listeners\":[{\"name\":\"http\",\"address\":\"127.0.0.1:8080\"},"
    "{\"name\":\"socks5\",\"address\":\"[::1]:1080\"}]}\n";
constexpr char kStats[] =
    "listener.http.downstream_cx_active: 7\n"
    "request_record.total: 1234\n"
    "tunnel.listener.http.tunnels_active: 3\n"
    "tunnel.listener.socks5.tunnels_active: 2\n"
    "tunnel.listener.http.tunnels_total: 99\n"
    "tunnel.key.k1.tunnels_active: 5\n"
    "upstream.client_limit_refused: 4\n"
    "upstream.descriptor_reserve_refused: 1\n";
constexpr char kBans[] =
    "{\"enabled\":true,\"bans\":[{\"address\":\"192.0.2.1\",\"failures\":5,"
    "\"expires_in_seconds\":60,\"reason\":\"auth\"}],\"tracked\":3}\n";

TEST(StatusCommandTest, ReadsEveryAnswer) {
  auto s = parseInstanceStatus(kInfo, kListeners, kStats, kBans);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, "1.2.3");
  EXPECT_EQ(s->state, "live");
  EXPECT_EQ(s->uptime_seconds, 3725);
  EXPECT_EQ(s->workers, 2);
  EXPECT_EQ(s->config_version, 4);
  ASSERT_EQ(s->listeners.size(), 2u);
  EXPECT_EQ(s->listeners[1].name, "socks5");
  EXPECT_EQ(s->listeners[1].address, "[::1]:1080");
  EXPECT_EQ(s->active_connections, 7);
  // Only the per-listener gauges: a tunnel also counts under its key.
  EXPECT_EQ(s->tunnels_active, 5);
  EXPECT_EQ(s->requests_total, 1234);
  EXPECT_EQ(s->budget_client_refused, 4);
  EXPECT_EQ(s->budget_reserve_refused, 1);
  EXPECT_TRUE(s->bans_enabled);
  EXPECT_EQ(s->bans, 1);
}

TEST(StatusCommandTest, RendersTextAndJson) {
  auto s = parseInstanceStatus(kInfo, kListeners, kStats, kBans);
  ASSERT_TRUE(s.ok()) << s.status();
  s->admin_address = "127.0.0.1:9901";
  const std::string text = renderStatusText(*s);
  EXPECT_NE(text.find("sluice 1.2.3, admin endpoint 127.0.0.1:9901"), std::string::npos) << text;
  EXPECT_NE(text.find("1h 2m 5s (3725 s)"), std::string::npos) << text;
  EXPECT_NE(text.find("socks5     [::1]:1080"), std::string::npos) << text;
  EXPECT_NE(text.find("budget refusals:  5"), std::string::npos) << text;
  EXPECT_NE(text.find("config version:   4\n"), std::string::npos) << text;
  const std::string json = renderStatusJson(*s);
  EXPECT_NE(json.find("\"listeners\":[{\"name\":\"http\",\"address\":\"127.0.0.1:8080\"},"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"upstream_budget_refused\":5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"config_version\":4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bans_enabled\":true,\"bans\":1}"), std::string::npos) << json;
}

TEST(StatusCommandTest, DisabledBansAndEmptyStats) {
  auto s = parseInstanceStatus(kInfo, "{\"listeners\":[]}", "",
                               "{\"enabled\":false,\"bans\":[],\"tracked\":0}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->bans_enabled);
  EXPECT_EQ(s->requests_total, 0);
  EXPECT_NE(renderStatusText(*s).find("bans:             disabled"), std::string::npos);
}

TEST(StatusCommandTest, RefusesWhatIsNotSluice) {
  EXPECT_FALSE(parseInstanceStatus("<html>", kListeners, kStats, kBans).ok());
  EXPECT_FALSE(parseInstanceStatus("{\"hello\":1}", kListeners, kStats, kBans).ok());
  EXPECT_FALSE(parseInstanceStatus(kInfo, "not json", kStats, kBans).ok());
}

}  // namespace
}  // namespace server
}  // namespace sluice
