#pragma once

#include <string_view>

#include "source/common/stats/stats.h"

namespace sluice {
namespace upstream {

// One set of tunnel counters. Every tunnel adds to two: its listener's and, when it
// authenticated, its key's. Handles are registered at config time and shared.
struct TunnelStats {
  stats::Counter tunnels_total;
  stats::Gauge tunnels_active;
  stats::Counter bytes_to_upstream;    // client → destination
  stats::Counter bytes_to_downstream;  // destination → client
  stats::Counter bytes_spliced;        // of both, those moved socket to socket by splice(2)
  stats::Counter splice_fallback;  // bulk tunnels that found no pipe (limit, descriptors) and copy
  stats::Counter idle_timeout;
  stats::Counter upstream_reset;    // the destination reset or closed before both sides ended
  stats::Counter downstream_reset;  // the client did
  // From the start of relaying to its end, however it ended (the listener's set only: never
  // per key).
  stats::Histogram duration;
};

// "tunnel.listener.<listener>.*" (the name sanitized; in Prometheus the label listener). Same
// name, same handles.
TunnelStats listenerTunnelStats(std::string_view listener);
// "tunnel.key.<key name>.*" (in Prometheus the label key): tunnels_total, tunnels_active and the
// bytes each way (the others count nowhere: a key's resets and timeouts are its listener's).
TunnelStats keyTunnelStats(std::string_view key_name);
// "tunnel.key_overflow.*": shared by the keys past the ones that have a set of their own.
TunnelStats keyOverflowTunnelStats();
// Stat slots one key's set takes.
inline constexpr uint32_t kKeyTunnelStats = 4;

}  // namespace upstream
}  // namespace sluice
