#include "source/common/stats/stats.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace sluice {
namespace stats {
namespace {

class StatsTest : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Store::bindThreadShard(nullptr);
    store().resetForTest();
  }
  void TearDown() override { Store::bindThreadShard(nullptr); }

  static Store& store() { return Store::get(); }
};

TEST_F(StatsTest, SameNameSameHandle) {
  Counter a = store().counter("listener.http.downstream_cx_total");
  Counter b = store().counter("listener.http.downstream_cx_total");
  Counter c = store().counter("listener.http.downstream_rq_total");
  Gauge g = store().gauge("worker.0.downstream_cx_active");
  EXPECT_EQ(a.index, b.index);
  EXPECT_NE(a.index, c.index);
  EXPECT_NE(a.index, g.index);
  EXPECT_NE(c.index, g.index);
  // Slot 0 belongs to default-constructed handles.
  EXPECT_NE(a.index, 0u);
  EXPECT_EQ(sizeof(Counter), 4u);
  EXPECT_EQ(sizeof(Gauge), 4u);

  a.inc();
  b.add(4);
  EXPECT_EQ(store().counterValue("listener.http.downstream_cx_total"), 5u);
  EXPECT_EQ(store().counterValue("listener.http.downstream_rq_total"), 0u);
}

TEST_F(StatsTest, UnknownOrMistypedNamesReadZero) {
  Counter c = store().counter("auth.denied");
  Gauge g = store().gauge("upstream.cx_active");
  c.add(3);
  g.add(7);
  EXPECT_EQ(store().counterValue("auth.denied"), 3u);
  EXPECT_EQ(store().gaugeValue("upstream.cx_active"), 7);
  EXPECT_EQ(store().counterValue("no.such.stat"), 0u);
  EXPECT_EQ(store().gaugeValue("no.such.stat"), 0);
  EXPECT_EQ(store().gaugeValue("auth.denied"), 0);
  EXPECT_EQ(store().counterValue("upstream.cx_active"), 0u);
  EXPECT_EQ(store().counterValue("auth"), 0u);
}

TEST_F(StatsTest, FallbackShardWithoutBinding) {
  Counter c = store().counter("main.events");
  c.inc();
  c.inc();
  EXPECT_EQ(store().counterValue("main.events"), 2u);

  // Unbound threads share the fallback shard; fetch_add keeps their sum exact.
  constexpr int kThreads = 4;
  constexpr int kIncrements = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([c] {
      for (int i = 0; i < kIncrements; ++i) {
        c.inc();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store().counterValue("main.events"), 2u + kThreads * kIncrements);
}

TEST_F(StatsTest, BoundShardsSumExactlyAcrossThreads) {
  Counter c = store().counter("http1.http.rq_total");
  Counter bytes = store().counter("http1.http.rx_bytes");
  constexpr int kThreads = 4;
  constexpr uint64_t kIncrements = 1000000;
  std::atomic<bool> done{false};
  std::atomic<int> running{0};

  // A reader sums while the writers run: it must never see the total go down or overshoot.
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      uint64_t now = store().counterValue("http1.http.rq_total");
      EXPECT_GE(now, last);
      EXPECT_LE(now, kThreads * kIncrements);
      last = now;
    }
  });

  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      Shard* shard = store().createShard();
      Store::bindThreadShard(shard);
      running.fetch_add(1);
      for (uint64_t i = 0; i < kIncrements; ++i) {
        c.inc();
      }
      bytes.add(1000 + t);
      // Each writer touched only its own shard.
      EXPECT_EQ(shard->values[c.index].load(), kIncrements);
      EXPECT_EQ(detail::g_fallback_shard.values[c.index].load(), 0u);
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  reader.join();

  EXPECT_EQ(running.load(), kThreads);
  EXPECT_EQ(store().counterValue("http1.http.rq_total"), kThreads * kIncrements);
  EXPECT_EQ(store().counterValue("http1.http.rx_bytes"), 1000u + 1001 + 1002 + 1003);
  // Shards outlive their threads: the values stay counted.
  c.inc();
  EXPECT_EQ(store().counterValue("http1.http.rq_total"), kThreads * kIncrements + 1);
}

