#include "source/common/stats/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// What a histogram's /stats lines add to its name, and its Prometheus samples to its family's.
constexpr std::string_view kDerivedLines[] = {".count", ".sum", ".p50", ".p90", ".p99"};
constexpr std::string_view kHistogramSamples[] = {"_bucket", "_sum", "_count"};
constexpr double kQuantiles[] = {0.5, 0.9, 0.99};

// Microseconds as decimal seconds, exactly and without trailing zeros: 250 is "0.00025",
// 60000000 is "60".
std::string seconds(uint64_t micros) {
  std::string out = absl::StrCat(micros / 1000000);
  uint64_t fraction = micros % 1000000;
  if (fraction == 0) return out;
  std::string digits = absl::StrFormat("%06d", fraction);
  digits.erase(digits.find_last_not_of('0') + 1);
  absl::StrAppend(&out, ".", digits);
  return out;
}

// A quantile, to the microsecond; `none` without observations.
std::string quantileSeconds(const Store::HistogramValue& h, double q, std::string_view none) {
  const std::optional<double> micros = h.quantileMicros(q);
  if (!micros) return std::string(none);
  return seconds(static_cast<uint64_t>(std::llround(*micros)));
}

std::string concat(std::string_view a, std::string_view b) {
  std::string out(a);
  out.append(b);
  return out;
}

// A series' labels with le added last: {listener="http",le="0.5"}.
std::string withLe(const std::string& labels, const std::string& le) {
  if (labels.empty()) return absl::StrCat("{le=\"", le, "\"}");
  return absl::StrCat(labels.substr(0, labels.size() - 1), ",le=\"", le, "\"}");
}

}  // namespace

Buckets::Buckets(std::initializer_list<uint64_t> bounds_micros) {
  init(bounds_micros.begin(), bounds_micros.size());
}

Buckets::Buckets(const std::vector<uint64_t>& bounds_micros) {
  init(bounds_micros.data(), bounds_micros.size());
}

void Buckets::init(const uint64_t* bounds, size_t n) {
  SLUICE_ASSERT(n <= kMaxBounds, absl::StrFormat("%d histogram bounds: at most %d", n, kMaxBounds));
  for (size_t i = 0; i < n; ++i) {
    SLUICE_ASSERT(bounds[i] > 0 && (i == 0 || bounds[i] > bounds[i - 1]),
                  "histogram bounds must be positive and strictly increasing");
    bounds_[i] = bounds[i];
  }
  size_ = static_cast<uint32_t>(n);
  bounds_[size_] = std::numeric_limits<uint64_t>::max();
  for (uint32_t width = 1; width <= 64; ++width) {
    const uint64_t smallest = uint64_t{1} << (width - 1);
    uint32_t i = 0;
    while (i < size_ && bounds_[i] < smallest) ++i;
    first_[width] = static_cast<uint8_t>(i);
  }
}

bool Buckets::operator==(const Buckets& other) const {
  return size_ == other.size_ && std::equal(bounds_, bounds_ + size_, other.bounds_);
}

const Buckets& latencyBuckets() {
  static const Buckets b{100,     250,     500,     1000,     2500,     5000,
                         10000,   25000,   50000,   100000,   250000,   500000,
                         1000000, 2500000, 5000000, 10000000, 30000000, 60000000};
  return b;
}

const Buckets& requestBuckets() {
  static const Buckets b{500,      1000,     2500,      5000,      10000,     25000,   50000,
                         100000,   250000,   500000,    1000000,   2500000,   5000000, 10000000,
                         30000000, 60000000, 300000000, 900000000, 3600000000};
  return b;
}

const Buckets& tunnelBuckets() {
  static const Buckets b{10000,      50000,      100000,      500000,      1000000,    5000000,
                         10000000,   30000000,   60000000,    300000000,   600000000,  1800000000,
                         3600000000, 7200000000, 14400000000, 28800000000, 86400000000};
  return b;
}

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

Histogram Store::histogram(std::string_view name, const Buckets& buckets, std::string_view help) {
  return histogram(name, Metric{std::string(name), {}, std::string(help)}, buckets);
}

Histogram Store::histogram(std::string_view name, const Metric& metric, const Buckets& buckets) {
  const uint32_t index = registerStat(name, Type::Histogram, metric, &buckets);
  std::lock_guard<std::mutex> lock(mutex_);
  return Histogram{index, entries_.find(name)->second.buckets};
}

const Buckets* Store::internBucketsLocked(const Buckets& buckets) {
  for (const Buckets& b : buckets_) {
    if (b == buckets) return &b;
  }
  buckets_.push_back(buckets);
  return &buckets_.back();
}

