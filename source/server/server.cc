#include "source/server/server.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>

#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"

#include "source/common/common/json.h"
#include "source/common/common/logger.h"
#include "source/common/common/version.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/redact.h"
#include "source/common/extensions/registry.h"
#include "source/common/upstream/upstream_budget.h"
#include "source/server/ban_endpoints.h"
#include "source/server/service_notify.h"

namespace sluice {
namespace server {

namespace {
// How long a reload waits for the workers to take the new config (each does at its loop's next
// turn, which a busy worker reaches within milliseconds).
constexpr std::chrono::milliseconds kReloadApplyWait{5000};

// Counts the workers that have taken a reload's config.
class WorkersApplied {
 public:
  explicit WorkersApplied(size_t workers) : left_(workers) {}
  void done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (left_ > 0 && --left_ == 0) cv_.notify_all();
  }
  // Whether all had within `limit`.
  bool wait(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, limit, [this] { return left_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t left_;
};
}  // namespace

absl::StatusOr<int> createListenSocket(const network::Address& address, uint32_t backlog) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  // Accepted sockets inherit TCP_NODELAY from the listening one: no setsockopt per connection.
  network::setNoDelay(fd);
  if (::bind(fd, address.sockaddr_ptr(), address.length()) != 0 ||
      ::listen(fd, static_cast<int>(backlog)) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s", address.asString(), strerror(err)));
  }
  return fd;
}

namespace {

// SO_REUSEPORT would let a second process share the port silently; a plain bind first
// proves the address is free.
absl::Status checkAddressFree(const network::Address& address) {
  if (address.port() == 0) return absl::OkStatus();
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  int rc = ::bind(fd, address.sockaddr_ptr(), address.length());
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s", address.asString(), strerror(err)));
  }
  return absl::OkStatus();
}

network::Address localAddress(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

}  // namespace

Server::Server(ServerConfigSharedPtr config, std::string config_path)
    : config_(std::move(config)), config_path_(std::move(config_path)) {
  config_version_gauge_.add(1);
}

Server::~Server() {
  for (auto& w : workers_) w->stop();
  workers_.clear();
  if (sigint_ != nullptr) event_free(sigint_);
  if (sigterm_ != nullptr) event_free(sigterm_);
  if (sighup_ != nullptr) event_free(sighup_);
  if (sigusr1_ != nullptr) event_free(sigusr1_);
  if (sigusr2_ != nullptr) event_free(sigusr2_);
  upgrade_.reset();
  closeListenDups();
  admin_.reset();
  upstream::AccessLog::get().stop();
  if (!pid_file_written_.empty()) ::unlink(pid_file_written_.c_str());
}

void Server::writePidFile() {
  if (config_->pid_file == pid_file_written_) return;
  if (!pid_file_written_.empty()) ::unlink(pid_file_written_.c_str());
  pid_file_written_.clear();
  if (config_->pid_file.empty()) return;
  std::ofstream out(config_->pid_file, std::ios::trunc);
  out << getpid() << "\n";
  out.close();
  if (!out) {
    SLUICE_LOG(Warn, "pid_file: cannot write %s", config_->pid_file);
    return;
  }
  pid_file_written_ = config_->pid_file;
}

void Server::inherit(std::vector<HandedSocket> sockets, int upgrade_fd) {
  inherited_ = std::move(sockets);
  upgrade_fd_ = upgrade_fd;
}

absl::Status Server::bindListeners(std::vector<std::vector<int>>& fds) {
  const uint32_t n = static_cast<uint32_t>(fds.size());
  auto close_all = [&fds] {
    for (auto& per_worker : fds) {
      for (int fd : per_worker) ::close(fd);
      per_worker.clear();
    }
  };
  for (const ListenerConfigSharedPtr& listener : config_->listeners) {
    // Sockets a binary upgrade handed over for this address: still listening, their queues
    // intact.
    std::vector<int> handed;
    for (HandedSocket& h : inherited_) {
      if (h.kind == HandedSocket::Kind::Listener && h.fd >= 0 && h.address == listener->address &&
          handed.size() < n) {
        handed.push_back(h.fd);
        h.fd = -1;
      }
    }
    network::Address address = listener->address;
    if (handed.empty()) {
      absl::Status free = checkAddressFree(listener->address);
      if (!free.ok()) {
        close_all();
        return absl::UnavailableError(
            absl::StrFormat("listener '%s': %s", listener->name, free.message()));
      }
    } else {
      address = localAddress(handed[0]);
      // An older binary may have left it off: its accepted sockets must get it too.
      for (int fd : handed) network::setNoDelay(fd);
    }
    for (uint32_t w = 0; w < n; ++w) {
      if (w < handed.size()) {
        fds[w].push_back(handed[w]);
        continue;
      }
      auto fd = createListenSocket(address, listener->backlog);
      if (!fd.ok()) {
        for (size_t r = w; r < handed.size(); ++r) ::close(handed[r]);
        close_all();
        return absl::UnavailableError(
            absl::StrFormat("listener '%s': %s", listener->name, fd.status().message()));
      }
      // With port 0 the first socket picks the port; the others join it.
      if (w == 0) address = localAddress(*fd);
      fds[w].push_back(*fd);
    }
    bound_.push_back(address);
  }
  return absl::OkStatus();
}

absl::Status Server::start() {
  started_at_ = std::chrono::steady_clock::now();
  signal(SIGPIPE, SIG_IGN);
  // An upgrade keeps the worker count: one worker per handed socket of a listener.
  uint32_t n = config_->workers;
  if (!inherited_.empty()) {
    for (const ListenerConfigSharedPtr& listener : config_->listeners) {
      uint32_t count = 0;
      for (const HandedSocket& h : inherited_) {
        count += h.kind == HandedSocket::Kind::Listener && h.address == listener->address;
      }
      if (count > 0) {
        if (count != n) {
          SLUICE_LOG(Warn,
                     "upgrade: %d workers, as many as the sockets handed over (workers: %d "
                     "takes effect at the next start)",
                     count, n);
        }
        n = count;
        break;
      }
    }
  }
  // fds[worker][listener]
  std::vector<std::vector<int>> fds(n);
  auto close_all = [&fds] {
    for (auto& per_worker : fds) {
      for (int fd : per_worker) ::close(fd);
    }
  };
  absl::Status bound = bindListeners(fds);
  if (!bound.ok()) return bound;

  if (config_->admin_address.valid()) {
    AdminHandlers handlers;
    handlers.ready = [this] { return running_ && !draining_; };
    handlers.config_dump = [this] { return configDumpJson(); };
    handlers.server_info = [this] { return serverInfoJson(); };
    handlers.listeners = [this] { return listenersJson(); };
    handlers.drain = [this] { beginDrain(); };
    // Through config_: a reload may bring a new table.
    addBanEndpoints([this] { return config_->bans; }, handlers.extra);
    AdminEndpoint certificates;
    certificates.method = AdminEndpoint::Method::Post;
    certificates.help = "re-read only the TLS certificates and keys";
    certificates.handler = [this](const std::map<std::string, std::string>&) {
      std::string report;
      bool ok = reloadCertificates(report);
      return AdminEndpoint::Response{ok ? 200 : 500, report, false};
    };
    handlers.extra["/reload_certificates"] = std::move(certificates);
    AdminEndpoint reload;
    reload.method = AdminEndpoint::Method::Post;
    reload.help = "read the config file again and run it when it passes its checks (like SIGHUP)";
    reload.handler = [this](const std::map<std::string, std::string>&) {
      ReloadResult result = this->reload();
      return AdminEndpoint::Response{result.ok ? 200 : 400, result.report, false};
    };
    handlers.extra["/reload"] = std::move(reload);
    AdminEndpoint upgrade;
    upgrade.method = AdminEndpoint::Method::Post;
    upgrade.help =
        "start the binary now at this one's path, hand it the sockets, drain (like "
        "SIGUSR2)";
    upgrade.handler = [this](const std::map<std::string, std::string>&) {
      ReloadResult result = this->upgrade();
      return AdminEndpoint::Response{result.ok ? 202 : 409, result.report, false};
    };
    handlers.extra["/upgrade"] = std::move(upgrade);
    admin_ = std::make_unique<Admin>(dispatcher_, std::move(handlers));
    int handed_admin = -1;
    for (HandedSocket& h : inherited_) {
      if (h.kind == HandedSocket::Kind::Admin && h.fd >= 0 && h.address == config_->admin_address) {
        handed_admin = h.fd;
        h.fd = -1;
      }
    }
    absl::Status s =
        handed_admin >= 0 ? admin_->adopt(handed_admin) : admin_->bind(config_->admin_address);
    if (!s.ok()) {
      close_all();
      return absl::UnavailableError(absl::StrFormat("admin: %s", s.message()));
    }
  }

  dispatcher_.setIoBatching(config_->io_uring);
  sigint_ = evsignal_new(dispatcher_.base(), SIGINT, &Server::onSignal, this);
  sigterm_ = evsignal_new(dispatcher_.base(), SIGTERM, &Server::onSignal, this);
  evsignal_add(sigint_, nullptr);
  evsignal_add(sigterm_, nullptr);
  sighup_ = evsignal_new(dispatcher_.base(), SIGHUP, &Server::onHangup, this);
  sigusr1_ = evsignal_new(
      dispatcher_.base(), SIGUSR1,
      [](evutil_socket_t, short, void*) { upstream::AccessLog::get().reopen(); }, nullptr);
  evsignal_add(sigusr1_, nullptr);
  evsignal_add(sighup_, nullptr);
  sigusr2_ = evsignal_new(
      dispatcher_.base(), SIGUSR2,
      [](evutil_socket_t, short, void* arg) {
        SLUICE_LOG(Info, "SIGUSR2 received: binary upgrade");
        static_cast<Server*>(arg)->upgrade();
      },
      this);
  evsignal_add(sigusr2_, nullptr);

  // Before the workers: each takes a line buffer when the log is on.
  absl::Status log = upstream::AccessLog::get().configure(config_->access_log);
  if (!log.ok()) {
    close_all();
    return log;
  }
  // Handed-over sockets the config has no listener for: their queues are given up.
  for (HandedSocket& h : inherited_) {
    if (h.fd >= 0) ::close(h.fd);
  }
  inherited_.clear();
  listen_dups_.assign(config_->listeners.size(), std::vector<int>(n, -1));
  for (uint32_t w = 0; w < n; ++w) {
    for (size_t i = 0; i < config_->listeners.size(); ++i) {
      listen_dups_[i][w] = ::fcntl(fds[w][i], F_DUPFD_CLOEXEC, 0);
    }
  }
  for (uint32_t w = 0; w < n; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, config_, fds[w], [this](uint32_t index) {
      dispatcher_.post([this, index] { onWorkerExit(index); });
    }));
  }
  for (auto& w : workers_) w->start();
  // Ready (/ready, READY=1) means every worker is in its loop, named and pinned.
  for (auto& w : workers_) w->waitStarted();
  running_ = true;
  // Workers allocate per connection, never per request: the arena locks malloc_trim takes are
  // met only by connections opening or closing at that moment.
  memory_release_timer_ = std::make_unique<event::Timer>(dispatcher_, [this] {
    if (malloc_trim(0) != 0) memory_released_.inc();
    armMemoryRelease();
  });
  armMemoryRelease();
  // The destination guard treats this host's addresses as sluice itself: follow interfaces
  // coming and going.
  upstream::UpstreamBudget& budget = upstream::UpstreamBudget::get();
  budget.configure(config_->upstream_per_client, config_->descriptor_reserve);
  SLUICE_LOG(Info, "upstream sockets: at most %d per client, %d descriptors kept back",
             budget.perClient(), budget.reserve());
  host_address_count_ = network::HostAddresses::get().size();
  host_addresses_.add(static_cast<int64_t>(host_address_count_));
  host_address_timer_ = std::make_unique<event::Timer>(dispatcher_, [this] {
    network::HostAddresses& host = network::HostAddresses::get();
    if (host.refresh()) {
      const size_t count = host.size();
      host_address_changes_.inc();
      host_addresses_.add(static_cast<int64_t>(count) - static_cast<int64_t>(host_address_count_));
      host_address_count_ = count;
      SLUICE_LOG(Info, "the host's interface addresses changed: %d now", count);
    }
    // A raised or lowered open-files limit (prlimit) moves the reserve's line.
    upstream::UpstreamBudget::get().refreshDescriptorLimit();
    // Quotas: new periods, and the counts saved to the state file (this thread, not a worker).
    config_->policy->tickQuotas();
    host_address_timer_->enable(kHostAddressInterval);
  });
  host_address_timer_->enable(kHostAddressInterval);
  for (size_t i = 0; i < config_->listeners.size(); ++i) {
    SLUICE_LOG(Info, "listener '%s' on %s (%d workers)", config_->listeners[i]->name,
               bound_[i].asString(), n);
  }
  if (admin_) SLUICE_LOG(Info, "admin on http://%s/", admin_->boundAddress().asString());
  writePidFile();
  notifyServiceReady(servingStatus());
  if (upgrade_fd_ >= 0) {
    // The old process drains once it hears this.
    announceServing(upgrade_fd_);
    upgrade_fd_ = -1;
    SLUICE_LOG(Info, "upgrade: serving on the handed-over sockets; the old process drains");
  }
  return absl::OkStatus();
}

