// The histogram against exact percentiles of the same samples, sorted.

#include "tools/load/histogram.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace load {
namespace {

// rank = ceil(p/100 * n), 1-based, as the histogram defines it.
uint64_t exactPercentile(const std::vector<uint64_t>& sorted, double p) {
  if (p >= 100) return sorted.back();
  const unsigned __int128 ppm = static_cast<unsigned __int128>(std::llround(p * 10000.0));
  uint64_t rank = static_cast<uint64_t>((ppm * sorted.size() + 999999) / 1000000);
  if (rank < 1) rank = 1;
  return sorted[rank - 1];
}

void checkAgainstExact(std::vector<uint64_t> samples) {
  Histogram h;
  for (uint64_t v : samples) h.record(v);
  std::sort(samples.begin(), samples.end());
  ASSERT_EQ(h.count(), samples.size());
  EXPECT_EQ(h.min(), samples.front());
  EXPECT_EQ(h.max(), samples.back());
  for (double p : {0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    const uint64_t exact = exactPercentile(samples, p);
    const uint64_t got = h.percentile(p);
    // Never below the true value, and at most one bucket width (1/1024 relative) above it.
    EXPECT_GE(got, exact) << "p" << p;
    EXPECT_LE(static_cast<double>(got - exact), static_cast<double>(exact) / 1024.0)
        << "p" << p << " exact " << exact << " got " << got;
  }
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 0; v < 2048; ++v) h.record(v);
  EXPECT_EQ(h.percentile(50), 1023u);
  EXPECT_EQ(h.percentile(100), 2047u);
  EXPECT_EQ(h.percentile(0.1), 2u);
}

TEST(HistogramTest, BucketsAreContiguousAndBounded) {
  for (size_t i = 1; i < Histogram::bucketCount(); ++i) {
    ASSERT_EQ(Histogram::lowestAt(i), Histogram::highestAt(i - 1) + 1) << i;
    ASSERT_EQ(Histogram::indexOf(Histogram::lowestAt(i)), i);
    ASSERT_EQ(Histogram::indexOf(Histogram::highestAt(i)), i);
    const double width = static_cast<double>(Histogram::highestAt(i) - Histogram::lowestAt(i));
    ASSERT_LE(width, static_cast<double>(Histogram::lowestAt(i)) / 1024.0) << i;
  }
}

TEST(HistogramTest, UniformSamplesMatchSortedPercentiles) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint64_t> d(0, 50'000'000);  // up to 50 ms in ns
  std::vector<uint64_t> s(200000);
  for (auto& v : s) v = d(rng);
  checkAgainstExact(s);
}

TEST(HistogramTest, LongTailSamplesMatchSortedPercentiles) {
  // Log-normal latencies around 100 us with a tail into seconds.
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> d(std::log(100000.0), 1.5);
  std::vector<uint64_t> s(100000);
  for (auto& v : s) v = static_cast<uint64_t>(d(rng));
  checkAgainstExact(s);
}

TEST(HistogramTest, FewSamplesAndRankRounding) {
  checkAgainstExact({5});
  checkAgainstExact({1000000, 2000000});
  // 99.9% of 1000 samples is rank 999 exactly, not 1000.
  std::vector<uint64_t> s;
  for (uint64_t i = 1; i <= 1000; ++i) s.push_back(i * 1000);
  Histogram h;
  for (uint64_t v : s) h.record(v);
  EXPECT_LE(h.percentile(99.9), 999000u + 999000u / 1024);
  EXPECT_GE(h.percentile(99.9), 999000u);
  EXPECT_EQ(h.percentile(100), 1000000u);
}

TEST(HistogramTest, MergeEqualsOneHistogram) {
  Histogram a, b, all;
  for (uint64_t v = 1; v < 100000; v += 7) {
    (v % 2 ? a : b).record(v * 13);
    all.record(v * 13);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.mean(), all.mean());
  for (double p : {50.0, 90.0, 99.0, 99.99}) EXPECT_EQ(a.percentile(p), all.percentile(p));
}

TEST(HistogramTest, HugeValuesAreClampedNotLost) {
  Histogram h;
  h.record(UINT64_MAX);
  h.record(1);
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.max(), Histogram::kMaxValue);
  EXPECT_EQ(h.percentile(50), 1u);
}

TEST(HistogramTest, EmptyIsZero) {
  Histogram h;
  EXPECT_EQ(h.percentile(50), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

}  // namespace
}  // namespace load
}  // namespace sluice