bool Store::derivedNameTakenLocked(std::string_view name, Type type) const {
  if (type == Type::Histogram) {
    for (std::string_view suffix : kDerivedLines) {
      if (entries_.find(concat(name, suffix)) != entries_.end()) return true;
    }
    return false;
  }
  for (std::string_view suffix : kDerivedLines) {
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) {
      continue;
    }
    auto stem = entries_.find(name.substr(0, name.size() - suffix.size()));
    return stem != entries_.end() && stem->second.type == Type::Histogram;
  }
  return false;
}

bool Store::hasRoomFor(std::string_view name, uint32_t slots, uint32_t reserve) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.find(name) != entries_.end()) return true;
  return next_index_ + slots + reserve <= kMaxStats;
}

uint32_t Store::registerStat(std::string_view name, Type type, const Metric& metric,
                             const Buckets* buckets) {
  SLUICE_ASSERT(validName(name), absl::StrFormat("invalid stat name '%s'", name));
  for (const Label& label : metric.labels) {
    SLUICE_ASSERT(labelNameValid(label.name),
                  absl::StrFormat("stat '%s': invalid label name '%s'", name, label.name));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    SLUICE_ASSERT(
        it->second.type == type,
        absl::StrFormat("stat '%s' registered as two types (counter, gauge, histogram)", name));
    SLUICE_ASSERT(type != Type::Histogram || *it->second.buckets == *buckets,
                  absl::StrFormat("histogram '%s' registered with two bucket sets", name));
    return it->second.index;
  }
  SLUICE_ASSERT(!derivedNameTakenLocked(name, type),
                absl::StrFormat("stat '%s' takes a name of a histogram's /stats lines", name));
  const uint32_t slots = type == Type::Histogram ? buckets->size() + 2 : 1;
  SLUICE_ASSERT(next_index_ + slots <= kMaxStats,
                absl::StrFormat("too many stats registering '%s'", name));
  const uint32_t index = next_index_;
  next_index_ += slots;
  const Buckets* interned = type == Type::Histogram ? internBucketsLocked(*buckets) : nullptr;
  it = entries_.emplace(std::string(name), Entry{type, index, interned}).first;
  addSeriesLocked(it->first, type, index, metric, interned);
  return index;
}

void Store::addSeriesLocked(const std::string& name, Type type, uint32_t index,
                            const Metric& metric, const Buckets* buckets) {
  std::vector<std::string> label_names;
  label_names.reserve(metric.labels.size());
  for (const Label& label : metric.labels) label_names.push_back(label.name);
  const std::string labels = renderLabels(metric.labels);
  const std::string base = prometheusBaseName(metric.family);

  std::string exposed = exposedName(base, type);
  auto fits = [&](const std::string& candidate) {
    // A histogram's samples and other families' names must not meet.
    if (histogram_samples_.count(candidate) > 0) return false;
    if (type == Type::Histogram) {
      for (std::string_view suffix : kHistogramSamples) {
        if (families_.count(concat(candidate, suffix)) > 0) return false;
      }
    }
    auto family = families_.find(candidate);
    return family == families_.end() ||
           (family->second.type == type && family->second.label_names == label_names &&
            family->second.buckets == buckets && family->second.series.count(labels) == 0);
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
    family->second.buckets = buckets;
    if (type == Type::Histogram) {
      for (std::string_view suffix : kHistogramSamples) {
        histogram_samples_.insert(concat(exposed, suffix));
      }
    }
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
    if (entry.type == Type::Histogram) continue;
    out.push_back(Value{name, entry.type, static_cast<int64_t>(sums[entry.index])});
  }
  return out;
}

Store::HistogramValue Store::histogramFrom(const std::string& name, const Entry& entry,
                                           const std::vector<uint64_t>& sums) {
  HistogramValue h;
  h.name = name;
  h.buckets = entry.buckets;
  h.sum_micros = sums[entry.index];
  const auto first = sums.begin() + entry.index + 1;
  h.counts.assign(first, first + entry.buckets->size() + 1);
  return h;
}

std::vector<Store::HistogramValue> Store::histograms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t> sums = sumAllLocked();
  std::vector<HistogramValue> out;
  for (const auto& [name, entry] : entries_) {
    if (entry.type == Type::Histogram) out.push_back(histogramFrom(name, entry, sums));
  }
  return out;
}

uint64_t Store::HistogramValue::count() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

