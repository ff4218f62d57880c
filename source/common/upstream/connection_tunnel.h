#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "source/common/network/filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/request_record.h"
#include "source/common/upstream/tunnel_relay.h"
#include "source/common/upstream/tunnel_stats.h"
#include "source/common/upstream/upstream_handle.h"

namespace sluice {
namespace upstream {

// How a codec's tunnels over whole client connections are counted and recorded. Part of the
// codec's config, which the listener config every connection holds keeps alive.
struct ConnectionTunnelConfig {
  std::string listener_name;  // for the end-of-request records
  stats::Histogram request_duration;
  const TunnelStats* listener_stats = nullptr;  // tunnel.listener.<listener>.*
  // The codec's own counters of how its tunnels end, and its gauges of tunnels open (an
  // accepted upgrade counts in both; a default handle counts nowhere).
  stats::Counter idle_timeout;
  stats::Counter upstream_reset;
  stats::Counter downstream_reset;
  stats::Gauge tunnels_active;
  stats::Gauge upgrades_active;
};

// The config of a codec whose stats count how its tunnels end (tunnel_idle_timeout,
// upstream_reset, downstream_reset) and those open (tunnels_active); no upgrades.
template <class CodecStats>
ConnectionTunnelConfig connectionTunnelConfig(std::string listener_name,
                                              stats::Histogram request_duration,
                                              const TunnelStats& listener_stats,
                                              const CodecStats& codec) {
  ConnectionTunnelConfig config;
  config.listener_name = std::move(listener_name);
  config.request_duration = request_duration;
  config.listener_stats = &listener_stats;
  config.idle_timeout = codec.tunnel_idle_timeout;
  config.upstream_reset = codec.upstream_reset;
  config.downstream_reset = codec.downstream_reset;
  config.tunnels_active = codec.tunnels_active;
  return config;
}

// What a codec hands over with its connection.
struct ConnectionTunnelStart {
  UpstreamHandle upstream;
  const TunnelStats* key_stats = nullptr;  // the authenticated key's tunnel counters, or null
  bool upgrade = false;                    // an accepted upgrade (counted in upgrades_active)
  bool client_ended = false;               // the client already half-closed
  bool upstream_ended = false;             // the destination already ended its side
};

// A client connection that became a tunnel (HTTP/1.1 CONNECT or an accepted upgrade, SOCKS5
// CONNECT or BIND): the network filter that takes the codec's place once the codec has answered,
// so a tunnel holds only what it uses (the relay, the request's trace and one timer) and none of
// the codec's state. It carries the request to its end: the relay's end, the client leaving,
// or a reload revoking the request's key, then emits its record and closes the connection.
class ConnectionTunnel final : public network::ReadFilter, private TunnelDownstream {
 public:
  // The codec `codec` of `callbacks`' connection, answered and calling from one of its own
  // methods, gives its place to a tunnel carrying `trace`'s request (moved out of it) over
  // `start.upstream`. Bytes the client sent ahead, in the connection's read buffer, go first.
  // The codec is deleted from the loop; it must hold nothing that acts meanwhile (no armed
  // timer, no upstream).
  static void replace(network::ReadFilterCallbacks& callbacks, network::ReadFilter& codec,
                      const ConnectionTunnelConfig& config, RequestTrace& trace,
                      ConnectionTunnelStart start);

  ConnectionTunnel(const ConnectionTunnelConfig& config, network::Connection& client,
                   RequestTrace&& trace, UpstreamHandle upstream, const TunnelOptions& options,
                   bool upgrade);
  ~ConnectionTunnel() override;

  // network::ReadFilter (the tunnel needs only its connection, given at construction)
  void initializeReadFilterCallbacks(network::ReadFilterCallbacks&) override {}
  network::FilterStatus onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;
  uint32_t onKeysRevoked() override;

 private:
  // TunnelDownstream: the client side is the whole client connection.
  void writeDownstream(buffer::Buffer& data, bool end_stream) override {
    client_.write(data, end_stream);
  }
  void readDisableDownstream(bool disable) override { client_.readDisable(disable); }
  network::Connection* spliceableConnection() override { return &client_; }
  // Delivered from the loop.
  void onTunnelEnd(TunnelEnd end) override;
  RequestTrace& tunnelTrace() override { return trace_; }
  event::Timer& tunnelTimer() override { return timer_; }
  // The request ends: the upstream closes, the record goes out, the gauges come down (once).
  void finish();
  // finish(), then the client connection closes once what it was sent is written.
  void close();

  const ConnectionTunnelConfig& config_;
  network::Connection& client_;
  event::Timer timer_;  // the relay's idle deadline and deferred end
  RequestTrace trace_;
  TunnelRelay relay_;
  const bool upgrade_;
  bool finished_ = false;
};

}  // namespace upstream
}  // namespace sluice