TEST_F(StatsTest, GaugesAcrossShards) {
  Gauge g = store().gauge("worker.0.downstream_cx_active");
  Shard* a = store().createShard();
  Shard* b = store().createShard();

  // Connections opened on one worker's shard and closed on another's still net out.
  std::thread ta([&] {
    Store::bindThreadShard(a);
    for (int i = 0; i < 10; ++i) g.inc();
  });
  ta.join();
  std::thread tb([&] {
    Store::bindThreadShard(b);
    for (int i = 0; i < 13; ++i) g.dec();
  });
  tb.join();
  EXPECT_EQ(store().gaugeValue("worker.0.downstream_cx_active"), -3);

  g.add(5);   // fallback shard
  g.add(-1);  // fallback shard
  EXPECT_EQ(store().gaugeValue("worker.0.downstream_cx_active"), 1);

  Store::bindThreadShard(a);
  g.dec();
  Store::bindThreadShard(nullptr);
  EXPECT_EQ(store().gaugeValue("worker.0.downstream_cx_active"), 0);

  auto snap = store().snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].type, Type::Gauge);
  EXPECT_EQ(snap[0].value, 0);
}

TEST_F(StatsTest, BindNullFallsBackToSharedShard) {
  Counter c = store().counter("bind.test");
  Shard* shard = store().createShard();
  Store::bindThreadShard(shard);
  c.inc();
  EXPECT_EQ(shard->values[c.index].load(), 1u);
  Store::bindThreadShard(nullptr);
  c.inc();
  EXPECT_EQ(shard->values[c.index].load(), 1u);
  EXPECT_EQ(detail::g_fallback_shard.values[c.index].load(), 1u);
  EXPECT_EQ(store().counterValue("bind.test"), 2u);
}

TEST_F(StatsTest, DefaultAndOutOfRangeHandlesStayInsideTheShard) {
  Counter c = store().counter("only.one");
  Counter unset;
  unset.inc();
  Gauge unset_gauge;
  unset_gauge.add(-9);
  // Slot 0 is never reported.
  auto snap = store().snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].name, "only.one");
  EXPECT_EQ(snap[0].value, 0);

  // A forged index wraps into the shard instead of writing past it.
  Counter forged{kMaxStats + c.index};
  forged.inc();
  EXPECT_EQ(store().counterValue("only.one"), 1u);
}

TEST_F(StatsTest, SnapshotSortedWithTypes) {
  store().gauge("b.gauge").add(-4);
  store().counter("a.counter").add(7);
  store().counter("c.counter");
  auto snap = store().snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].name, "a.counter");
  EXPECT_EQ(snap[0].type, Type::Counter);
  EXPECT_EQ(snap[0].value, 7);
  EXPECT_EQ(snap[1].name, "b.gauge");
  EXPECT_EQ(snap[1].type, Type::Gauge);
  EXPECT_EQ(snap[1].value, -4);
  EXPECT_EQ(snap[2].name, "c.counter");
  EXPECT_EQ(snap[2].value, 0);
}

TEST_F(StatsTest, TypeConflictDies) {
  store().counter("auth.denied");
  EXPECT_DEATH(store().gauge("auth.denied"), "registered as two types");
  store().gauge("worker.0.downstream_cx_active");
  EXPECT_DEATH(store().counter("worker.0.downstream_cx_active"), "registered as two types");
  EXPECT_DEATH(store().histogram("auth.denied", latencyBuckets()), "registered as two types");
}

TEST_F(StatsTest, InvalidNamesDie) {
  EXPECT_DEATH(store().counter(""), "invalid stat name");
  EXPECT_DEATH(store().counter("a..b"), "invalid stat name");
  EXPECT_DEATH(store().counter(".a"), "invalid stat name");
  EXPECT_DEATH(store().counter("a."), "invalid stat name");
  EXPECT_DEATH(store().gauge("a b"), "invalid stat name");
  EXPECT_DEATH(store().gauge("a\nb"), "invalid stat name");
  EXPECT_DEATH(store().gauge("a\"b"), "invalid stat name");
  EXPECT_DEATH(store().gauge(std::string(257, 'a')), "invalid stat name");
  // The longest accepted name.
  store().counter(std::string(256, 'a'));
}