void Server::armMemoryRelease() {
  if (memory_release_timer_ == nullptr) return;
  if (config_->memory_release_interval.count() > 0) {
    memory_release_timer_->enable(config_->memory_release_interval);
  } else {
    memory_release_timer_->disable();
  }
}

void Server::closeListenDups() {
  for (auto& per_listener : listen_dups_) {
    for (int fd : per_listener) {
      if (fd >= 0) ::close(fd);
    }
  }
  listen_dups_.clear();
}

Server::ReloadResult Server::upgrade() {
  if (draining_) return {false, "draining: no upgrade\n"};
  if (config_path_.empty()) return {false, "started without a config file: nothing to upgrade\n"};
  if (upgrade_ && upgrade_->running()) return {false, "an upgrade is already under way\n"};
  const std::string binary = runningBinaryPath();
  if (binary.empty()) return {false, "cannot tell the path of the running binary\n"};
  std::vector<HandedSocket> sockets;
  for (size_t i = 0; i < config_->listeners.size() && i < listen_dups_.size(); ++i) {
    for (int fd : listen_dups_[i]) {
      sockets.push_back({HandedSocket::Kind::Listener, config_->listeners[i]->address, fd});
    }
  }
  if (admin_ && admin_->listenFd() >= 0) {
    sockets.push_back({HandedSocket::Kind::Admin, config_->admin_address, admin_->listenFd()});
  }
  if (!upgrade_) {
    upgrade_ = std::make_unique<UpgradeHandoff>(
        dispatcher_,
        [this](pid_t pid) {
          upgrades_.inc();
          SLUICE_LOG(Info, "upgrade: pid %d serves on the sockets; this process drains and exits",
                     pid);
          notifyServiceMainPid(pid, absl::StrFormat("upgraded: pid %d serves", pid));
          // The new process wrote its own pid there.
          pid_file_written_.clear();
          if (admin_) admin_->stopListening();
          beginDrain();
        },
        [this](const std::string& why) {
          upgrades_failed_.inc();
          SLUICE_LOG(Error, "upgrade failed, this process serves on: %s", why);
        });
  }
  auto pid =
      upgrade_->start({binary, "run", "-c", config_path_}, sockets, std::chrono::seconds(30));
  if (!pid.ok()) {
    upgrades_failed_.inc();
    SLUICE_LOG(Error, "upgrade failed, this process serves on: %s", pid.status().message());
    return {false, std::string(pid.status().message()) + "\n"};
  }
  SLUICE_LOG(Info, "upgrade: started %s as pid %d with %d sockets", binary, *pid, sockets.size());
  return {true, absl::StrFormat("upgrade started: %s as pid %d\n", binary, *pid)};
}

