#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/stats/stats.h"

namespace sluice {
namespace stats {
namespace {

class HistogramTest : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Store::bindThreadShard(nullptr);
    store().resetForTest();
  }
  void TearDown() override { Store::bindThreadShard(nullptr); }

  static Store& store() { return Store::get(); }
  static Store::HistogramValue value(std::string_view name) {
    std::optional<Store::HistogramValue> h = store().histogramValue(name);
    EXPECT_TRUE(h.has_value()) << name;
    return h.value_or(Store::HistogramValue{});
  }
};

// The reference: the first bound at least v, by binary search.
uint32_t slowBucket(const Buckets& b, uint64_t v) {
  std::vector<uint64_t> bounds;
  for (uint32_t i = 0; i < b.size(); ++i) bounds.push_back(b.bound(i));
  return static_cast<uint32_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

TEST(BucketsTest, BoundsAreInclusiveUpperBounds) {
  const Buckets b{1, 10, 100};
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.bucketFor(0), 0u);
  EXPECT_EQ(b.bucketFor(1), 0u);
  EXPECT_EQ(b.bucketFor(2), 1u);
  EXPECT_EQ(b.bucketFor(10), 1u);
  EXPECT_EQ(b.bucketFor(11), 2u);
  EXPECT_EQ(b.bucketFor(100), 2u);
  EXPECT_EQ(b.bucketFor(101), 3u);  // +Inf
  EXPECT_EQ(b.bucketFor(std::numeric_limits<uint64_t>::max()), 3u);
}

TEST(BucketsTest, LookupAgreesWithASearchEverywhere) {
  // Dense bounds (several per power of two) take the same path as sparse ones.
  const Buckets dense{3, 4, 5, 6, 7, 8, 9, 1000, 1001, 1002, uint64_t{1} << 40};
  for (const Buckets* b : {&latencyBuckets(), &requestBuckets(), &tunnelBuckets(), &dense}) {
    std::vector<uint64_t> values = {0, 1, 2, std::numeric_limits<uint64_t>::max()};
    for (uint32_t i = 0; i < b->size(); ++i) {
      values.insert(values.end(), {b->bound(i) - 1, b->bound(i), b->bound(i) + 1});
    }
    for (int bit = 0; bit < 64; ++bit) {
      const uint64_t p = uint64_t{1} << bit;
      values.insert(values.end(), {p - 1, p, p + 1});
    }
    uint64_t x = 88172645463325252ull;  // xorshift64: fixed, so the test is deterministic
    for (int i = 0; i < 20000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      values.push_back(x >> (x % 64));
    }
    for (uint64_t v : values) ASSERT_EQ(b->bucketFor(v), slowBucket(*b, v)) << v;
  }
}

TEST(BucketsTest, ShippedSetsAreLogSpaced) {
  struct Expect {
    const Buckets* b;
    uint64_t first, last;
  };
  for (const Expect& e :
       {Expect{&latencyBuckets(), 100, 60000000}, Expect{&requestBuckets(), 500, 3600000000},
        Expect{&tunnelBuckets(), 10000, 86400000000}}) {
    ASSERT_GT(e.b->size(), 10u);
    EXPECT_EQ(e.b->bound(0), e.first);
    EXPECT_EQ(e.b->bound(e.b->size() - 1), e.last);
    // At least doubling: the lookup then scans one or two bounds.
    for (uint32_t i = 1; i < e.b->size(); ++i) {
      EXPECT_GE(e.b->bound(i), 2 * e.b->bound(i - 1)) << i;
    }
  }
}

TEST(BucketsDeathTest, InvalidBoundsDie) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)Buckets({0, 10}), "positive and strictly increasing");
  EXPECT_DEATH((void)Buckets({10, 10}), "positive and strictly increasing");
  EXPECT_DEATH((void)Buckets({10, 5}), "positive and strictly increasing");
  std::vector<uint64_t> many;
  for (uint64_t i = 1; i <= Buckets::kMaxBounds + 1; ++i) many.push_back(i);
  EXPECT_DEATH((void)Buckets(many), "at most");
  many.pop_back();
  EXPECT_EQ(Buckets(many).size(), Buckets::kMaxBounds);
}

TEST_F(HistogramTest, RecordsBucketsAndSum) {
  const Histogram h = store().histogram("upstream.connect_seconds", Buckets{1000, 10000});
  EXPECT_NE(h.index, 0u);
  h.recordMicros(500);
  h.record(std::chrono::milliseconds(1));  // on the bound: le is inclusive
  h.record(std::chrono::microseconds(1001));
  h.record(std::chrono::nanoseconds(20000999));  // truncated to 20000 µs
  h.record(std::chrono::microseconds(-5));       // a clock that stepped back: 0
  const Store::HistogramValue v = value("upstream.connect_seconds");
  EXPECT_EQ(v.counts, (std::vector<uint64_t>{3, 1, 1}));
  EXPECT_EQ(v.count(), 5u);
  EXPECT_EQ(v.sum_micros, 500u + 1000 + 1001 + 20000);
  EXPECT_EQ(v.buckets->size(), 2u);
}

