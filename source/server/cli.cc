#include "source/server/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/common/version.h"
#include "source/common/config/api_key.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/short_form.h"
#include "source/common/config/yaml_loader.h"
#include "source/common/extensions/registry.h"
#include "source/server/admin_client.h"
#include "source/server/listener_config.h"
#include "source/server/policy_command.h"
#include "source/server/server.h"
#include "source/server/service_command.h"
#include "source/server/status_command.h"
#include "source/server/upgrade.h"

namespace sluice {
namespace server {

namespace {

constexpr const char* kUsage =
    "usage: sluice <command> [-c FILE] [--log-level LEVEL]\n"
    "       sluice service enable|disable|status [--user] [--unit-dir DIR] [--no-systemctl]\n"
    "\n"
    "commands:\n"
    "  run             run the proxy in the foreground (SIGINT/SIGTERM drain, then exit 0)\n"
    "  check           validate the configuration (binds nothing)\n"
    "  init            write a commented configuration with a fresh API key\n"
    "  config expand   print the full form of the configuration\n"
    "  reload          check the configuration, then have the running instance take it\n"
    "                  (through its admin address, or SIGHUP to the pid in pid_file)\n"
    "  upgrade         have the running instance start the binary now at its path, hand it\n"
    "                  the listen sockets and drain (no connection refused)\n"
    "  status          ask the running instance (at the config's admin address) how it is\n"
    "  policy explain KEY_NAME HOST:PORT [--kind KIND] [--listener NAME]\n"
    "                  what the policy does with a request of that key to that destination:\n"
    "                  the deciding rule, the addresses and the verdict on each (exit 0\n"
    "                  allowed, 1 refused, 2 usage or config error)\n"
    "  service enable  write a systemd unit running this binary with the config, and start it\n"
    "  service disable stop it and remove the unit\n"
    "  service status  systemctl status of the unit\n"
    "  --version       print the version\n"
    "\n"
    "options:\n"
    "  -c, --config FILE   configuration file (default: %s)\n"
    "  --log-level LEVEL   error | warn | info | debug (overrides log_level)\n"
    "  --json              status: print one JSON object\n"
    "  --kind KIND         policy explain: http, connect (default), websocket, socks5-connect,\n"
    "                      socks5-udp or socks5-bind\n"
    "  --listener NAME     policy explain: the listener (default: the first with the key)\n"
    "  --user              service: the user's service manager (systemctl --user)\n"
    "  --unit-dir DIR      service: the unit's folder (default /etc/systemd/system, or\n"
    "                      ~/.config/systemd/user with --user)\n"
    "  --no-systemctl      service: only write or remove the unit\n";

void printUsage(FILE* out) { absl::FPrintF(out, kUsage, config::defaultConfigPath()); }

int fail(const std::string& message) {
  absl::FPrintF(stderr, "sluice: %s\n", message);
  return 1;
}

bool mkdirs(const std::string& dir) {
  if (dir.empty()) return true;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0 && !mkdirs(dir.substr(0, slash))) return false;
  return mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

int cmdInit(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && !mkdirs(path.substr(0, slash))) {
    return fail(absl::StrFormat("cannot create the folder of %s: %s", path, strerror(errno)));
  }
  // O_EXCL: never overwrite a config (it holds the keys clients already use).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      return fail(absl::StrFormat("%s already exists; not overwriting it", path));
    }
    return fail(absl::StrFormat("cannot create %s: %s", path, strerror(errno)));
  }
  std::string text = config::initialConfigText(config::generateApiKey());
  ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    return fail(absl::StrFormat("cannot write %s", path));
  }
  absl::PrintF("wrote %s (with a fresh API key; mode 0600)\n", path);
  return 0;
}

// Every connection is a descriptor (two for a proxied one): take all the process may have,
// and say so when the configured connection limits cannot all be met.
void raiseFileLimit(const ServerConfig& config) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  uint64_t wanted = 0;
  for (const auto& listener : config.listeners) {
    wanted += 2 * uint64_t{listener->limiter ? listener->limiter->maxConnections() : 0};
  }
  if (wanted > lim.rlim_cur) {
    SLUICE_LOG(Warn,
               "open files limit is %d but the listeners' max_connections allow %d descriptors "
               "(two per proxied connection): accepts will back off when it runs out",
               static_cast<uint64_t>(lim.rlim_cur), wanted);
  }
}