std::string Server::servingStatus() const {
  std::string listeners;
  for (size_t i = 0; i < config_->listeners.size(); ++i) {
    absl::StrAppendFormat(&listeners, "%s%s on %s", i == 0 ? "" : ", ", config_->listeners[i]->name,
                          bound_[i].asString());
  }
  return absl::StrFormat("serving: %s; workers: %d", listeners, workers_.size());
}

void Server::run() {
  dispatcher_.run();
  for (auto& w : workers_) w->join();
  // What the quotas counted until the workers stopped.
  config_->policy->tickQuotas();
  // The workers handed over their last lines as they exited.
  upstream::AccessLog::get().stop();
  SLUICE_LOG(Info, "stopped");
}

void Server::onSignal(evutil_socket_t signal, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  if (self->draining_) {
    SLUICE_LOG(Warn, "second %s: stopping now", signal == SIGINT ? "SIGINT" : "SIGTERM");
    for (auto& w : self->workers_) w->stop();
    return;
  }
  SLUICE_LOG(Info, "%s received", signal == SIGINT ? "SIGINT" : "SIGTERM");
  self->beginDrain();
}

void Server::onHangup(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  SLUICE_LOG(Info, "SIGHUP received: reloading %s", self->config_path_);
  // For logrotate's sake whether or not the reload goes through (a reload reopens it too).
  upstream::AccessLog::get().reopen();
  self->reload();
}

