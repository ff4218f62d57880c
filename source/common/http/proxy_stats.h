#pragma once

#include <cstdint>

#include "source/common/stats/stats.h"

namespace sluice {
namespace http {

// The stats the HTTP/1.1 and HTTP/2 front-end codecs both keep, under the same names; each
// codec's stats struct extends this with its own.
struct ProxyStats {
  stats::Counter rq_forward;         // http:// (absolute-form) requests relayed
  stats::Counter rq_connect;         // CONNECT tunnels requested
  stats::Counter rq_rejected;        // malformed or unsupported requests (400/431/501/505)
  stats::Counter rq_head_timeout;    // request heads not in within their deadline
  stats::Counter rq_body_too_large;  // bodies over max_request_body_bytes (413, close or reset)
  stats::Counter rq_body_timeout;    // uploads the client stalled before any response (408)
  stats::Counter rq_retry;           // retried on a fresh connection after a pooled one failed
  stats::Counter rs_1xx, rs_2xx, rs_3xx, rs_4xx, rs_5xx;
  stats::Counter upstream_rs_bad;      // malformed origin responses (502)
  stats::Counter upstream_rs_timeout;  // origins that did not answer in time (504)
  stats::Counter upstream_reset;       // origins that closed mid-exchange
  // Responses cut because the client took none of them for response_timeout (it stopped
  // reading, and the origin was held back for it).
  stats::Counter downstream_rs_timeout;
  stats::Counter downstream_idle_timeout;
  stats::Counter downstream_reset;  // clients that left (or reset a stream) mid-exchange
  // Clients that left while their request waited for its lookup or connect (both cancelled).
  stats::Counter rq_abandoned;
  stats::Counter tunnel_idle_timeout;
  stats::Gauge tunnels_active;
  stats::Counter bytes_upstream_tx;  // request bytes written to origins (head and body)
  stats::Counter bytes_upstream_rx;  // response bytes read from origins

  // One response status sent to the client, by class.
  void countStatus(uint16_t status) const {
    if (status < 200) {
      rs_1xx.inc();
    } else if (status < 300) {
      rs_2xx.inc();
    } else if (status < 400) {
      rs_3xx.inc();
    } else if (status < 500) {
      rs_4xx.inc();
    } else {
      rs_5xx.inc();
    }
  }
};

// Registers the shared stats in `scope` (at config load): "<codec>.<chain>.<stat>".
void registerProxyStats(const stats::Scope& scope, ProxyStats& s);

}  // namespace http
}  // namespace sluice
