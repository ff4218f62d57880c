#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace policy {

// Rate and concurrency limits of policy groups and of their keys (Group.limits, the group's
// keys together; Group.key_limits, each key on its own).
//
// The state a limit keeps (tokens, requests in flight) lives in limiters that outlive config
// versions: one GroupLimiter per group name and one KeyLimiter per (group, key name), carried by
// a reload for as long as the group and the key stay, like a key's grant. A config version only
// says what their limits are; its values reach the limiters when the version starts to run
// (GroupLimiters::apply), so connections accepted under an older version are held to the new
// values too. Workers touch a limiter through atomics only: no lock on the request path.

// Nanoseconds of the monotonic clock (CLOCK_MONOTONIC, steady_clock): never goes backwards.
int64_t monotonicNanos();

// Byte quotas count per UTC day or month.
enum class QuotaPeriod : uint8_t { Day, Month };
// The start and the end (the next period's start) of the period holding `unix_seconds`.
int64_t quotaPeriodStart(QuotaPeriod period, int64_t unix_seconds);
int64_t quotaPeriodEnd(QuotaPeriod period, int64_t unix_seconds);
// Seconds of the wall clock (UTC). For tests only, SLUICE_TEST_CLOCK_OFFSET_SECONDS (read once)
// is added, so a test can move into the next period; it is not a setting.
int64_t wallSeconds();

// The rate, concurrency and bandwidth parts of one GroupLimits message, checked.
struct LimitSpec {
  double requests_per_second = 0;        // 0: no rate limit
  uint32_t burst = 0;                    // tokens of a full bucket: at least 1 when the rate is set
  uint32_t max_concurrent = 0;           // 0: no concurrency limit
  uint64_t upload_bytes_per_second = 0;  // 0: not shaped
  uint64_t download_bytes_per_second = 0;
  uint64_t quota_bytes = 0;  // 0: no quota
  QuotaPeriod quota_period = QuotaPeriod::Day;

  bool limitsQuota() const { return quota_bytes > 0; }
  bool limitsRate() const { return requests_per_second > 0; }
  bool limitsConcurrency() const { return max_concurrent > 0; }
  bool limitsBandwidth() const {
    return upload_bytes_per_second > 0 || download_bytes_per_second > 0;
  }
  bool any() const {
    return limitsRate() || limitsConcurrency() || limitsBandwidth() || limitsQuota();
  }
};

inline constexpr double kMinRequestsPerSecond = 0.001;
inline constexpr double kMaxRequestsPerSecond = 10'000'000;
inline constexpr uint32_t kMaxBurst = 1'000'000;

inline constexpr uint64_t kMinBytesPerSecond = 1024;
inline constexpr uint64_t kMaxBytesPerSecond = 1ull << 40;

// Checks a GroupLimits message (errors start with `path`). The fields this build does not
// enforce (quotas) are refused, never silently ignored.
absl::StatusOr<LimitSpec> parseLimitSpec(const config::v1::GroupLimits& proto,
                                         std::string_view path);

// A token bucket of `burst` tokens refilled at `rate` per second, kept as the generic cell rate
// algorithm does: one 64-bit word holds the time at which the bucket is full again (its
// "theoretical arrival time"), so taking a token is one compare-and-swap and the state never
// needs a refill step. A bucket whose rate is 0 is off: every take succeeds.
//
// Its rate and burst change while workers take tokens (a reload): the word also carries a
// 2-bit generation naming which of four parameter slots it is expressed in, and the main thread
// converts the word to the new slot in the same compare-and-swap that names it, so a taker never
// reads a time under the wrong parameters.
class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(const TokenBucket&) = delete;
  TokenBucket& operator=(const TokenBucket&) = delete;

  // Takes one token at `now` (monotonicNanos()). False when the bucket is empty, with `wait`:
  // the nanoseconds until it holds one. Callers on different threads may pass times out of
  // order (each read its clock before the other's swap); an earlier time never adds tokens.
  bool tryTake(int64_t now, int64_t& wait);
  // Puts back a token taken at about the same time (another limit refused the request).
  void giveBack();
  // One thread at a time (the main thread at a reload's swap, or the builder before any
  // worker sees the bucket). From `now` on the bucket fills at `rate` tokens per second up to
  // `burst`; the tokens it holds stay, at most the new burst. A bucket that was off starts
  // full. rate 0 turns it off.
  void configure(double rate, uint32_t burst, int64_t now);
  bool enabled() const;
  // Tokens held at `now` (fractional; 0 when off), for tests and diagnostics.
  double tokens(int64_t now) const;

 private:
  struct Params {
    std::atomic<int64_t> interval{0};   // nanoseconds per token; 0: off
    std::atomic<int64_t> tolerance{0};  // burst * interval
  };
  static constexpr uint64_t kGenerationMask = 3;

  alignas(64) std::atomic<uint64_t> state_{0};  // full-again time << 2 | generation
  Params params_[4];
};

