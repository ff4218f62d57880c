#include "source/server/worker.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/memory/idle_cache.h"
#include "source/common/upstream/access_log.h"

namespace sluice {
namespace server {

namespace {
// Sockets accepted per readiness event before yielding to the connections already open.
constexpr int kAcceptsPerEvent = 64;
// A listening socket ready at every look for this long is taken kAcceptsPerEvent at a time.
constexpr std::chrono::milliseconds kAcceptBurstAfter{10};

// accept(2) passes on the errors of the connection it took (Linux), which is then gone: the
// queue behind it is fine.
bool acceptErrorIsTheConnections(int err) {
  switch (err) {
    case EPROTO:
    case EPERM:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETDOWN:
    case ENETUNREACH:
      return true;
    default:
      return false;
  }
}
// How long accepting pauses after EMFILE/ENFILE: the backlog waits, nothing spins.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
}  // namespace

// ---- ActiveConnection ----

// The connection's write filters, in the order added (run in reverse): what sees the codec's
// output on their behalf, and their way to the client.
struct ActiveConnection::WriteFilters : network::WriteInterceptor, network::WriteFilterCallbacks {
  explicit WriteFilters(network::Connection& c) : connection_(c) {}
  network::Connection& connection() override { return connection_; }
  void injectWrite(buffer::Buffer& data, bool end_stream) override {
    connection_.writeDirect(data, end_stream);
  }
  bool onWrite(buffer::Buffer& data, bool end_stream) override {
    for (auto it = filters.rbegin(); it != filters.rend(); ++it) {
      if ((*it)->onWrite(data, end_stream) == network::FilterStatus::StopIteration) return false;
    }
    return true;
  }
  network::Connection& connection_;
  std::vector<network::WriteFilterPtr> filters;
};

namespace {
// What a filter chain's factories add their filters through.
class FilterAdder : public network::FilterManager {
 public:
  explicit FilterAdder(ActiveConnection& connection) : connection_(connection) {}
  void addReadFilter(network::ReadFilterPtr filter) override {
    connection_.addReadFilter(std::move(filter));
  }
  void addWriteFilter(network::WriteFilterPtr filter) override {
    connection_.addWriteFilter(std::move(filter));
  }

