#include "source/common/policy/limits.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace policy {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kMs = 1'000'000;
// Far from 0, where the bucket's "full" state lives.
constexpr int64_t kStart = 1000 * kSecond;

// Takes tokens every `step` from `start` to `start + duration` (both included): how many it
// got.
int hammer(TokenBucket& bucket, int64_t start, int64_t duration, int64_t step) {
  int taken = 0;
  int64_t wait = 0;
  for (int64_t t = start; t <= start + duration; t += step) taken += bucket.tryTake(t, wait);
  return taken;
}

TEST(TokenBucketTest, OffTakesEverything) {
  TokenBucket bucket;
  EXPECT_FALSE(bucket.enabled());
  int64_t wait = -1;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(bucket.tryTake(kStart, wait));
  EXPECT_EQ(wait, -1);
}

TEST(TokenBucketTest, StartsFullWithTheBurst) {
  TokenBucket bucket;
  bucket.configure(10, 5, kStart);
  EXPECT_TRUE(bucket.enabled());
  EXPECT_DOUBLE_EQ(bucket.tokens(kStart), 5);
  int64_t wait = 0;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.tryTake(kStart, wait)) << i;
  EXPECT_FALSE(bucket.tryTake(kStart, wait));
  // One token comes every 100 ms.
  EXPECT_EQ(wait, 100 * kMs);
  EXPECT_DOUBLE_EQ(bucket.tokens(kStart), 0);
}

TEST(TokenBucketTest, RefillsAtTheRateAndNeverAboveTheBurst) {
  TokenBucket bucket;
  bucket.configure(10, 5, kStart);
  int64_t wait = 0;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(bucket.tryTake(kStart, wait));
  EXPECT_FALSE(bucket.tryTake(kStart + 99 * kMs, wait));
  EXPECT_EQ(wait, 1 * kMs);
  EXPECT_TRUE(bucket.tryTake(kStart + 100 * kMs, wait));
  EXPECT_FALSE(bucket.tryTake(kStart + 100 * kMs, wait));
  // An hour idle fills it to the burst, not to 36,000.
  EXPECT_DOUBLE_EQ(bucket.tokens(kStart + 3600 * kSecond), 5);
  EXPECT_EQ(hammer(bucket, kStart + 3600 * kSecond, 0, 1), 1);
  int taken = 0;
  for (int i = 0; i < 100; ++i) taken += bucket.tryTake(kStart + 3600 * kSecond, wait);
  EXPECT_EQ(taken, 4);
}

TEST(TokenBucketTest, RateOverTenSecondsIsBurstPlusRateTimesTime) {
  TokenBucket bucket;
  bucket.configure(20, 20, kStart);
  // A client asking every millisecond for 10 s.
  EXPECT_EQ(hammer(bucket, kStart, 10 * kSecond, kMs), 20 + 200);
}

TEST(TokenBucketTest, FractionalRates) {
  TokenBucket half;
  half.configure(0.5, 1, kStart);
  int64_t wait = 0;
  EXPECT_TRUE(half.tryTake(kStart, wait));
  EXPECT_FALSE(half.tryTake(kStart + 1999 * kMs, wait));
  EXPECT_EQ(wait, 1 * kMs);
  EXPECT_TRUE(half.tryTake(kStart + 2000 * kMs, wait));
  EXPECT_FALSE(half.tryTake(kStart + 2000 * kMs, wait));
  EXPECT_EQ(wait, 2 * kSecond);

  TokenBucket odd;
  odd.configure(2.5, 3, kStart);
  EXPECT_EQ(hammer(odd, kStart, 100 * kSecond, 10 * kMs), 3 + 250);

  TokenBucket third;  // 333,333,333.3 ns per token, rounded
  third.configure(3, 3, kStart);
  EXPECT_EQ(hammer(third, kStart, 30 * kSecond, kMs), 3 + 90);
}

