#include "benchmark/benchmark.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace stats {
namespace {

// The hot path: a worker bumping a counter in its own shard.
void BM_CounterIncBoundShard(benchmark::State& state) {
  Counter c = Store::get().counter("bench.bound");
  Store::bindThreadShard(Store::get().createShard());
  for (auto _ : state) {
    c.inc();
  }
  Store::bindThreadShard(nullptr);
}
BENCHMARK(BM_CounterIncBoundShard)->Threads(1)->Threads(4);

void BM_GaugeIncDecBoundShard(benchmark::State& state) {
  Gauge g = Store::get().gauge("bench.gauge");
  Store::bindThreadShard(Store::get().createShard());
  for (auto _ : state) {
    g.inc();
    g.dec();
  }
  Store::bindThreadShard(nullptr);
}
BENCHMARK(BM_GaugeIncDecBoundShard);

// A worker recording a request's duration: the bucket lookup and two slots of its shard.
void BM_HistogramRecordBoundShard(benchmark::State& state) {
  Histogram h = Store::get().histogram("bench.duration_seconds", requestBuckets());
  Store::bindThreadShard(Store::get().createShard());
  // Request-like durations, spread over the low buckets.
  const uint64_t micros[8] = {300, 700, 1200, 4000, 9000, 30000, 800, 2000};
  uint32_t i = 0;
  for (auto _ : state) {
    h.recordMicros(micros[i++ & 7]);
  }
  Store::bindThreadShard(nullptr);
}
BENCHMARK(BM_HistogramRecordBoundShard);

// For comparison: unbound threads contend on the shared shard's atomic add.
void BM_CounterIncFallbackShard(benchmark::State& state) {
  Counter c = Store::get().counter("bench.fallback");
  for (auto _ : state) {
    c.inc();
  }
}
BENCHMARK(BM_CounterIncFallbackShard)->Threads(1)->Threads(4);

}  // namespace
}  // namespace stats
}  // namespace sluice
