#include "source/common/upstream/access_log.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "gtest/gtest.h"

namespace sluice {
namespace upstream {
namespace {

using std::chrono::microseconds;

// 2026-12-01T16:10:00.123Z
constexpr int64_t kNowMs = 1796141400123;

RequestRecord served() {
  RequestRecord r;
  r.protocol = proxy::Protocol::Http1;
  r.listener = "http";
  r.key = "ci";
  r.client = network::Address::ipv4(0x7f000001, 40000);
  r.method = "GET";
  r.host = "example.com";
  r.port = 80;
  r.path = "/a?b=c";
  r.status = 200;
  r.bytes_to_origin = 79;
  r.bytes_from_origin = 1463;
  r.connect = microseconds(42);
  r.first_byte = microseconds(3099);
  r.total = microseconds(4731);
  r.upstream = network::Address::ipv4(0x5db8d822, 80);
  return r;
}

TEST(AccessLogTest, JsonLineHasEveryField) {
  std::string out;
  appendJsonLine(out, served(), kNowMs);
  EXPECT_EQ(out,
            "{\"time\":\"2026-12-01T16:10:00.123Z\",\"client\":\"127.0.0.1:40000\",\"key\":\"ci\","
            "\"protocol\":\"http1\",\"listener\":\"http\",\"method\":\"GET\","
            "\"target\":\"example.com:80\",\"path\":\"/a?b=c\",\"status\":200,"
            "\"bytes_to_origin\":79,\"bytes_from_origin\":1463,\"resolve_us\":-1,"
            "\"connect_us\":42,\"first_byte_us\":3099,\"total_us\":4731,"
            "\"upstream\":\"93.184.216.34:80\",\"failure\":\"none\",\"denial\":\"\","
            "\"proxy_status\":\"\",\"policy_rule\":\"\",\"policy_report_only\":false}\n");
}

TEST(AccessLogTest, PolicyRulesInBothFormats) {
  RequestRecord refused = served();
  refused.status = 403;
  refused.upstream = network::Address();
  refused.denial = "policy rule staff.rules[1]";
  refused.policy_rule = "staff.rules[1]";
  RequestRecord trial = served();
  trial.policy_rule = "trial \"one\"";
  trial.policy_report_only = true;
  std::string out;
  appendJsonLine(out, refused, kNowMs);
  EXPECT_NE(out.find(",\"policy_rule\":\"staff.rules[1]\",\"policy_report_only\":false}\n"),
            std::string::npos)
      << out;
  out.clear();
  appendJsonLine(out, trial, kNowMs);
  EXPECT_NE(out.find(",\"policy_rule\":\"trial \\\"one\\\"\",\"policy_report_only\":true}\n"),
            std::string::npos)
      << out;
  out.clear();
  appendSquidLine(out, refused, kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_DENIED/403 1463 GET http://example.com:80/a?b=c "
            "ci HIER_NONE/- - policy_rule=staff.rules[1]\n");
  out.clear();
  appendSquidLine(out, trial, kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_MISS/200 1463 GET http://example.com:80/a?b=c "
            "ci HIER_DIRECT/93.184.216.34 - report_only_rule=trial%\"one\"\n");
}

TEST(AccessLogTest, JsonEscapesWhatAClientSent) {
  RequestRecord r = served();
  r.path = "/\"quote\"\\back\nline\x01\xff";
  r.host = "::1";
  r.denial = "no \"way\"";
  std::string out;
  appendJsonLine(out, r, kNowMs);
  EXPECT_NE(out.find("\"path\":\"/\\\"quote\\\"\\\\back\\u000aline\\u0001\\u00ff\""),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\"target\":\"[::1]:80\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"denial\":\"no \\\"way\\\"\""), std::string::npos) << out;
  // One line, whatever the client sent.
  EXPECT_EQ(out.find('\n'), out.size() - 1);
}

TEST(AccessLogTest, SquidLineReadsLikeSquids) {
  std::string out;
  appendSquidLine(out, served(), kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_MISS/200 1463 GET http://example.com:80/a?b=c "
            "ci HIER_DIRECT/93.184.216.34 -\n");

  RequestRecord tunnel = served();
  tunnel.method = "CONNECT";
  tunnel.port = 443;
  tunnel.path = {};
  out.clear();
  appendSquidLine(out, tunnel, kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_TUNNEL/200 1463 CONNECT example.com:443 ci "
            "HIER_DIRECT/93.184.216.34 -\n");

  RequestRecord refused = served();
  refused.key = {};
  refused.status = 407;
  refused.upstream = network::Address();
  refused.denial = "proxy credentials required";
  refused.path = "/with space";
  out.clear();
  appendSquidLine(out, refused, kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_DENIED/407 1463 GET "
            "http://example.com:80/with%space - HIER_NONE/- -\n");

  RequestRecord socks = served();
  socks.protocol = proxy::Protocol::Socks5;
  socks.method = "connect";
  socks.path = {};
  socks.status = 2;  // not allowed
  socks.denial = "destination is a private address";
  socks.upstream = network::Address();
  out.clear();
  appendSquidLine(out, socks, kNowMs);
  EXPECT_EQ(out,
            "1796141400.123      4 127.0.0.1 TCP_DENIED/403 1463 CONNECT example.com:80 ci "
            "HIER_NONE/- -\n");
}

TEST(AccessLogTest, ModesChooseTheRecords) {
  char path[] = "/tmp/sluice-access-log-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  AccessLog& log = AccessLog::get();
  AccessLogConfig config;
  config.mode = AccessLogMode::Errors;
  config.path = path;
  ASSERT_TRUE(log.configure(config).ok());
  RequestRecord refused = served();
  refused.denial = "destination is a private address";
  EXPECT_FALSE(log.wants(served()));
  EXPECT_TRUE(log.wants(refused));
  RequestRecord tried = served();
  tried.policy_rule = "trial.rules[0]";
  tried.policy_report_only = true;
  EXPECT_TRUE(log.wants(tried));
  logRecord(served());
  logRecord(refused);
  log.stop();
  std::ifstream in(path);
  std::stringstream read;
  read << in.rdbuf();
  const std::string text = read.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("private address"), std::string::npos);
  EXPECT_FALSE(log.enabled());

  config.mode = AccessLogMode::All;
  config.path = "/nonexistent-dir/access.log";
  const absl::Status bad = log.configure(config);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("access_log.path"), std::string::npos);
  unlink(path);
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