TEST_F(HistogramTest, TakesItsSlotsAndSameNameSameHandle) {
  const Histogram a = store().histogram("a_seconds", latencyBuckets());
  const Histogram again = store().histogram("a_seconds", Buckets(latencyBuckets()));
  EXPECT_EQ(a.index, again.index);
  EXPECT_EQ(a.buckets, again.buckets);  // the store's copy, shared
  EXPECT_NE(a.buckets, &latencyBuckets());
  // The sum and one slot per bucket, +Inf included.
  EXPECT_EQ(store().counter("next").index, a.index + latencyBuckets().size() + 2);
  // Histograms are not counters or gauges.
  a.recordMicros(5);
  EXPECT_EQ(store().counterValue("a_seconds"), 0u);
  EXPECT_EQ(store().gaugeValue("a_seconds"), 0);
  ASSERT_EQ(store().snapshot().size(), 1u);
  EXPECT_EQ(store().snapshot()[0].name, "next");
  EXPECT_FALSE(store().histogramValue("next").has_value());
  EXPECT_FALSE(store().histogramValue("nothing").has_value());
}

TEST_F(HistogramTest, DefaultHandleRecordsNothing) {
  const Counter first = store().counter("first");  // slots 1 and 2: what a default bucket hits
  const Counter second = store().counter("second");
  EXPECT_EQ(first.index, 1u);
  Histogram unset;
  unset.recordMicros(1);
  unset.record(std::chrono::hours(1));
  EXPECT_EQ(store().counterValue("first"), 0u);
  EXPECT_EQ(store().counterValue("second"), 0u);
  (void)second;
}

TEST_F(HistogramTest, MergesShardsFromSeveralThreads) {
  const Histogram h = store().histogram("dns.lookup_seconds", Buckets{10, 100, 1000});
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 200000;
  std::atomic<bool> done{false};

  // A reader merging while the writers run never sees the count go down or overshoot.
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      const Store::HistogramValue v = value("dns.lookup_seconds");
      EXPECT_GE(v.count(), last);
      EXPECT_LE(v.count(), kThreads * kPerThread);
      last = v.count();
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      Shard* shard = store().createShard();
      Store::bindThreadShard(shard);
      // Thread t observes 10^t µs: 1, 10, 100, 1000, one bucket each.
      uint64_t micros = 1;
      for (int i = 0; i < t; ++i) micros *= 10;
      for (uint64_t i = 0; i < kPerThread; ++i) h.recordMicros(micros);
      // Only this thread's shard moved.
      const uint32_t bucket = h.buckets->bucketFor(micros);
      EXPECT_EQ(shard->values[h.index + 1 + bucket].load(), kPerThread);
      EXPECT_EQ(shard->values[h.index].load(), kPerThread * micros);
      EXPECT_EQ(detail::g_fallback_shard.values[h.index + 1 + bucket].load(), 0u);
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();

  const Store::HistogramValue v = value("dns.lookup_seconds");
  EXPECT_EQ(v.counts, (std::vector<uint64_t>{2 * kPerThread, kPerThread, kPerThread, 0}));
  EXPECT_EQ(v.sum_micros, kPerThread * (1 + 10 + 100 + 1000));
}

TEST_F(HistogramTest, UnboundThreadsShareTheFallbackShardExactly) {
  const Histogram h = store().histogram("main_seconds", Buckets{10});
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) h.recordMicros(t % 2 == 0 ? 5 : 50);
    });
  }
  for (auto& t : threads) t.join();
  const Store::HistogramValue v = value("main_seconds");
  EXPECT_EQ(v.counts, (std::vector<uint64_t>{2 * kPerThread, 2 * kPerThread}));
  EXPECT_EQ(v.sum_micros, 2 * kPerThread * 5 + 2 * kPerThread * 50);
}

