// Registers stats shaped like the proxy's (and a few awkward ones) and prints the Prometheus
// exposition, for prometheus_format_test.py to parse.
#include <cstdio>
#include <thread>

#include "source/common/stats/stats.h"

int main() {
  using sluice::stats::Label;
  using sluice::stats::Scope;
  using sluice::stats::Store;
  Store& store = Store::get();
  const Scope http("listener", "listener", "http");
  http.counter("downstream_cx_total", "Client connections accepted.").add(12);
  Scope("listener", "listener", "we\"ird\\name\n").counter("downstream_cx_total", "").add(1);
  const Scope chain("http1", "chain", "http");
  chain.counter("rq_total", "Request heads parsed.").add(40);
  chain.counter("rs_2xx", "rs", Label{"class", "2xx"}, "Responses, by class.").add(7);
  chain.counter("rs_5xx", "rs", Label{"class", "5xx"}, "Responses, by class.");
  store.counter("auth.denied", "Requests denied.").add(3);  // A counter whose name lacks "_total".
  store.counter("dns:cache-hits").add(5);
  http.gauge("downstream_cx_active", "Client connections open.")
      .add(-2);  // Shards can net negative.
  Scope("listener", "listener", "socks5").gauge("downstream_cx_active", "").add(4);
  store.counter("never.touched");
  // Two names that sanitize to the same metric.
  store.counter("a.b").add(1);
  store.counter("a_b").add(2);
  // Histograms: one observed on two shards (this thread's and a worker's), one never.
  const sluice::stats::Buckets buckets{500, 250000, 60000000};
  const sluice::stats::Histogram duration =
      Scope("request", "listener", "http")
          .histogram("http1.duration_seconds", "duration_seconds", Label{"protocol", "http1"},
                     "Requests, start to end.", buckets);
  store.histogram("dns.lookup_duration_seconds", buckets, "Lookups.");
  duration.recordMicros(100);
  std::thread worker([&] {
    Store::bindThreadShard(store.createShard());
    store.counter("http1.http.rq_total").add(2);
    duration.recordMicros(250000);
    duration.recordMicros(1500000);
    duration.recordMicros(61000000);
  });
  worker.join();
  const std::string text = store.renderPrometheus();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
