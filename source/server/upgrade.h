#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"

namespace sluice {
namespace server {

// A binary upgrade hands the running process's listen sockets to a new binary without closing
// them, so no connection is refused: the old process starts the new binary with one end of a
// SOCK_SEQPACKET socket pair, sends every listen socket over it (SCM_RIGHTS, one per message,
// with what it is), and once the new process says it serves, drains and exits.

// One listen socket as it travels: a listener's (one per worker) or the admin endpoint's.
struct HandedSocket {
  enum class Kind : uint8_t { Listener, Admin };
  Kind kind = Kind::Listener;
  // The listener's configured address (what the new config is matched on), or the admin's.
  network::Address address;
  int fd = -1;
};

// The new process's side. Reads what the old one sends on `fd` (at most `timeout`); the
// caller owns the descriptors received.
absl::StatusOr<std::vector<HandedSocket>> receiveHandedSockets(int fd,
                                                               std::chrono::milliseconds timeout);
// Tells the old process that the new one serves (then closes `fd`).
void announceServing(int fd);

// The old process's side: one upgrade at a time, on the main thread.
class UpgradeHandoff {
 public:
  // `on_serving(pid)`: the new process serves (the old one should drain now). `on_failed`:
  // it exited, said nothing in time, or could not be started; the old one serves on.
  UpgradeHandoff(event::Dispatcher& dispatcher, std::function<void(pid_t)> on_serving,
                 std::function<void(const std::string&)> on_failed);
  ~UpgradeHandoff();

  // Starts `argv` (argv[0] the binary) with "--upgrade-fd N" appended, sends `sockets` (the
  // caller keeps its descriptors) and waits up to `timeout` for the new process to serve.
  absl::StatusOr<pid_t> start(const std::vector<std::string>& argv,
                              const std::vector<HandedSocket>& sockets,
                              std::chrono::milliseconds timeout);
  bool running() const { return fd_ >= 0; }

 private:
  void onReadable();
  void onSocketEvent(uint32_t) { onReadable(); }
  void finish(bool serving, const std::string& why);

  event::Dispatcher& dispatcher_;
  std::function<void(pid_t)> on_serving_;
  std::function<void(const std::string&)> on_failed_;
  int fd_ = -1;
  pid_t child_ = -1;
  std::unique_ptr<event::FileEvent> event_;
  std::unique_ptr<event::Timer> timer_;
};

// The path of the running binary: an upgrade starts what lies there now (the new binary moved
// over the old one shows as "<path> (deleted)" in /proc/self/exe; the path is what counts).
std::string runningBinaryPath();

}  // namespace server
}  // namespace sluice
