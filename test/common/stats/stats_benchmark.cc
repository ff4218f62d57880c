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