Server::ReloadResult Server::reload() {
  if (draining_) return {false, "draining: no reload\n"};
  if (config_path_.empty()) return {false, "started without a config file: nothing to reload\n"};
  notifyServiceReloading("reloading " + config_path_);
  auto refuse = [this](std::string message) {
    reloads_refused_.inc();
    SLUICE_LOG(Error, "reload refused, the running configuration (version %d) stays: %s",
               config_version_, message);
    notifyServiceReady(servingStatus());
    return ReloadResult{false, message + "\n"};
  };
  // Stat names are never forgotten: names a reload adds (listeners, chains, keys) take room
  // for good, and a full store would stop the process.
  constexpr uint32_t kStatsRoom = 1024;
  if (!stats::Store::get().hasRoomFor({}, kStatsRoom, 0)) {
    return refuse(absl::StrFormat(
        "the stats store has room for fewer than %d more stats (names earlier reloads added "
        "hold theirs): restart to take a new config",
        kStatsRoom));
  }
  auto bootstrap = config::loadBootstrapFile(config_path_);
  if (!bootstrap.ok()) return refuse(std::string(bootstrap.status().message()));
  auto built = buildServerConfig(*bootstrap, config_.get());
  if (!built.ok()) {
    return refuse(absl::StrFormat("%s: %s", config_path_, built.status().message()));
  }
  ServerConfigSharedPtr next = std::move(*built);
  // Checked now, set only once the reload goes through: a refused reload changes nothing.
  const bool new_level =
      !bootstrap->log_level().empty() && bootstrap->log_level() != config_->bootstrap.log_level();
  LogLevel level;
  if (new_level && !logger::parseLevel(bootstrap->log_level(), level)) {
    return refuse(absl::StrFormat("%s: log_level: unknown level '%s' (error, warn, info, debug)",
                                  config_path_, bootstrap->log_level()));
  }
  absl::Status sink = upstream::AccessLog::checkSink(next->access_log);
  if (!sink.ok()) return refuse(absl::StrFormat("%s: %s", config_path_, sink.message()));
  std::vector<network::Address> bound;
  auto sockets = planListeners(*next, bound);
  if (!sockets.ok()) return refuse(std::string(sockets.status().message()));

  // Checked and bound: from here on the new version runs.
  if (new_level) logger::setLevel(level);
  const std::vector<std::string> later = restartOnlyChanges(*next);
  const std::vector<std::string> revoked = revokeGrants(*next);
  keys_revoked_.add(revoked.size());
  for (const ListenerConfigSharedPtr& listener : next->listeners) {
    listener->limiter->setLimits(listener->max_connections, listener->max_connections_per_client);
  }
  // Limiters carried from the running version (tokens, requests in flight) take the new limits.
  next->policy->applyLimits();
  if (next->bans != nullptr && config_->bans != nullptr && next->bans != config_->bans) {
    const size_t moved = next->bans->adoptBans(*config_->bans);
    if (moved > 0) SLUICE_LOG(Info, "reload: %d bans in force carried to the new options", moved);
  }
  upstream::UpstreamBudget::get().configure(next->upstream_per_client, next->descriptor_reserve);
  upstream::AccessLog::get().reconfigure(next->access_log);
  std::vector<std::string> added, removed, kept;
  for (size_t i = 0; i < next->listeners.size(); ++i) {
    bool existed = false;
    for (const auto& l : config_->listeners) existed |= l->name == next->listeners[i]->name;
    (existed ? kept : added).push_back(next->listeners[i]->name);
  }
  for (const auto& l : config_->listeners) {
    bool stays = false;
    for (const auto& n : next->listeners) stays |= n->name == l->name;
    if (!stays) removed.push_back(l->name);
  }
  // The duplicates follow: kept listeners keep theirs, new ones get some, removed ones close.
  std::vector<std::vector<int>> dups(next->listeners.size());
  for (size_t i = 0; i < next->listeners.size(); ++i) {
    const ListenerSocket& first = (*sockets)[0][i];
    if (first.keep >= 0 && static_cast<size_t>(first.keep) < listen_dups_.size()) {
      dups[i] = std::move(listen_dups_[first.keep]);
    } else {
      for (const auto& per_worker : *sockets) {
        dups[i].push_back(::fcntl(per_worker[i].fd, F_DUPFD_CLOEXEC, 0));
      }
    }
  }
  closeListenDups();
  listen_dups_ = std::move(dups);
  config_ = next;
  armMemoryRelease();
  bound_ = std::move(bound);
  ++config_version_;
  config_version_gauge_.add(1);
  reloads_done_.inc();
  const bool keys_revoked = !revoked.empty();
  auto applied = std::make_shared<WorkersApplied>(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    workers_[w]->applyConfig(next, std::move((*sockets)[w]), keys_revoked,
                             [applied] { applied->done(); });
  }
  // The answer (and SIGHUP's return to the loop) waits until every worker runs the new config:
  // a request sent after a reload's 200 meets the new keys, groups and listeners.
  const bool all_applied = applied->wait(kReloadApplyWait);
  writePidFile();

  std::string report =
      absl::StrFormat("config version %d from %s\n", config_version_, config_path_);
  for (size_t i = 0; i < config_->listeners.size(); ++i) {
    absl::StrAppendFormat(&report, "listener %s on %s\n", config_->listeners[i]->name,
                          bound_[i].asString());
  }
  if (!added.empty()) absl::StrAppendFormat(&report, "added: %s\n", absl::StrJoin(added, ", "));
  if (!removed.empty()) {
    absl::StrAppendFormat(&report, "removed: %s (open connections finish)\n",
                          absl::StrJoin(removed, ", "));
  }
  if (!revoked.empty()) {
    absl::StrAppendFormat(&report,
                          "keys revoked: %s (refused from now on; what they opened closes in %d "
                          "ms)\n",
                          absl::StrJoin(revoked, ", "),
                          static_cast<int>(config_->revoke_grace.count()));
  }
  for (const std::string& note : later) absl::StrAppendFormat(&report, "%s\n", note);
  if (!all_applied) {
    absl::StrAppendFormat(&report, "not every worker had taken the new config after %d ms\n",
                          static_cast<int>(kReloadApplyWait.count()));
    SLUICE_LOG(Warn, "reload: not every worker had taken the new config after %d ms",
               static_cast<int>(kReloadApplyWait.count()));
  }
  SLUICE_LOG(Info, "reloaded: config version %d (%d listeners%s%s%s)", config_version_,
             config_->listeners.size(),
             added.empty() ? "" : "; added " + absl::StrJoin(added, ", "),
             removed.empty() ? "" : "; removed " + absl::StrJoin(removed, ", "),
             revoked.empty() ? "" : "; keys revoked: " + absl::StrJoin(revoked, ", "));
  for (const std::string& note : later) SLUICE_LOG(Warn, "reload: %s", note);
  notifyServiceReady(servingStatus());
  return ReloadResult{true, report};
}