int cmdStatus(const std::string& path, const ServerConfig& config, bool json) {
  if (!config.admin_address.valid()) {
    return fail(absl::StrFormat(
        "%s has no admin address (admin.listen is off): status asks the running instance "
        "there, so it cannot find one",
        path));
  }
  if (config.admin_address.port() == 0) {
    return fail(absl::StrFormat(
        "%s: the admin address %s has port 0 (any free port): no fixed address to ask", path,
        config.admin_address.asString()));
  }
  auto status = queryInstanceStatus(config.admin_address);
  if (!status.ok()) {
    if (absl::IsUnavailable(status.status()) || absl::IsDeadlineExceeded(status.status())) {
      return fail(absl::StrFormat("no sluice is answering at %s (the admin address in %s): %s",
                                  adminDialAddress(config.admin_address).asString(), path,
                                  status.status().message()));
    }
    return fail(std::string(status.status().message()));
  }
  absl::PrintF("%s", json ? renderStatusJson(*status) : renderStatusText(*status));
  return 0;
}

// The file passed `check` already: hand it to the running instance, and print its answer.
int cmdReload(const std::string& path, const ServerConfig& config) {
  if (config.admin_address.valid() && config.admin_address.port() != 0) {
    auto answer = adminPost(config.admin_address, "/reload", std::chrono::seconds(10));
    if (!answer.ok()) {
      return fail(absl::StrFormat("no sluice is answering at %s (the admin address in %s): %s",
                                  adminDialAddress(config.admin_address).asString(), path,
                                  answer.status().message()));
    }
    if (answer->code != 200) {
      return fail(absl::StrFormat("the running instance refused the reload (HTTP %d): %s",
                                  answer->code, answer->body));
    }
    absl::PrintF("reloaded: %s", answer->body);
    return 0;
  }
  if (config.pid_file.empty()) {
    return fail(absl::StrFormat(
        "%s has neither an admin address with a fixed port nor a pid_file: no way to find the "
        "running instance",
        path));
  }
  FILE* f = fopen(config.pid_file.c_str(), "r");
  long pid = 0;
  const bool read = f != nullptr && fscanf(f, "%ld", &pid) == 1 && pid > 1;
  if (f != nullptr) fclose(f);
  if (!read) {
    return fail(absl::StrFormat("cannot read a pid from %s (pid_file in %s): is sluice running?",
                                config.pid_file, path));
  }
  if (::kill(static_cast<pid_t>(pid), SIGHUP) != 0) {
    return fail(absl::StrFormat("cannot signal pid %d (from %s): %s", pid, config.pid_file,
                                strerror(errno)));
  }
  absl::PrintF("sent SIGHUP to pid %d: without an admin address, its log says how it went\n", pid);
  return 0;
}

// Asks the instance at the config's admin address (or the pid in pid_file) to upgrade, then
// waits until another process answers there.
int cmdUpgrade(const std::string& path, const ServerConfig& config) {
  if (!config.admin_address.valid() || config.admin_address.port() == 0) {
    return fail(absl::StrFormat(
        "%s has no admin address with a fixed port: `sluice upgrade` needs one to see the new "
        "process take over (or send SIGUSR2 to the running pid yourself)",
        path));
  }
  auto pidOf = [&config]() -> long {
    auto info = adminGet(config.admin_address, "/server_info", std::chrono::seconds(3));
    if (!info.ok() || info->code != 200) return -1;
    const size_t at = info->body.find("\"pid\":");
    return at == std::string::npos ? -1 : atol(info->body.c_str() + at + 6);
  };
  auto failures = [&config]() -> long {
    auto stats =
        adminGet(config.admin_address, "/stats?filter=upgrade.failed", std::chrono::seconds(3));
    if (!stats.ok() || stats->code != 200) return -1;
    const size_t at = stats->body.find("upgrade.failed: ");
    return at == std::string::npos ? -1 : atol(stats->body.c_str() + at + 16);
  };
  const long before = pidOf();
  const long failed_before = failures();
  auto answer = adminPost(config.admin_address, "/upgrade", std::chrono::seconds(10));
  if (!answer.ok()) {
    return fail(absl::StrFormat("no sluice is answering at %s (the admin address in %s): %s",
                                adminDialAddress(config.admin_address).asString(), path,
                                answer.status().message()));
  }
  if (answer->code != 202) {
    return fail(absl::StrFormat("the running instance refused the upgrade (HTTP %d): %s",
                                answer->code, answer->body));
  }
  absl::PrintF("%s", answer->body);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < deadline) {
    const long now = pidOf();
    if (now > 0 && now != before) {
      absl::PrintF("upgraded: pid %d serves (was %d)\n", now, before);
      return 0;
    }
    if (now == before && failures() > failed_before) break;
    usleep(100 * 1000);
  }
  return fail(absl::StrFormat(
      "pid %d still serves at %s: the new process did not take over (the running one's log "
      "says why)",
      before, adminDialAddress(config.admin_address).asString()));
}

