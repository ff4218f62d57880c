#include "source/common/policy/limits.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "absl/strings/str_format.h"

namespace sluice {
namespace policy {

namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

int64_t intervalFor(double rate) {
  if (rate <= 0) return 0;
  return std::max<int64_t>(1, std::llround(static_cast<double>(kNanosPerSecond) / rate));
}

uint32_t secondsUntil(int64_t wait) {
  const int64_t seconds = (wait + kNanosPerSecond - 1) / kNanosPerSecond;
  return static_cast<uint32_t>(std::clamp<int64_t>(seconds, 1, UINT32_MAX));
}

}  // namespace

int64_t monotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t quotaPeriodStart(QuotaPeriod period, int64_t unix_seconds) {
  if (period == QuotaPeriod::Day) return unix_seconds - (unix_seconds % 86400 + 86400) % 86400;
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return static_cast<int64_t>(timegm(&tm));
}

int64_t quotaPeriodEnd(QuotaPeriod period, int64_t unix_seconds) {
  if (period == QuotaPeriod::Day) return quotaPeriodStart(period, unix_seconds) + 86400;
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  tm.tm_mon += 1;  // timegm normalizes December + 1 into January of the next year
  return static_cast<int64_t>(timegm(&tm));
}

int64_t wallSeconds() {
  static const int64_t offset = [] {
    const char* v = std::getenv("SLUICE_TEST_CLOCK_OFFSET_SECONDS");
    return v != nullptr ? std::strtoll(v, nullptr, 10) : 0;
  }();
  return static_cast<int64_t>(std::time(nullptr)) + offset;
}

absl::StatusOr<LimitSpec> parseLimitSpec(const config::v1::GroupLimits& proto,
                                         std::string_view path) {
  LimitSpec spec;
  if (!proto.quota_period().empty()) {
    if (proto.quota_period() != "day" && proto.quota_period() != "month") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.quota_period: \"%s\" is not day or month", path, proto.quota_period()));
    }
    if (proto.quota_bytes() == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.quota_period: set without quota_bytes", path));
    }
  }
  spec.quota_bytes = proto.quota_bytes();
  spec.quota_period = proto.quota_period() == "month" ? QuotaPeriod::Month : QuotaPeriod::Day;
  const double rate = proto.requests_per_second();
  if (!std::isfinite(rate) || rate < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.requests_per_second: %g is not a rate (0 leaves it off)", path, rate));
  }
  if (rate != 0 && (rate < kMinRequestsPerSecond || rate > kMaxRequestsPerSecond)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.requests_per_second: %g is outside %g-%g (0 leaves it off)", path, rate,
                        kMinRequestsPerSecond, kMaxRequestsPerSecond));
  }
  if (proto.burst() != 0 && rate == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.burst: set without requests_per_second", path));
  }
  if (proto.burst() > kMaxBurst) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.burst: %d is above %d", path, proto.burst(), kMaxBurst));
  }
  spec.requests_per_second = rate;
  if (rate != 0) {
    spec.burst =
        proto.burst() != 0
            ? proto.burst()
            : static_cast<uint32_t>(std::max(1.0, std::min<double>(std::ceil(rate), kMaxBurst)));
  }
  spec.max_concurrent = proto.max_concurrent();
  for (const auto& [value, field] :
       {std::pair<uint64_t, const char*>{proto.upload_bytes_per_second(),
                                         "upload_bytes_per_second"},
        {proto.download_bytes_per_second(), "download_bytes_per_second"}}) {
    if (value != 0 && (value < kMinBytesPerSecond || value > kMaxBytesPerSecond)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.%s: %d is outside %d-%d (0 leaves it off)", path, field, value,
                          kMinBytesPerSecond, kMaxBytesPerSecond));
    }
  }
  spec.upload_bytes_per_second = proto.upload_bytes_per_second();
  spec.download_bytes_per_second = proto.download_bytes_per_second();
  return spec;
}