 private:
  ActiveConnection& connection_;
};
}  // namespace

ActiveConnection::ActiveConnection(Worker& worker, ListenerConfigSharedPtr listener,
                                   network::ConnectionPtr connection, network::ConnectionSlot slot)
    : listener_(std::move(listener)), connection_(std::move(connection)), slot_(std::move(slot)) {
  SLUICE_ASSERT(connection_->dispatcher().context() == &worker,
                "a client connection is on its worker's loop");
  connection_->setCallbacks(this);
  connection_->setByteCounters(
      {listener_->stats.downstream_bytes_rx, listener_->stats.downstream_bytes_tx});
  listener_->stats.downstream_cx_total.inc();
  listener_->stats.downstream_cx_active.inc();
}

ActiveConnection::~ActiveConnection() {
  // Filters go first: they may still use the connection while they release what they hold.
  connection_->setWriteInterceptor(nullptr);
  filters_.clear();
  write_filters_.reset();
  listener_->stats.downstream_cx_active.dec();
}

void ActiveConnection::initialize(const FilterChainConfig& chain) {
  FilterAdder adder(*this);
  for (const auto& factory : chain.filters) factory(adder);
  startFilters(0);
}

void ActiveConnection::addReadFilter(network::ReadFilterPtr filter) {
  filter->initializeReadFilterCallbacks(*this);
  filters_.push_back(std::move(filter));
}

proxy::WorkerContext& ActiveConnection::worker() { return owner(); }

Worker& ActiveConnection::owner() {
  return *static_cast<Worker*>(connection_->dispatcher().context());
}

void ActiveConnection::replaceReadFilter(network::ReadFilter& current,
                                         network::ReadFilterPtr next) {
  for (network::ReadFilterPtr& filter : filters_) {
    if (filter.get() != &current) continue;
    next->initializeReadFilterCallbacks(*this);
    // The filter being replaced is on the stack: it goes once its call has returned.
    connection_->dispatcher().deferredDelete(std::exchange(filter, std::move(next)));
    return;
  }
  // Only a filter of this connection gives its place; the caller goes on to use `next`.
  SLUICE_ASSERT(false, "replaceReadFilter: the filter is not in this connection's chain");
}

void ActiveConnection::addWriteFilter(network::WriteFilterPtr filter) {
  if (write_filters_ == nullptr) {
    write_filters_ = std::make_unique<WriteFilters>(*connection_);
    // Connections without write filters never pay for the interception.
    connection_->setWriteInterceptor(write_filters_.get());
  }
  filter->initializeWriteFilterCallbacks(*write_filters_);
  write_filters_->filters.push_back(std::move(filter));
}

// onNewConnection runs on each filter in order; a filter that stops holds back the later ones
// until it calls continueReading().
void ActiveConnection::startFilters(size_t from) {
  for (size_t i = from; i < filters_.size() && !closed_; ++i) {
    if (filters_[i]->onNewConnection() == network::FilterStatus::StopIteration) {
      stopped_at_ = static_cast<uint32_t>(i);
      return;
    }
  }
  initialized_ = true;
  stopped_at_ = 0;
  if (!closed_ && !connection_->readBuffer().empty()) deliver(0, connection_->readBuffer(), false);
}

void ActiveConnection::deliver(size_t from, buffer::Buffer& data, bool end_stream) {
  for (size_t i = from; i < filters_.size() && !closed_; ++i) {
    if (filters_[i]->onData(data, end_stream) == network::FilterStatus::StopIteration) {
      stopped_at_ = static_cast<uint32_t>(i);
      return;
    }
  }
}

void ActiveConnection::continueReading() {
  if (!initialized_) {
    startFilters(stopped_at_ + 1);
  } else {
    deliver(stopped_at_ + 1, connection_->readBuffer(), false);
  }
}

void ActiveConnection::onData(buffer::Buffer& data, bool end_stream) {
  // Bytes that arrive while a filter still holds back onNewConnection wait in the buffer.
  if (!initialized_) return;
  deliver(0, data, end_stream);
}

void ActiveConnection::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) return;
  if (closed_) return;
  closed_ = true;
  for (auto& filter : filters_) filter->onEvent(event);
  owner().removeConnection(*this);
}

void ActiveConnection::onAboveWriteHighWatermark() {
  for (auto& filter : filters_) filter->onAboveWriteHighWatermark();
}

void ActiveConnection::onBelowWriteLowWatermark() {
  for (auto& filter : filters_) filter->onBelowWriteLowWatermark();
}

void ActiveConnection::onPeerEndWhileReadDisabled() {
  for (auto& filter : filters_) {
    if (closed_) return;
    filter->onPeerEndWhileReadDisabled();
  }
}

void ActiveConnection::drain() {
  for (auto& filter : filters_) {
    if (closed_) return;
    filter->onDrain();
  }
}

uint32_t ActiveConnection::closeRevoked() {
  uint32_t closed = 0;
  for (auto& filter : filters_) {
    if (closed_) break;
    closed += filter->onKeysRevoked();
  }
  return closed;
}

void ActiveConnection::close() {
  if (!closed_) connection_->close(network::CloseType::FlushWrite);
}

// ---- AcceptedSocket ----

AcceptedSocket::AcceptedSocket(ActiveListener& listener, int fd, const network::Address& peer,
                               network::ConnectionSlot slot)
    : listener_(listener),
      fd_(fd),
      peer_(peer),
      slot_(std::move(slot)),
      chain_(listener.worker().dispatcher(), fd, peer, listener.config().listener_filters_timeout,
             [this](bool success) { listener_.onSocketDone(*this, success); }) {}

AcceptedSocket::~AcceptedSocket() {
  if (fd_ >= 0) ::close(fd_);
}

void AcceptedSocket::run(std::vector<network::ListenerFilterPtr> filters) {
  chain_.run(std::move(filters));
}

// ---- ActiveListener ----

ActiveListener::ActiveListener(Worker& worker, ListenerConfigSharedPtr config, int fd)
    : worker_(worker), fd_(fd), backoff_(worker.dispatcher(), [this] { watch(); }) {
  setConfig(std::move(config));
  watch();
}

