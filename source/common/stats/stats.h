#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
namespace stats {

// Slots per shard; a power of two so a handle's index can be masked instead of checked.
inline constexpr uint32_t kMaxStats = 8192;
static_assert((kMaxStats & (kMaxStats - 1)) == 0, "kMaxStats must be a power of two");

enum class Type : uint8_t { Counter, Gauge, Histogram };

// One value per registered stat for one writer thread. Only the owning thread writes a bound
// shard, so updates are plain relaxed load + store; readers sum all shards with relaxed loads.
// Gauges are stored as two's complement deltas, so their sum is meaningful as int64.
struct alignas(64) Shard {
  std::atomic<uint64_t> values[kMaxStats] = {};
};

namespace detail {
// The calling thread's shard, or null. __thread (not thread_local) so reads need no TLS wrapper
// call; initial-exec keeps the access a single %fs-relative load even from a shared object.
extern __thread Shard* t_shard __attribute__((tls_model("initial-exec")));
// Shared by every thread that bound no shard (main thread, tests); updated with fetch_add.
extern Shard g_fallback_shard;

inline void addToSlot(uint32_t index, uint64_t delta) {
  const uint32_t slot = index & (kMaxStats - 1);
  Shard* shard = t_shard;
  if (__builtin_expect(shard != nullptr, 1)) {
    std::atomic<uint64_t>& value = shard->values[slot];
    value.store(value.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  } else {
    g_fallback_shard.values[slot].fetch_add(delta, std::memory_order_relaxed);
  }
}

// Two slots of one shard: the shard pointer is read once.
inline void addToSlots(uint32_t a, uint64_t delta_a, uint32_t b, uint64_t delta_b) {
  const uint32_t slot_a = a & (kMaxStats - 1);
  const uint32_t slot_b = b & (kMaxStats - 1);
  Shard* shard = t_shard;
  if (__builtin_expect(shard != nullptr, 1)) {
    std::atomic<uint64_t>& va = shard->values[slot_a];
    va.store(va.load(std::memory_order_relaxed) + delta_a, std::memory_order_relaxed);
    std::atomic<uint64_t>& vb = shard->values[slot_b];
    vb.store(vb.load(std::memory_order_relaxed) + delta_b, std::memory_order_relaxed);
  } else {
    g_fallback_shard.values[slot_a].fetch_add(delta_a, std::memory_order_relaxed);
    g_fallback_shard.values[slot_b].fetch_add(delta_b, std::memory_order_relaxed);
  }
}
}  // namespace detail

// Handles are indexes into every shard: 4 bytes, copyable, valid for the life of the process.
// A default-constructed handle points at slot 0, which is reserved and never reported.
struct Counter {
  uint32_t index = 0;
  void inc() const { detail::addToSlot(index, 1); }
  void add(uint64_t n) const { detail::addToSlot(index, n); }
};

struct Gauge {
  uint32_t index = 0;
  void inc() const { detail::addToSlot(index, 1); }
  void dec() const { detail::addToSlot(index, ~uint64_t{0}); }
  void add(int64_t n) const { detail::addToSlot(index, static_cast<uint64_t>(n)); }
};

// The upper bounds of a histogram's buckets, in microseconds, strictly increasing (at most
// kMaxBounds, each at least 1); an observation above the last falls in the +Inf bucket. Finding
// an observation's bucket is a bit-width lookup and a compare or two, whatever the number of
// bounds, so long-tailed sets cost the hot path nothing more.
class Buckets {
 public:
  static constexpr uint32_t kMaxBounds = 32;

  // Aborts on bounds that are not strictly increasing, on 0 and on more than kMaxBounds.
  Buckets(std::initializer_list<uint64_t> bounds_micros);
  explicit Buckets(const std::vector<uint64_t>& bounds_micros);

  // Finite bounds; a histogram has one bucket more (+Inf).
  uint32_t size() const { return size_; }
  uint64_t bound(uint32_t i) const { return bounds_[i]; }
  // The first bucket whose bound is at least `micros`, or size() (+Inf).
  uint32_t bucketFor(uint64_t micros) const {
    uint32_t i = first_[64 - __builtin_clzll(micros | 1)];
    while (micros > bounds_[i]) ++i;  // bounds_[size_] stops it
    return i;
  }
  bool operator==(const Buckets& other) const;