// ------------------------------------------------------------------------------------------
// TokenBucket

bool TokenBucket::tryTake(int64_t now, int64_t& wait) {
  uint64_t word = state_.load(std::memory_order_acquire);
  for (;;) {
    const Params& p = params_[word & kGenerationMask];
    const int64_t interval = p.interval.load(std::memory_order_relaxed);
    if (interval == 0) return true;
    const int64_t tolerance = p.tolerance.load(std::memory_order_relaxed);
    const int64_t full_at = static_cast<int64_t>(word >> 2);
    // Taking a token pushes the time the bucket is full again one interval later; the bucket
    // is empty when that lies more than a full bucket's worth (burst intervals) ahead.
    const int64_t next = std::max(full_at, now) + interval;
    if (next - now > tolerance) {
      wait = next - now - tolerance;
      return false;
    }
    const uint64_t desired = (static_cast<uint64_t>(next) << 2) | (word & kGenerationMask);
    if (state_.compare_exchange_weak(word, desired, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return true;
    }
  }
}

void TokenBucket::giveBack() {
  uint64_t word = state_.load(std::memory_order_acquire);
  for (;;) {
    const int64_t interval =
        params_[word & kGenerationMask].interval.load(std::memory_order_relaxed);
    const int64_t full_at = static_cast<int64_t>(word >> 2);
    if (interval == 0 || full_at == 0) return;
    const int64_t back = std::max<int64_t>(0, full_at - interval);
    const uint64_t desired = (static_cast<uint64_t>(back) << 2) | (word & kGenerationMask);
    if (state_.compare_exchange_weak(word, desired, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return;
    }
  }
}

void TokenBucket::configure(double rate, uint32_t burst, int64_t now) {
  const int64_t interval = intervalFor(rate);
  const int64_t tolerance = interval * static_cast<int64_t>(interval == 0 ? 0 : burst);
  uint64_t word = state_.load(std::memory_order_acquire);
  const Params& current = params_[word & kGenerationMask];
  if (current.interval.load(std::memory_order_relaxed) == interval &&
      current.tolerance.load(std::memory_order_relaxed) == tolerance) {
    return;
  }
  // The next slot: no taker reads it until the swap below names it (a taker still holding an
  // older word fails its own swap and reads the word again).
  const uint64_t generation = ((word & kGenerationMask) + 1) & kGenerationMask;
  params_[generation].interval.store(interval, std::memory_order_relaxed);
  params_[generation].tolerance.store(tolerance, std::memory_order_relaxed);
  for (;;) {
    const Params& old = params_[word & kGenerationMask];
    const int64_t old_interval = old.interval.load(std::memory_order_relaxed);
    const int64_t old_tolerance = old.tolerance.load(std::memory_order_relaxed);
    int64_t full_at = 0;  // off, or full: any time up to now reads as a full bucket
    if (interval != 0 && old_interval != 0) {
      const int64_t missing = std::max<int64_t>(0, static_cast<int64_t>(word >> 2) - now);
      double held = static_cast<double>(old_tolerance - std::min(missing, old_tolerance)) /
                    static_cast<double>(old_interval);
      held = std::min(held, static_cast<double>(burst));
      full_at = now + tolerance - std::llround(held * static_cast<double>(interval));
      full_at = std::max<int64_t>(full_at, 0);
    }
    const uint64_t desired = (static_cast<uint64_t>(full_at) << 2) | generation;
    if (state_.compare_exchange_weak(word, desired, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return;
    }
  }
}

bool TokenBucket::enabled() const {
  const uint64_t word = state_.load(std::memory_order_acquire);
  return params_[word & kGenerationMask].interval.load(std::memory_order_relaxed) != 0;
}

double TokenBucket::tokens(int64_t now) const {
  const uint64_t word = state_.load(std::memory_order_acquire);
  const Params& p = params_[word & kGenerationMask];
  const int64_t interval = p.interval.load(std::memory_order_relaxed);
  const int64_t tolerance = p.tolerance.load(std::memory_order_relaxed);
  if (interval == 0) return 0;
  const int64_t missing = std::max<int64_t>(0, static_cast<int64_t>(word >> 2) - now);
  return static_cast<double>(tolerance - std::min(missing, tolerance)) /
         static_cast<double>(interval);
}

// ------------------------------------------------------------------------------------------
// ByteBucket

int64_t ByteBucket::charge(uint64_t bytes, int64_t now) {
  const uint64_t rate = rate_.load(std::memory_order_relaxed);
  if (rate == 0 || bytes == 0) return 0;
  const int64_t cost =
      static_cast<int64_t>(static_cast<unsigned __int128>(bytes) * kNanosPerSecond / rate);
  const int64_t tolerance = std::max<int64_t>(
      kBurstNanos, static_cast<int64_t>(static_cast<unsigned __int128>(kMinBurstBytes) *
                                        kNanosPerSecond / rate));
  int64_t full_at = full_at_.load(std::memory_order_relaxed);
  int64_t next;
  do {
    // A bucket that was full (full_at in the past) starts from now: no credit beyond a burst.
    next = std::max(full_at, now - tolerance) + cost;
  } while (!full_at_.compare_exchange_weak(full_at, next, std::memory_order_relaxed));
  return std::max<int64_t>(0, next - now);
}

// ------------------------------------------------------------------------------------------
// ByteQuota

void ByteQuota::configure(uint64_t limit, QuotaPeriod period, int64_t now_seconds) {
  const bool changed_period = period_.load(std::memory_order_relaxed) != period;
  period_.store(period, std::memory_order_relaxed);
  limit_.store(limit, std::memory_order_relaxed);
  if (changed_period || period_start_.load(std::memory_order_relaxed) == 0) {
    // A new period kind counts from its own start; what was counted stays.
    period_start_.store(quotaPeriodStart(period, now_seconds), std::memory_order_relaxed);
  }
}

void ByteQuota::roll(int64_t now_seconds) {
  const int64_t start = quotaPeriodStart(period(), now_seconds);
  if (start == periodStart()) return;
  period_start_.store(start, std::memory_order_relaxed);
  used_.store(0, std::memory_order_relaxed);
}

void ByteQuota::restore(int64_t period_start, uint64_t used) {
  if (period_start != periodStart()) return;  // counted in a past period
  used_.store(used, std::memory_order_relaxed);
}

// ------------------------------------------------------------------------------------------
// ConcurrencyLimit

ConcurrencyLimit::Take ConcurrencyLimit::tryTake() {
  const uint32_t max = max_.load(std::memory_order_relaxed);
  if (max == 0) return Take::Unlimited;
  int64_t active = active_.load(std::memory_order_relaxed);
  do {
    if (active >= static_cast<int64_t>(max)) return Take::Refused;
  } while (!active_.compare_exchange_weak(active, active + 1, std::memory_order_relaxed));
  return Take::Taken;
}

// ------------------------------------------------------------------------------------------
// GroupLimiter, KeyLimiter, LimitSlot

GroupLimiter::GroupLimiter(std::string name)
    : name_(std::move(name)),
      rate_reason_("request rate limit of group " + name_),
      concurrency_reason_("concurrency limit of group " + name_),
      quota_reason_("byte quota of group " + name_) {}

void GroupLimiter::registerStats() {
  if (stats_registered_) return;
  stats_registered_ = true;
  const stats::Scope scope = stats::Scope("policy").scope("group", "group", name_);
  rate_limited_ = scope.counter(
      "rate_limited", "Requests refused (429) by the group's shared requests_per_second.");
  concurrency_limited_ = scope.counter(
      "concurrency_limited", "Requests refused (429) by the group's shared max_concurrent.");
  key_rate_limited_ =
      scope.counter("key_rate_limited",
                    "Requests of the group's keys refused (429) by their own requests_per_second.");
  key_concurrency_limited_ =
      scope.counter("key_concurrency_limited",
                    "Requests of the group's keys refused (429) by their own max_concurrent.");
  concurrent_ = scope.gauge("concurrent",
                            "Requests, tunnels and streams open under the group's max_concurrent.");
  bandwidth_paused_ = scope.counter(
      "bandwidth_paused",
      "Reads paused (a transfer slowed) by the group's upload/download_bytes_per_second.");
  key_bandwidth_paused_ = scope.counter(
      "key_bandwidth_paused",
      "Reads paused (a transfer slowed) by the group's keys' own bytes_per_second limits.");
  quota_refused_ =
      scope.counter("quota_refused", "Requests refused (429) by the group's shared quota_bytes.");
  key_quota_refused_ = scope.counter(
      "key_quota_refused", "Requests of the group's keys refused (429) by their own quota_bytes.");
  quota_closed_ = scope.counter("quota_closed",
                                "Tunnels and transfers of the group closed on reaching a quota.");
  quota_bytes_ =
      scope.gauge("quota_bytes", "Bytes counted against the group's quota_bytes this period.");
}

KeyLimiter::KeyLimiter(std::shared_ptr<GroupLimiter> group, std::string name)
    : group_(std::move(group)),
      name_(std::move(name)),
      rate_reason_("request rate limit of key " + name_),
      concurrency_reason_("concurrency limit of key " + name_),
      quota_reason_("byte quota of key " + name_) {}

void KeyLimiter::registerStats(uint32_t stats_reserve) {
  if (stats_registered_ || name_.empty()) return;
  stats_registered_ = true;
  stats::Store& store = stats::Store::get();
  stats::Scope scope = stats::Scope("policy").scope("key", "key", name_);
  if (!store.hasRoomFor(scope.name("rate_limited"), 6, stats_reserve)) {
    // Thousands of keys: those past the store's room share one set.
    scope = stats::Scope("policy").scope("key_overflow");
  }
  rate_limited_ = scope.counter(
      "rate_limited", "Requests of the key refused (429) for rate, by its own or its group's.");
  concurrency_limited_ = scope.counter(
      "concurrency_limited",
      "Requests of the key refused (429) for concurrency, by its own or its group's.");
  concurrent_ = scope.gauge("concurrent",
                            "Requests, tunnels and streams open under the key's max_concurrent.");
  bandwidth_paused_ =
      scope.counter("bandwidth_paused",
                    "Reads of the key's transfers paused, by its own or its group's bandwidth.");
  quota_refused_ = scope.counter(
      "quota_refused", "Requests of the key refused (429) by its own or its group's quota.");
  quota_bytes_ =
      scope.gauge("quota_bytes", "Bytes counted against the key's own quota_bytes this period.");
}

int64_t KeyLimiter::chargeBytes(Direction way, uint64_t bytes, int64_t now) {
  GroupLimiter& group = *group_;
  const bool up = way == Direction::Upload;
  const bool own_reached = own_.quota.charge(bytes);
  if (group.state_.quota.charge(bytes) || own_reached) {
    group.quota_closed_.inc();
    return kQuotaReached;
  }
  const int64_t own = (up ? own_.upload : own_.download).charge(bytes, now);
  const int64_t shared = (up ? group.state_.upload : group.state_.download).charge(bytes, now);
  if (own == 0 && shared == 0) return 0;
  bandwidth_paused_.inc();
  if (own >= shared) {
    group.key_bandwidth_paused_.inc();
    return own;
  }
  group.bandwidth_paused_.inc();
  return shared;
}

bool KeyLimiter::admitLimited(LimitSlot& slot, LimitRefusal& refusal) {
  if (slot.admitted()) return true;
  GroupLimiter& group = *group_;
  // A quota reached refuses until its period ends.
  for (const bool own : {true, false}) {
    const ByteQuota& quota = own ? own_.quota : group.state_.quota;
    if (!quota.exhausted()) continue;
    quota_refused_.inc();
    (own ? group.key_quota_refused_ : group.quota_refused_).inc();
    const int64_t now = wallSeconds();
    const int64_t left = quotaPeriodEnd(quota.period(), now) - now;
    refusal = {LimitRefusal::Kind::Quota, own ? quota_reason_ : group.quota_reason_,
               static_cast<uint32_t>(std::clamp<int64_t>(left, 1, UINT32_MAX))};
    return false;
  }
  // Concurrency first: it needs no clock, and a place taken is simply given back if the rate
  // refuses after all.
  const ConcurrencyLimit::Take key_place = own_.concurrency.tryTake();
  if (key_place == ConcurrencyLimit::Take::Refused) {
    concurrency_limited_.inc();
    group.key_concurrency_limited_.inc();
    refusal = {LimitRefusal::Kind::Concurrency, concurrency_reason_, 1};
    return false;
  }
  const ConcurrencyLimit::Take group_place = group.state_.concurrency.tryTake();
  auto give_back_places = [&] {
    if (key_place == ConcurrencyLimit::Take::Taken) own_.concurrency.release();
    if (group_place == ConcurrencyLimit::Take::Taken) group.state_.concurrency.release();
  };
  if (group_place == ConcurrencyLimit::Take::Refused) {
    give_back_places();
    concurrency_limited_.inc();
    group.concurrency_limited_.inc();
    refusal = {LimitRefusal::Kind::Concurrency, group.concurrency_reason_, 1};
    return false;
  }
  const bool key_rate = own_.bucket.enabled();
  const bool group_rate = group.state_.bucket.enabled();
  if (key_rate || group_rate) {
    const int64_t now = monotonicNanos();
    int64_t wait = 0;
    if (key_rate && !own_.bucket.tryTake(now, wait)) {
      give_back_places();
      rate_limited_.inc();
      group.key_rate_limited_.inc();
      refusal = {LimitRefusal::Kind::Rate, rate_reason_, secondsUntil(wait)};
      return false;
    }
    if (group_rate && !group.state_.bucket.tryTake(now, wait)) {
      // The key's own token is not spent on a request its group refuses.
      if (key_rate) own_.bucket.giveBack();
      give_back_places();
      rate_limited_.inc();
      group.rate_limited_.inc();
      refusal = {LimitRefusal::Kind::Rate, group.rate_reason_, secondsUntil(wait)};
      return false;
    }
  }
  slot.limiter_ = this;
  slot.holds_key_ = key_place == ConcurrencyLimit::Take::Taken;
  slot.holds_group_ = group_place == ConcurrencyLimit::Take::Taken;
  if (slot.holds_key_) concurrent_.inc();
  if (slot.holds_group_) group.concurrent_.inc();
  return true;
}

void LimitSlot::releaseHeld() {
  KeyLimiter& key = *limiter_;
  if (holds_key_) {
    key.own_.concurrency.release();
    key.concurrent_.dec();
  }
  if (holds_group_) {
    key.group_->state_.concurrency.release();
    key.group_->concurrent_.dec();
  }
  limiter_ = nullptr;
  holds_key_ = holds_group_ = false;
}

// ------------------------------------------------------------------------------------------
// GroupLimiters

absl::StatusOr<std::unique_ptr<GroupLimiters>> GroupLimiters::build(std::string_view group_name,
                                                                    const config::v1::Group& proto,
                                                                    std::string_view path,
                                                                    const GroupLimiters* running) {
  std::unique_ptr<GroupLimiters> limits(new GroupLimiters());
  auto group_spec = parseLimitSpec(proto.limits(), absl::StrFormat("%s.limits", path));
  if (!group_spec.ok()) return group_spec.status();
  auto key_spec = parseLimitSpec(proto.key_limits(), absl::StrFormat("%s.key_limits", path));
  if (!key_spec.ok()) return key_spec.status();
  limits->group_spec_ = *group_spec;
  limits->key_spec_ = *key_spec;
  if (running != nullptr) {
    limits->group_ = running->group_;
    limits->group_is_new_ = false;
    std::lock_guard<std::mutex> lock(running->mutex_);
    limits->carried_ = running->keys_;
  } else {
    limits->group_ = std::make_shared<GroupLimiter>(std::string(group_name));
    // No worker sees a new limiter before this version runs: it starts with its values.
    limits->group_->state_.configure(limits->group_spec_, monotonicNanos());
  }
  if (limits->group_spec_.any() || limits->key_spec_.any()) limits->group_->registerStats();
  return limits;
}

void GroupLimiters::configureKey(KeyLimiter& key, int64_t now) const {
  // Requests without a key have no key of their own to limit.
  key.own_.configure(key.name_.empty() ? LimitSpec() : key_spec_, now);
  const bool own = !key.name_.empty() && key_spec_.any();
  key.active_.store(own || group_spec_.any(), std::memory_order_relaxed);
  // Bytes are charged for a bandwidth limit or a quota, the key's own or its group's.
  const bool own_bytes =
      !key.name_.empty() && (key_spec_.limitsBandwidth() || key_spec_.limitsQuota());
  key.shapes_.store(own_bytes || group_spec_.limitsBandwidth() || group_spec_.limitsQuota(),
                    std::memory_order_relaxed);
}

std::shared_ptr<KeyLimiter> GroupLimiters::forKey(std::string_view key_name,
                                                  uint32_t stats_reserve) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = keys_.find(key_name); it != keys_.end()) return it->second;
  std::shared_ptr<KeyLimiter> key;
  if (auto it = carried_.find(key_name); it != carried_.end()) {
    // Taken on by this version; its values reach it in apply().
    key = it->second;
    carried_.erase(it);
  } else {
    key = std::make_shared<KeyLimiter>(group_, std::string(key_name));
    configureKey(*key, monotonicNanos());
    if (auto saved = saved_.find(key_name); saved != saved_.end() && !key_name.empty()) {
      key->own_.quota.restore(saved->second.first, saved->second.second);
    }
  }
  if (group_spec_.any() || key_spec_.any()) key->registerStats(stats_reserve);
  keys_.emplace(std::string(key_name), key);
  return key;
}

std::shared_ptr<KeyLimiter> GroupLimiters::keyless() const { return forKey({}, 0); }

void GroupLimiters::restoreQuotas(SavedQuotas saved) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = saved.find(std::string_view()); it != saved.end() && group_is_new_) {
    group_->state_.quota.restore(it->second.first, it->second.second);
  }
  for (const auto& [name, key] : keys_) {
    if (auto it = saved.find(name); it != saved.end() && !name.empty()) {
      key->own_.quota.restore(it->second.first, it->second.second);
    }
  }
  saved_ = std::move(saved);
}

void GroupLimiters::tickQuotas(int64_t now_seconds) const {
  auto show = [](stats::Gauge& gauge, int64_t& shown, uint64_t used) {
    gauge.add(static_cast<int64_t>(used) - shown);
    shown = static_cast<int64_t>(used);
  };
  std::lock_guard<std::mutex> lock(mutex_);
  if (group_spec_.limitsQuota()) {
    group_->state_.quota.roll(now_seconds);
    show(group_->quota_bytes_, group_->quota_bytes_shown_, group_->state_.quota.used());
  }
  if (!key_spec_.limitsQuota()) return;
  for (const auto& [name, key] : keys_) {
    if (name.empty()) continue;
    key->own_.quota.roll(now_seconds);
    show(key->quota_bytes_, key->quota_bytes_shown_, key->own_.quota.used());
  }
}

void GroupLimiters::apply(int64_t now) const {
  if (!group_is_new_) group_->state_.configure(group_spec_, now);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, key] : keys_) configureKey(*key, now);
  // Limiters of keys this version dropped are not needed to carry on from.
  carried_.clear();
}

}  // namespace policy
}  // namespace sluice