void ActiveListener::watch() {
  if (fd_ < 0) return;
  // Level-triggered: while connections wait, every look at the sockets says so, so one accept
  // per look needs no further accept to learn that the queue is empty.
  event_ = std::make_unique<event::FileEvent>(
      worker_.dispatcher(), fd_, this, event::FileEvent::To<&ActiveListener::onSocketEvent>(),
      event::FileEvent::Interest::ReadLevel);
}

void ActiveListener::onSocketEvent(uint32_t events) {
  if (events & event::FileEvent::kRead) onAcceptReady();
}

ActiveListener::~ActiveListener() {
  stopAccepting();
  pending_.clear();
}

void ActiveListener::setConfig(ListenerConfigSharedPtr config) {
  // Connections copy this pointer at accept and drop it at close: through a control block of
  // this worker's own, those counts stay in this core's cache.
  auto holder = std::make_shared<ListenerConfigSharedPtr>(std::move(config));
  const ListenerConfig* raw = holder->get();
  config_ = ListenerConfigSharedPtr(std::move(holder), raw);
}

void ActiveListener::stopAccepting() {
  if (fd_ < 0) return;
  event_.reset();
  backoff_.disable();
  ::close(fd_);
  fd_ = -1;
}

void ActiveListener::onAcceptReady() {
  // One connection per look at the sockets: the level-triggered socket says at the next look
  // whether more wait, so the accept that would only say EAGAIN is skipped (connections come in
  // small clumps: taking more per look costs that accept more often than it saves a look).
  // Ready at every look for kAcceptBurstAfter, the socket is taken kAcceptsPerEvent at a time
  // (until EAGAIN): a burst, or a loop so busy that its looks are far apart, does not leave the
  // queue to overflow.
  event::Dispatcher& dispatcher = worker_.dispatcher();
  const uint64_t turn = dispatcher.turns();
  const event::MonotonicTime now = dispatcher.now();
  if (turn != last_accept_turn_ + 1) ready_since_ = now;
  last_accept_turn_ = turn;
  const int limit = now - ready_since_ >= kAcceptBurstAfter ? kAcceptsPerEvent : 1;
  for (int i = 0; i < limit && fd_ >= 0; ++i) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      config_->stats.downstream_accept_error.inc();
      if (acceptErrorIsTheConnections(errno)) continue;  // that connection is gone, not the rest
      // Out of descriptors or memory, or worse. Logged once per streak: the retry every
      // kAcceptBackoff would flood the log. Level-triggered, the waiting connections would
      // report the socket at every look: it is not watched until the backoff ends.
      if (failed_accepts_++ == 0) {
        SLUICE_LOG(Warn, "listener '%s': accept: %s; retrying every %d ms", config_->name,
                   strerror(errno), static_cast<int>(kAcceptBackoff.count()));
      }
      event_.reset();
      backoff_.enable(kAcceptBackoff);
      return;
    }
    if (failed_accepts_ > 0) {
      SLUICE_LOG(Info, "listener '%s': accepting again after %d failed accepts", config_->name,
                 failed_accepts_);
      failed_accepts_ = 0;
    }
    network::Address peer = network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
    network::ConnectionSlot slot;
    if (!admit(fd, peer, slot)) continue;
    std::vector<network::ListenerFilterPtr> filters =
        ListenerFilterChain::makeFilters(config_->listener_filters);
    if (filters.empty()) {
      // Nothing to run before the connection (the usual case): no chain object, no timer.
      newConnection(fd, peer, network::SocketFacts(), std::move(slot));
      continue;
    }
    auto socket = std::make_unique<AcceptedSocket>(*this, fd, peer, std::move(slot));
    AcceptedSocket* raw = socket.get();
    pending_.push_front(std::move(socket));
    raw->position = pending_.begin();
    raw->run(std::move(filters));
  }
}

