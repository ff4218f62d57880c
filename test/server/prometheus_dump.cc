// Registers stats shaped like the proxy's (and a few awkward ones) and prints the Prometheus
// exposition, for prometheus_format_test.py to parse.
#include <cstdio>
#include <thread>

#include "source/common/stats/stats.h"

int main() {
  using sluice::stats::Store;
  Store& store = Store::get();
  store.counter("listener.http.downstream_cx_total").add(12);
  store.counter("http1.http.rq_total").add(40);
  store.counter("auth.denied").add(3);  // A counter whose name lacks "_total".
  store.counter("dns:cache-hits").add(5);
  store.gauge("worker.0.downstream_cx_active").add(-2);  // Shards can net negative.
  store.gauge("worker.1.downstream_cx_active").add(4);
  store.counter("never.touched");
  // Two names that sanitize to the same metric.
  store.counter("a.b").add(1);
  store.counter("a_b").add(2);
  std::thread worker([&] {
    Store::bindThreadShard(store.createShard());
    store.counter("http1.http.rq_total").add(2);
  });
  worker.join();
  const std::string text = store.renderPrometheus();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