absl::StatusOr<std::vector<std::vector<ListenerSocket>>> Server::planListeners(
    const ServerConfig& next, std::vector<network::Address>& bound) {
  std::vector<std::vector<ListenerSocket>> plan(workers_.size(),
                                                std::vector<ListenerSocket>(next.listeners.size()));
  std::vector<bool> kept(config_->listeners.size(), false);
  std::vector<int> opened;
  auto fail = [&opened](std::string message) -> absl::Status {
    for (int fd : opened) ::close(fd);
    return absl::UnavailableError(std::move(message));
  };
  bound.clear();
  for (size_t i = 0; i < next.listeners.size(); ++i) {
    const ListenerConfig& listener = *next.listeners[i];
    // The same address keeps its sockets (and the connections waiting in their queues), under
    // whichever name.
    int keep = -1;
    for (size_t j = 0; j < config_->listeners.size() && keep < 0; ++j) {
      if (!kept[j] && config_->listeners[j]->address == listener.address)
        keep = static_cast<int>(j);
    }
    if (keep >= 0) {
      kept[keep] = true;
      for (auto& per_worker : plan) per_worker[i].keep = keep;
      bound.push_back(bound_[keep]);
      continue;
    }
    absl::Status free = checkAddressFree(listener.address);
    if (!free.ok()) {
      return fail(absl::StrFormat("listener '%s': %s", listener.name, free.message()));
    }
    network::Address address = listener.address;
    for (size_t w = 0; w < workers_.size(); ++w) {
      auto fd = createListenSocket(address, listener.backlog);
      if (!fd.ok()) {
        return fail(absl::StrFormat("listener '%s': %s", listener.name, fd.status().message()));
      }
      opened.push_back(*fd);
      if (w == 0) address = localAddress(*fd);
      plan[w][i].fd = *fd;
    }
    bound.push_back(address);
  }
  return plan;
}