TEST(StatsNameTest, Validation) {
  EXPECT_TRUE(validName("listener.http.downstream_cx_total"));
  EXPECT_TRUE(validName("worker.0.downstream_cx_active"));
  EXPECT_TRUE(validName("a-b:c_d"));
  EXPECT_FALSE(validName(""));
  EXPECT_FALSE(validName("."));
  EXPECT_FALSE(validName("a..b"));
  EXPECT_FALSE(validName("a/b"));
  EXPECT_FALSE(validName(std::string_view("a\0b", 3)));
}

TEST(StatsNameTest, SanitizeNamePart) {
  EXPECT_EQ(sanitizeNamePart("http"), "http");
  EXPECT_EQ(sanitizeNamePart("my.listener"), "my_listener");
  EXPECT_EQ(sanitizeNamePart("a b/c\"d\n"), "a_b_c_d_");
  EXPECT_EQ(sanitizeNamePart("keep-dash_and_9"), "keep-dash_and_9");
  EXPECT_EQ(sanitizeNamePart(""), "_");
  EXPECT_EQ(sanitizeNamePart("\xc3\xa9"), "__");
  EXPECT_TRUE(validName("listener." + sanitizeNamePart("we.ird name\t") + ".rq_total"));
}

TEST_F(StatsTest, CapacityLimit) {
  // Slot 0 is reserved, so kMaxStats - 1 names fit.
  for (uint32_t i = 1; i < kMaxStats; ++i) {
    Counter c = store().counter(absl::StrFormat("fill.%d", i));
    EXPECT_EQ(c.index, i);
  }
  EXPECT_EQ(store().snapshot().size(), kMaxStats - 1);
  // An existing name still resolves when the store is full.
  EXPECT_EQ(store().counter("fill.1").index, 1u);
  EXPECT_DEATH(store().counter("one.too.many"), "too many stats");
  EXPECT_DEATH(store().gauge("one.too.many"), "too many stats");
}

TEST_F(StatsTest, ResetForTestForgetsNamesAndValues) {
  store().counter("x.y").add(10);
  Shard* shard = store().createShard();
  Store::bindThreadShard(shard);
  store().gauge("x.z").add(3);
  store().resetForTest();
  EXPECT_TRUE(store().snapshot().empty());
  EXPECT_EQ(shard->values[1].load(), 0u);
  EXPECT_EQ(shard->values[2].load(), 0u);
  // Re-registering after a reset may reuse slots: they start from zero.
  EXPECT_EQ(store().gauge("x.y").index, 1u);
  EXPECT_EQ(store().gaugeValue("x.y"), 0);
  EXPECT_EQ(store().counterValue("x.y"), 0u);
}

TEST_F(StatsTest, RenderText) {
  EXPECT_EQ(store().renderText(), "");
  store().counter("listener.http.downstream_cx_total").add(12);
  store().gauge("worker.0.downstream_cx_active").add(-2);
  store().counter("auth.denied");
  EXPECT_EQ(store().renderText(),
            "auth.denied: 0\n"
            "listener.http.downstream_cx_total: 12\n"
            "worker.0.downstream_cx_active: -2\n");
  EXPECT_EQ(store().renderText("downstream_cx"),
            "listener.http.downstream_cx_total: 12\n"
            "worker.0.downstream_cx_active: -2\n");
  EXPECT_EQ(store().renderText("nothing matches"), "");
}

TEST_F(StatsTest, RenderJson) {
  EXPECT_EQ(store().renderJson(), "{\"stats\":[],\"histograms\":[]}");
  store().counter("listener.http.downstream_cx_total").add(12);
  store().gauge("worker.0.downstream_cx_active").add(-2);
  EXPECT_EQ(store().renderJson(),
            "{\"stats\":[{\"name\":\"listener.http.downstream_cx_total\",\"value\":12},"
            "{\"name\":\"worker.0.downstream_cx_active\",\"value\":-2}],\"histograms\":[]}");
  EXPECT_EQ(store().renderJson("worker"),
            "{\"stats\":[{\"name\":\"worker.0.downstream_cx_active\",\"value\":-2}],"
            "\"histograms\":[]}");
  EXPECT_EQ(store().renderJson("zzz"), "{\"stats\":[],\"histograms\":[]}");
}