void ActiveListener::onSocketDone(AcceptedSocket& socket, bool success) {
  std::unique_ptr<AcceptedSocket> owned = std::move(*socket.position);
  pending_.erase(socket.position);
  if (success && config_->client_address_from_filters &&
      !socket.slot().attachClient(network::ClientKey::of(socket.chain().peer()))) {
    // Only now is the client known (a PROXY header): its own limit applies from here.
    config_->stats.downstream_cx_per_client_overflow.inc();
    refuse(socket.fd());
  } else if (success) {
    // The client's address as the listener filters left it (a PROXY header may have named it).
    ActiveConnection* conn = newConnection(socket.releaseFd(), socket.chain().peer(),
                                           socket.chain().facts(), socket.releaseSlot());
    // Peeked bytes are already waiting: no new readiness edge will announce them.
    if (conn != nullptr && socket.chain().peeked()) conn->connection().scheduleRead();
  } else if (socket.chain().timedOut()) {
    config_->stats.downstream_listener_filter_timeout.inc();
  } else {
    config_->stats.downstream_cx_refused.inc();
  }
  // A listener filter may be on the stack: delete after the current callback.
  worker_.dispatcher().deferredDelete(std::move(owned));
  // The last socket of a listener a reload removed: the listener can go too.
  if (fd_ < 0 && pending_.empty())
    worker_.dispatcher().post([w = &worker_] { w->pruneRetiredListeners(); });
}

bool ActiveListener::admit(int fd, const network::Address& peer, network::ConnectionSlot& slot) {
  network::ConnectionLimiter& limiter = *config_->limiter;
  if (config_->client_address_from_filters) {
    // The socket's peer is a balancer: the client's count waits for its header.
    if (limiter.tryAcquireGlobal() == network::ConnectionLimiter::Admission::Admitted) {
      slot = network::ConnectionSlot(limiter);
      return true;
    }
    config_->stats.downstream_cx_overflow.inc();
    refuse(fd);
    ::close(fd);
    return false;
  }
  const network::ClientKey client = network::ClientKey::of(peer);
  switch (limiter.tryAcquire(client)) {
    case network::ConnectionLimiter::Admission::Admitted:
      slot = network::ConnectionSlot(limiter, client);
      return true;
    case network::ConnectionLimiter::Admission::ListenerFull:
      config_->stats.downstream_cx_overflow.inc();
      break;
    case network::ConnectionLimiter::Admission::ClientFull:
      config_->stats.downstream_cx_per_client_overflow.inc();
      break;
  }
  refuse(fd);
  ::close(fd);
  return false;
}

void ActiveListener::refuse(int fd) {
  if (config_->overflow_reply.empty()) return;
  // Best effort, never blocking: read what the client already sent (closing with unread bytes
  // would reset the connection and could destroy the reply), then answer.
  char discard[4096];
  (void)::recv(fd, discard, sizeof(discard), MSG_DONTWAIT);
  (void)::send(fd, config_->overflow_reply.data(), config_->overflow_reply.size(),
               MSG_DONTWAIT | MSG_NOSIGNAL);
}

ActiveConnection* ActiveListener::newConnection(int fd, const network::Address& peer,
                                                const network::SocketFacts& facts,
                                                network::ConnectionSlot slot) {
  if (fd < 0) return nullptr;
  const FilterChainConfig* chain = config_->match(facts);
  if (chain == nullptr) {
    config_->stats.downstream_cx_no_chain.inc();
    ::close(fd);
    return nullptr;
  }
  // TCP_NODELAY comes from the listening socket (createListenSocket), as Linux copies it.
  auto conn = std::make_unique<network::Connection>(worker_.dispatcher(), fd, peer,
                                                    network::Connection::Blocking::NonBlocking);
  if (chain->transport_socket != nullptr) {
    network::TransportSocketPtr transport = chain->transport_socket->createTransportSocket();
    transport->setHandshakeGate(worker_.handshakeGate());
    conn->setTransportSocket(std::move(transport));
  }
  auto active =
      std::make_unique<ActiveConnection>(worker_, config_, std::move(conn), std::move(slot));
  ActiveConnection* raw = active.get();
  worker_.addConnection(std::move(active));
  raw->initialize(*chain);
  // Read at once when the worker's clients usually send with their connection (a TLS transport
  // reads the socket itself).
  if (chain->transport_socket == nullptr) raw->connection().readAtAccept();
  return raw;
}

// ---- Worker ----