 private:
  void init(const uint64_t* bounds, size_t n);

  uint32_t size_ = 0;
  // By bit width w of an observation (1..64): the first bucket whose bound is at least
  // 2^(w-1), the smallest value of that width. Bounds at least doubling make the scan from
  // there one or two steps.
  uint8_t first_[65] = {};
  // The bounds, then UINT64_MAX as the +Inf bucket's.
  uint64_t bounds_[kMaxBounds + 1] = {};
};

// Bucket sets for sluice's latencies, log-spaced (1, 2.5, 5 per decade, then coarser).
// 0.1 ms to 60 s: connects, lookups, handshakes.
const Buckets& latencyBuckets();
// 0.5 ms to 1 h: whole requests (a tunnel or a SOCKS5 command is one too).
const Buckets& requestBuckets();
// 10 ms to 24 h: tunnels.
const Buckets& tunnelBuckets();

// A histogram of durations: slot `index` holds the sum of the observations in microseconds,
// slot index + 1 + i the count of bucket i (the last one +Inf). Recording adds to two slots of
// the calling thread's shard, as counters do: no lock, no allocation. The count is the sum of
// the buckets. A default-constructed handle records nothing.
struct Histogram {
  uint32_t index = 0;
  const Buckets* buckets = nullptr;

  void recordMicros(uint64_t micros) const {
    if (buckets == nullptr) return;
    detail::addToSlots(index + 1 + buckets->bucketFor(micros), 1, index, micros);
  }
  // Negative durations (a clock that stepped) count as 0.
  template <class Rep, class Period>
  void record(std::chrono::duration<Rep, Period> d) const {
    const int64_t micros = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    recordMicros(micros < 0 ? 0 : static_cast<uint64_t>(micros));
  }
};

// Stat names are dotted segments of [A-Za-z0-9_:-] ("listener.http.downstream_cx_total").
// Registering any other name is a bug and aborts; user-supplied parts (listener names) must go
// through sanitizeNamePart() first.
bool validName(std::string_view name);
// Maps every character outside [A-Za-z0-9_-] (dots included) to '_'; "" becomes "_".
std::string sanitizeNamePart(std::string_view part);

// One label of a stat's Prometheus form. The value is kept as given (a listener, filter chain
// or API key name, a protocol) and escaped when rendered.
struct Label {
  std::string name;  // [a-zA-Z_][a-zA-Z0-9_]*
  std::string value;
};

// How a stat appears in the Prometheus exposition: "sluice_" + family (dots as '_', and
// "_total" added to a counter's unless it ends so), with labels, under a "# HELP" of help.
// Stats of one family share its type and label names.
struct Metric {
  std::string family;
  std::vector<Label> labels;
  std::string help;
};

// The process-wide registry of stat names and the owner of every shard.
class Store {
 public:
  static Store& get();

  // Config time only (takes a mutex). The same name returns the same handle. Aborts when the
  // store is full, the name is invalid, or the name is already registered with the other type.
  // Without a Metric the Prometheus family is the name itself, with no labels.
  Counter counter(std::string_view name, std::string_view help = {});
  Gauge gauge(std::string_view name, std::string_view help = {});
  Counter counter(std::string_view name, const Metric& metric);
  Gauge gauge(std::string_view name, const Metric& metric);
  // A histogram takes buckets.size() + 2 slots. Its Prometheus family is exposed as named (end
  // it in "_seconds"). Aborts as above, and when the name is registered with other buckets, or
  // it (or a stat) would take one of the names /stats derives from a histogram's ("<name>.count",
  // ".sum", ".p50", ".p90", ".p99").
  Histogram histogram(std::string_view name, const Buckets& buckets, std::string_view help = {});
  Histogram histogram(std::string_view name, const Metric& metric, const Buckets& buckets);
  // For stats made per user-supplied item (one set per API key): true when `name` is already
  // registered, or `slots` more still leave `reserve` free for the rest of the config.
  bool hasRoomFor(std::string_view name, uint32_t slots, uint32_t reserve) const;

