#include "source/common/upstream/tunnel_stats.h"

namespace sluice {
namespace upstream {

namespace {

// A key's set: tunnels and bytes (thousands of keys share the store, so four counters each).
TunnelStats registerKeyTunnelStats(const stats::Scope& scope) {
  TunnelStats s;
  s.tunnels_total = scope.counter("tunnels_total", "Tunnels started.");
  s.tunnels_active = scope.gauge("tunnels_active", "Tunnels open.");
  s.bytes_to_upstream =
      scope.counter("bytes_to_upstream", "Tunnel bytes from clients to destinations.");
  s.bytes_to_downstream =
      scope.counter("bytes_to_downstream", "Tunnel bytes from destinations to clients.");
  return s;
}

// A listener's set: the key's, plus splice and how tunnels ended.
TunnelStats registerTunnelStats(const stats::Scope& scope) {
  TunnelStats s = registerKeyTunnelStats(scope);
  s.bytes_spliced = scope.counter("bytes_spliced",
                                  "Tunnel bytes (both ways) moved socket to socket by splice(2).");
  s.splice_fallback = scope.counter(
      "splice_fallback", "Bulk tunnels that found no pipe for splice(2) and copy instead.");
  s.idle_timeout = scope.counter("idle_timeout", "Tunnels closed after tunnel_idle_timeout.");
  s.upstream_reset = scope.counter(
      "upstream_reset", "Tunnels the destination reset or closed before both sides ended.");
  s.downstream_reset = scope.counter("downstream_reset",
                                     "Tunnels the client reset or closed before both sides ended.");
  s.duration = scope.histogram("duration_seconds",
                               "Tunnels, from the start of relaying to its end, however it ended.",
                               stats::tunnelBuckets());
  return s;
}

}  // namespace

TunnelStats listenerTunnelStats(std::string_view listener) {
  return registerTunnelStats(stats::Scope("tunnel").scope("listener", "listener", listener));
}

TunnelStats keyTunnelStats(std::string_view key_name) {
  return registerKeyTunnelStats(stats::Scope("tunnel").scope("key", "key", key_name));
}

TunnelStats keyOverflowTunnelStats() {
  return registerKeyTunnelStats(stats::Scope("tunnel").scope("key_overflow"));
}

}  // namespace upstream
}  // namespace sluice