std::vector<std::string> Server::revokeGrants(const ServerConfig& next) {
  auto named = [&next](const std::string& name) -> const ListenerConfig* {
    for (const ListenerConfigSharedPtr& l : next.listeners) {
      if (l->name == name) return l.get();
    }
    return nullptr;
  };
  auto heldByNext = [&next](const proxy::KeyGrantSharedPtr& grant) {
    for (const ListenerConfigSharedPtr& l : next.listeners) {
      for (const auto& keys : l->grants.key_sets) {
        for (const proxy::KeyGrantSharedPtr& k : keys) {
          if (k == grant) return true;
        }
      }
    }
    return false;
  };
  std::set<std::string> revoked;
  std::vector<std::pair<std::string, proxy::KeyGrantSharedPtr>> detached;
  // A grant the next config does not hold is revoked unless its listener (same name) still
  // takes its key (renamed, or its listener lets anyone in now): then it stays detached and
  // is checked again at every reload while connections hold it.
  auto consider = [&](const std::string& listener, const proxy::KeyGrantSharedPtr& grant) {
    if (grant->revoked() || heldByNext(grant)) return;
    const ListenerConfig* same = named(listener);
    if (same != nullptr && same->grants.accepts(grant->digest())) {
      detached.emplace_back(listener, grant);
      return;
    }
    grant->revoke();
    revoked.insert(grant->name());
  };
  for (const ListenerConfigSharedPtr& running : config_->listeners) {
    for (const proxy::KeyGrantSharedPtr& grant : running->grants.all()) {
      consider(running->name, grant);
    }
  }
  for (const auto& [listener, grant] : detached_grants_) {
    // Only this list holds it: nothing is left to revoke.
    if (grant.use_count() > 1) consider(listener, grant);
  }
  detached_grants_ = std::move(detached);
  return std::vector<std::string>(revoked.begin(), revoked.end());
}

