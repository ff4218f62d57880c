#include "source/common/upstream/connection_tunnel.h"

#include <memory>
#include <utility>

#include "source/common/proxy/request_filter.h"

namespace sluice {
namespace upstream {

namespace {
TunnelOptions tunnelOptions(const ConnectionTunnelConfig& config,
                            const ConnectionTunnelStart& start) {
  const UpstreamInfo& info = start.upstream.info();
  TunnelOptions options;
  options.idle_timeout = info.tunnel_idle_timeout;
  options.splice = info.splice;
  options.max_pipes = info.max_splice_pipes;
  options.listener_stats = config.listener_stats;
  options.key_stats = start.key_stats;
  return options;
}
}  // namespace

void ConnectionTunnel::replace(network::ReadFilterCallbacks& callbacks, network::ReadFilter& codec,
                               const ConnectionTunnelConfig& config, RequestTrace& trace,
                               ConnectionTunnelStart start) {
  network::Connection& client = callbacks.connection();
  const TunnelOptions options = tunnelOptions(config, start);
  auto tunnel = std::make_unique<ConnectionTunnel>(
      config, client, std::move(trace), std::move(start.upstream), options, start.upgrade);
  ConnectionTunnel& t = *tunnel;
  callbacks.replaceReadFilter(codec, std::move(tunnel));
  t.relay_.start(client.readBuffer(), start.client_ended, start.upstream_ended);
}

ConnectionTunnel::ConnectionTunnel(const ConnectionTunnelConfig& config,
                                   network::Connection& client, RequestTrace&& trace,
                                   UpstreamHandle upstream, const TunnelOptions& options,
                                   bool upgrade)
    : config_(config),
      client_(client),
      timer_(client.dispatcher(), [this] { relay_.onTimer(); }),
      trace_(std::move(trace)),
      relay_(std::move(upstream), *this, options),
      upgrade_(upgrade) {
  config_.tunnels_active.inc();
  if (upgrade_) config_.upgrades_active.inc();
}

ConnectionTunnel::~ConnectionTunnel() { finish(); }

network::FilterStatus ConnectionTunnel::onData(buffer::Buffer& data, bool end_stream) {
  if (finished_) {
    data.clear();
  } else {
    relay_.onDownstreamData(data, end_stream);
  }
  return network::FilterStatus::StopIteration;
}

void ConnectionTunnel::onEvent(network::ConnectionEvent event) {
  if (event != network::ConnectionEvent::Connected) finish();
}

void ConnectionTunnel::onAboveWriteHighWatermark() { relay_.onDownstreamBackedUp(true); }

void ConnectionTunnel::onBelowWriteLowWatermark() { relay_.onDownstreamBackedUp(false); }

uint32_t ConnectionTunnel::onKeysRevoked() {
  if (finished_ || !trace_.revoked()) return 0;
  trace_.fail(proxy::kRevokedReason);
  close();
  return 1;
}

void ConnectionTunnel::onTunnelEnd(TunnelEnd end) {
  switch (end) {
    case TunnelEnd::UpstreamReset:
      trace_.fail("the destination closed the tunnel", FailureKind::Reset);
      config_.upstream_reset.inc();
      break;
    case TunnelEnd::QuotaReached:
      trace_.fail("byte quota reached");
      break;
    case TunnelEnd::IdleTimeout:
      config_.idle_timeout.inc();
      break;
    case TunnelEnd::DownstreamReset:
      config_.downstream_reset.inc();
      break;
    case TunnelEnd::Done:
      break;
  }
  close();
}

void ConnectionTunnel::finish() {
  if (finished_) return;
  finished_ = true;
  relay_.abort();
  trace_.end(timer_.dispatcher().now(), config_.listener_name, config_.request_duration);
  config_.tunnels_active.dec();
  if (upgrade_) config_.upgrades_active.dec();
}

void ConnectionTunnel::close() {
  finish();
  client_.close(network::CloseType::FlushWrite);
}

}  // namespace upstream
}  // namespace sluice