Worker::Worker(uint32_t index, ServerConfigSharedPtr config, std::vector<int> listen_fds,
               std::function<void(uint32_t)> on_exit)
    : index_(index),
      config_(std::move(config)),
      listen_fds_(std::move(listen_fds)),
      on_exit_(std::move(on_exit)),
      handshake_gate_(
          dispatcher_, config_->tls_handshakes_per_turn,
          stats::Store::get().counter(
              "server.tls_handshakes_waited",
              "TLS handshakes that waited for a later turn of their worker's loop: more than "
              "tls_handshakes_per_turn new TLS connections had their first bytes in one turn.")) {
  dispatcher_.setContext(this);
  resolver_ = std::make_unique<dns::Resolver>(dispatcher_, config_->bootstrap.dns());
  pool_ = std::make_unique<upstream::Pool>(dispatcher_, config_->pool_max_idle,
                                           config_->pool_idle_timeout);

  io_batched_ = stats::Store::get().counter(
      "server.io_batched",
      "Sends, receives, socket registrations and closes a worker's batch carried to the kernel "
      "(with io_uring, or one system call each for a batch of one).");
  io_uring_enters_ =
      stats::Store::get().counter("server.io_uring_enters",
                                  "io_uring_enter calls that carried a worker's batch: "
                                  "server.io_batched over this is operations per call.");
  reads_standing_ = stats::Store::get().gauge(
      "server.reads_standing",
      "Connections whose reads stand in a worker's io_uring (reads by completion).");
  reads_completed_ = stats::Store::get().counter(
      "server.reads_completed",
      "Messages read by completion (what one turn brought one connection's standing receive).");
  reads_out_of_buffers_ = stats::Store::get().counter(
      "server.reads_out_of_buffers",
      "Standing receives the kernel ended because the worker's provided buffers were all in "
      "use (the connection reads by readiness until its socket is empty again).");
  close_flush_timeouts_ = stats::Store::get().counter(
      "server.close_flush_timeouts",
      "Connections closed with bytes still unsent: the peer had not taken a flushed close's "
      "last bytes within close_flush_timeout.");
  revoked_closed_ = stats::Store::get().counter(
      "reload.revoked_closed",
      "Connections, tunnels, HTTP/2 streams and SOCKS5 sessions closed after a reload took "
      "their key or their client's address away (once reload.revoke_grace passed).");
}

Worker::~Worker() {
  join();
  listeners_.clear();
  retired_listeners_.clear();
  closeConnections();
  pool_.reset();
  egress_resolvers_.clear();
  resolver_.reset();
  for (int fd : listen_fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void Worker::pinToCpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) == 0) {
    SLUICE_LOG(Warn, "worker %d: cannot read the CPUs this process may use: %s", index_,
               strerror(errno));
    return;
  }
  // The Nth allowed CPU, wrapping around: under taskset or a cgroup the allowed set is not 0..N.
  const int want = static_cast<int>(index_ % static_cast<uint32_t>(CPU_COUNT(&allowed)));
  int cpu = -1;
  for (int i = 0, seen = 0; i < CPU_SETSIZE; ++i) {
    if (!CPU_ISSET(i, &allowed)) continue;
    if (seen++ == want) {
      cpu = i;
      break;
    }
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  if (rc != 0) {
    SLUICE_LOG(Warn, "worker %d: cannot pin to CPU %d: %s", index_, cpu, strerror(rc));
    return;
  }
  SLUICE_LOG(Debug, "worker %d pinned to CPU %d", index_, cpu);
}

void Worker::armMemoryRelease() {
  if (config_->memory_release_interval.count() > 0) {
    memory_release_timer_->enable(config_->memory_release_interval);
  } else {
    memory_release_timer_->disable();
  }
}

void Worker::start() {
  thread_ = std::thread([this] { run(); });
}

void Worker::waitStarted() { started_.get_future().wait(); }