TEST_F(HistogramTest, QuantilesInterpolateWithinTheBucket) {
  const Histogram h = store().histogram("q_seconds", Buckets{1000, 2000, 4000});
  EXPECT_FALSE(value("q_seconds").quantileMicros(0.5).has_value());
  for (int i = 0; i < 50; ++i) h.recordMicros(700);
  for (int i = 0; i < 40; ++i) h.recordMicros(1500);
  for (int i = 0; i < 10; ++i) h.recordMicros(3000);
  const Store::HistogramValue v = value("q_seconds");
  EXPECT_NEAR(*v.quantileMicros(0.25), 500, 1e-6);  // rank 25 of 50 in [0, 1000]
  EXPECT_NEAR(*v.quantileMicros(0.5), 1000, 1e-6);  // all of the first bucket
  EXPECT_NEAR(*v.quantileMicros(0.7), 1500, 1e-6);  // rank 20 of 40 in [1000, 2000]
  EXPECT_NEAR(*v.quantileMicros(0.9), 2000, 1e-6);
  EXPECT_NEAR(*v.quantileMicros(0.99), 3800, 1e-6);  // rank 9 of 10 in [2000, 4000]
  EXPECT_NEAR(*v.quantileMicros(1.0), 4000, 1e-6);

  // Empty buckets on the way are skipped; what lies above every bound reads as the last one.
  const Histogram tail = store().histogram("tail_seconds", Buckets{1000, 2000, 4000});
  tail.recordMicros(3500);
  tail.recordMicros(9000);
  const Store::HistogramValue t = value("tail_seconds");
  EXPECT_NEAR(*t.quantileMicros(0.5), 4000, 1e-6);   // rank 1 of 1 in [2000, 4000]
  EXPECT_NEAR(*t.quantileMicros(0.99), 4000, 1e-6);  // in +Inf
}

TEST_F(HistogramTest, RenderPrometheus) {
  const Buckets b{500, 250000, 60000000};
  const Scope listener("request", "listener", "http");
  const Histogram http1 = listener.histogram("http1.duration_seconds", "duration_seconds",
                                             Label{"protocol", "http1"}, "Requests.", b);
  const Histogram socks = listener.histogram("socks5.duration_seconds", "duration_seconds",
                                             Label{"protocol", "socks5"}, "Requests.", b);
  const Histogram dns = store().histogram("dns.lookup_duration_seconds", b, "Lookups.");
  http1.recordMicros(100);
  http1.recordMicros(250000);
  http1.recordMicros(1500000);
  http1.recordMicros(61000000);
  socks.recordMicros(2);
  (void)dns;
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_dns_lookup_duration_seconds Lookups.\n"
            "# TYPE sluice_dns_lookup_duration_seconds histogram\n"
            "sluice_dns_lookup_duration_seconds_bucket{le=\"0.0005\"} 0\n"
            "sluice_dns_lookup_duration_seconds_bucket{le=\"0.25\"} 0\n"
            "sluice_dns_lookup_duration_seconds_bucket{le=\"60\"} 0\n"
            "sluice_dns_lookup_duration_seconds_bucket{le=\"+Inf\"} 0\n"
            "sluice_dns_lookup_duration_seconds_sum 0\n"
            "sluice_dns_lookup_duration_seconds_count 0\n"
            "# HELP sluice_request_duration_seconds Requests.\n"
            "# TYPE sluice_request_duration_seconds histogram\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"http1\","
            "le=\"0.0005\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"http1\","
            "le=\"0.25\"} 2\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"http1\","
            "le=\"60\"} 3\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"http1\","
            "le=\"+Inf\"} 4\n"
            "sluice_request_duration_seconds_sum{listener=\"http\",protocol=\"http1\"} 62.7501\n"
            "sluice_request_duration_seconds_count{listener=\"http\",protocol=\"http1\"} 4\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"0.0005\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"0.25\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"60\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"+Inf\"} 1\n"
            "sluice_request_duration_seconds_sum{listener=\"http\",protocol=\"socks5\"} 0.000002\n"
            "sluice_request_duration_seconds_count{listener=\"http\",protocol=\"socks5\"} 1\n");
  // The filter matches the dotted names.
  EXPECT_EQ(store().renderPrometheus("socks5"),
            "# HELP sluice_request_duration_seconds Requests.\n"
            "# TYPE sluice_request_duration_seconds histogram\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"0.0005\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"0.25\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"60\"} 1\n"
            "sluice_request_duration_seconds_bucket{listener=\"http\",protocol=\"socks5\","
            "le=\"+Inf\"} 1\n"
            "sluice_request_duration_seconds_sum{listener=\"http\",protocol=\"socks5\"} 0.000002\n"
            "sluice_request_duration_seconds_count{listener=\"http\",protocol=\"socks5\"} 1\n");
  EXPECT_EQ(store().histogramValue("request.http.http1.duration_seconds")->count(), 4u);
}

