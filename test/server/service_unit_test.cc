#include "source/server/service_unit.h"

#include "gtest/gtest.h"

namespace sluice {
namespace server {
namespace {

bool has(const std::string& unit, const std::string& line) {
  return unit.find("\n" + line + "\n") != std::string::npos;
}

ServiceUnitSpec systemSpec() {
  ServiceUnitSpec spec;
  spec.binary = "/usr/local/bin/sluice";
  spec.config = "/etc/sluice/config.yaml";
  return spec;
}

TEST(ServiceUnitTest, SystemUnit) {
  const std::string unit = renderServiceUnit(systemSpec());
  EXPECT_EQ(unit.rfind(kServiceUnitMarker, 0), 0u) << unit;
  for (const char* line :
       {"Type=notify", "ExecStart=/usr/local/bin/sluice run -c /etc/sluice/config.yaml",
        "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "LimitNOFILE=65536",
        "TimeoutStopSec=20s", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
        "PrivateTmp=yes", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE", "WantedBy=multi-user.target"}) {
    EXPECT_TRUE(has(unit, line)) << line << " missing in\n" << unit;
  }
  EXPECT_EQ(unit.find("ReadWritePaths="), std::string::npos) << unit;
}

TEST(ServiceUnitTest, UserUnitGrantsNothingAndKeepsHome) {
  ServiceUnitSpec spec = systemSpec();
  spec.user = true;
  spec.config = "/home/ann/.config/sluice/config.yaml";
  const std::string unit = renderServiceUnit(spec);
  EXPECT_EQ(unit.find("ProtectHome"), std::string::npos) << unit;
  EXPECT_EQ(unit.find("Capabilit"), std::string::npos) << unit;
  EXPECT_TRUE(has(unit, "ProtectSystem=strict")) << unit;
  EXPECT_TRUE(has(unit, "WantedBy=default.target")) << unit;
}

TEST(ServiceUnitTest, AccessLogFolderIsWritable) {
  ServiceUnitSpec spec = systemSpec();
  spec.access_log_dir = "/var/log/sluice";
  EXPECT_TRUE(has(renderServiceUnit(spec), "ReadWritePaths=/var/log/sluice"));
}

TEST(ServiceUnitTest, ConfigInAHomeStaysReadable) {
  ServiceUnitSpec spec = systemSpec();
  spec.config = "/root/.config/sluice/config.yaml";
  EXPECT_TRUE(has(renderServiceUnit(spec), "ProtectHome=read-only"));
}

TEST(ServiceUnitTest, QuotesAndEscapesPaths) {
  ServiceUnitSpec spec = systemSpec();
  spec.config = "/etc/my sluice/100%$x.yaml";
  spec.access_log_dir = "/var/log/my logs";
  const std::string unit = renderServiceUnit(spec);
  EXPECT_TRUE(has(unit, "ExecStart=/usr/local/bin/sluice run -c \"/etc/my sluice/100%%$$x.yaml\""))
      << unit;
  EXPECT_TRUE(has(unit, "ReadWritePaths=\"/var/log/my logs\"")) << unit;
}

TEST(ServiceUnitTest, StopTimeoutFollowsTheDrainTimeout) {
  ServiceUnitSpec spec = systemSpec();
  spec.drain_timeout = std::chrono::seconds(120);
  EXPECT_TRUE(has(renderServiceUnit(spec), "TimeoutStopSec=130s"));
}

TEST(ServiceUnitTest, WarnsAboutWhatTheSandboxHides) {
  ServiceUnitSpec spec = systemSpec();
  EXPECT_TRUE(serviceUnitWarnings(spec).empty());
  spec.config = "/tmp/c.yaml";
  spec.access_log_dir = "/nonexistent/sluice-logs";
  auto warnings = serviceUnitWarnings(spec);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("PrivateTmp"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("does not exist"), std::string::npos) << warnings[1];
}

}  // namespace
}  // namespace server
}  // namespace sluice
