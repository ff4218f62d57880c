#include "source/common/stats/stats.h"

#include "absl/strings/str_cat.h"
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

bool labelNameValid(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!prometheusChar(c)) return false;
  }
  return true;
}

// "sluice_" + family with every other character mapped to '_' (the dots first of all).
std::string prometheusBaseName(std::string_view family) {
  std::string out = "sluice_";
  out.reserve(out.size() + family.size());
  for (char c : family) {
    out.push_back(prometheusChar(c) ? c : '_');
  }
  return out;
}

// A counter's exposed name ends in "_total" (the Prometheus convention); a gauge's as it is.
std::string exposedName(std::string base, Type type) {
  constexpr std::string_view kTotal = "_total";
  const bool total = base.size() >= kTotal.size() &&
                     std::string_view(base).substr(base.size() - kTotal.size()) == kTotal;
  if (type == Type::Counter && !total) base += kTotal;
  return base;
}

// Label values and HELP text escape backslash and line feed; label values the double quote too.
void appendEscaped(std::string* out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// {a="x",b="y"} in the order given, or "" without labels.
std::string renderLabels(const std::vector<Label>& labels) {
  if (labels.empty()) return {};
  std::string out = "{";
  for (const Label& label : labels) {
    if (out.size() > 1) out.push_back(',');
    absl::StrAppend(&out, label.name, "=\"");
    appendEscaped(&out, label.value, true);
    out.push_back('"');
  }
  out.push_back('}');
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

Counter Store::counter(std::string_view name, std::string_view help) {
  return counter(name, Metric{std::string(name), {}, std::string(help)});
}

Gauge Store::gauge(std::string_view name, std::string_view help) {
  return gauge(name, Metric{std::string(name), {}, std::string(help)});
}

Counter Store::counter(std::string_view name, const Metric& metric) {
  return Counter{registerStat(name, Type::Counter, metric)};
}

Gauge Store::gauge(std::string_view name, const Metric& metric) {
  return Gauge{registerStat(name, Type::Gauge, metric)};
}

bool Store::hasRoomFor(std::string_view name, uint32_t slots, uint32_t reserve) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.find(name) != entries_.end()) return true;
  return next_index_ + slots + reserve <= kMaxStats;
}

uint32_t Store::registerStat(std::string_view name, Type type, const Metric& metric) {
  SLUICE_ASSERT(validName(name), absl::StrFormat("invalid stat name '%s'", name));
  for (const Label& label : metric.labels) {
    SLUICE_ASSERT(labelNameValid(label.name),
                  absl::StrFormat("stat '%s': invalid label name '%s'", name, label.name));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    SLUICE_ASSERT(it->second.type == type,
                  absl::StrFormat("stat '%s' registered as both counter and gauge", name));
    return it->second.index;
  }
  SLUICE_ASSERT(next_index_ < kMaxStats, absl::StrFormat("too many stats registering '%s'", name));
  const uint32_t index = next_index_++;
  it = entries_.emplace(std::string(name), Entry{type, index}).first;
  addSeriesLocked(it->first, type, index, metric);
  return index;
}

void Store::addSeriesLocked(const std::string& name, Type type, uint32_t index,
                            const Metric& metric) {
  std::vector<std::string> label_names;
  label_names.reserve(metric.labels.size());
  for (const Label& label : metric.labels) label_names.push_back(label.name);
  const std::string labels = renderLabels(metric.labels);
  const std::string base = prometheusBaseName(metric.family);

  std::string exposed = exposedName(base, type);
  auto fits = [&](const std::string& candidate) {
    auto family = families_.find(candidate);
    return family == families_.end() ||
           (family->second.type == type && family->second.label_names == label_names &&
            family->second.series.count(labels) == 0);
  };
  if (!fits(exposed)) {
    // Another stat already holds this sample ("a.b" and "a_b"), or the family has another
    // type or other labels: keep both visible under distinct names.
    int n = 2;
    std::string candidate;
    do {
      candidate = exposedName(absl::StrFormat("%s_%d", base, n++), type);
    } while (!fits(candidate));
    SLUICE_LOG(Warn, "stat '%s' exported to Prometheus as '%s%s': '%s%s' is taken", name, candidate,
               labels, exposed, labels);
    exposed = std::move(candidate);
  }
  auto [family, created] = families_.try_emplace(exposed);
  if (created) {
    family->second.type = type;
    family->second.label_names = std::move(label_names);
  }
  if (family->second.help.empty()) family->second.help = metric.help;
  family->second.series.emplace(labels, Series{index, &name});
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
  for (const auto& [exposed, family] : families_) {
    bool described = false;
    for (const auto& [labels, series] : family.series) {
      if (!matches(*series.name, filter)) {
        continue;
      }
      if (!described) {
        out += "# HELP ";
        out += exposed;
        out.push_back(' ');
        if (family.help.empty()) {
          // A stat registered without a description still says where it comes from.
          absl::StrAppend(&out, "sluice stat ", *series.name);
        } else {
          appendEscaped(&out, family.help, false);
        }
        absl::StrAppend(&out, "\n# TYPE ", exposed,
                        family.type == Type::Counter ? " counter\n" : " gauge\n");
        described = true;
      }
      absl::StrAppend(&out, exposed, labels, " ", static_cast<int64_t>(sums[series.index]), "\n");
    }
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
  families_.clear();
  entries_.clear();
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

Scope::Scope(std::string_view prefix)
    : prefix_(std::string(prefix) + "."), family_(std::string(prefix) + "_") {}

Scope::Scope(std::string_view prefix, std::string_view label_name, std::string_view value)
    : prefix_(std::string(prefix) + "." + sanitizeNamePart(value) + "."),
      family_(std::string(prefix) + "_"),
      labels_{Label{std::string(label_name), std::string(value)}} {}

Scope Scope::scope(std::string_view segment) const {
  const std::string part(segment);
  return Scope(prefix_ + part + ".", family_ + part + "_", labels_);
}

Scope Scope::scope(std::string_view segment, std::string_view label_name,
                   std::string_view value) const {
  const std::string part(segment);
  std::vector<Label> labels = labels_;
  labels.push_back(Label{std::string(label_name), std::string(value)});
  return Scope(prefix_ + part + "." + sanitizeNamePart(value) + ".", family_ + part + "_",
               std::move(labels));
}

Metric Scope::metric(std::string_view family, std::string_view help) const {
  return Metric{family_ + std::string(family), labels_, std::string(help)};
}

Counter Scope::counter(std::string_view stat, std::string_view help) const {
  return Store::get().counter(name(stat), metric(stat, help));
}

Gauge Scope::gauge(std::string_view stat, std::string_view help) const {
  return Store::get().gauge(name(stat), metric(stat, help));
}

Counter Scope::counter(std::string_view stat, std::string_view family, Label value,
                       std::string_view help) const {
  Metric m = metric(family, help);
  m.labels.push_back(std::move(value));
  return Store::get().counter(name(stat), m);
}

}  // namespace stats
}  // namespace sluice
