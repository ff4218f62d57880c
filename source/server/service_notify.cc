#include "source/server/service_notify.h"

#include <cstring>
#include <string>

#include <time.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "systemd/sd-daemon.h"

namespace sluice {
namespace server {

namespace {

void notify(std::string_view state, std::string_view status) {
  // One assignment per line: a newline in the status would start another.
  std::string line(status);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  const std::string message = absl::StrFormat("%s\nSTATUS=%s", state, line);
  // 0 when NOTIFY_SOCKET is unset; negative when the socket is gone.
  const int rc = sd_notify(0, message.c_str());
  if (rc < 0) {
    SLUICE_LOG(Warn, "cannot tell the service manager %s: %s", state, strerror(-rc));
  }
}

}  // namespace

void notifyServiceReady(std::string_view status) { notify("READY=1", status); }

void notifyServiceReloading(std::string_view status) {
  // systemd 253+ pairs RELOADING=1 with the time it was sent; older ones ignore the field.
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t usec = uint64_t(now.tv_sec) * 1000000 + uint64_t(now.tv_nsec) / 1000;
  notify(absl::StrFormat("RELOADING=1\nMONOTONIC_USEC=%d", usec), status);
}

void notifyServiceStopping(std::string_view status) { notify("STOPPING=1", status); }

void notifyServiceMainPid(int pid, std::string_view status) {
  notify(absl::StrFormat("MAINPID=%d", pid), status);
}

}  // namespace server
}  // namespace sluice
