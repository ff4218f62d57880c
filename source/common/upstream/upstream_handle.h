#pragma once

#include <chrono>

#include "source/common/network/connection.h"
#include "source/common/network/connection_limiter.h"

namespace sluice {
namespace policy {
class KeyLimiter;
}
namespace upstream {

class Pool;

// What the router hands to the codec with an upstream connection.
struct UpstreamInfo {
  bool reused = false;  // came from the keep-alive pool
  std::chrono::milliseconds response_timeout{60000};
  std::chrono::milliseconds tunnel_idle_timeout{300000};
  // Tunnels between two plain TCP sockets may move bytes with splice(2), with at most this
  // many pipes in flight per worker.
  bool splice = true;
  uint32_t max_splice_pipes = 1024;
  // Set when the connection goes to an HTTP parent proxy for relayed requests: they go out in
  // absolute-form for `parent_target` (the checked destination address), with
  // `parent_authorization` (config-owned; empty: none) as their Proxy-Authorization.
  bool via_http_parent = false;
  network::Address parent_target;
  // Instead, when the route has `resolve: parent`: the name and port (the request's, valid
  // while it runs).
  std::string_view parent_target_host;
  uint16_t parent_target_port = 0;
  std::string_view parent_authorization;
  // The egress address the connection was made from (invalid: the system's choice): with its
  // peer, where the pool keeps it.
  network::Address source;
  // Through a parent proxy: the parent (ParentHealth::id(); 0: direct), and for a SOCKS5 parent
  // the destination its tunnel reaches (the pool keeps it there, not under the parent).
  uint64_t via = 0;
  network::Address pool_destination;
  // A UDP association through a SOCKS5 parent (RequestKind::UdpAssociation): where the parent
  // takes its datagrams. The connection is its control connection, never pooled.
  network::Address udp_relay;
  // The limits the request was admitted under (its LimitSlot's limiter), or null: the relay or
  // exchange that moves its bytes charges them to its bandwidth buckets. Lives as long as the
  // config the request runs under.
  policy::KeyLimiter* limiter = nullptr;
};

// An origin connection as the router hands it over: the connection, where it came from, and
// the one way to let it go. release() returns it to the worker's keep-alive pool after a clean
// exchange, or closes it; dropping the handle closes it. Connections are deleted through the
// dispatcher, so a handle may be released from inside the connection's own callbacks.
// What a tunnel keeps of its UpstreamHandle: a fraction of its size, for as long as the tunnel
// is open. Closes the connection when released or destroyed.
class TunnelUpstream {
 public:
  TunnelUpstream() = default;
  TunnelUpstream(network::ConnectionPtr connection, network::ConnectionSlot slot)
      : connection_(std::move(connection)), slot_(std::move(slot)) {}
  TunnelUpstream(TunnelUpstream&&) noexcept = default;
  TunnelUpstream& operator=(TunnelUpstream&& other) noexcept {
    if (this != &other) {
      release();
      connection_ = std::move(other.connection_);
      slot_ = std::move(other.slot_);
    }
    return *this;
  }
  ~TunnelUpstream() { release(); }

  explicit operator bool() const { return connection_ != nullptr; }
  network::Connection& connection() const { return *connection_; }
  network::Connection* operator->() const { return connection_.get(); }
  void release();

 private:
  network::ConnectionPtr connection_;
  network::ConnectionSlot slot_;
};

class UpstreamHandle {
 public:
  UpstreamHandle() = default;
  // `pool` takes the connection back after a clean exchange (null: never pooled); `slot` is the
  // client's place in the upstream budget, given back with the connection.
  UpstreamHandle(network::ConnectionPtr connection, Pool* pool, const UpstreamInfo& info,
                 network::ConnectionSlot slot = {})
      : connection_(std::move(connection)), pool_(pool), info_(info), slot_(std::move(slot)) {}
  UpstreamHandle(UpstreamHandle&& other) noexcept { *this = std::move(other); }
  UpstreamHandle& operator=(UpstreamHandle&& other) noexcept;
  ~UpstreamHandle() { release(false); }

  explicit operator bool() const { return connection_ != nullptr; }
  network::Connection& connection() const { return *connection_; }
  network::Connection* operator->() const { return connection_.get(); }
  const UpstreamInfo& info() const { return info_; }

  // Lets the connection go: into the pool when `reusable` (the exchange ended cleanly and the
  // connection is still open), closed otherwise. Its callbacks are detached first.
  void release(bool reusable);
  // A tunnel's hold: the connection and its place in the upstream budget, without the rest
  // (a tunnel's connection never goes back to the pool). The handle is left empty.
  TunnelUpstream takeForTunnel();

 private:
  network::ConnectionPtr connection_;
  Pool* pool_ = nullptr;
  UpstreamInfo info_;
  network::ConnectionSlot slot_;
};

}  // namespace upstream
}  // namespace sluice
