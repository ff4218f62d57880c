#include "source/common/http/proxy_stats.h"

namespace sluice {
namespace http {

void registerProxyStats(const config::StatsScope& scope, ProxyStats& s) {
  s.rq_forward = scope.counter("rq_forward");
  s.rq_connect = scope.counter("rq_connect");
  s.rq_rejected = scope.counter("rq_rejected");
  s.rq_head_timeout = scope.counter("rq_head_timeout");
  s.rq_body_too_large = scope.counter("rq_body_too_large");
  s.rq_body_timeout = scope.counter("rq_body_timeout");
  s.rq_retry = scope.counter("rq_retry");
  s.rs_1xx = scope.counter("rs_1xx");
  s.rs_2xx = scope.counter("rs_2xx");
  s.rs_3xx = scope.counter("rs_3xx");
  s.rs_4xx = scope.counter("rs_4xx");
  s.rs_5xx = scope.counter("rs_5xx");
  s.upstream_rs_bad = scope.counter("upstream_rs_bad");
  s.upstream_rs_timeout = scope.counter("upstream_rs_timeout");
  s.upstream_reset = scope.counter("upstream_reset");
  s.downstream_idle_timeout = scope.counter("downstream_idle_timeout");
  s.downstream_reset = scope.counter("downstream_reset");
  s.rq_abandoned = scope.counter("rq_abandoned");
  s.tunnel_idle_timeout = scope.counter("tunnel_idle_timeout");
  s.tunnels_active = scope.gauge("tunnels_active");
  s.bytes_upstream_tx = scope.counter("upstream_bytes_tx");
  s.bytes_upstream_rx = scope.counter("upstream_bytes_rx");
}

}  // namespace http
}  // namespace sluice