TEST(TokenBucketTest, AnEarlierTimeAddsNoTokens) {
  // Two workers read the clock, then swap in the other order: the later swap carries the
  // earlier time.
  TokenBucket bucket;
  bucket.configure(10, 2, kStart);
  int64_t wait = 0;
  ASSERT_TRUE(bucket.tryTake(kStart + kSecond, wait));
  ASSERT_TRUE(bucket.tryTake(kStart + kSecond, wait));
  EXPECT_FALSE(bucket.tryTake(kStart + kSecond - 50 * kMs, wait));
  EXPECT_EQ(wait, 150 * kMs);
  EXPECT_FALSE(bucket.tryTake(kStart, wait));
  EXPECT_TRUE(bucket.tryTake(kStart + kSecond + 100 * kMs, wait));
}

TEST(TokenBucketTest, TheClockIsMonotonic) {
  int64_t last = monotonicNanos();
  for (int i = 0; i < 100000; ++i) {
    const int64_t now = monotonicNanos();
    ASSERT_GE(now, last);
    last = now;
  }
  EXPECT_GT(last, 0);
}

TEST(TokenBucketTest, GiveBackReturnsAToken) {
  TokenBucket bucket;
  bucket.configure(1, 2, kStart);
  int64_t wait = 0;
  ASSERT_TRUE(bucket.tryTake(kStart, wait));
  ASSERT_TRUE(bucket.tryTake(kStart, wait));
  ASSERT_FALSE(bucket.tryTake(kStart, wait));
  bucket.giveBack();
  EXPECT_TRUE(bucket.tryTake(kStart, wait));
  EXPECT_FALSE(bucket.tryTake(kStart, wait));
}

TEST(TokenBucketTest, ANewRateKeepsTheTokensHeld) {
  TokenBucket bucket;
  bucket.configure(10, 10, kStart);
  int64_t wait = 0;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(bucket.tryTake(kStart, wait));
  EXPECT_NEAR(bucket.tokens(kStart), 6, 1e-9);
  // Faster and deeper: the 6 stay, and it now fills at 100/s.
  bucket.configure(100, 50, kStart);
  EXPECT_NEAR(bucket.tokens(kStart), 6, 1e-6);
  EXPECT_NEAR(bucket.tokens(kStart + 100 * kMs), 16, 1e-6);
  // A smaller burst caps them.
  bucket.configure(100, 3, kStart);
  EXPECT_NEAR(bucket.tokens(kStart), 3, 1e-6);
  EXPECT_EQ(hammer(bucket, kStart, 0, 1), 1);
  int taken = 0;
  for (int i = 0; i < 10; ++i) taken += bucket.tryTake(kStart, wait);
  EXPECT_EQ(taken, 2);
  // The same values again change nothing.
  bucket.configure(100, 3, kStart);
  EXPECT_NEAR(bucket.tokens(kStart), 0, 1e-6);
}

TEST(TokenBucketTest, TurnedOffAndOnAgainStartsFull) {
  TokenBucket bucket;
  bucket.configure(1, 3, kStart);
  int64_t wait = 0;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(bucket.tryTake(kStart, wait));
  bucket.configure(0, 0, kStart);
  EXPECT_FALSE(bucket.enabled());
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(bucket.tryTake(kStart, wait));
  bucket.configure(1, 3, kStart);
  EXPECT_DOUBLE_EQ(bucket.tokens(kStart), 3);
}

TEST(TokenBucketTest, ConfiguredManyTimesCyclesItsGenerations) {
  TokenBucket bucket;
  int64_t wait = 0;
  for (int i = 1; i <= 10; ++i) {
    bucket.configure(i, i, kStart + i * kSecond);
    EXPECT_NEAR(bucket.tokens(kStart + i * kSecond), i == 1 ? 1 : i - 1, 1e-6) << i;
    ASSERT_TRUE(bucket.tryTake(kStart + i * kSecond, wait));
  }
}

TEST(TokenBucketTest, ThreadsTakeExactlyTheBurstBetweenThem) {
  TokenBucket bucket;
  bucket.configure(0.001, 10000, kStart);
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      int64_t wait = 0;
      int mine = 0;
      for (int i = 0; i < 10000; ++i) mine += bucket.tryTake(kStart, wait);
      taken += mine;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 10000);
}

