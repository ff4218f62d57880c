#include "source/common/stats/stats.h"

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace stats {

namespace detail {
__thread Shard* t_shard __attribute__((tls_model("initial-exec"))) = nullptr;
Shard g_fallback_shard;
}  // namespace detail

namespace {

// Long enough for any composed name, short enough that a runaway name is caught as a bug.
constexpr size_t kMaxNameLength = 256;

bool nameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == ':';
}

bool prometheusChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string prometheusBaseName(std::string_view name) {
  std::string out = "sluice_";
  out.reserve(out.size() + name.size());
  for (char c : name) {
    out.push_back(prometheusChar(c) ? c : '_');
  }
  return out;
}

bool matches(std::string_view name, std::string_view filter) {
  return filter.empty() || name.find(filter) != std::string_view::npos;
}

}  // namespace

bool validName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return false;
  }
  char prev = '.';
  for (char c : name) {
    // Dots separate non-empty segments: no leading, trailing or doubled dot.
    if (c == '.') {
      if (prev == '.') {
        return false;
      }
    } else if (!nameChar(c)) {
      return false;
    }
    prev = c;
  }
  return prev != '.';
}

std::string sanitizeNamePart(std::string_view part) {
  if (part.empty()) {
    return "_";
  }
  std::string out(part);
  for (char& c : out) {
    if (!prometheusChar(c) && c != '-') {
      c = '_';
    }
  }
  return out;
}

Store& Store::get() {
  static Store* store = new Store();  // Never destroyed: workers may still update at exit.
  return *store;
}

Store::Store() = default;

Counter Store::counter(std::string_view name) { return Counter{registerStat(name, Type::Counter)}; }

Gauge Store::gauge(std::string_view name) { return Gauge{registerStat(name, Type::Gauge)}; }

bool Store::hasRoomFor(std::string_view name, uint32_t slots, uint32_t reserve) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.find(name) != entries_.end()) return true;
  return next_index_ + slots + reserve <= kMaxStats;
}

uint32_t Store::registerStat(std::string_view name, Type type) {
  SLUICE_ASSERT(validName(name), absl::StrFormat("invalid stat name '%s'", name));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    SLUICE_ASSERT(it->second.type == type,
                  absl::StrFormat("stat '%s' registered as both counter and gauge", name));
    return it->second.index;
  }
  SLUICE_ASSERT(next_index_ < kMaxStats, absl::StrFormat("too many stats registering '%s'", name));
  const uint32_t index = next_index_++;

  std::string prometheus_name = prometheusBaseName(name);
  if (prometheus_names_.count(prometheus_name) != 0) {
    // Another name already maps here ("a.b" and "a_b"): keep both visible under distinct names.
    int n = 2;
    while (prometheus_names_.count(absl::StrFormat("%s_%d", prometheus_name, n)) != 0) {
      ++n;
    }
    std::string unique = absl::StrFormat("%s_%d", prometheus_name, n);
    SLUICE_LOG(Warn, "stat '%s' exported to Prometheus as '%s': '%s' is taken", name, unique,
               prometheus_name);
    prometheus_name = std::move(unique);
  }
  prometheus_names_.emplace(prometheus_name, index);
  entries_.emplace(std::string(name), Entry{type, index, std::move(prometheus_name)});
  return index;
}

Shard* Store::createShard() {
  auto shard = std::make_unique<Shard>();
  Shard* raw = shard.get();
  std::lock_guard<std::mutex> lock(mutex_);
  shards_.push_back(std::move(shard));
  return raw;
}

void Store::bindThreadShard(Shard* shard) { detail::t_shard = shard; }

uint64_t Store::sumLocked(uint32_t index) const {
  uint64_t sum = detail::g_fallback_shard.values[index].load(std::memory_order_relaxed);
  for (const auto& shard : shards_) {
    sum += shard->values[index].load(std::memory_order_relaxed);
  }
  return sum;
}

std::vector<uint64_t> Store::sumAllLocked() const {
  std::vector<uint64_t> sums(next_index_, 0);
  // Shard-major so each shard is walked sequentially.
  auto add = [&](const Shard& shard) {
    for (uint32_t i = 0; i < next_index_; ++i) {
      sums[i] += shard.values[i].load(std::memory_order_relaxed);
    }
  };
  add(detail::g_fallback_shard);
  for (const auto& shard : shards_) {
    add(*shard);
  }
  return sums;
}

std::vector<Store::Value> Store::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t> sums = sumAllLocked();
  std::vector<Value> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) {
    out.push_back(Value{name, entry.type, static_cast<int64_t>(sums[entry.index])});
  }
  return out;
}

uint64_t Store::counterValue(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.type != Type::Counter) {
    return 0;
  }
  return sumLocked(it->second.index);
}

int64_t Store::gaugeValue(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.type != Type::Gauge) {
    return 0;
  }
  return static_cast<int64_t>(sumLocked(it->second.index));
}

std::string Store::renderText(std::string_view filter) const {
  std::string out;
  for (const Value& v : snapshot()) {
    if (matches(v.name, filter)) {
      absl::StrAppendFormat(&out, "%s: %d\n", v.name, v.value);
    }
  }
  return out;
}

std::string Store::renderPrometheus(std::string_view filter) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t> sums = sumAllLocked();
  std::string out;
  for (const auto& [name, entry] : entries_) {
    if (!matches(name, filter)) {
      continue;
    }
    const char* type = entry.type == Type::Counter ? "counter" : "gauge";
    absl::StrAppendFormat(&out, "# TYPE %s %s\n%s %d\n", entry.prometheus_name, type,
                          entry.prometheus_name, static_cast<int64_t>(sums[entry.index]));
  }
  return out;
}

std::string Store::renderJson(std::string_view filter) const {
  // Valid names hold no character that JSON would need escaped.
  std::string out = "{\"stats\":[";
  bool first = true;
  for (const Value& v : snapshot()) {
    if (!matches(v.name, filter)) {
      continue;
    }
    absl::StrAppendFormat(&out, "%s{\"name\":\"%s\",\"value\":%d}", first ? "" : ",", v.name,
                          v.value);
    first = false;
  }
  out += "]}";
  return out;
}

void Store::resetForTest() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  prometheus_names_.clear();
  next_index_ = 1;
  auto zero = [](Shard& shard) {
    for (auto& value : shard.values) {
      value.store(0, std::memory_order_relaxed);
    }
  };
  zero(detail::g_fallback_shard);
  for (auto& shard : shards_) {
    zero(*shard);
  }
}

}  // namespace stats
}  // namespace sluice
