#include "source/common/upstream/tunnel_stats.h"

#include <string>

namespace sluice {
namespace upstream {

namespace {

// A key's set: tunnels and bytes (thousands of keys share the store, so four counters each).
TunnelStats registerKeyTunnelStats(const std::string& prefix) {
  stats::Store& store = stats::Store::get();
  TunnelStats s;
  s.tunnels_total = store.counter(prefix + "tunnels_total");
  s.tunnels_active = store.gauge(prefix + "tunnels_active");
  s.bytes_to_upstream = store.counter(prefix + "bytes_to_upstream");
  s.bytes_to_downstream = store.counter(prefix + "bytes_to_downstream");
  return s;
}

// A listener's set: the key's, plus splice and how tunnels ended.
TunnelStats registerTunnelStats(const std::string& prefix) {
  stats::Store& store = stats::Store::get();
  TunnelStats s = registerKeyTunnelStats(prefix);
  s.bytes_spliced = store.counter(prefix + "bytes_spliced");
  s.splice_fallback = store.counter(prefix + "splice_fallback");
  s.idle_timeout = store.counter(prefix + "idle_timeout");
  s.upstream_reset = store.counter(prefix + "upstream_reset");
  s.downstream_reset = store.counter(prefix + "downstream_reset");
  return s;
}

}  // namespace

TunnelStats listenerTunnelStats(std::string_view listener) {
  return registerTunnelStats("tunnel.listener." + stats::sanitizeNamePart(listener) + ".");
}

TunnelStats keyTunnelStats(std::string_view key_name) {
  return registerKeyTunnelStats("tunnel.key." + stats::sanitizeNamePart(key_name) + ".");
}

TunnelStats keyOverflowTunnelStats() { return registerKeyTunnelStats("tunnel.key_overflow."); }

}  // namespace upstream
}  // namespace sluice