TEST(TokenBucketTest, ThreadsAtTheirOwnClocksKeepTheRate) {
  TokenBucket bucket;
  bucket.configure(1000, 1, kStart);
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      int64_t wait = 0;
      int mine = 0;
      // Each thread walks the same second at its own pace; tokens are 1 ms apart.
      for (int64_t ns = 0; ns < kSecond; ns += 10'000 + t * 1000) {
        mine += bucket.tryTake(kStart + ns, wait);
      }
      taken += mine;
    });
  }
  for (auto& t : threads) t.join();
  // At most one per millisecond plus the burst (threads out of step may get fewer).
  EXPECT_LE(taken.load(), 1001);
  EXPECT_GE(taken.load(), 1);
}

TEST(ConcurrencyLimitTest, TakesUpToTheMaximumAndReleases) {
  ConcurrencyLimit limit;
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Unlimited);
  EXPECT_EQ(limit.active(), 0);
  limit.configure(3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Taken);
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Refused);
  EXPECT_EQ(limit.active(), 3);
  limit.release();
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Taken);
  // A lower maximum refuses until enough end.
  limit.configure(1);
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Refused);
  limit.release();
  limit.release();
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Refused);
  limit.release();
  EXPECT_EQ(limit.tryTake(), ConcurrencyLimit::Take::Taken);
  limit.release();
  EXPECT_EQ(limit.active(), 0);
}

TEST(ConcurrencyLimitTest, ThreadsNeverHoldMoreThanTheMaximum) {
  ConcurrencyLimit limit;
  limit.configure(2);
  std::atomic<int> holding{0};
  std::atomic<int> most{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        if (limit.tryTake() != ConcurrencyLimit::Take::Taken) {
          ++refused;
          continue;
        }
        const int now = ++holding;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --holding;
        limit.release();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_GE(most.load(), 1);
  EXPECT_EQ(limit.active(), 0);
}

TEST(LimitSpecTest, DefaultsAndErrors) {
  config::v1::GroupLimits proto;
  auto off = parseLimitSpec(proto, "p");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->any());
  proto.set_requests_per_second(2.5);
  auto spec = parseLimitSpec(proto, "p");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->burst, 3u);  // rounded up
  proto.set_requests_per_second(0.25);
  EXPECT_EQ(parseLimitSpec(proto, "p")->burst, 1u);
  proto.set_burst(7);
  EXPECT_EQ(parseLimitSpec(proto, "p")->burst, 7u);

  auto error = [](void (*edit)(config::v1::GroupLimits&)) {
    config::v1::GroupLimits p;
    edit(p);
    auto s = parseLimitSpec(p, "policy.groups[0].limits");
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_EQ(error([](auto& p) { p.set_requests_per_second(-1); }),
            "policy.groups[0].limits.requests_per_second: -1 is not a rate (0 leaves it off)");
  EXPECT_EQ(error([](auto& p) { p.set_requests_per_second(std::nan("")); }).substr(0, 47),
            "policy.groups[0].limits.requests_per_second: na");
  EXPECT_EQ(error([](auto& p) { p.set_requests_per_second(0.0001); }),
            "policy.groups[0].limits.requests_per_second: 0.0001 is outside 0.001-1e+07 (0 leaves "
            "it off)");
  EXPECT_EQ(error([](auto& p) { p.set_burst(3); }),
            "policy.groups[0].limits.burst: set without requests_per_second");
  EXPECT_EQ(error([](auto& p) {
              p.set_requests_per_second(1);
              p.set_burst(2'000'000);
            }),
            "policy.groups[0].limits.burst: 2000000 is above 1000000");
  EXPECT_EQ(error([](auto& p) { p.set_download_bytes_per_second(1000); }),
            "policy.groups[0].limits.download_bytes_per_second: 1000 is outside "
            "1024-1099511627776 (0 leaves it off)");
  EXPECT_EQ(error([](auto& p) { p.set_upload_bytes_per_second(1ull << 41); }),
            "policy.groups[0].limits.upload_bytes_per_second: 2199023255552 is outside "
            "1024-1099511627776 (0 leaves it off)");
  EXPECT_EQ(error([](auto& p) { p.set_upload_bytes_per_second(1024); }), "ok");
  EXPECT_EQ(error([](auto& p) { p.set_quota_bytes(1000); }), "ok");
  EXPECT_EQ(error([](auto& p) { p.set_quota_period("day"); }),
            "policy.groups[0].limits.quota_period: set without quota_bytes");
  EXPECT_EQ(error([](auto& p) {
              p.set_quota_bytes(1000);
              p.set_quota_period("week");
            }),
            "policy.groups[0].limits.quota_period: \"week\" is not day or month");
}

