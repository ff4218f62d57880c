#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
namespace stats {

// Slots per shard; a power of two so a handle's index can be masked instead of checked.
inline constexpr uint32_t kMaxStats = 8192;
static_assert((kMaxStats & (kMaxStats - 1)) == 0, "kMaxStats must be a power of two");

enum class Type : uint8_t { Counter, Gauge };

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
  // Sum over all shards with relaxed loads: safe from any thread while workers write.
  // Sorted by name.
  std::vector<Value> snapshot() const;
  // 0 when the name is unknown or registered with the other type.
  uint64_t counterValue(std::string_view name) const;
  int64_t gaugeValue(std::string_view name) const;

  // The renderers keep only stats whose name contains filter (all of them when empty).
  // "name: value\n" per stat, sorted by name.
  std::string renderText(std::string_view filter = {}) const;
  // Prometheus text exposition format 0.0.4, families sorted by name, each with one "# HELP"
  // and one "# TYPE" line ahead of its samples (sorted by labels).
  std::string renderPrometheus(std::string_view filter = {}) const;
  // {"stats":[{"name":"...","value":N},...]}, sorted by name.
  std::string renderJson(std::string_view filter = {}) const;

  // Forgets every name and zeroes every shard. Tests only: not safe while other threads write.
  void resetForTest();

 private:
  struct Entry {
    Type type;
    uint32_t index;
  };
  // One sample of a family: the slot and the stat's dotted name (a key of entries_).
  struct Series {
    uint32_t index;
    const std::string* name;
  };
  struct Family {
    Type type;
    std::vector<std::string> label_names;
    std::string help;
    // By rendered label set ("{listener=\"http\"}", or "" without labels).
    std::map<std::string, Series> series;
  };

  Store();
  uint32_t registerStat(std::string_view name, Type type, const Metric& metric);
  // Caller holds mutex_. Files a new stat under its family; a family whose type or label names
  // differ, or that already holds the same label set, is taken: a "_<n>" suffix keeps every
  // stat visible under a distinct name.
  void addSeriesLocked(const std::string& name, Type type, uint32_t index, const Metric& metric);
  // Caller holds mutex_. Sums one slot over every shard.
  uint64_t sumLocked(uint32_t index) const;
  // Caller holds mutex_. Every slot summed over every shard, shard by shard.
  std::vector<uint64_t> sumAllLocked() const;

  mutable std::mutex mutex_;
  // Ordered so every snapshot comes out sorted without a sort.
  std::map<std::string, Entry, std::less<>> entries_;
  // By exposed name ("sluice_listener_downstream_cx_total").
  std::map<std::string, Family, std::less<>> families_;
  uint32_t next_index_ = 1;  // Slot 0 is the sink for default-constructed handles.
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