std::vector<std::string> Server::restartOnlyChanges(const ServerConfig& next) const {
  using google::protobuf::util::MessageDifferencer;
  std::vector<std::string> notes;
  const config::v1::Bootstrap& now = config_->bootstrap;
  const config::v1::Bootstrap& then = next.bootstrap;
  if (next.workers != workers_.size()) {
    notes.push_back(absl::StrFormat("workers: %d takes effect at the next start (%d run now)",
                                    next.workers, workers_.size()));
  }
  if (next.pin_workers != config_->pin_workers) {
    notes.push_back("pin_workers: takes effect at the next start");
  }
  if (next.io_uring != config_->io_uring) {
    notes.push_back("disable_io_uring: takes effect at the next start");
  }
  if (next.reads_by_completion != config_->reads_by_completion) {
    notes.push_back("reads_by_completion: takes effect at the next start");
  }
  if (!(next.admin_address == config_->admin_address)) {
    notes.push_back("admin.address: takes effect at the next start");
  }
  if (!MessageDifferencer::Equals(now.dns(), then.dns())) {
    notes.push_back("dns: takes effect at the next start");
  }
  if (!MessageDifferencer::Equals(now.upstream_pool(), then.upstream_pool())) {
    notes.push_back("upstream_pool: takes effect at the next start");
  }
  return notes;
}

