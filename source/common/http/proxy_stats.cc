#include "source/common/http/proxy_stats.h"

namespace sluice {
namespace http {

void registerProxyStats(const stats::Scope& scope, ProxyStats& s) {
  s.rq_forward = scope.counter("rq_forward", "http:// (absolute-form) requests relayed.");
  s.rq_connect = scope.counter("rq_connect", "CONNECT tunnels requested.");
  s.rq_rejected =
      scope.counter("rq_rejected", "Malformed or unsupported requests (400, 431, 501, 505).");
  s.rq_head_timeout =
      scope.counter("rq_head_timeout", "Request heads not in within their deadline (408).");
  s.rq_body_too_large =
      scope.counter("rq_body_too_large", "Request bodies over max_request_body_bytes (413).");
  s.rq_body_timeout = scope.counter("rq_body_timeout",
                                    "Request bodies the client stalled before any response (408).");
  s.rq_retry = scope.counter("rq_retry",
                             "Requests retried on a fresh connection after a pooled one failed.");
  // One family for the status classes, a label each.
  auto status = [&](const char* stat, const char* status_class) {
    return scope.counter(stat, "rs", stats::Label{"class", status_class},
                         "Responses sent to clients, by status class.");
  };
  s.rs_1xx = status("rs_1xx", "1xx");
  s.rs_2xx = status("rs_2xx", "2xx");
  s.rs_3xx = status("rs_3xx", "3xx");
  s.rs_4xx = status("rs_4xx", "4xx");
  s.rs_5xx = status("rs_5xx", "5xx");
  s.upstream_rs_bad = scope.counter("upstream_rs_bad", "Malformed origin responses (502).");
  s.upstream_rs_timeout =
      scope.counter("upstream_rs_timeout", "Origins that did not answer in time (504).");
  s.upstream_reset = scope.counter("upstream_reset", "Origins that closed mid-exchange.");
  s.downstream_rs_timeout = scope.counter(
      "downstream_rs_timeout",
      "Responses cut because the client took none of them for response_timeout (it stopped "
      "reading).");
  s.downstream_idle_timeout = scope.counter(
      "downstream_idle_timeout", "Client connections closed after idle_timeout without a request.");
  s.downstream_reset =
      scope.counter("downstream_reset", "Clients that left (or reset a stream) mid-exchange.");
  s.rq_abandoned = scope.counter(
      "rq_abandoned", "Clients that left while their request waited for its lookup or connect.");
  s.tunnel_idle_timeout =
      scope.counter("tunnel_idle_timeout", "Tunnels closed after tunnel_idle_timeout.");
  s.tunnels_active = scope.gauge("tunnels_active", "Tunnels open (CONNECT and upgrades).");
  s.bytes_upstream_tx =
      scope.counter("upstream_bytes_tx", "Request bytes written to origins (head and body).");
  s.bytes_upstream_rx = scope.counter("upstream_bytes_rx", "Response bytes read from origins.");
}

}  // namespace http
}  // namespace sluice
