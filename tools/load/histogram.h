#pragma once

// A log-linear latency histogram in the style of HdrHistogram: values (nanoseconds) below
// 2 * kSubBuckets are exact; above, every power-of-two range is split into kSubBuckets / 2
// equal buckets, so a reported value is never more than 1 / (kSubBuckets / 2) (~0.1%) above
// the true one. Recording is an index computation and an increment: no allocation, no lock.
// One per thread; merged after the run.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {
namespace load {

class Histogram {
 public:
  static constexpr int kSubBucketBits = 11;  // 2048 exact values, then 1024 per octave
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;
  static constexpr uint64_t kHalf = kSubBuckets / 2;
  // Values above ~18 minutes (2^40 ns) are clamped: no latency this tool measures gets there.
  static constexpr int kMaxBits = 40;
  static constexpr uint64_t kMaxValue = (uint64_t{1} << kMaxBits) - 1;

  Histogram();

  void record(uint64_t value) {
    if (value > kMaxValue) value = kMaxValue;
    ++counts_[indexOf(value)];
    ++count_;
    sum_ += value;
    if (value < min_) min_ = value;
    if (value > max_) max_ = value;
  }
  void merge(const Histogram& other);
  void reset();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_) / count_; }
  // The value at rank ceil(p/100 * count) (1-based), as the highest value its bucket holds,
  // capped at the exact max. p in [0, 100]; 0 when empty.
  uint64_t percentile(double p) const;

  static size_t indexOf(uint64_t value) {
    if (value < kSubBuckets) return static_cast<size_t>(value);
    const int msb = 63 - __builtin_clzll(value);
    const int shift = msb - (kSubBucketBits - 1);
    return static_cast<size_t>(kSubBuckets + (shift - 1) * kHalf + ((value >> shift) - kHalf));
  }
  // The smallest and largest values that share index i's bucket.
  static uint64_t lowestAt(size_t i);
  static uint64_t highestAt(size_t i);
  static size_t bucketCount() { return indexOf(kMaxValue) + 1; }

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace load
}  // namespace sluice