  // A zeroed shard owned by the store and never freed; each worker binds one at start.
  Shard* createShard();
  // Binds the calling thread to shard (null unbinds: the thread falls back to the shared shard).
  static void bindThreadShard(Shard* shard);

  struct Value {
    std::string name;
    Type type;
    int64_t value;  // Counters too: 2^63 events are out of reach.
  };
  // One histogram summed over every shard.
  struct HistogramValue {
    std::string name;
    const Buckets* buckets = nullptr;
    std::vector<uint64_t> counts;  // per bucket, buckets->size() + 1 of them (the last +Inf)
    uint64_t sum_micros = 0;

    uint64_t count() const;
    // The q-quantile (0 < q <= 1) in microseconds, estimated as Prometheus's
    // histogram_quantile() does: the bucket holding rank q * count, interpolated linearly
    // between its bounds (the first from 0). Rank in +Inf gives the last bound; no observation
    // gives nullopt.
    std::optional<double> quantileMicros(double q) const;
  };
  // Sum over all shards with relaxed loads: safe from any thread while workers write.
  // Counters and gauges, sorted by name.
  std::vector<Value> snapshot() const;
  // Histograms, sorted by name. A read racing a worker may see an observation's bucket before
  // its sum (or the other way round); the count always agrees with the buckets.
  std::vector<HistogramValue> histograms() const;
  // 0 when the name is unknown or registered with another type.
  uint64_t counterValue(std::string_view name) const;
  int64_t gaugeValue(std::string_view name) const;
  // nullopt when the name is unknown or not a histogram.
  std::optional<HistogramValue> histogramValue(std::string_view name) const;

  // The renderers keep only stats whose name contains filter (all of them when empty).
  // "name: value\n" per stat, sorted by name; a histogram is five such lines, "<name>.count",
  // ".sum" (seconds), ".p50", ".p90" and ".p99" (seconds, estimated; "nan" while count is 0).
  std::string renderText(std::string_view filter = {}) const;
  // Prometheus text exposition format 0.0.4, families sorted by name, each with one "# HELP"
  // and one "# TYPE" line ahead of its samples (sorted by labels); a histogram's samples are
  // its cumulative "_bucket{...,le="..."}" (seconds, "+Inf" last), "_sum" (seconds) and
  // "_count".
  std::string renderPrometheus(std::string_view filter = {}) const;
  // {"stats":[{"name":"...","value":N},...],"histograms":[{"name":"...","count":N,"sum":S,
  // "p50":Q,"p90":Q,"p99":Q,"buckets":[{"le":B,"count":N},...]},...]}, sorted by name; seconds,
  // quantiles null while count is 0, bucket counts cumulative over the finite bounds (+Inf is
  // the count).
  std::string renderJson(std::string_view filter = {}) const;

  // Forgets every name and zeroes every shard. Tests only: not safe while other threads write.
  void resetForTest();

 private:
  struct Entry {
    Type type;
    uint32_t index;
    const Buckets* buckets = nullptr;  // a histogram's
  };
  // One sample of a family: the slot and the stat's dotted name (a key of entries_).
  struct Series {
    uint32_t index;
    const std::string* name;
  };
  struct Family {
    Type type;
    std::vector<std::string> label_names;
    const Buckets* buckets = nullptr;  // a histogram family's: the same for every series
    std::string help;
    // By rendered label set ("{listener=\"http\"}", or "" without labels).
    std::map<std::string, Series> series;
  };

