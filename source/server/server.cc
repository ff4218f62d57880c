#include "source/server/server.h"

#include <cerrno>
#include <cstring>

#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

#include "source/common/common/json.h"
#include "source/common/common/logger.h"
#include "source/common/common/version.h"
#include "source/common/config/redact.h"
#include "source/common/extensions/registry.h"
#include "source/common/upstream/upstream_budget.h"
#include "source/server/ban_endpoints.h"
#include "source/server/service_notify.h"

namespace sluice {
namespace server {

absl::StatusOr<int> createListenSocket(const network::Address& address, uint32_t backlog) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
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

Server::Server(ServerConfigSharedPtr config) : config_(std::move(config)) {}

Server::~Server() {
  for (auto& w : workers_) w->stop();
  workers_.clear();
  if (sigint_ != nullptr) event_free(sigint_);
  if (sigterm_ != nullptr) event_free(sigterm_);
  if (sighup_ != nullptr) event_free(sighup_);
  if (sigusr1_ != nullptr) event_free(sigusr1_);
  admin_.reset();
  upstream::AccessLog::get().stop();
}

absl::Status Server::start() {
  started_at_ = std::chrono::steady_clock::now();
  signal(SIGPIPE, SIG_IGN);
  const uint32_t n = config_->workers;
  // fds[worker][listener]
  std::vector<std::vector<int>> fds(n);
  auto close_all = [&fds] {
    for (auto& per_worker : fds) {
      for (int fd : per_worker) ::close(fd);
    }
  };
  for (const ListenerConfigSharedPtr& listener : config_->listeners) {
    absl::Status free = checkAddressFree(listener->address);
    if (!free.ok()) {
      close_all();
      return absl::UnavailableError(
          absl::StrFormat("listener '%s': %s", listener->name, free.message()));
    }
    network::Address address = listener->address;
    for (uint32_t w = 0; w < n; ++w) {
      auto fd = createListenSocket(address, listener->backlog);
      if (!fd.ok()) {
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

  if (config_->admin_address.valid()) {
    AdminHandlers handlers;
    handlers.ready = [this] { return running_ && !draining_; };
    handlers.config_dump = [this] { return configDumpJson(); };
    handlers.server_info = [this] { return serverInfoJson(); };
    handlers.listeners = [this] { return listenersJson(); };
    handlers.drain = [this] { beginDrain(); };
    addBanEndpoints(config_->bans, handlers.extra);
    AdminEndpoint reload;
    reload.method = AdminEndpoint::Method::Post;
    reload.help = "re-read the TLS certificates and keys (like SIGHUP)";
    reload.handler = [this](const std::map<std::string, std::string>&) {
      std::string report;
      bool ok = reloadCertificates(report);
      return AdminEndpoint::Response{ok ? 200 : 500, report, false};
    };
    handlers.extra["/reload_certificates"] = std::move(reload);
    admin_ = std::make_unique<Admin>(dispatcher_, std::move(handlers));
    absl::Status s = admin_->bind(config_->admin_address);
    if (!s.ok()) {
      close_all();
      return absl::UnavailableError(absl::StrFormat("admin: %s", s.message()));
    }
  }

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

  // Before the workers: each takes a line buffer when the log is on.
  absl::Status log = upstream::AccessLog::get().configure(config_->access_log);
  if (!log.ok()) {
    close_all();
    return log;
  }
  for (uint32_t w = 0; w < n; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, config_, fds[w], [this](uint32_t index) {
      dispatcher_.post([this, index] { onWorkerExit(index); });
    }));
  }
  for (auto& w : workers_) w->start();
  running_ = true;
  if (config_->memory_release_interval.count() > 0) {
    // Workers allocate per connection, never per request: the arena locks malloc_trim takes
    // are met only by connections opening or closing at that moment.
    memory_release_timer_ = std::make_unique<event::Timer>(dispatcher_, [this] {
      if (malloc_trim(0) != 0) memory_released_.inc();
      memory_release_timer_->enable(config_->memory_release_interval);
    });
    memory_release_timer_->enable(config_->memory_release_interval);
  }
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
    host_address_timer_->enable(kHostAddressInterval);
  });
  host_address_timer_->enable(kHostAddressInterval);
  for (size_t i = 0; i < config_->listeners.size(); ++i) {
    SLUICE_LOG(Info, "listener '%s' on %s (%d workers)", config_->listeners[i]->name,
               bound_[i].asString(), n);
  }
  if (admin_) SLUICE_LOG(Info, "admin on http://%s/", admin_->boundAddress().asString());
  notifyServiceReady(servingStatus());
  return absl::OkStatus();
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
  // Once stopping, the service manager hears nothing more but the exit.
  const bool tell = !self->draining_;
  if (tell) notifyServiceReloading("reloading the TLS certificates and the access log");
  upstream::AccessLog::get().reopen();
  std::string report;
  const bool ok = self->reloadCertificates(report);
  if (tell) {
    notifyServiceReady(ok ? self->servingStatus()
                          : self->servingStatus() + " (a certificate did not reload: see the log)");
  }
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
    event_base_loopbreak(dispatcher_.base());
  }
}

std::string Server::serverInfoJson() const {
  auto uptime = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                 started_at_);
  size_t active = 0;
  for (const auto& w : workers_) active += w->activeConnections();
  return absl::StrFormat(
      "{\"version\":\"%s\",\"state\":\"%s\",\"uptime_seconds\":%d,\"workers\":%d,"
      "\"active_connections\":%d,\"extensions\":%s}\n",
      kVersion, draining_ ? "draining" : "live", uptime.count(), workers_.size(), active,
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
  return json;
}

}  // namespace server
}  // namespace sluice