TEST_F(HistogramTest, RenderTextAndJson) {
  const Histogram h = store().histogram("tls.https.handshake_duration_seconds",
                                        Buckets{1000, 2000, 4000}, "Handshakes.");
  store().histogram("tunnel.listener.http.duration_seconds", tunnelBuckets());
  store().counter("tls.https.handshakes").add(3);
  h.recordMicros(700);
  h.recordMicros(1500);
  h.recordMicros(3000);
  EXPECT_EQ(store().renderText("tls"),
            "tls.https.handshake_duration_seconds.count: 3\n"
            "tls.https.handshake_duration_seconds.sum: 0.0052\n"
            "tls.https.handshake_duration_seconds.p50: 0.0015\n"
            "tls.https.handshake_duration_seconds.p90: 0.0034\n"
            "tls.https.handshake_duration_seconds.p99: 0.00394\n"
            "tls.https.handshakes: 3\n");
  // No observation yet: no quantile either.
  EXPECT_EQ(store().renderText("tunnel"),
            "tunnel.listener.http.duration_seconds.count: 0\n"
            "tunnel.listener.http.duration_seconds.sum: 0\n"
            "tunnel.listener.http.duration_seconds.p50: nan\n"
            "tunnel.listener.http.duration_seconds.p90: nan\n"
            "tunnel.listener.http.duration_seconds.p99: nan\n");
  EXPECT_EQ(store().renderJson("tls"),
            "{\"stats\":[{\"name\":\"tls.https.handshakes\",\"value\":3}],"
            "\"histograms\":[{\"name\":\"tls.https.handshake_duration_seconds\",\"count\":3,"
            "\"sum\":0.0052,\"p50\":0.0015,\"p90\":0.0034,\"p99\":0.00394,"
            "\"buckets\":[{\"le\":0.001,\"count\":1},{\"le\":0.002,\"count\":2},"
            "{\"le\":0.004,\"count\":3}]}]}");
  const std::string tunnel = store().renderJson("tunnel");
  const std::string start =
      "{\"stats\":[],\"histograms\":[{\"name\":\"tunnel.listener.http.duration_seconds\","
      "\"count\":0,\"sum\":0,\"p50\":null,\"p90\":null,\"p99\":null,"
      "\"buckets\":[{\"le\":0.01,\"count\":0},{\"le\":0.05,";
  EXPECT_EQ(tunnel.compare(0, start.size(), start), 0) << tunnel;
  const std::string end = "{\"le\":86400,\"count\":0}]}]}";
  EXPECT_EQ(tunnel.substr(tunnel.size() - end.size()), end);
}

TEST_F(HistogramTest, NamesItsLinesTakeAreReserved) {
  store().histogram("rq.duration_seconds", latencyBuckets());
  EXPECT_DEATH(store().counter("rq.duration_seconds.count"), "histogram's /stats lines");
  EXPECT_DEATH(store().gauge("rq.duration_seconds.p99"), "histogram's /stats lines");
  store().counter("other.sum");
  EXPECT_DEATH(store().histogram("other", latencyBuckets()), "histogram's /stats lines");
  // Other buckets under the same name are a bug too.
  EXPECT_DEATH(store().histogram("rq.duration_seconds", tunnelBuckets()), "two bucket sets");
  // Names that only look alike are fine.
  store().counter("rq.duration_seconds_count");
  store().counter("rq.count");
}

TEST_F(HistogramTest, PrometheusSamplesDoNotMeetOtherFamilies) {
  store().histogram("lat_seconds", Buckets{10}, "A histogram.");
  store().gauge("lat_seconds_sum", "A gauge.").add(7);
  store().gauge("m_count", "Another gauge.").add(1);
  store().histogram("m", Buckets{10}, "Another histogram.");
  const std::string text = store().renderPrometheus();
  EXPECT_NE(text.find("# TYPE sluice_lat_seconds_sum_2 gauge\nsluice_lat_seconds_sum_2 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE sluice_m_2 histogram\nsluice_m_2_bucket{le=\"0.00001\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE sluice_m_count gauge\nsluice_m_count 1\n"), std::string::npos)
      << text;
}

TEST_F(HistogramTest, AFullStoreRefusesAHistogramThatDoesNotFit) {
  const Buckets b{1, 2};  // 4 slots
  for (uint32_t i = 1; i < kMaxStats - 3; ++i) store().counter("fill." + std::to_string(i));
  EXPECT_DEATH(store().histogram("too.big", b), "too many stats");
  EXPECT_TRUE(store().hasRoomFor("x", 3, 0));
  EXPECT_FALSE(store().hasRoomFor("x", 4, 0));
  store().counter("fill.last");
  EXPECT_DEATH(store().histogram("too.big", b), "too many stats");
}

TEST_F(HistogramTest, ResetForgetsHistograms) {
  const Histogram h = store().histogram("gone_seconds", Buckets{10});
  Shard* shard = store().createShard();
  Store::bindThreadShard(shard);
  h.recordMicros(3);
  store().resetForTest();
  EXPECT_TRUE(store().histograms().empty());
  EXPECT_EQ(shard->values[h.index].load(), 0u);
  EXPECT_EQ(shard->values[h.index + 1].load(), 0u);
  EXPECT_EQ(store().renderJson(), "{\"stats\":[],\"histograms\":[]}");
}

}  // namespace
}  // namespace stats
}  // namespace sluice
