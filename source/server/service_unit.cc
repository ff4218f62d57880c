#include "source/server/service_unit.h"

#include <string_view>

#include <sys/stat.h>

#include "absl/strings/str_format.h"

namespace sluice {
namespace server {

const char kServiceUnitMarker[] = "# Written by `sluice service enable`";

namespace {

bool under(std::string_view path, std::string_view dir) {
  return path == dir ||
         (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

// ProtectHome=yes makes these empty for the service.
bool underHome(std::string_view path) {
  return under(path, "/home") || under(path, "/root") || under(path, "/run/user");
}

// PrivateTmp=yes gives the service its own, empty /tmp and /var/tmp.
bool underTmp(std::string_view path) { return under(path, "/tmp") || under(path, "/var/tmp"); }

// A path in a unit: '%' starts a specifier, and quotes keep spaces in one word.
std::string unitPath(std::string_view path) {
  std::string out;
  bool quote = false;
  for (char c : path) {
    if (c == '%') {
      out += "%%";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
      quote = true;
    } else {
      if (c == ' ' || c == '\t' || c == '\'') quote = true;
      out += c;
    }
  }
  return quote ? "\"" + out + "\"" : out;
}

// A word of a command line in a unit: a path, with '$' kept from variable expansion too.
std::string execWord(std::string_view word) {
  std::string out;
  for (char c : unitPath(word)) {
    if (c == '$') out += '$';
    out += c;
  }
  return out;
}

}  // namespace

std::string renderServiceUnit(const ServiceUnitSpec& spec) {
  const auto stop_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(spec.drain_timeout).count() + 10;
  const bool home_needed = underHome(spec.binary) || underHome(spec.config) ||
                           (!spec.access_log_dir.empty() && underHome(spec.access_log_dir));
  std::string out;
  absl::StrAppendFormat(&out, "%s for %s; `sluice service disable` removes it.\n",
                        kServiceUnitMarker, spec.config);
  out += "[Unit]\n";
  out += "Description=sluice forward proxy\n";
  if (!spec.user) {
    out += "After=network-online.target\n";
    out += "Wants=network-online.target\n";
  }
  out += "\n[Service]\n";
  // sluice says READY=1 once every listener is bound and the workers run.
  out += "Type=notify\n";
  out += "NotifyAccess=main\n";
  absl::StrAppendFormat(&out, "ExecStart=%s run -c %s\n", execWord(spec.binary),
                        execWord(spec.config));
  // SIGHUP re-reads the TLS certificates and reopens the access log.
  out += "ExecReload=/bin/kill -HUP $MAINPID\n";
  out += "Restart=on-failure\n";
  out += "RestartSec=2s\n";
  // SIGTERM drains; past the drain timeout sluice closes what is left and exits.
  absl::StrAppendFormat(&out, "TimeoutStopSec=%ds\n", stop_seconds);
  absl::StrAppendFormat(&out, "LimitNOFILE=%d\n", kServiceOpenFilesLimit);
  out += "NoNewPrivileges=yes\n";
  out += "ProtectSystem=strict\n";
  if (!spec.user) {
    // The config or the binary in a home folder must stay readable.
    out += home_needed ? "ProtectHome=read-only\n" : "ProtectHome=yes\n";
  }
  out += "PrivateTmp=yes\n";
  if (!spec.user) {
    // Ports below 1024 and nothing else.
    out += "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n";
    out += "AmbientCapabilities=CAP_NET_BIND_SERVICE\n";
  }
  if (!spec.access_log_dir.empty()) {
    absl::StrAppendFormat(&out, "ReadWritePaths=%s\n", unitPath(spec.access_log_dir));
  }
  out += "\n[Install]\n";
  out += spec.user ? "WantedBy=default.target\n" : "WantedBy=multi-user.target\n";
  return out;
}

std::vector<std::string> serviceUnitWarnings(const ServiceUnitSpec& spec) {
  std::vector<std::string> out;
  for (const auto& [what, path] :
       {std::pair<const char*, const std::string&>{"the config", spec.config},
        {"the binary", spec.binary},
        {"the access log", spec.access_log_dir}}) {
    if (!path.empty() && underTmp(path)) {
      out.push_back(absl::StrFormat(
          "%s (%s) is in /tmp or /var/tmp, which the service does not see (PrivateTmp=yes "
          "gives it empty ones): move it",
          what, path));
    }
  }
  struct stat st;
  if (!spec.access_log_dir.empty() && stat(spec.access_log_dir.c_str(), &st) != 0) {
    out.push_back(
        absl::StrFormat("the access log folder %s does not exist, and the service cannot create it "
                        "(ProtectSystem=strict): create it before starting",
                        spec.access_log_dir));
  }
  return out;
}

}  // namespace server
}  // namespace sluice
