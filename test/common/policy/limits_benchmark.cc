// What a limit costs a request: the token bucket's compare-and-swap and the in-flight count,
// alone and with two threads on the same group (the machine's two cores), against a key with no
// limit (one relaxed load).
//
//   bazel run -c opt //test/common/policy:limits_benchmark
#include <benchmark/benchmark.h>

#include "source/common/policy/limits.h"

namespace sluice {
namespace policy {
namespace {

config::v1::Group group(double rate, uint32_t max) {
  config::v1::Group g;
  g.set_name("bench");
  if (rate != 0) g.mutable_limits()->set_requests_per_second(rate);
  if (max != 0) g.mutable_limits()->set_max_concurrent(max);
  return g;
}

// One per process: the threads of a multi-threaded run share it, as workers share a group.
KeyLimiter& limiter(double rate, uint32_t max) {
  static auto* limits = [&] {
    auto built = GroupLimiters::build("bench", group(rate, max), "bench", nullptr);
    return built->release();
  }();
  static auto* key = new std::shared_ptr<KeyLimiter>(limits->forKey("k"));
  return **key;
}

void BM_BucketTake(benchmark::State& state) {
  static TokenBucket bucket;
  if (state.thread_index() == 0) bucket.configure(1e7, 1'000'000, monotonicNanos());
  int64_t wait = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bucket.tryTake(monotonicNanos(), wait));
}
BENCHMARK(BM_BucketTake)->Threads(1)->Threads(2);

void BM_ConcurrencyTakeRelease(benchmark::State& state) {
  static ConcurrencyLimit limit;
  if (state.thread_index() == 0) limit.configure(1'000'000);
  for (auto _ : state) {
    benchmark::DoNotOptimize(limit.tryTake());
    limit.release();
  }
}
BENCHMARK(BM_ConcurrencyTakeRelease)->Threads(1)->Threads(2);

// A key whose group has a rate it never reaches and a maximum it never reaches: what a
// request pays for admission and release.
void BM_AdmitNeverReached(benchmark::State& state) {
  KeyLimiter& key = limiter(1e7, 1'000'000);
  LimitRefusal refusal;
  for (auto _ : state) {
    LimitSlot slot;
    benchmark::DoNotOptimize(key.admit(slot, refusal));
  }
}
BENCHMARK(BM_AdmitNeverReached)->Threads(1)->Threads(2);

void BM_AdmitNoLimit(benchmark::State& state) {
  static auto* limits =
      GroupLimiters::build("free", config::v1::Group(), "free", nullptr)->release();
  static auto* key = new std::shared_ptr<KeyLimiter>(limits->forKey("k"));
  LimitRefusal refusal;
  for (auto _ : state) {
    LimitSlot slot;
    benchmark::DoNotOptimize((*key)->admit(slot, refusal));
  }
}
BENCHMARK(BM_AdmitNoLimit);

void BM_Clock(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(monotonicNanos());
}
BENCHMARK(BM_Clock);

}  // namespace
}  // namespace policy
}  // namespace sluice
