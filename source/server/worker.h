#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"

#include "source/common/dns/resolver.h"
#include "source/common/event/dispatcher.h"
#include "source/common/memory/slab.h"
#include "source/common/network/connection.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/network/filter.h"
#include "source/common/network/handshake_gate.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/access_log.h"
#include "source/common/upstream/pool.h"
#include "source/server/listener_config.h"
#include "source/server/listener_filter_chain.h"

namespace sluice {
namespace server {

class Worker;
class ActiveListener;

// A client connection served by its network filter chain. Lives on one worker until it closes.
class ActiveConnection : public memory::SlabAllocated,
                         public network::ConnectionCallbacks,
                         public network::ReadFilterCallbacks,
                         public event::DeferredDeletable {
 public:
  ActiveConnection(Worker& worker, ListenerConfigSharedPtr listener,
                   network::ConnectionPtr connection, network::ConnectionSlot slot);
  ~ActiveConnection() override;

  void initialize(const FilterChainConfig& chain);
  void drain();
  // The config version the connection started with: it keeps it until it closes.
  const ListenerConfig& listener() const { return *listener_; }
  const network::Address& peer() const { return connection_->peer(); }
  // Closes what authenticated with a key a reload revoked (see ReadFilter::onKeysRevoked).
  uint32_t closeRevoked();
  // Closes the connection (a reload took its client's address away).
  void close();

  // What the filter chain's factories add to (network::FilterManager).
  void addReadFilter(network::ReadFilterPtr filter);
  void addWriteFilter(network::WriteFilterPtr filter);
  // network::ReadFilterCallbacks
  network::Connection& connection() override { return *connection_; }
  void continueReading() override;
  proxy::WorkerContext& worker() override;
  void replaceReadFilter(network::ReadFilter& current, network::ReadFilterPtr next) override;
  // network::ConnectionCallbacks
  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;
  void onPeerEndWhileReadDisabled() override;

  // Its place in the worker's list of connections (intrusive: no list node per connection).
  ActiveConnection* prev = nullptr;
  ActiveConnection* next = nullptr;

 private:
  void startFilters(size_t from);
  void deliver(size_t from, buffer::Buffer& data, bool end_stream);
  // The worker whose loop the connection is on (the dispatcher's context): not held, 8 bytes
  // less per connection.
  Worker& owner();

  // Counted in the worker's own control block (ActiveListener::setConfig): no atomic that
  // another core writes.
  ListenerConfigSharedPtr listener_;
  network::ConnectionPtr connection_;
  network::ConnectionSlot
      slot_;  // its place in the listener's connection limits, held until deletion
  absl::InlinedVector<network::ReadFilterPtr, 1> filters_;  // usually one: the codec
  // Made with the first write filter: a connection without any holds a null pointer.
  struct WriteFilters;
  std::unique_ptr<WriteFilters> write_filters_;
  uint32_t stopped_at_ = 0;  // the filter that last returned StopIteration
  bool initialized_ = false;
  bool closed_ = false;
};

// An accepted socket going through the listener filters, before it has a connection.
class AcceptedSocket : public event::DeferredDeletable {
 public:
  AcceptedSocket(ActiveListener& listener, int fd, const network::Address& peer,
                 network::ConnectionSlot slot);
  ~AcceptedSocket() override;

  void run(std::vector<network::ListenerFilterPtr> filters);
  // Hands the socket over (to its connection): this object no longer closes it.
  int releaseFd() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  network::ConnectionSlot releaseSlot() { return std::move(slot_); }
  network::ConnectionSlot& slot() { return slot_; }
  int fd() const { return fd_; }
  // The socket's own peer; chain().peer() is the client a listener filter may have named.
  const network::Address& peer() const { return peer_; }
  ListenerFilterChain& chain() { return chain_; }
  std::list<std::unique_ptr<AcceptedSocket>>::iterator position;

 private:
  ActiveListener& listener_;
  int fd_;
  network::Address peer_;
  network::ConnectionSlot slot_;
  ListenerFilterChain chain_;
};

// One listener's SO_REUSEPORT socket on one worker: accepts one connection per look at the
// sockets while they come one at a time, up to kAcceptsPerEvent (or EAGAIN) in a burst; backs off
// when the process runs out of file descriptors; refuses sockets over the listener's connection
// limits.
class ActiveListener {
 public:
  ActiveListener(Worker& worker, ListenerConfigSharedPtr config, int fd);
  ~ActiveListener();

  // A reload kept this listener's address: the socket stays, connections accepted from now on
  // get `config`.
  void setConfig(ListenerConfigSharedPtr config);
  void stopAccepting();
  // Sockets still in the listener filters (a removed listener lives on until they are done).
  bool idle() const { return pending_.empty(); }
  Worker& worker() { return worker_; }
  const ListenerConfig& config() const { return *config_; }
  // A socket that passed the listener filters (or was refused: success false).
  void onSocketDone(AcceptedSocket& socket, bool success);

 private:
  void onAcceptReady();
  void onSocketEvent(uint32_t events);
  // Watches the listening socket (again, after a backoff).
  void watch();
  // Takes a place in the connection limits for the socket, or refuses and closes it.
  bool admit(int fd, const network::Address& peer, network::ConnectionSlot& slot);
  // Sends the overflow reply (if the listener has one) to a socket refused over a limit.
  void refuse(int fd);
  // The new connection (null when no filter chain matched). Its initialize() already ran, so
  // it may have closed (a filter refused it): such a connection is deleted on the next turn.
  ActiveConnection* newConnection(int fd, const network::Address& peer,
                                  const network::SocketFacts& facts, network::ConnectionSlot slot);

