#pragma once

#include <string_view>

namespace sluice {
namespace server {

// Tells the service manager that started sluice (systemd, Type=notify) what the server is
// doing, with a one-line STATUS= for `systemctl status`. Each does nothing when NOTIFY_SOCKET
// is unset, i.e. when no service manager waits for it. Main thread only, never per request.

// READY=1: every listener is bound and the workers run (also after a reload).
void notifyServiceReady(std::string_view status);
// RELOADING=1: a SIGHUP reload began; READY=1 follows when it is done.
void notifyServiceReloading(std::string_view status);
// STOPPING=1: a drain began; the process exits when it ends.
void notifyServiceStopping(std::string_view status);
// MAINPID=: a binary upgrade handed the service over to this process (the new binary).
void notifyServiceMainPid(int pid, std::string_view status);

}  // namespace server
}  // namespace sluice