  Store();
  // Returns the first of the stat's slots (one, or a histogram's buckets->size() + 2).
  uint32_t registerStat(std::string_view name, Type type, const Metric& metric,
                        const Buckets* buckets = nullptr);
  // Caller holds mutex_. Files a new stat under its family; a family whose type, label names
  // or buckets differ, that already holds the same label set, or whose name a histogram's
  // samples take, is taken: a "_<n>" suffix keeps every stat visible under a distinct name.
  void addSeriesLocked(const std::string& name, Type type, uint32_t index, const Metric& metric,
                       const Buckets* buckets);
  // Caller holds mutex_. The store's own copy of a bucket set (one per distinct set).
  const Buckets* internBucketsLocked(const Buckets& buckets);
  // Caller holds mutex_. True when `name` is one a histogram's /stats lines take, or, for a
  // histogram, when one of its lines' names is a stat.
  bool derivedNameTakenLocked(std::string_view name, Type type) const;
  // Caller holds mutex_. A histogram from summed slots.
  static HistogramValue histogramFrom(const std::string& name, const Entry& entry,
                                      const std::vector<uint64_t>& sums);
  // Caller holds mutex_. Sums one slot over every shard.
  uint64_t sumLocked(uint32_t index) const;
  // Caller holds mutex_. Every slot summed over every shard, shard by shard.
  std::vector<uint64_t> sumAllLocked() const;

  mutable std::mutex mutex_;
  // Ordered so every snapshot comes out sorted without a sort.
  std::map<std::string, Entry, std::less<>> entries_;
  // By exposed name ("sluice_listener_downstream_cx_total").
  std::map<std::string, Family, std::less<>> families_;
  // The sample names histogram families emit ("<family>_bucket", "_sum", "_count").
  std::set<std::string, std::less<>> histogram_samples_;
  std::deque<Buckets> buckets_;  // interned: handles point here for the life of the process
  uint32_t next_index_ = 1;      // Slot 0 is the sink for default-constructed handles.
  std::vector<std::unique_ptr<Shard>> shards_;
};

// A group of stats registered together under one dotted prefix. A labelled scope's prefix
// holds a per-instance part (a listener, filter chain or API key name) that the Prometheus form
// carries as a label instead of in the family name:
// Scope("listener", "listener", "http").counter("downstream_cx_total", ...) registers
// "listener.http.downstream_cx_total", exported as sluice_listener_downstream_cx_total
// {listener="http"}. Used at config load only.
class Scope {
 public:
  // Stats "<prefix>.<stat>", families "<prefix>_<stat>".
  explicit Scope(std::string_view prefix);
  // Stats "<prefix>.<value>.<stat>" (value through sanitizeNamePart), families
  // "<prefix>_<stat>", with label_name="<value>".
  Scope(std::string_view prefix, std::string_view label_name, std::string_view value);

  // Stats "<this prefix>.<segment>.<stat>", families "<this family>_<segment>_<stat>", the
  // same labels.
  Scope scope(std::string_view segment) const;
  // Same, with one more per-instance part: "<this prefix>.<segment>.<value>.<stat>".
  Scope scope(std::string_view segment, std::string_view label_name, std::string_view value) const;

  Counter counter(std::string_view stat, std::string_view help) const;
  Gauge gauge(std::string_view stat, std::string_view help) const;
  Histogram histogram(std::string_view stat, std::string_view help, const Buckets& buckets) const;
  // A histogram with one more label, as the counter below: "<prefix>.<stat>" in family
  // "<prefix>_<family>".
  Histogram histogram(std::string_view stat, std::string_view family, Label value,
                      std::string_view help, const Buckets& buckets) const;
  // One value of a breakdown: "<prefix>.<stat>" counted in family "<prefix>_<family>" with one
  // more label (tls.<chain>.alpn_h2 is sluice_tls_alpn_total{chain="...",protocol="h2"}).
  Counter counter(std::string_view stat, std::string_view family, Label value,
                  std::string_view help) const;

  // The dotted name of one of its stats.
  std::string name(std::string_view stat) const { return prefix_ + std::string(stat); }

 private:
  Scope(std::string prefix, std::string family, std::vector<Label> labels)
      : prefix_(std::move(prefix)), family_(std::move(family)), labels_(std::move(labels)) {}
  Metric metric(std::string_view family, std::string_view help) const;

  std::string prefix_;  // with its trailing dot
  std::string family_;  // with its trailing '_'
  std::vector<Label> labels_;
};

}  // namespace stats
}  // namespace sluice