// `sluice policy explain`: loads the config as `check` does, then explains; 2 for usage and
// config errors (1 means refused).
int cmdPolicy(const std::string& path, const std::string& log_level, const std::string& action,
              const std::vector<std::string>& args, PolicyExplainRequest explain) {
  auto usage = [](const std::string& message) {
    printUsage(stderr);
    absl::FPrintF(stderr, "sluice: %s\n", message);
    return kExplainUsage;
  };
  if (action != "explain") return usage("policy: say explain");
  if (args.size() != 2) return usage("policy explain takes KEY_NAME HOST:PORT");
  explain.key_name = args[0];
  explain.target = args[1];
  // Quiet unless asked: the report is the output.
  LogLevel level = LogLevel::Warn;
  if (!log_level.empty() && !logger::parseLevel(log_level, level)) {
    return usage(absl::StrFormat("--log-level: unknown level '%s'", log_level));
  }
  logger::setLevel(level);
  auto bootstrap = config::loadBootstrapFile(path);
  if (!bootstrap.ok()) {
    absl::FPrintF(stderr, "sluice: %s\n", bootstrap.status().message());
    return kExplainUsage;
  }
  auto server_config = buildServerConfig(*bootstrap);
  if (!server_config.ok()) {
    absl::FPrintF(stderr, "sluice: %s: %s\n", path, server_config.status().message());
    return kExplainUsage;
  }
  std::string out;
  const int code = explainPolicy(**server_config, explain, out);
  absl::FPrintF(code == kExplainUsage ? stderr : stdout, "%s", out);
  return code;
}

}  // namespace