TEST_F(StatsTest, RenderPrometheus) {
  EXPECT_EQ(store().renderPrometheus(), "");
  store().counter("listener.http.downstream_cx_total", "Connections accepted.").add(12);
  store().gauge("worker.0.downstream_cx_active", "Connections open.").add(-2);
  store().counter("auth.denied", "Requests denied.").inc();
  store().counter("dns:cache-hits").add(3);  // No description: HELP names the stat.
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_auth_denied_total Requests denied.\n"
            "# TYPE sluice_auth_denied_total counter\n"
            "sluice_auth_denied_total 1\n"
            "# HELP sluice_dns_cache_hits_total sluice stat dns:cache-hits\n"
            "# TYPE sluice_dns_cache_hits_total counter\n"
            "sluice_dns_cache_hits_total 3\n"
            "# HELP sluice_listener_http_downstream_cx_total Connections accepted.\n"
            "# TYPE sluice_listener_http_downstream_cx_total counter\n"
            "sluice_listener_http_downstream_cx_total 12\n"
            "# HELP sluice_worker_0_downstream_cx_active Connections open.\n"
            "# TYPE sluice_worker_0_downstream_cx_active gauge\n"
            "sluice_worker_0_downstream_cx_active -2\n");
  EXPECT_EQ(store().renderPrometheus("auth"),
            "# HELP sluice_auth_denied_total Requests denied.\n"
            "# TYPE sluice_auth_denied_total counter\n"
            "sluice_auth_denied_total 1\n");
}

TEST_F(StatsTest, ScopesPutInstancesInLabels) {
  const Scope http("listener", "listener", "http");
  const Scope tls("listener", "listener", "tls.1");  // The dotted name sanitizes it.
  http.counter("downstream_cx_total", "Connections accepted.").add(3);
  tls.counter("downstream_cx_total", "Connections accepted.").add(4);
  http.gauge("downstream_cx_active", "Connections open.").add(1);
  Scope("tunnel").scope("key", "key", "ci").counter("bytes_to_upstream", "Bytes up.").add(9);
  const Scope sniffer = http.scope("sniffer");
  sniffer.counter("tls", "admitted", Label{"protocol", "tls"}, "Admitted.").add(5);
  sniffer.counter("http1", "admitted", Label{"protocol", "http1"}, "Admitted.").add(6);

  // /stats keeps the dotted names.
  EXPECT_EQ(store().counterValue("listener.http.downstream_cx_total"), 3u);
  EXPECT_EQ(store().counterValue("listener.tls_1.downstream_cx_total"), 4u);
  EXPECT_EQ(store().counterValue("tunnel.key.ci.bytes_to_upstream"), 9u);
  EXPECT_EQ(store().counterValue("listener.http.sniffer.tls"), 5u);
  EXPECT_EQ(http.name("downstream_cx_total"), "listener.http.downstream_cx_total");

  // One HELP and one TYPE per family, however many label sets it holds; counters end in _total
  // once, gauges never.
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_listener_downstream_cx_active Connections open.\n"
            "# TYPE sluice_listener_downstream_cx_active gauge\n"
            "sluice_listener_downstream_cx_active{listener=\"http\"} 1\n"
            "# HELP sluice_listener_downstream_cx_total Connections accepted.\n"
            "# TYPE sluice_listener_downstream_cx_total counter\n"
            "sluice_listener_downstream_cx_total{listener=\"http\"} 3\n"
            "sluice_listener_downstream_cx_total{listener=\"tls.1\"} 4\n"
            "# HELP sluice_listener_sniffer_admitted_total Admitted.\n"
            "# TYPE sluice_listener_sniffer_admitted_total counter\n"
            "sluice_listener_sniffer_admitted_total{listener=\"http\",protocol=\"http1\"} 6\n"
            "sluice_listener_sniffer_admitted_total{listener=\"http\",protocol=\"tls\"} 5\n"
            "# HELP sluice_tunnel_key_bytes_to_upstream_total Bytes up.\n"
            "# TYPE sluice_tunnel_key_bytes_to_upstream_total counter\n"
            "sluice_tunnel_key_bytes_to_upstream_total{key=\"ci\"} 9\n");
  // The filter still matches dotted names, and a family shows only the samples that match.
  EXPECT_EQ(store().renderPrometheus("tls_1"),
            "# HELP sluice_listener_downstream_cx_total Connections accepted.\n"
            "# TYPE sluice_listener_downstream_cx_total counter\n"
            "sluice_listener_downstream_cx_total{listener=\"tls.1\"} 4\n");
}

