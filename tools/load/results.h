// What a thread counts: outcomes, errors, bytes and phase histograms, merged at the end.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tools/load/histogram.h"

namespace sluice {
namespace load {

enum class ErrorKind : uint8_t {
  ConnectRefused,
  ConnectFailed,
  ProxyTls,
  ProxyStatus,  // CONNECT answered non-2xx
  SocksAuth,
  SocksReply,
  SocksProtocol,
  Tls,
  Reset,
  Closed,  // peer closed before the response was complete
  BadResponse,
  WebSocket,
  Timeout,
  Resolve,
  kCount,
};

const char* errorName(ErrorKind k);

struct Results {
  Histogram latency, connect, proxy_handshake, dst_tls, ttfb;
  uint64_t ok = 0;      // 2xx (101 for the WebSocket upgrade; echoed messages)
  uint64_t failed = 0;  // non-2xx and errors
  uint64_t incomplete = 0;
  uint64_t status[600] = {};
  uint64_t errors[static_cast<int>(ErrorKind::kCount)] = {};
  uint64_t proxy_status[600] = {};
  uint64_t wire_rx = 0, wire_tx = 0;  // socket bytes (TLS records included)
  uint64_t app_rx = 0, app_tx = 0;    // bytes to and from the destination's protocol
  uint64_t body_rx = 0;               // response body bytes (WebSocket/tunnel payload)
  uint64_t body_tx = 0;               // request body bytes (WebSocket/tunnel payload)
  uint64_t connections = 0;
  uint64_t tls_full = 0, tls_resumed = 0;
  uint64_t held = 0;
  uint64_t end_ns = 0;

  void merge(const Results& r) {
    latency.merge(r.latency);
    connect.merge(r.connect);
    proxy_handshake.merge(r.proxy_handshake);
    dst_tls.merge(r.dst_tls);
    ttfb.merge(r.ttfb);
    ok += r.ok;
    failed += r.failed;
    incomplete += r.incomplete;
    for (int i = 0; i < 600; ++i) status[i] += r.status[i], proxy_status[i] += r.proxy_status[i];
    for (int i = 0; i < static_cast<int>(ErrorKind::kCount); ++i) errors[i] += r.errors[i];
    wire_rx += r.wire_rx, wire_tx += r.wire_tx, app_rx += r.app_rx, app_tx += r.app_tx;
    body_rx += r.body_rx;
    body_tx += r.body_tx;
    connections += r.connections;
    tls_full += r.tls_full, tls_resumed += r.tls_resumed;
    held += r.held;
    end_ns = std::max(end_ns, r.end_ns);
  }
};

}  // namespace load
}  // namespace sluice