std::optional<double> Store::HistogramValue::quantileMicros(double q) const {
  const uint64_t total = count();
  if (total == 0 || buckets == nullptr) return std::nullopt;
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;  // observations in the buckets before i
  for (uint32_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0 || static_cast<double>(below + counts[i]) < rank) {
      below += counts[i];
      continue;
    }
    if (i == buckets->size()) break;  // +Inf: the last bound is all that is known
    const double low = i == 0 ? 0.0 : static_cast<double>(buckets->bound(i - 1));
    const double high = static_cast<double>(buckets->bound(i));
    const double into = std::max(0.0, rank - static_cast<double>(below));
    return low + (high - low) * into / static_cast<double>(counts[i]);
  }
  return buckets->size() == 0 ? 0.0 : static_cast<double>(buckets->bound(buckets->size() - 1));
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

std::optional<Store::HistogramValue> Store::histogramValue(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.type != Type::Histogram) {
    return std::nullopt;
  }
  return histogramFrom(it->first, it->second, sumAllLocked());
}

std::string Store::renderText(std::string_view filter) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t> sums = sumAllLocked();
  std::string out;
  for (const auto& [name, entry] : entries_) {
    if (!matches(name, filter)) continue;
    if (entry.type != Type::Histogram) {
      absl::StrAppend(&out, name, ": ", static_cast<int64_t>(sums[entry.index]), "\n");
      continue;
    }
    const HistogramValue h = histogramFrom(name, entry, sums);
    absl::StrAppend(&out, name, ".count: ", h.count(), "\n", name, ".sum: ", seconds(h.sum_micros),
                    "\n");
    for (double q : kQuantiles) {
      absl::StrAppend(&out, name, ".p", static_cast<int>(std::lround(q * 100)), ": ",
                      quantileSeconds(h, q, "nan"), "\n");
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
        const char* type = family.type == Type::Counter ? " counter\n"
                           : family.type == Type::Gauge ? " gauge\n"
                                                        : " histogram\n";
        absl::StrAppend(&out, "\n# TYPE ", exposed, type);
        described = true;
      }
      if (family.type != Type::Histogram) {
        absl::StrAppend(&out, exposed, labels, " ", static_cast<int64_t>(sums[series.index]), "\n");
        continue;
      }
      const Buckets& buckets = *family.buckets;
      uint64_t cumulative = 0;
      for (uint32_t i = 0; i <= buckets.size(); ++i) {
        cumulative += sums[series.index + 1 + i];
        const std::string le = i < buckets.size() ? seconds(buckets.bound(i)) : "+Inf";
        absl::StrAppend(&out, exposed, "_bucket", withLe(labels, le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, exposed, "_sum", labels, " ", seconds(sums[series.index]), "\n",
                      exposed, "_count", labels, " ", cumulative, "\n");
    }
  }
  return out;
}

std::string Store::renderJson(std::string_view filter) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<uint64_t> sums = sumAllLocked();
  // Valid names hold no character that JSON would need escaped.
  std::string out = "{\"stats\":[";
  bool first = true;
  for (const auto& [name, entry] : entries_) {
    if (entry.type == Type::Histogram || !matches(name, filter)) continue;
    absl::StrAppend(&out, first ? "" : ",", "{\"name\":\"", name,
                    "\",\"value\":", static_cast<int64_t>(sums[entry.index]), "}");
    first = false;
  }
  out += "],\"histograms\":[";
  first = true;
  for (const auto& [name, entry] : entries_) {
    if (entry.type != Type::Histogram || !matches(name, filter)) continue;
    const HistogramValue h = histogramFrom(name, entry, sums);
    absl::StrAppend(&out, first ? "" : ",", "{\"name\":\"", name, "\",\"count\":", h.count(),
                    ",\"sum\":", seconds(h.sum_micros));
    for (double q : kQuantiles) {
      absl::StrAppend(&out, ",\"p", static_cast<int>(std::lround(q * 100)),
                      "\":", quantileSeconds(h, q, "null"));
    }
    out += ",\"buckets\":[";
    uint64_t cumulative = 0;
    for (uint32_t i = 0; i < h.buckets->size(); ++i) {
      cumulative += h.counts[i];
      absl::StrAppend(&out, i == 0 ? "" : ",", "{\"le\":", seconds(h.buckets->bound(i)),
                      ",\"count\":", cumulative, "}");
    }
    out += "]}";
    first = false;
  }
  out += "]}";
  return out;
}

void Store::resetForTest() {
  std::lock_guard<std::mutex> lock(mutex_);
  families_.clear();
  histogram_samples_.clear();
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

Histogram Scope::histogram(std::string_view stat, std::string_view help,
                           const Buckets& buckets) const {
  return Store::get().histogram(name(stat), metric(stat, help), buckets);
}

Histogram Scope::histogram(std::string_view stat, std::string_view family, Label value,
                           std::string_view help, const Buckets& buckets) const {
  Metric m = metric(family, help);
  m.labels.push_back(std::move(value));
  return Store::get().histogram(name(stat), m, buckets);
}

}  // namespace stats
}  // namespace sluice