int runCli(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command;
  std::string path = config::defaultConfigPath();
  std::string log_level;
  bool json = false;
  int upgrade_fd = -1;
  ServiceCommand service;
  bool service_option = false;
  PolicyExplainRequest explain;
  std::string policy_action;
  bool explain_option = false;
  std::vector<std::string> policy_args;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--version" || a == "version") {
      absl::PrintF("sluice %s\n", kVersion);
      return 0;
    }
    if (a == "-h" || a == "--help" || a == "help") {
      printUsage(stdout);
      return 0;
    }
    if (a == "--upgrade-fd") {
      // Internal: how the running process hands its sockets to the binary it starts.
      if (i + 1 >= args.size()) return fail("--upgrade-fd needs a value");
      upgrade_fd = atoi(args[++i].c_str());
      if (upgrade_fd < 3) return fail("--upgrade-fd: not a descriptor");
      continue;
    }
    if (a == "-c" || a == "--config" || a == "--log-level" || a == "--unit-dir") {
      if (i + 1 >= args.size()) return fail(absl::StrFormat("%s needs a value", a));
      (a == "--log-level" ? log_level : a == "--unit-dir" ? service.unit_dir : path) = args[++i];
      service_option |= a == "--unit-dir";
      continue;
    }
    if (a == "--kind" || a == "--listener") {
      if (i + 1 >= args.size()) return fail(absl::StrFormat("%s needs a value", a));
      (a == "--kind" ? explain.kind : explain.listener) = args[++i];
      explain_option = true;
      continue;
    }
    if (a == "--json") {
      json = true;
      continue;
    }
    if (a == "--user" || a == "--no-systemctl") {
      (a == "--user" ? service.user : service.no_systemctl) = true;
      service_option = true;
      continue;
    }
    if (!a.empty() && a[0] == '-') {
      printUsage(stderr);
      return fail(absl::StrFormat("unknown option '%s'", a));
    }
    if (command.empty()) {
      command = a;
    } else if (command == "config" && a == "expand") {
      command = "config expand";
    } else if (command == "service" && service.action.empty()) {
      service.action = a;
    } else if (command == "policy" && policy_action.empty()) {
      policy_action = a;
    } else if (command == "policy") {
      policy_args.push_back(a);
    } else {
      printUsage(stderr);
      return fail(absl::StrFormat("unexpected argument '%s'", a));
    }
  }
  if (command.empty()) {
    printUsage(stderr);
    return 2;
  }
  if (json && command != "status") return fail("--json goes with `sluice status`");
  if (service_option && command != "service") {
    return fail("--user, --unit-dir and --no-systemctl go with `sluice service`");
  }
  if (command == "service") {
    if (service.action != "enable" && service.action != "disable" && service.action != "status") {
      printUsage(stderr);
      return fail("service: say enable, disable or status");
    }
    service.config_path = path;
    // Only a unit for a config that passes `check` is written.
    if (service.action != "enable") return runServiceCommand(service, nullptr);
  }
  if (explain_option && command != "policy") {
    return fail("--kind and --listener go with `sluice policy explain`");
  }
  if (command == "policy") return cmdPolicy(path, log_level, policy_action, policy_args, explain);
  if (command == "init") return cmdInit(path);
  if (command != "run" && command != "check" && command != "config expand" && command != "status" &&
      command != "service" && command != "reload" && command != "upgrade") {
    printUsage(stderr);
    return fail(absl::StrFormat("unknown command '%s'", command));
  }

  auto bootstrap = config::loadBootstrapFile(path);
  if (!bootstrap.ok()) {
    if (access(path.c_str(), F_OK) != 0 && command == "run") {
      return fail(absl::StrFormat("%s\n(no config yet? `sluice init -c %s` writes one)",
                                  bootstrap.status().message(), path));
    }
    return fail(std::string(bootstrap.status().message()));
  }
  if (command == "config expand") {
    absl::PrintF("%s", config::toYaml(*bootstrap));
    return 0;
  }
  std::string level_name = !log_level.empty() ? log_level : bootstrap->log_level();
  if (!level_name.empty()) {
    LogLevel level;
    if (!logger::parseLevel(level_name, level)) {
      return fail(
          absl::StrFormat("log_level: unknown level '%s' (error, warn, info, debug)", level_name));
    }
    logger::setLevel(level);
  }
  auto server_config = buildServerConfig(*bootstrap);
  if (!server_config.ok()) {
    return fail(absl::StrFormat("%s: %s", path, server_config.status().message()));
  }
  if (command == "status") return cmdStatus(path, **server_config, json);
  if (command == "reload") return cmdReload(path, **server_config);
  if (command == "upgrade") return cmdUpgrade(path, **server_config);
  if (upgrade_fd >= 0 && command != "run") return fail("--upgrade-fd goes with `sluice run`");
  if (command == "service") return runServiceCommand(service, server_config->get());
  if (command == "check") {
    absl::PrintF("configuration OK: %s (%d listeners, %d workers)\n", path,
                 (*server_config)->listeners.size(), (*server_config)->workers);
    return 0;
  }
  SLUICE_LOG(Info, "sluice %s starting with %s", kVersion, path);
  raiseFileLimit(**server_config);
  SLUICE_LOG(Info, "linked extensions: %s", extensions::describeLinked());
  Server server(*server_config, path);
  if (upgrade_fd >= 0) {
    auto handed = receiveHandedSockets(upgrade_fd, std::chrono::seconds(10));
    if (!handed.ok()) return fail(std::string(handed.status().message()));
    SLUICE_LOG(Info, "upgrade: %d sockets handed over by the running process", handed->size());
    server.inherit(std::move(*handed), upgrade_fd);
  }
  absl::Status started = server.start();
  if (!started.ok()) return fail(std::string(started.message()));
  server.run();
  return 0;
}

}  // namespace server
}  // namespace sluice
