#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/status.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/local_host.h"
#include "source/common/stats/stats.h"
#include "source/server/admin.h"
#include "source/server/listener_config.h"
#include "source/server/upgrade.h"
#include "source/server/worker.h"

namespace sluice {
namespace server {

// The main thread: binds every listen socket (one per worker per listener, SO_REUSEPORT),
// starts the workers, serves the admin endpoint and turns SIGINT/SIGTERM into a graceful drain.
class Server {
 public:
  // `config_path`: the file a reload reads again (empty: reloads are refused).
  explicit Server(ServerConfigSharedPtr config, std::string config_path = {});
  ~Server();

  // Before start() in a process a binary upgrade started: the sockets the old process handed
  // over (listeners whose address the config keeps take them instead of binding), and the
  // descriptor to tell it on once this one serves.
  void inherit(std::vector<HandedSocket> sockets, int upgrade_fd);
  // Binds and starts; an error names the listener and address (nothing is left running).
  absl::Status start();
  // Runs the main loop until the workers have drained (or the drain timeout passed).
  void run();
  void beginDrain();
  // Re-reads every TLS chain's certificates (SIGHUP, POST /reload_certificates); the text
  // reports each chain. False if any failed (those keep their old certificates).
  bool reloadCertificates(std::string& report);
  // Reads the config file again and, when it passes every check `sluice check` makes, runs it:
  // listeners whose address stays keep their sockets, new ones are bound before old ones
  // close, new connections get the new version while those open finish with theirs, and keys
  // and client addresses the new version no longer accepts are revoked. When the file is bad,
  // nothing changes. The text says what happened (or the error, with the key's path).
  struct ReloadResult {
    bool ok = false;
    std::string report;
  };
  ReloadResult reload();
  // Binary upgrade (SIGUSR2, POST /upgrade, `sluice upgrade`): starts the binary now at this
  // one's path with the same config, hands it every listen socket, and drains once it serves.
  // If it fails, this process serves on. The text says what started (or why not).
  ReloadResult upgrade();
  static void onHangup(evutil_socket_t, short, void* arg);
  // Addresses actually bound, per listener (port 0 resolved).
  const std::vector<network::Address>& boundAddresses() const { return bound_; }

 private:
  static void onSignal(evutil_socket_t signal, short, void* arg);
  void onWorkerExit(uint32_t index);
  std::string serverInfoJson() const;
  std::string listenersJson() const;
  std::string configDumpJson() const;
  // The one-line STATUS= told to the service manager while serving.
  std::string servingStatus() const;
  // The sockets of the next config's listeners, per worker (or an error, nothing left open).
  absl::StatusOr<std::vector<std::vector<ListenerSocket>>> planListeners(
      const ServerConfig& next, std::vector<network::Address>& bound);
  // Revokes the grants the next config no longer accepts; returns their names.
  std::vector<std::string> revokeGrants(const ServerConfig& next);
  // Settings that only a restart changes, and how the next config differs in them.
  std::vector<std::string> restartOnlyChanges(const ServerConfig& next) const;
  void writePidFile();
  void closeListenDups();
  // Listen sockets for the next listeners, per worker: the inherited ones when their address
  // matches, else new ones.
  absl::Status bindListeners(std::vector<std::vector<int>>& fds);

  ServerConfigSharedPtr config_;
  const std::string config_path_;
  // Grants no listener of the running config holds any more that were not revoked (a removed
  // listener's keys that another listener still takes): connections may still hold them, so
  // every reload checks them again.
  // With the name of the listener they came from.
  std::vector<std::pair<std::string, proxy::KeyGrantSharedPtr>> detached_grants_;
  uint64_t config_version_ = 1;
  std::string pid_file_written_;
  event::Dispatcher dispatcher_;
  std::unique_ptr<Admin> admin_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<network::Address> bound_;
  // A duplicate of every listen socket, [listener][worker]: what an upgrade hands over (the
  // workers own theirs and may close them at any time). Closed at a drain.
  std::vector<std::vector<int>> listen_dups_;
  std::vector<HandedSocket> inherited_;
  int upgrade_fd_ = -1;
  std::unique_ptr<UpgradeHandoff> upgrade_;
  struct event* sigusr2_ = nullptr;  // binary upgrade
  struct event* sigint_ = nullptr;
  struct event* sigterm_ = nullptr;
  struct event* sighup_ = nullptr;
  struct event* sigusr1_ = nullptr;  // reopens the access log
  std::unique_ptr<event::Timer> drain_timer_;
  std::unique_ptr<event::Timer> memory_release_timer_;
  // Arms it for the running config's memory_release_interval (0: off).
  void armMemoryRelease();
  // How often the host's interface addresses are re-read.
  static constexpr std::chrono::seconds kHostAddressInterval{2};
  std::unique_ptr<event::Timer> host_address_timer_;
  size_t host_address_count_ = 0;
  stats::Gauge host_addresses_ = stats::Store::get().gauge(
      "server.host_addresses",
      "Addresses of this host (what the destination guard refuses as sluice itself).");
  stats::Counter host_address_changes_ = stats::Store::get().counter(
      "server.host_address_changes", "Changes seen in the host's addresses.");
  stats::Counter reloads_done_ =
      stats::Store::get().counter("reload.done", "Reloads that took a new configuration.");
  stats::Counter reloads_refused_ = stats::Store::get().counter(
      "reload.refused",
      "Reloads refused: the file failed its checks, or a new address could "
      "not be bound (the running configuration stayed).");
  stats::Counter keys_revoked_ = stats::Store::get().counter(
      "reload.keys_revoked", "API keys reloads took away (refused from the reload on).");
  stats::Counter upgrades_ = stats::Store::get().counter(
      "upgrade.done", "Binary upgrades handed over to a new process (this one then drained).");
  stats::Counter upgrades_failed_ = stats::Store::get().counter(
      "upgrade.failed", "Binary upgrades whose new process did not serve (this one served on).");
  stats::Gauge config_version_gauge_ = stats::Store::get().gauge(
      "reload.config_version", "The running configuration's version: 1 at start, +1 a reload.");
  std::chrono::steady_clock::time_point started_at_;
  uint32_t workers_exited_ = 0;
  bool running_ = false;
  bool draining_ = false;
  // Trims that handed memory back (malloc_trim returned 1).
  stats::Counter memory_released_ = stats::Store::get().counter(
      "server.memory_released", "Trims that handed free heap memory back to the system.");
};

// A listening TCP socket with SO_REUSEPORT (several per address: one per worker) and TCP_NODELAY,
// which the sockets it accepts inherit.
absl::StatusOr<int> createListenSocket(const network::Address& address, uint32_t backlog);

}  // namespace server
}  // namespace sluice