// Requests in flight against a maximum. release() exactly once per Taken.
class ConcurrencyLimit {
 public:
  enum class Take : uint8_t {
    Unlimited,  // no maximum: nothing taken, nothing to release
    Taken,
    Refused,  // at the maximum
  };
  ConcurrencyLimit() = default;
  ConcurrencyLimit(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit& operator=(const ConcurrencyLimit&) = delete;

  Take tryTake();
  void release() { active_.fetch_sub(1, std::memory_order_relaxed); }
  // Any thread; 0 removes the maximum. A lower maximum refuses until enough in flight end.
  void configure(uint32_t max) { max_.store(max, std::memory_order_relaxed); }
  uint32_t max() const { return max_.load(std::memory_order_relaxed); }
  int64_t active() const { return active_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<int64_t> active_{0};
  std::atomic<uint32_t> max_{0};
};

// Bytes per second for shaping: bytes already moved are charged (a transfer is never refused),
// and the answer is how long the side that produced them should not be read. One word holds
// the time at which the bucket is full again, as in TokenBucket; charging is one
// compare-and-swap. The bucket holds kBurst of the rate (at least kMinBurstBytes), so a
// transfer that starts after a quiet spell runs ahead of the rate by at most that.
class ByteBucket {
 public:
  static constexpr int64_t kBurstNanos = 100'000'000;  // 100 ms of the rate
  static constexpr uint64_t kMinBurstBytes = 64 * 1024;

  ByteBucket() = default;
  ByteBucket(const ByteBucket&) = delete;
  ByteBucket& operator=(const ByteBucket&) = delete;

  // Charges `bytes` moved at `now`: the nanoseconds to pause the producer (0: go on).
  int64_t charge(uint64_t bytes, int64_t now);
  // Any thread; 0 turns it off. The debt already charged stays (in time, at the old rate).
  void configure(uint64_t bytes_per_second) {
    rate_.store(bytes_per_second, std::memory_order_relaxed);
  }
  uint64_t rate() const { return rate_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<int64_t> full_at_{0};
  std::atomic<uint64_t> rate_{0};
};

// Bytes both ways per period (quota_bytes, quota_period). Workers add what moves (one relaxed
// fetch_add); the main thread starts a new period (roll) and saves the count to the state file.
class ByteQuota {
 public:
  ByteQuota() = default;
  ByteQuota(const ByteQuota&) = delete;
  ByteQuota& operator=(const ByteQuota&) = delete;

  bool enabled() const { return limit_.load(std::memory_order_relaxed) != 0; }
  bool exhausted() const {
    const uint64_t limit = limit_.load(std::memory_order_relaxed);
    return limit != 0 && used_.load(std::memory_order_relaxed) >= limit;
  }
  // Adds `bytes`: true when the count has reached the limit.
  bool charge(uint64_t bytes) {
    const uint64_t limit = limit_.load(std::memory_order_relaxed);
    if (limit == 0) return false;
    return used_.fetch_add(bytes, std::memory_order_relaxed) + bytes >= limit;
  }
  // Main thread.
  void configure(uint64_t limit, QuotaPeriod period, int64_t now_seconds);
  // Main thread: a new period starts the count at 0.
  void roll(int64_t now_seconds);
  // Main thread, at start: a count saved in the state file for the period it was counted in
  // (ignored unless that is the current period).
  void restore(int64_t period_start, uint64_t used);
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  int64_t periodStart() const { return period_start_.load(std::memory_order_relaxed); }
  QuotaPeriod period() const { return period_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> limit_{0};
  std::atomic<int64_t> period_start_{0};
  std::atomic<QuotaPeriod> period_{QuotaPeriod::Day};
};

// What one limit (a group's shared one or a key's own) keeps.
struct LimitState {
  TokenBucket bucket;
  ConcurrencyLimit concurrency;
  ByteBucket upload;    // client -> destination
  ByteBucket download;  // destination -> client
  ByteQuota quota;
  void configure(const LimitSpec& spec, int64_t now) {
    bucket.configure(spec.requests_per_second, spec.burst, now);
    concurrency.configure(spec.max_concurrent);
    upload.configure(spec.upload_bytes_per_second);
    download.configure(spec.download_bytes_per_second);
    quota.configure(spec.quota_bytes, spec.quota_period, wallSeconds());
  }
};

// Which way bytes move, for shaping.
enum class Direction : uint8_t { Upload, Download };

// A group's limits shared by all its keys (Group.limits), for as long as the group is
// configured; and the group's counters.
class GroupLimiter {
 public:
  explicit GroupLimiter(std::string name);
  const std::string& name() const { return name_; }
  const LimitState& state() const { return state_; }

 private:
  friend class KeyLimiter;
  friend class LimitSlot;
  friend class GroupLimiters;
  // Registers policy.group.<name>.* the first time a version of the group limits anything.
  void registerStats();

  const std::string name_;
  LimitState state_;
  // Why a refusal by this group's limits is one (the answer's details).
  const std::string rate_reason_;
  const std::string concurrency_reason_;
  bool stats_registered_ = false;           // main thread
  stats::Counter rate_limited_;             // refused by the group's rate
  stats::Counter concurrency_limited_;      // refused by the group's max_concurrent
  stats::Counter key_rate_limited_;         // refused by a key's own rate
  stats::Counter key_concurrency_limited_;  // refused by a key's own max_concurrent
  stats::Gauge concurrent_;                 // in flight under the group's max_concurrent
  stats::Counter bandwidth_paused_;         // reads paused by the group's bandwidth
  stats::Counter key_bandwidth_paused_;     // reads paused by a key's own bandwidth
  const std::string quota_reason_;
  stats::Counter quota_refused_;      // refused (429) by the group's quota
  stats::Counter key_quota_refused_;  // refused by a key's own quota
  stats::Counter quota_closed_;       // transfers closed on reaching a quota (either)
  stats::Gauge quota_bytes_;          // the group's count this period (main thread)
  int64_t quota_bytes_shown_ = 0;     // main thread
};

class LimitSlot;

// Why admit() refused a request.
struct LimitRefusal {
  enum class Kind : uint8_t { Rate, Concurrency, Quota };
  Kind kind = Kind::Rate;
  std::string_view reason;   // owned by the limiter
  uint32_t retry_after = 1;  // seconds, at least 1: until a token (1 for concurrency)
};

// What one key's requests are held to: its own limits (Group.key_limits) and its group's, for
// as long as the key stays in its group. Requests on a listener without keys have one of
// their own (empty name, only the group's limits). Every key of a configured group has one,
// limits or not, so a reload that adds a limit reaches connections accepted before it.
class KeyLimiter {
 public:
  KeyLimiter(std::shared_ptr<GroupLimiter> group, std::string name);

  // Takes the request's place under the limits, into `slot`: false (with `refusal`) when a
  // limit refuses it, and then nothing is taken. A slot that already holds a place (the same
  // request retried on a fresh connection) is left as it is. A key whose group and own limits
  // are all off pays one relaxed load.
  bool admit(LimitSlot& slot, LimitRefusal& refusal) {
    if (!active_.load(std::memory_order_relaxed)) return true;
    return admitLimited(slot, refusal);
  }
  const std::string& name() const { return name_; }
  const GroupLimiter& group() const { return *group_; }
  const LimitState& state() const { return own_; }
  // Whether some limit applies to this key now (its own or its group's).
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Shaping (upload_/download_bytes_per_second of the key's and its group's limits): charges
  // `bytes` just moved `way` to both buckets and returns the nanoseconds the side that
  // produced them should not be read, the longer of the two (the stricter limit wins); 0 when
  // neither limits that way or both have room. Any worker, lock-free.
  int64_t chargeBytes(Direction way, uint64_t bytes, int64_t now);
  // Whether a bandwidth limit or a quota applies to this key now (its own or its group's):
  // transfers of keys with only rate or concurrency limits pay this one relaxed load per read.
  bool shapes() const { return shapes_.load(std::memory_order_relaxed); }
  // What chargeBytes returns when a quota (the key's or its group's) has been reached: the
  // transfer is to be closed.
  static constexpr int64_t kQuotaReached = -1;

 private:
  friend class LimitSlot;
  friend class GroupLimiters;
  bool admitLimited(LimitSlot& slot, LimitRefusal& refusal);
  // Registers policy.key.<name>.* (or the shared overflow set) once.
  void registerStats(uint32_t stats_reserve);

  const std::shared_ptr<GroupLimiter> group_;
  const std::string name_;
  LimitState own_;
  std::atomic<bool> active_{false};
  std::atomic<bool> shapes_{false};
  const std::string rate_reason_;
  const std::string concurrency_reason_;
  bool stats_registered_ = false;       // main thread
  stats::Counter rate_limited_;         // refused for rate, by the key's or the group's bucket
  stats::Counter concurrency_limited_;  // refused for concurrency, either limit
  stats::Gauge concurrent_;             // in flight under the key's own max_concurrent
  stats::Counter bandwidth_paused_;     // reads paused, by the key's or the group's bandwidth
  const std::string quota_reason_;
  stats::Counter quota_refused_;  // refused by the key's or the group's quota
  stats::Gauge quota_bytes_;      // the key's own count this period (main thread)
  int64_t quota_bytes_shown_ = 0;
};

// A request's place under its key's limits, from its admission until it ends and whatever it
// becomes (a tunnel holds it for its whole life). Owned by the codec's per-request state (the
// RequestTrace), so it is given back exactly once, on whichever path the request ends.
class LimitSlot {
 public:
  LimitSlot() = default;
  ~LimitSlot() { release(); }
  LimitSlot(const LimitSlot&) = delete;
  LimitSlot& operator=(const LimitSlot&) = delete;
  // The place moves with the request (a connection that becomes a tunnel); `other` holds none.
  LimitSlot(LimitSlot&& other) noexcept
      : limiter_(std::exchange(other.limiter_, nullptr)),
        holds_key_(std::exchange(other.holds_key_, false)),
        holds_group_(std::exchange(other.holds_group_, false)) {}

  // Admitted under some limit (and not released since).
  bool admitted() const { return limiter_ != nullptr; }
  // The limiter it was admitted by (for what builds on limits: bandwidth, quotas), or null.
  KeyLimiter* limiter() const { return limiter_; }
  // Gives back the concurrency places it holds; a second call does nothing.
  void release() {
    if (limiter_ != nullptr) releaseHeld();
  }

 private:
  friend class KeyLimiter;
  void releaseHeld();

  KeyLimiter* limiter_ = nullptr;  // kept alive by the config the request runs under
  bool holds_key_ = false;
  bool holds_group_ = false;
};

// The limits of one group in one config version: what its `limits` and `key_limits` say, and
// the limiters they apply to, carried from the running version's group of the same name.
class GroupLimiters {
 public:
  // Errors start with `path` ("policy.groups[i]"). `running`: the running config's group of
  // the same name (a reload), or null.
  static absl::StatusOr<std::unique_ptr<GroupLimiters>> build(std::string_view group_name,
                                                              const config::v1::Group& proto,
                                                              std::string_view path,
                                                              const GroupLimiters* running);

  // The limiter of key `key_name` of this group: the running version's when it has the key
  // (its tokens and requests in flight stay), else a new one. The same name gives the same
  // limiter in one version (a key on several listeners). Config time, one thread. Per-key
  // counters are registered while the stats store keeps `stats_reserve` free, then keys share
  // policy.key_overflow.*.
  std::shared_ptr<KeyLimiter> forKey(std::string_view key_name,
                                     uint32_t stats_reserve = 2048) const;
  // The limiter of requests without a key (a listener without keys): the group's limits only.
  std::shared_ptr<KeyLimiter> keyless() const;

  // Once this version runs (a reload's swap; main thread): every limiter it holds takes its
  // values, keeping its tokens and requests in flight. Limiters new in this version have them
  // from the start.
  void apply(int64_t now) const;

  const LimitSpec& groupSpec() const { return group_spec_; }
  const LimitSpec& keySpec() const { return key_spec_; }
  const std::shared_ptr<GroupLimiter>& groupLimiter() const { return group_; }
  bool hasQuota() const { return group_spec_.limitsQuota() || key_spec_.limitsQuota(); }
  // Main thread: starts new periods, updates the quota gauges, and calls `save(key_name,
  // quota)` for the group's quota (key_name empty) and each key's own.
  template <class F>
  void forEachQuota(F save) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (group_spec_.limitsQuota()) save(std::string_view(), group_->state_.quota);
    if (!key_spec_.limitsQuota()) return;
    for (const auto& [name, key] : keys_) {
      if (!name.empty()) save(std::string_view(name), key->own_.quota);
    }
  }
  void tickQuotas(int64_t now_seconds) const;
  // Counts read from the state file at start: (key name, empty for the group's) -> (period
  // start, bytes). Applied to this version's new limiters as they are made.
  using SavedQuotas = std::map<std::string, std::pair<int64_t, uint64_t>, std::less<>>;
  void restoreQuotas(SavedQuotas saved) const;

 private:
  GroupLimiters() = default;
  void configureKey(KeyLimiter& key, int64_t now) const;

  LimitSpec group_spec_;
  LimitSpec key_spec_;
  std::shared_ptr<GroupLimiter> group_;
  bool group_is_new_ = true;  // not carried: configured when built
  mutable std::mutex mutex_;  // config time only
  mutable std::map<std::string, std::shared_ptr<KeyLimiter>, std::less<>> keys_;
  // The running version's limiters not yet claimed by a key of this version.
  mutable std::map<std::string, std::shared_ptr<KeyLimiter>, std::less<>> carried_;
  mutable SavedQuotas saved_;  // config time, main thread
};

}  // namespace policy
}  // namespace sluice
