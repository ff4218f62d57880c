#include "tools/load/histogram.h"

#include <algorithm>
#include <cmath>

namespace sluice {
namespace load {

Histogram::Histogram() : counts_(bucketCount(), 0) {}

uint64_t Histogram::lowestAt(size_t i) {
  if (i < kSubBuckets) return i;
  const size_t shift = (i - kSubBuckets) / kHalf + 1;
  const uint64_t sub = (i - kSubBuckets) % kHalf + kHalf;
  return sub << shift;
}

uint64_t Histogram::highestAt(size_t i) {
  if (i < kSubBuckets) return i;
  const size_t shift = (i - kSubBuckets) / kHalf + 1;
  return lowestAt(i) + (uint64_t{1} << shift) - 1;
}

void Histogram::merge(const Histogram& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void Histogram::reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = 0;
  sum_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
}

uint64_t Histogram::percentile(double p) const {
  if (count_ == 0) return 0;
  if (p >= 100.0) return max_;
  // Integer rank arithmetic (p in millionths of the whole): 99.9% of 1000 must be rank 999, not
  // the 1000 a floating-point product just above 999 would give.
  const unsigned __int128 ppm = static_cast<unsigned __int128>(std::llround(p * 10000.0));
  uint64_t rank = static_cast<uint64_t>((ppm * count_ + 999999) / 1000000);
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(highestAt(i), max_);
  }
  return max_;
}

}  // namespace load
}  // namespace sluice