TEST(LimitSpecTest, BandwidthIsALimit) {
  config::v1::GroupLimits proto;
  proto.set_download_bytes_per_second(8 << 20);
  auto spec = parseLimitSpec(proto, "p");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->download_bytes_per_second, 8u << 20);
  EXPECT_EQ(spec->upload_bytes_per_second, 0u);
  EXPECT_TRUE(spec->limitsBandwidth());
  EXPECT_TRUE(spec->any());
  EXPECT_FALSE(spec->limitsRate());
}

// ------------------------------------------------------------------------------------------
// Quotas

TEST(QuotaPeriodTest, DaysAndMonthsInUtc) {
  // 2026-12-01T22:15:00Z
  const int64_t t = 1796163300;
  EXPECT_EQ(quotaPeriodStart(QuotaPeriod::Day, t), 1796083200);  // 2026-12-01T00:00Z
  EXPECT_EQ(quotaPeriodEnd(QuotaPeriod::Day, t), 1796169600);    // 2026-12-02T00:00Z
  EXPECT_EQ(quotaPeriodStart(QuotaPeriod::Month, t), 1796083200);
  EXPECT_EQ(quotaPeriodEnd(QuotaPeriod::Month, t), 1798761600);  // 2027-01-01T00:00Z
  // The last second of a period is in it; the next one starts the next.
  EXPECT_EQ(quotaPeriodStart(QuotaPeriod::Month, 1798761599), 1796083200);
  EXPECT_EQ(quotaPeriodStart(QuotaPeriod::Month, 1798761600), 1798761600);
  // February of a leap year: 2028-02-10 is in [2028-02-01, 2028-03-01).
  EXPECT_EQ(quotaPeriodStart(QuotaPeriod::Month, 1833753600), 1832976000);
  EXPECT_EQ(quotaPeriodEnd(QuotaPeriod::Month, 1833753600), 1835481600);
}

TEST(ByteQuotaTest, CountsRollsAndRestores) {
  ByteQuota q;
  EXPECT_FALSE(q.charge(1 << 30));  // off
  const int64_t day = 1796163300;
  q.configure(1000, QuotaPeriod::Day, day);
  EXPECT_FALSE(q.charge(999));
  EXPECT_FALSE(q.exhausted());
  EXPECT_TRUE(q.charge(1));
  EXPECT_TRUE(q.exhausted());
  q.roll(day + 3600);  // the same day
  EXPECT_EQ(q.used(), 1000u);
  q.roll(day + 86400);  // the next
  EXPECT_EQ(q.used(), 0u);
  EXPECT_FALSE(q.exhausted());
  // A saved count of the current period is taken, one of a past period is not.
  q.restore(q.periodStart(), 700);
  EXPECT_EQ(q.used(), 700u);
  q.restore(q.periodStart() - 86400, 5);
  EXPECT_EQ(q.used(), 700u);
}

TEST(KeyLimiterTest, AQuotaReachedClosesAndRefusesUntilThePeriodEnds) {
  config::v1::Group proto;
  proto.mutable_key_limits()->set_quota_bytes(1 << 20);
  auto built = GroupLimiters::build("ci", proto, "g", nullptr);
  ASSERT_TRUE(built.ok());
  auto a = (*built)->forKey("a");
  EXPECT_TRUE(a->shapes());
  LimitSlot slot;
  LimitRefusal refusal;
  ASSERT_TRUE(a->admit(slot, refusal));
  EXPECT_EQ(a->chargeBytes(Direction::Download, (1 << 20) - 1, kSecond), 0);
  EXPECT_EQ(a->chargeBytes(Direction::Upload, 1, kSecond), KeyLimiter::kQuotaReached);
  LimitSlot next;
  EXPECT_FALSE(a->admit(next, refusal));
  EXPECT_EQ(refusal.kind, LimitRefusal::Kind::Quota);
  EXPECT_EQ(refusal.reason, "byte quota of key a");
  EXPECT_GE(refusal.retry_after, 1u);
  EXPECT_LE(refusal.retry_after, 86400u);
  // Another key has its own.
  LimitSlot other;
  EXPECT_TRUE((*built)->forKey("b")->admit(other, refusal));
}