void Worker::run() {
  logger::setThreadName(absl::StrFormat("worker%d", index_));
  // The OS thread name too, for top -H and /proc/<pid>/task/*/comm.
  pthread_setname_np(pthread_self(), absl::StrFormat("sluice-w%d", index_).c_str());
  if (config_->pin_workers) pinToCpu();
  dispatcher_.setIoBatching(config_->io_uring);
  if (event::IoBatch* batch = dispatcher_.ioBatch()) {
    batch->setCounters(io_batched_, io_uring_enters_);
    batch->setStandingCounters(reads_standing_, reads_completed_, reads_out_of_buffers_);
    batch->allowStanding(config_->reads_by_completion);
  }
  network::Connection::setFlushCloseLimit(config_->close_flush_timeout, close_flush_timeouts_);
  stats::Store::bindThreadShard(stats::Store::get().createShard());
  for (size_t i = 0; i < listen_fds_.size(); ++i) {
    listeners_.push_back(
        std::make_unique<ActiveListener>(*this, config_->listeners[i], listen_fds_[i]));
    listen_fds_[i] = -1;  // the listener owns it now
  }
  if (upstream::AccessLog::get().enabled()) {
    access_log_.emplace(dispatcher_);
    access_log_->install();
  }
  // Buffers a burst left in the free lists and nobody took since go back, for the main thread's
  // malloc_trim (and the slabs) to return: an idle worker keeps no cache of them.
  memory_release_timer_.emplace(dispatcher_, [this] {
    memory::releaseIdleCaches();
    armMemoryRelease();
  });
  armMemoryRelease();
  started_.set_value();
  dispatcher_.run();
  // Close what is left on this thread, where it was created.
  memory_release_timer_.reset();
  revoke_timer_.reset();
  listeners_.clear();
  retired_listeners_.clear();
  closeConnections();
  pool_->closeAll();
  egress_resolvers_.clear();
  // The records of the connections just closed go out with the last batch.
  access_log_.reset();
  stats::Store::bindThreadShard(nullptr);
  if (on_exit_) on_exit_(index_);
}

void Worker::drain() {
  dispatcher_.post([this] {
    draining_ = true;
    for (auto& listener : listeners_) listener->stopAccepting();
    for (auto& listener : retired_listeners_) listener->stopAccepting();
    pool_->drain();
    // onDrain may close connections (and remove them from the list) under us.
    for (ActiveConnection* c : connectionList()) c->drain();
    maybeFinishDrain();
  });
}

void Worker::stop() { dispatcher_.exit(); }

void Worker::applyConfig(ServerConfigSharedPtr next, std::vector<ListenerSocket> sockets,
                         bool keys_revoked, std::function<void()> applied) {
  dispatcher_.post([this, next = std::move(next), sockets = std::move(sockets), keys_revoked,
                    applied = std::move(applied)] {
    swapConfig(next, sockets, keys_revoked);
    if (applied) applied();
  });
}

void Worker::swapConfig(ServerConfigSharedPtr next, std::vector<ListenerSocket> sockets,
                        bool keys_revoked) {
  std::vector<std::unique_ptr<ActiveListener>> running = std::move(listeners_);
  listeners_.clear();
  for (size_t i = 0; i < next->listeners.size(); ++i) {
    const ListenerSocket& socket = sockets[i];
    std::unique_ptr<ActiveListener> listener;
    if (socket.keep >= 0 && static_cast<size_t>(socket.keep) < running.size() &&
        running[socket.keep] != nullptr) {
      listener = std::move(running[socket.keep]);
      listener->setConfig(next->listeners[i]);
    } else {
      listener = std::make_unique<ActiveListener>(*this, next->listeners[i], socket.fd);
    }
    if (draining_) listener->stopAccepting();
    listeners_.push_back(std::move(listener));
  }
  // Only now are the listeners that stay gone: the new addresses accept already.
  for (auto& listener : running) {
    if (listener == nullptr) continue;
    listener->stopAccepting();
    retired_listeners_.push_back(std::move(listener));
  }
  pruneRetiredListeners();
  config_ = std::move(next);
  handshake_gate_.setPerTurn(config_->tls_handshakes_per_turn);
  network::Connection::setFlushCloseLimit(config_->close_flush_timeout, close_flush_timeouts_);
  if (memory_release_timer_) armMemoryRelease();
  pruneEgressResolvers();
  if (upstream::AccessLog::get().enabled() && !access_log_) {
    access_log_.emplace(dispatcher_);
    access_log_->install();
  }
  // A client the next config refuses finishes what it has in flight, takes nothing new, and
  // is closed when the grace ends (an idle keep-alive connection closes now).
  std::vector<ActiveConnection*> refused;
  for (ActiveConnection* c = connections_; c != nullptr; c = c->next) {
    if (!stillAdmitted(*c)) refused.push_back(c);
  }
  for (ActiveConnection* c : refused) c->drain();
  if (keys_revoked || !refused.empty()) {
    if (!revoke_timer_) revoke_timer_.emplace(dispatcher_, [this] { closeRevoked(); });
    revoke_timer_->enable(config_->revoke_grace);
  }
}