  Worker& worker_;
  ListenerConfigSharedPtr config_;
  int fd_;
  std::unique_ptr<event::FileEvent> event_;
  event::Timer backoff_;
  uint32_t failed_accepts_ = 0;         // accepts failed (not for their own connection), in a row
  uint64_t last_accept_turn_ = 0;       // the loop's turn of the last look that found it ready
  event::MonotonicTime ready_since_{};  // ready at every look since
  std::list<std::unique_ptr<AcceptedSocket>> pending_;
};

// A reload's plan for one listener of the next config on one worker: keep the running
// listener at `keep` (its index in the running config), or start one on the new socket `fd`.
struct ListenerSocket {
  int keep = -1;
  int fd = -1;
};

// One event loop thread and everything it owns: listen sockets, connections, upstream pool,
// resolver, stats shard. Nothing here is touched by another thread except through post().
class Worker : public proxy::WorkerContext {
 public:
  // listen_fds: one bound, listening socket per listener, in config order.
  Worker(uint32_t index, ServerConfigSharedPtr config, std::vector<int> listen_fds,
         std::function<void(uint32_t)> on_exit);
  ~Worker() override;

  void start();
  // Blocks until the worker's thread is set up (named, pinned, its listeners watched) and in its
  // loop; once, after start(). The server is ready only when every worker is.
  void waitStarted();
  // Thread-safe. Stops accepting, lets connections finish, exits the loop when none is left.
  void drain();
  // Thread-safe. Exits the loop now; connections are closed when the worker is destroyed.
  void stop();
  // Thread-safe. Takes the next config at the loop's next turn: listeners per `sockets` (one
  // per listener of `next`, in order; the running ones not kept stop accepting), new
  // connections get the new version, and after next->revoke_grace whatever a revoked key
  // authenticated and connections from addresses the next config refuses are closed.
  // `applied` runs on the worker's thread once it has (the reload waits for every worker).
  void applyConfig(ServerConfigSharedPtr next, std::vector<ListenerSocket> sockets,
                   bool keys_revoked, std::function<void()> applied = {});
  void join();
  size_t activeConnections() const { return active_.load(std::memory_order_relaxed); }

  // proxy::WorkerContext
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  dns::Resolver& resolver() override { return *resolver_; }
  dns::Resolver& resolver(const network::Egress& egress) override;
  upstream::Pool& pool() override { return *pool_; }
  uint32_t index() const override { return index_; }
  bool draining() const override { return draining_; }

  // Where the TLS handshakes of this worker's accepted connections take turns.
  network::HandshakeGate& handshakeGate() { return handshake_gate_; }
  void addConnection(std::unique_ptr<ActiveConnection> conn);
  // Deletes the listeners a reload removed whose last accepted socket is done.
  void pruneRetiredListeners();
  void removeConnection(ActiveConnection& conn);

 private:
  // server.pin_workers: this worker's thread to one CPU (on its own thread).
  void pinToCpu();
  void run();
  void maybeFinishDrain();
  void swapConfig(ServerConfigSharedPtr next, std::vector<ListenerSocket> sockets,
                  bool keys_revoked);
  // reload.revoke_grace after a swap: closes what the reload revoked.
  void closeRevoked();
  // Drops the egress resolvers of addresses the running config's groups no longer have.
  void pruneEgressResolvers();
  // Whether a listener of the running config named like the connection's admits its client.
  bool stillAdmitted(const ActiveConnection& conn) const;

  const uint32_t index_;
  ServerConfigSharedPtr config_;
  std::vector<int> listen_fds_;
  std::function<void(uint32_t)> on_exit_;
  event::Dispatcher dispatcher_;
  std::unique_ptr<dns::Resolver> resolver_;
  // One per egress address pair the groups' requests resolved from, made on first use.
  absl::flat_hash_map<network::Egress, std::unique_ptr<dns::Resolver>> egress_resolvers_;
  std::unique_ptr<upstream::Pool> pool_;
  // Declared after the dispatcher and before the connections: a connection deleted late (the
  // dispatcher's deferred deletions) finds itself out of the gate's queue.
  network::HandshakeGate handshake_gate_;
  std::vector<std::unique_ptr<ActiveListener>> listeners_;
  // Listeners a reload removed, until the sockets in their listener filters are done.
  std::vector<std::unique_ptr<ActiveListener>> retired_listeners_;
  // The connections this worker serves, newest first; the worker owns them.
  ActiveConnection* connections_ = nullptr;
  // Every connection, for a loop that may close some of them (closing only defers deletion).
  std::vector<ActiveConnection*> connectionList() const;
  void closeConnections();
  // The access log's lines of this worker gather here and leave in batches.
  std::optional<upstream::AccessLogBuffer> access_log_;
  std::optional<event::Timer> revoke_timer_;
  // Every memory_release_interval: the buffer blocks left unused since the last time are freed.
  std::optional<event::Timer> memory_release_timer_;
  // Arms it for the running config's memory_release_interval (0: off).
  void armMemoryRelease();
  stats::Counter revoked_closed_;
  // The loop's batch of sends and receives (event::IoBatch).
  stats::Counter io_batched_;
  stats::Counter io_uring_enters_;
  stats::Gauge reads_standing_;
  stats::Counter reads_completed_;
  stats::Counter reads_out_of_buffers_;
  stats::Counter close_flush_timeouts_;
  std::atomic<size_t> active_{0};
  bool draining_ = false;
  std::thread thread_;
  std::promise<void> started_;
};

}  // namespace server
}  // namespace sluice