// ------------------------------------------------------------------------------------------
// ByteBucket

TEST(ByteBucketTest, OffNeverPauses) {
  ByteBucket b;
  EXPECT_EQ(b.charge(1 << 30, kSecond), 0);
}

TEST(ByteBucketTest, ABurstGoesThroughThenTheRateHolds) {
  ByteBucket b;
  b.configure(1 << 20);  // 1 MiB/s: the burst is 100 ms, 104857.6 bytes
  const int64_t t = 10 * kSecond;
  EXPECT_EQ(b.charge(100'000, t), 0);
  // Past the burst: the producer waits until the bucket has paid for what it took.
  const int64_t wait = b.charge(1 << 20, t);
  EXPECT_NEAR(static_cast<double>(wait), 0.9 * kSecond + 100'000.0 / (1 << 20) * kSecond, 1e3);
  // Once it waited that long, a read of 64 KiB costs its own time only.
  EXPECT_NEAR(static_cast<double>(b.charge(64 << 10, t + wait)), kSecond / 16.0, 1e3);
}

TEST(ByteBucketTest, SteadyProducerGetsTheRate) {
  ByteBucket b;
  b.configure(8 << 20);
  int64_t now = kSecond;
  uint64_t moved = 0;
  // A producer that reads 64 KiB, then sleeps as told, 1 ms late each time (a timer's rounding).
  while (moved < (64u << 20)) {
    const int64_t wait = b.charge(64 << 10, now);
    moved += 64 << 10;
    now += wait > 0 ? wait + kMs : 0;
  }
  const double seconds = static_cast<double>(now - kSecond) / kSecond;
  EXPECT_NEAR(seconds, 8.0 - 0.1, 0.05);
}

TEST(ByteBucketTest, AQuietSpellEarnsNoMoreThanABurst) {
  ByteBucket b;
  b.configure(1 << 20);
  EXPECT_EQ(b.charge(1000, kSecond), 0);
  // An hour later the bucket holds 100 ms of the rate, not an hour's.
  const int64_t later = 3600 * kSecond;
  EXPECT_GT(b.charge(1 << 20, later), 0);
}

TEST(KeyLimiterTest, BandwidthTheStricterOfKeyAndGroupWins) {
  config::v1::Group proto;
  proto.mutable_limits()->set_download_bytes_per_second(1 << 20);
  proto.mutable_key_limits()->set_download_bytes_per_second(4 << 20);
  auto built = GroupLimiters::build("ci", proto, "g", nullptr);
  ASSERT_TRUE(built.ok());
  auto a = (*built)->forKey("a");
  auto b = (*built)->forKey("b");
  EXPECT_TRUE(a->active());
  EXPECT_TRUE(a->shapes());
  LimitSlot slot;
  LimitRefusal refusal;
  ASSERT_TRUE(a->admit(slot, refusal));
  EXPECT_EQ(slot.limiter(), a.get());
  const int64_t t = 5 * kSecond;
  // 1 MiB more than the burst: the group's 1 MiB/s makes that a second's wait, the key's own
  // 4 MiB/s only a quarter.
  const int64_t wait = a->chargeBytes(Direction::Download, (1 << 20) + 104858, t);
  EXPECT_NEAR(static_cast<double>(wait), kSecond, kMs);
  // The group's bucket is shared: b's first bytes wait behind a's.
  EXPECT_GT(b->chargeBytes(Direction::Download, 1024, t), kSecond - kMs);
  // Uploads are not limited.
  EXPECT_EQ(a->chargeBytes(Direction::Upload, 1 << 30, t), 0);
}

TEST(KeyLimiterTest, OnlyABandwidthLimitShapes) {
  config::v1::Group proto;
  proto.mutable_limits()->set_requests_per_second(10);
  proto.mutable_key_limits()->set_upload_bytes_per_second(1 << 20);
  auto built = GroupLimiters::build("ci", proto, "g", nullptr);
  ASSERT_TRUE(built.ok());
  EXPECT_TRUE((*built)->forKey("a")->shapes());
  // Requests without a key have no key limits: the group's rate does not shape.
  EXPECT_FALSE((*built)->keyless()->shapes());
  EXPECT_TRUE((*built)->keyless()->active());
}

// ------------------------------------------------------------------------------------------
// GroupLimiters, KeyLimiter, LimitSlot

config::v1::Group groupProto(double rate, uint32_t burst, uint32_t max, double key_rate = 0,
                             uint32_t key_burst = 0, uint32_t key_max = 0) {
  config::v1::Group g;
  g.set_name("g");
  if (rate != 0 || max != 0) {
    g.mutable_limits()->set_requests_per_second(rate);
    g.mutable_limits()->set_burst(burst);
    g.mutable_limits()->set_max_concurrent(max);
  }
  if (key_rate != 0 || key_max != 0) {
    g.mutable_key_limits()->set_requests_per_second(key_rate);
    g.mutable_key_limits()->set_burst(key_burst);
    g.mutable_key_limits()->set_max_concurrent(key_max);
  }
  return g;
}

std::unique_ptr<GroupLimiters> build(const config::v1::Group& proto,
                                     const GroupLimiters* running = nullptr) {
  auto built = GroupLimiters::build("g", proto, "policy.groups[0]", running);
  EXPECT_TRUE(built.ok()) << built.status();
  return std::move(*built);
}

TEST(KeyLimiterTest, NoLimitsCostNothingAndHoldNothing) {
  auto limits = build(groupProto(0, 0, 0));
  auto key = limits->forKey("a");
  ASSERT_NE(key, nullptr);
  EXPECT_FALSE(key->active());
  LimitSlot slot;
  LimitRefusal refusal;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(key->admit(slot, refusal));
  EXPECT_FALSE(slot.admitted());
}

TEST(KeyLimiterTest, TheSameNameIsTheSameLimiter) {
  auto limits = build(groupProto(5, 5, 0));
  EXPECT_EQ(limits->forKey("a"), limits->forKey("a"));
  EXPECT_NE(limits->forKey("a"), limits->forKey("b"));
  EXPECT_EQ(limits->keyless(), limits->keyless());
}

TEST(KeyLimiterTest, KeysShareTheGroupRate) {
  auto limits = build(groupProto(1, 4, 0));
  auto a = limits->forKey("a");
  auto b = limits->forKey("b");
  auto anyone = limits->keyless();
  int admitted = 0;
  LimitRefusal refusal;
  for (int i = 0; i < 3; ++i) {
    for (KeyLimiter* k : {a.get(), b.get(), anyone.get()}) {
      LimitSlot slot;
      admitted += k->admit(slot, refusal);
    }
  }
  EXPECT_EQ(admitted, 4);
  EXPECT_EQ(refusal.kind, LimitRefusal::Kind::Rate);
  EXPECT_EQ(refusal.reason, "request rate limit of group g");
  EXPECT_EQ(refusal.retry_after, 1u);
}

TEST(KeyLimiterTest, KeyLimitsAreEachKeysOwn) {
  auto limits = build(groupProto(0, 0, 0, 1, 2, 0));
  auto a = limits->forKey("a");
  auto b = limits->forKey("b");
  LimitRefusal refusal;
  int a_admitted = 0;
  int b_admitted = 0;
  for (int i = 0; i < 10; ++i) {
    LimitSlot sa;
    LimitSlot sb;
    a_admitted += a->admit(sa, refusal);
    b_admitted += b->admit(sb, refusal);
  }
  EXPECT_EQ(a_admitted, 2);
  EXPECT_EQ(b_admitted, 2);
  EXPECT_EQ(refusal.reason, "request rate limit of key b");
  // Requests without a key have no key of their own to limit.
  auto anyone = limits->keyless();
  EXPECT_FALSE(anyone->active());
}

TEST(KeyLimiterTest, RetryAfterIsTheSecondsUntilAToken) {
  auto limits = build(groupProto(0.1, 1, 0));
  auto a = limits->forKey("a");
  LimitSlot first;
  LimitRefusal refusal;
  ASSERT_TRUE(a->admit(first, refusal));
  LimitSlot second;
  ASSERT_FALSE(a->admit(second, refusal));
  EXPECT_GE(refusal.retry_after, 9u);
  EXPECT_LE(refusal.retry_after, 10u);
  EXPECT_FALSE(second.admitted());
}

TEST(KeyLimiterTest, APlaceMovesWithItsSlot) {
  // A connection that becomes a tunnel moves its request's trace, slot included: the place is
  // held by the new slot alone and given back once.
  auto limits = build(groupProto(0, 0, 2, 0, 0, 1));
  auto a = limits->forKey("a");
  const GroupLimiter& group = *limits->groupLimiter();
  LimitRefusal refusal;
  LimitSlot first;
  ASSERT_TRUE(a->admit(first, refusal));
  LimitSlot moved(std::move(first));
  EXPECT_FALSE(first.admitted());  // NOLINT(bugprone-use-after-move): defined as empty
  EXPECT_EQ(moved.limiter(), a.get());
  first.release();
  EXPECT_EQ(a->state().concurrency.active(), 1);
  EXPECT_EQ(group.state().concurrency.active(), 1);
  moved.release();
  EXPECT_EQ(a->state().concurrency.active(), 0);
  EXPECT_EQ(group.state().concurrency.active(), 0);
}

TEST(KeyLimiterTest, ConcurrencyPlacesAreHeldUntilReleasedOnce) {
  auto limits = build(groupProto(0, 0, 2, 0, 0, 1));
  auto a = limits->forKey("a");
  auto b = limits->forKey("b");
  auto c = limits->forKey("c");
  const GroupLimiter& group = *limits->groupLimiter();
  LimitRefusal refusal;
  LimitSlot a1;
  LimitSlot a2;
  ASSERT_TRUE(a->admit(a1, refusal));
  EXPECT_TRUE(a1.admitted());
  EXPECT_EQ(a1.limiter(), a.get());
  // The key's own maximum (1) refuses its second.
  EXPECT_FALSE(a->admit(a2, refusal));
  EXPECT_EQ(refusal.kind, LimitRefusal::Kind::Concurrency);
  EXPECT_EQ(refusal.reason, "concurrency limit of key a");
  EXPECT_EQ(refusal.retry_after, 1u);
  LimitSlot b1;
  ASSERT_TRUE(b->admit(b1, refusal));
  // The group's maximum (2) refuses c, and gives back the place c took under its own.
  LimitSlot c1;
  EXPECT_FALSE(c->admit(c1, refusal));
  EXPECT_EQ(refusal.reason, "concurrency limit of group g");
  EXPECT_EQ(c->state().concurrency.active(), 0);
  EXPECT_EQ(group.state().concurrency.active(), 2);
  a1.release();
  a1.release();
  EXPECT_EQ(group.state().concurrency.active(), 1);
  EXPECT_EQ(a->state().concurrency.active(), 0);
  EXPECT_TRUE(c->admit(c1, refusal));
  // An admitted slot is not admitted again (a retried request).
  EXPECT_TRUE(c->admit(c1, refusal));
  EXPECT_EQ(group.state().concurrency.active(), 2);
  EXPECT_EQ(c->state().concurrency.active(), 1);
  {
    LimitSlot goes_out_of_scope;
    b1.release();
    ASSERT_TRUE(a->admit(goes_out_of_scope, refusal));
    EXPECT_EQ(group.state().concurrency.active(), 2);
  }
  EXPECT_EQ(group.state().concurrency.active(), 1);
}

TEST(KeyLimiterTest, ARateRefusalGivesBackThePlacesAndTheKeysToken) {
  // The key has tokens to spare; its group has one.
  auto limits = build(groupProto(0.001, 1, 5, 0.001, 10, 5));
  auto a = limits->forKey("a");
  LimitRefusal refusal;
  LimitSlot first;
  ASSERT_TRUE(a->admit(first, refusal));
  LimitSlot second;
  ASSERT_FALSE(a->admit(second, refusal));
  EXPECT_EQ(refusal.reason, "request rate limit of group g");
  EXPECT_EQ(a->state().concurrency.active(), 1);
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 1);
  EXPECT_NEAR(a->state().bucket.tokens(monotonicNanos()), 9, 0.01);
}

TEST(KeyLimiterTest, AReloadCarriesTheStateAndAppliesNewValuesWhenItRuns) {
  auto v1 = build(groupProto(0, 0, 2));
  auto a1 = v1->forKey("a");
  LimitRefusal refusal;
  LimitSlot held;
  ASSERT_TRUE(a1->admit(held, refusal));
  // The next version: the same limiters, their values unchanged until it runs.
  auto v2 = build(groupProto(0, 0, 1), v1.get());
  auto a2 = v2->forKey("a");
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(v1->groupLimiter(), v2->groupLimiter());
  LimitSlot another;
  ASSERT_TRUE(a2->admit(another, refusal));
  another.release();
  v2->apply(monotonicNanos());
  // One held from before counts against the new maximum of 1.
  EXPECT_FALSE(a2->admit(another, refusal));
  EXPECT_FALSE(a1->admit(another, refusal));  // an older connection's config: the same limiter
  held.release();
  EXPECT_TRUE(a2->admit(another, refusal));
  another.release();

  // A key new in a version gets its own; one the version dropped is not carried further.
  auto v3 = build(groupProto(0, 0, 1), v2.get());
  auto b3 = v3->forKey("b");
  v3->apply(monotonicNanos());
  auto v4 = build(groupProto(0, 0, 1), v3.get());
  EXPECT_EQ(v4->forKey("b"), b3);
  EXPECT_NE(v4->forKey("a"), a2);
}

TEST(KeyLimiterTest, AReloadAddingALimitReachesLimitersOfTheOlderVersion) {
  auto v1 = build(groupProto(0, 0, 0));
  auto a = v1->forKey("a");
  EXPECT_FALSE(a->active());
  auto v2 = build(groupProto(0.001, 1, 0), v1.get());
  ASSERT_EQ(v2->forKey("a"), a);
  EXPECT_FALSE(a->active());  // not before the version runs
  v2->apply(monotonicNanos());
  EXPECT_TRUE(a->active());
  LimitRefusal refusal;
  LimitSlot s1;
  LimitSlot s2;
  EXPECT_TRUE(a->admit(s1, refusal));
  EXPECT_FALSE(a->admit(s2, refusal));
  // And removing it again lets everything through.
  auto v3 = build(groupProto(0, 0, 0), v2.get());
  v3->forKey("a");
  v3->apply(monotonicNanos());
  EXPECT_FALSE(a->active());
  EXPECT_TRUE(a->admit(s2, refusal));
}

TEST(KeyLimiterTest, ThreadsAdmitAndReleaseWithoutLosingAPlace) {
  auto limits = build(groupProto(0, 0, 3, 0, 0, 2));
  auto a = limits->forKey("a");
  auto b = limits->forKey("b");
  std::vector<std::thread> threads;
  std::atomic<int> admitted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      KeyLimiter& key = t % 2 == 0 ? *a : *b;
      LimitRefusal refusal;
      for (int i = 0; i < 20000; ++i) {
        LimitSlot slot;
        if (key.admit(slot, refusal)) ++admitted;
        EXPECT_LE(limits->groupLimiter()->state().concurrency.active(), 3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(limits->groupLimiter()->state().concurrency.active(), 0);
  EXPECT_EQ(a->state().concurrency.active(), 0);
  EXPECT_EQ(b->state().concurrency.active(), 0);
}

}  // namespace
}  // namespace policy
}  // namespace sluice