bool Server::reloadCertificates(std::string& report) {
  bool ok = true;
  for (const auto& listener : config_->listeners) {
    for (const FilterChainConfig& chain : listener->chains) {
      if (chain.transport_socket == nullptr) continue;
      absl::Status s = chain.transport_socket->reloadCertificates();
      std::string line = absl::StrFormat("listener %s, chain %s: %s", listener->name, chain.name,
                                         s.ok() ? "certificates reloaded" : s.message());
      if (s.ok()) {
        SLUICE_LOG(Info, "%s", line);
      } else {
        SLUICE_LOG(Error, "%s (the previous certificates stay in use)", line);
        ok = false;
      }
      report += line + "\n";
    }
  }
  if (report.empty()) report = "no TLS listener\n";
  return ok;
}

void Server::beginDrain() {
  if (draining_) return;
  draining_ = true;
  // Otherwise the sockets would stay open (and queue connections nobody takes) until exit.
  closeListenDups();
  SLUICE_LOG(Info, "draining: no new connections; in-flight requests have %d ms to finish",
             static_cast<int>(config_->drain_timeout.count()));
  notifyServiceStopping(absl::StrFormat("draining: in-flight requests have %d ms to finish",
                                        static_cast<int>(config_->drain_timeout.count())));
  for (auto& w : workers_) w->drain();
  drain_timer_ = std::make_unique<event::Timer>(dispatcher_, [this] {
    SLUICE_LOG(Warn, "drain timeout: closing the remaining connections");
    for (auto& w : workers_) w->stop();
  });
  drain_timer_->enable(config_->drain_timeout);
}

void Server::onWorkerExit(uint32_t) {
  if (++workers_exited_ == workers_.size()) {
    if (drain_timer_) drain_timer_->disable();
    dispatcher_.stop();
  }
}

std::string Server::serverInfoJson() const {
  auto uptime = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                 started_at_);
  size_t active = 0;
  for (const auto& w : workers_) active += w->activeConnections();
  return absl::StrFormat(
      "{\"version\":\"%s\",\"state\":\"%s\",\"uptime_seconds\":%d,\"workers\":%d,"
      "\"active_connections\":%d,\"config_version\":%d,\"config_path\":%s,\"pid\":%d,"
      "\"extensions\":%s}\n",
      kVersion, draining_ ? "draining" : "live", uptime.count(), workers_.size(), active,
      config_version_, jsonQuoted(config_path_), static_cast<int>(getpid()),
      jsonQuoted(extensions::describeLinked()));
}

std::string Server::listenersJson() const {
  std::string out = "{\"listeners\":[";
  for (size_t i = 0; i < config_->listeners.size(); ++i) {
    if (i > 0) out += ",";
    out += absl::StrFormat("{\"name\":%s,\"address\":\"%s\"}",
                           jsonQuoted(config_->listeners[i]->name), bound_[i].asString());
  }
  return out + "]}\n";
}

std::string Server::configDumpJson() const {
  config::v1::Bootstrap copy = config_->bootstrap;
  config::redact(copy);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  auto status = google::protobuf::util::MessageToJsonString(copy, &json, options);
  if (!status.ok()) return absl::StrFormat("{\"error\":%s}\n", jsonQuoted(status.ToString()));
  // The running version first, then the Bootstrap's fields.
  const size_t open = json.find('{');
  if (open == std::string::npos) return json;
  const bool empty = json.find_first_not_of(" \n", open + 1) == json.find('}', open);
  json.insert(open + 1,
              absl::StrFormat("\n  \"config_version\": %d%s", config_version_, empty ? "\n" : ","));
  return json;
}

}  // namespace server
}  // namespace sluice
