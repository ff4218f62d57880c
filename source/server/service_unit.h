#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {
namespace server {

// The open-files limit the unit gives sluice: about 32,000 proxied connections (two
// descriptors each), far above a default of 1024. A drop-in (`systemctl edit sluice`) raises it.
constexpr uint64_t kServiceOpenFilesLimit = 65536;

// What the systemd unit of one config says.
struct ServiceUnitSpec {
  // A user unit (systemctl --user): no capabilities to grant, and the home stays visible.
  bool user = false;
  // Absolute paths.
  std::string binary;
  std::string config;
  // The access log's folder when it is a file, else empty: the one place sluice writes.
  std::string access_log_dir;
  // systemd stops waiting (SIGKILL) this long after the drain timeout.
  std::chrono::milliseconds drain_timeout{10000};
};

// The unit's text: Type=notify, ExecStart `<binary> run -c <config>`, ExecReload by SIGHUP,
// Restart=on-failure, LimitNOFILE and the sandboxing (ProtectSystem=strict, PrivateTmp,
// NoNewPrivileges; for a system unit also ProtectHome and CAP_NET_BIND_SERVICE only).
std::string renderServiceUnit(const ServiceUnitSpec& spec);

// What will not work as the operator expects under that sandboxing (a config under /tmp, which
// PrivateTmp hides; a missing access log folder): one sentence each.
std::vector<std::string> serviceUnitWarnings(const ServiceUnitSpec& spec);

// The first line of every unit sluice writes: `service disable` removes only those.
extern const char kServiceUnitMarker[];

}  // namespace server
}  // namespace sluice
