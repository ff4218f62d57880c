#pragma once

#include <string>

#include "source/server/listener_config.h"

namespace sluice {
namespace server {

// `sluice service enable|disable|status [--user] [--unit-dir DIR] [--no-systemctl]`.
struct ServiceCommand {
  std::string action;  // "enable", "disable" or "status"
  bool user = false;   // the user's service manager (systemctl --user)
  // Where the unit goes; empty: /etc/systemd/system, or ~/.config/systemd/user with --user.
  std::string unit_dir;
  // Only write (or remove) the unit; systemd is not asked.
  bool no_systemctl = false;
  std::string config_path;
};

// The unit's folder for a command (its --unit-dir or the service manager's own).
std::string serviceUnitDir(const ServiceCommand& command);

// Runs the command and returns the exit code. `config` is the checked configuration (enable
// needs it; disable and status do not). When systemctl fails (no service manager running),
// says what failed and what to run by hand, and returns 1.
int runServiceCommand(const ServiceCommand& command, const ServerConfig* config);

}  // namespace server
}  // namespace sluice