dns::Resolver& Worker::resolver(const network::Egress& egress) {
  if (egress.empty()) return *resolver_;
  std::unique_ptr<dns::Resolver>& resolver = egress_resolvers_[egress];
  if (resolver == nullptr) resolver = std::make_unique<dns::Resolver>(*resolver_, egress);
  return *resolver;
}

void Worker::pruneEgressResolvers() {
  // An egress no group has any more, with no lookup in flight (so no query handle is held):
  // a connection of an older config that still resolves from it makes it again.
  absl::erase_if(egress_resolvers_, [this](const auto& entry) {
    if (entry.second->lookupsInFlight() > 0) return false;
    for (const policy::GroupSharedPtr& group : config_->policy->groups()) {
      if (group->egress.addresses == entry.first) return false;
    }
    return true;
  });
}

bool Worker::stillAdmitted(const ActiveConnection& conn) const {
  for (const ListenerConfigSharedPtr& listener : config_->listeners) {
    if (listener->name == conn.listener().name) {
      return listener->grants.admits(conn.peer());
    }
  }
  // Its listener was removed: the connection finishes with the config it started with.
  return true;
}

void Worker::closeRevoked() {
  // Closing only defers the deletion: the pointers stay valid through the loop.
  uint32_t closed = 0;
  for (ActiveConnection* c : connectionList()) {
    if (!stillAdmitted(*c)) {
      c->close();
      ++closed;
    } else {
      closed += c->closeRevoked();
    }
  }
  if (closed > 0) {
    revoked_closed_.add(closed);
    SLUICE_LOG(Info, "worker %d: closed %d connections, tunnels and streams a reload revoked",
               index_, closed);
  }
}

void Worker::pruneRetiredListeners() {
  retired_listeners_.erase(
      std::remove_if(retired_listeners_.begin(), retired_listeners_.end(),
                     [](const std::unique_ptr<ActiveListener>& l) { return l->idle(); }),
      retired_listeners_.end());
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::addConnection(std::unique_ptr<ActiveConnection> conn) {
  ActiveConnection* raw = conn.release();
  raw->prev = nullptr;
  raw->next = connections_;
  if (connections_ != nullptr) connections_->prev = raw;
  connections_ = raw;
  active_.fetch_add(1, std::memory_order_relaxed);
}

void Worker::removeConnection(ActiveConnection& conn) {
  if (conn.prev != nullptr) conn.prev->next = conn.next;
  if (conn.next != nullptr) conn.next->prev = conn.prev;
  if (connections_ == &conn) connections_ = conn.next;
  conn.prev = conn.next = nullptr;
  active_.fetch_sub(1, std::memory_order_relaxed);
  dispatcher_.deferredDelete(std::unique_ptr<ActiveConnection>(&conn));
  maybeFinishDrain();
}

std::vector<ActiveConnection*> Worker::connectionList() const {
  std::vector<ActiveConnection*> list;
  for (ActiveConnection* c = connections_; c != nullptr; c = c->next) list.push_back(c);
  return list;
}

void Worker::closeConnections() {
  while (connections_ != nullptr) {
    ActiveConnection* c = connections_;
    connections_ = c->next;
    if (connections_ != nullptr) connections_->prev = nullptr;
    c->next = nullptr;
    delete c;
  }
}

void Worker::maybeFinishDrain() {
  if (draining_ && connections_ == nullptr) {
    // Let deferred deletions run first, then leave the loop.
    dispatcher_.exit();
  }
}

}  // namespace server
}  // namespace sluice