TEST_F(StatsTest, PrometheusEscapesLabelValuesAndHelp) {
  Scope("listener", "listener", "a\\b\"c\nd").counter("rq", "Back\\slash\nand \"quotes\".").inc();
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_listener_rq_total Back\\\\slash\\nand \"quotes\".\n"
            "# TYPE sluice_listener_rq_total counter\n"
            "sluice_listener_rq_total{listener=\"a\\\\b\\\"c\\nd\"} 1\n");
  EXPECT_EQ(store().renderText(), "listener.a_b_c_d.rq: 1\n");
}

TEST_F(StatsTest, PrometheusNamesStayUnique) {
  store().counter("a.b").add(1);
  store().counter("a_b").add(2);
  store().gauge("a-b").add(3);
  store().counter("a_b_2").add(4);
  store().counter("c_total").add(5);
  store().counter("c").add(6);
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_a_b sluice stat a-b\n"
            "# TYPE sluice_a_b gauge\n"
            "sluice_a_b 3\n"
            "# HELP sluice_a_b_2_2_total sluice stat a_b_2\n"
            "# TYPE sluice_a_b_2_2_total counter\n"
            "sluice_a_b_2_2_total 4\n"
            "# HELP sluice_a_b_2_total sluice stat a_b\n"
            "# TYPE sluice_a_b_2_total counter\n"
            "sluice_a_b_2_total 2\n"
            "# HELP sluice_a_b_total sluice stat a.b\n"
            "# TYPE sluice_a_b_total counter\n"
            "sluice_a_b_total 1\n"
            "# HELP sluice_c_2_total sluice stat c\n"
            "# TYPE sluice_c_2_total counter\n"
            "sluice_c_2_total 6\n"
            "# HELP sluice_c_total sluice stat c_total\n"
            "# TYPE sluice_c_total counter\n"
            "sluice_c_total 5\n");
}

TEST_F(StatsTest, FamiliesKeepOneTypeAndOneSetOfLabelNames) {
  store().counter("x.all", Metric{"x", {}, "All."}).add(1);
  store().counter("x.one", Metric{"x", {{"key", "one"}}, "Per key."}).add(2);
  store().gauge("x.g", Metric{"x_total", {{"key", "one"}}, "A gauge."}).add(3);
  EXPECT_EQ(store().renderPrometheus(),
            "# HELP sluice_x_2_total Per key.\n"
            "# TYPE sluice_x_2_total counter\n"
            "sluice_x_2_total{key=\"one\"} 2\n"
            "# HELP sluice_x_total All.\n"
            "# TYPE sluice_x_total counter\n"
            "sluice_x_total 1\n"
            "# HELP sluice_x_total_2 A gauge.\n"
            "# TYPE sluice_x_total_2 gauge\n"
            "sluice_x_total_2{key=\"one\"} 3\n");
}

TEST_F(StatsTest, InvalidLabelNamesDie) {
  EXPECT_DEATH(store().counter("y", Metric{"y", {{"0key", "v"}}, ""}), "invalid label name");
  EXPECT_DEATH(store().counter("y", Metric{"y", {{"a-b", "v"}}, ""}), "invalid label name");
  EXPECT_DEATH(store().counter("y", Metric{"y", {{"", "v"}}, ""}), "invalid label name");
}

}  // namespace
}  // namespace stats
}  // namespace sluice
