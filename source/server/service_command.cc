#include "source/server/service_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "source/server/service_unit.h"

extern char** environ;

namespace sluice {
namespace server {

namespace {

constexpr char kUnitName[] = "sluice.service";

int fail(const std::string& message) {
  absl::FPrintF(stderr, "sluice: %s\n", message);
  return 1;
}

std::string absolutePath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) != nullptr) return resolved;
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

std::string thisBinary() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string parentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string homeDir() {
  const char* home = getenv("HOME");
  return home != nullptr ? home : "";
}

bool mkdirs(const std::string& dir) {
  if (dir.empty() || dir == "/") return true;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  if (!mkdirs(parentDir(dir))) return false;
  return mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST;
}

bool readFile(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

// Replaces the unit in one step (a half-written unit is never loaded).
bool writeUnit(const std::string& path, const std::string& text, std::string& error) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = absl::StrFormat("cannot create %s: %s", tmp, strerror(errno));
    return false;
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    error = absl::StrFormat("cannot write %s: %s", path, strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// systemctl [--user] ARGS, its output going to ours. Its exit code, or -1 when it cannot run.
int systemctl(bool user, const std::vector<std::string>& args, std::string& shown) {
  std::vector<std::string> argv = {"systemctl"};
  if (user) argv.push_back("--user");
  argv.insert(argv.end(), args.begin(), args.end());
  shown = absl::StrJoin(argv, " ");
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  fflush(stdout);
  pid_t pid;
  if (posix_spawnp(&pid, "systemctl", nullptr, nullptr, c_argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs each systemctl step in order; at the first failure says what failed and lists the
// steps left to run by hand.
int systemctlSteps(bool user, const std::vector<std::vector<std::string>>& steps,
                   const std::string& done) {
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string shown;
    const int rc = systemctl(user, steps[i], shown);
    if (rc == 0) continue;
    std::string by_hand;
    for (size_t j = i; j < steps.size(); ++j) {
      std::vector<std::string> argv = {"systemctl"};
      if (user) argv.push_back("--user");
      argv.insert(argv.end(), steps[j].begin(), steps[j].end());
      absl::StrAppend(&by_hand, "  ", absl::StrJoin(argv, " "), "\n");
    }
    absl::FPrintF(
        stderr, "sluice: `%s` failed (%s): %s; once a service manager runs, do by hand:\n%s", shown,
        rc < 0 ? "systemctl cannot be run" : absl::StrFormat("exit %d", rc), done, by_hand);
    return 1;
  }
  return 0;
}

bool writtenBySluice(const std::string& path) {
  std::string text;
  return readFile(path, text) && absl::StartsWith(text, kServiceUnitMarker);
}

int enable(const ServiceCommand& command, const ServerConfig& config, const std::string& unit) {
  ServiceUnitSpec spec;
  spec.user = command.user;
  spec.binary = thisBinary();
  if (spec.binary.empty()) return fail("cannot find this binary's path (/proc/self/exe)");
  spec.config = absolutePath(command.config_path);
  spec.drain_timeout = config.drain_timeout;
  const upstream::AccessLogConfig& log = config.access_log;
  if (log.mode != upstream::AccessLogMode::Off && !log.path.empty() && log.path != "-") {
    // A relative path is relative to the service's working directory: / for the system
    // manager, the home folder for a user's.
    std::string path = log.path;
    if (path[0] != '/') {
      const std::string cwd = command.user ? homeDir() : "/";
      path = (cwd == "/" ? "" : cwd) + "/" + path;
      absl::FPrintF(stderr,
                    "sluice: warning: access_log.path %s is relative: the service writes %s\n",
                    log.path, path);
    }
    spec.access_log_dir = parentDir(path);
  }
  struct stat st;
  if (stat(unit.c_str(), &st) == 0 && !writtenBySluice(unit)) {
    return fail(absl::StrFormat(
        "%s exists and was not written by sluice: not replacing it (remove it, or write "
        "elsewhere with --unit-dir)",
        unit));
  }
  const std::string dir = parentDir(unit);
  if (!mkdirs(dir)) {
    return fail(absl::StrFormat("cannot create %s: %s", dir, strerror(errno)));
  }
  std::string error;
  if (!writeUnit(unit, renderServiceUnit(spec), error)) return fail(error);
  absl::PrintF("wrote %s: %s run -c %s\n", unit, spec.binary, spec.config);
  for (const std::string& warning : serviceUnitWarnings(spec)) {
    absl::FPrintF(stderr, "sluice: warning: %s\n", warning);
  }
  if (command.no_systemctl) return 0;
  // A unit outside the manager's own folders is enabled by its path (systemctl links it).
  const std::string name = command.unit_dir.empty() ? kUnitName : unit;
  const int rc = systemctlSteps(command.user, {{"daemon-reload"}, {"enable", "--now", name}},
                                "the unit is written but not enabled");
  if (rc == 0) absl::PrintF("sluice.service is enabled and started\n");
  return rc;
}

int disable(const ServiceCommand& command, const std::string& unit) {
  struct stat st;
  if (stat(unit.c_str(), &st) != 0) {
    absl::PrintF("no unit at %s: nothing to disable\n", unit);
    return 0;
  }
  if (!writtenBySluice(unit)) {
    return fail(absl::StrFormat("%s was not written by sluice: not removing it", unit));
  }
  if (!command.no_systemctl && systemctlSteps(command.user, {{"disable", "--now", kUnitName}},
                                              absl::StrFormat("the unit stays at %s", unit)) != 0) {
    absl::FPrintF(stderr, "  rm %s\n  systemctl%s daemon-reload\n", unit,
                  command.user ? " --user" : "");
    return 1;
  }
  if (::unlink(unit.c_str()) != 0) {
    return fail(absl::StrFormat("cannot remove %s: %s", unit, strerror(errno)));
  }
  absl::PrintF("removed %s\n", unit);
  if (command.no_systemctl) return 0;
  return systemctlSteps(command.user, {{"daemon-reload"}}, "the unit is removed");
}

int status(const ServiceCommand& command, const std::string& unit) {
  struct stat st;
  const bool present = stat(unit.c_str(), &st) == 0;
  absl::PrintF("unit: %s (%s)\n", unit, present ? "present" : "absent");
  if (command.no_systemctl) return present ? 0 : 1;
  std::string shown;
  const int rc = systemctl(command.user, {"status", kUnitName}, shown);
  if (rc < 0) return fail(absl::StrFormat("`%s` cannot be run", shown));
  // systemctl status: 3 means not running, 4 no such unit; anything else is its own failure.
  if (rc != 0 && rc != 3 && rc != 4) {
    absl::FPrintF(stderr,
                  "sluice: `%s` failed (exit %d): is a service manager running? `sluice status` "
                  "asks the proxy itself\n",
                  shown, rc);
  }
  return rc;
}

}  // namespace

std::string serviceUnitDir(const ServiceCommand& command) {
  if (!command.unit_dir.empty()) return absolutePath(command.unit_dir);
  if (!command.user) return "/etc/systemd/system";
  const char* xdg = getenv("XDG_CONFIG_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/systemd/user";
  return homeDir() + "/.config/systemd/user";
}

int runServiceCommand(const ServiceCommand& command, const ServerConfig* config) {
  const std::string unit = serviceUnitDir(command) + "/" + kUnitName;
  if (command.action == "enable") {
    if (config == nullptr) return fail("service enable needs a valid configuration");
    return enable(command, *config, unit);
  }
  if (command.action == "disable") return disable(command, unit);
  if (command.action == "status") return status(command, unit);
  return fail(
      absl::StrFormat("service: unknown action '%s' (enable, disable or status)", command.action));
}

}  // namespace server
}  // namespace sluice
