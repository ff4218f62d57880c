#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "source/common/network/address.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace ban {

struct BanOptions {
  // Failures within `window` that start a ban.
  uint32_t max_failures = 5;
  std::chrono::milliseconds window{60 * 1000};
  // How long a ban lasts.
  std::chrono::milliseconds duration{15 * 60 * 1000};
  // IPv6 clients are tracked and banned by this prefix: one host usually owns a whole /64.
  uint32_t ipv6_prefix = 64;
  // Tracked addresses (banned or counting failures). When full, an address counting failures
  // is evicted first; a ban only ever makes room for a newer ban.
  uint32_t max_entries = 100000;
  // Once `ipv6_aggregate_threshold` blocks of ipv6_prefix inside one range of this length are
  // banned at the same time, the whole range is banned: a client rotating through the /64s of
  // its /48 gets a few bans' worth of guesses, not 65536. 0, or ipv6_prefix itself: off.
  uint32_t ipv6_aggregate_prefix = 48;
  uint32_t ipv6_aggregate_threshold = 3;
};

inline bool operator==(const BanOptions& a, const BanOptions& b) {
  return a.max_failures == b.max_failures && a.window == b.window && a.duration == b.duration &&
         a.ipv6_prefix == b.ipv6_prefix && a.max_entries == b.max_entries &&
         a.ipv6_aggregate_prefix == b.ipv6_aggregate_prefix &&
         a.ipv6_aggregate_threshold == b.ipv6_aggregate_threshold;
}

struct BanStats {
  stats::Counter failures;          // failures recorded
  stats::Counter banned;            // bans started (an aggregate ban counts in `aggregated` only)
  stats::Counter aggregated;        // IPv6 ranges banned whole (ipv6_aggregate_prefix)
  stats::Counter evicted;           // entries dropped to stay within max_entries (both kinds)
  stats::Counter evicted_failures;  // addresses counting failures dropped for a newer entry
  stats::Counter evicted_bans;      // bans dropped, oldest first, for a newer ban
  stats::Counter untracked;         // failures not recorded: the table held nothing but bans
  stats::Gauge active;              // bans in the table (an expired one leaves at the next lookup)
};

// What a ban or a failure is recorded against: an IPv4 address, or an IPv6 address masked to
// the table's prefix (or, for an aggregate ban, to ipv6_aggregate_prefix). IPv4-mapped IPv6
// peers (::ffff:a.b.c.d) count as their IPv4 address.
struct BanKey {
  uint8_t family = 0;  // AF_INET or AF_INET6
  uint8_t prefix = 0;  // 32 for IPv4
  std::array<uint8_t, 16> bytes{};

  // "192.0.2.7", "2001:db8:1:2::/64" ("2001:db8::1" when the prefix is 128).
  std::string asString() const;
  bool operator==(const BanKey& other) const {
    return family == other.family && prefix == other.prefix && bytes == other.bytes;
  }
  template <typename H>
  friend H AbslHashValue(H h, const BanKey& k) {
    return H::combine(H::combine_contiguous(std::move(h), k.bytes.data(), k.bytes.size()), k.family,
                      k.prefix);
  }
};

// The addresses that gave wrong credentials, and the bans that followed: one table per process,
// shared by every worker. It sits off the hot path: anyBanned() is one relaxed atomic load, and
// only when it is true does a lookup take the mutex. Bounded by max_entries; expired bans are
// removed lazily, by whichever operation next takes the lock.
class BanTable {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Clock = std::function<TimePoint()>;

  // `clock` is for tests; the default is steady_clock::now.
  BanTable(BanOptions options, BanStats stats, Clock clock = nullptr);
  BanTable(const BanTable&) = delete;
  BanTable& operator=(const BanTable&) = delete;

  // False when no ban exists: callers skip isBanned() and pay nothing else.
  bool anyBanned() const { return active_.load(std::memory_order_relaxed) != 0; }
  // Whether the client's key, or the aggregate range holding it, is banned now. Lock-free when
  // no ban exists.
  bool isBanned(const network::Address& client);
  // Records one failure (a wrong key) of the client. True when it starts a ban; false when it
  // only counted, or when the client is already banned. `reason` appears in /bans and logs.
  bool recordFailure(const network::Address& client, std::string_view reason);
  // Lifts the ban covering the client: with `prefix` 0 whichever covers it (its own key's or its
  // aggregate range's), else the one of exactly that prefix length. Returns what was lifted.
  std::optional<BanKey> unban(const network::Address& client, uint32_t prefix = 0);

  struct BanInfo {
    std::string address;  // BanKey::asString()
    uint32_t failures;    // failures that led to the ban
    std::chrono::milliseconds remaining;
    std::string reason;
  };
  // The bans in force, soonest to expire first.
  std::vector<BanInfo> bans();
  // Entries held: bans and addresses counting failures.
  size_t size();

  // Moves the bans in force out of `from` (a reload that changed the ban options): each keeps
  // its address, reason and end; addresses still counting failures start afresh. Stops when
  // this table is full. Returns the bans moved.
  size_t adoptBans(BanTable& from);

  BanKey keyFor(const network::Address& client) const;
  // The aggregate range holding an IPv6 key; family 0 when aggregation is off or for IPv4.
  BanKey aggregateKeyFor(const BanKey& key) const;
  const BanOptions& options() const { return options_; }

 private:
  struct Entry {
    // Failure times within the window, oldest first; at most max_failures.
    std::vector<TimePoint> failures;
    bool banned = false;
    uint32_t ban_failures = 0;
    std::string reason;
    std::list<BanKey>::iterator watch_position;                  // when !banned
    std::multimap<TimePoint, BanKey>::iterator expiry_position;  // when banned
  };

  TimePoint now() const { return clock_ ? clock_() : std::chrono::steady_clock::now(); }
  // Caller holds mutex_. Drops bans that ended and addresses whose failures all left the window.
  void expireLocked(TimePoint now);
  // Caller holds mutex_. Removes one entry to make room: an address counting failures if any
  // (least recently failed first); else, only when `for_ban`, the oldest ban. False when
  // nothing may go.
  bool makeRoomLocked(bool for_ban);
  // Caller holds mutex_. Turns the entry into a ban that ends at now + duration.
  void startBanLocked(absl::flat_hash_map<BanKey, Entry>::iterator it, TimePoint now);
  // Caller holds mutex_. Bans the aggregate range once enough of its blocks are banned, taking
  // their bans' place. Returns the range's name when it did.
  std::optional<std::string> aggregateLocked(const BanKey& key, const BanKey& range,
                                             std::string_view reason, TimePoint now);
  void eraseLocked(absl::flat_hash_map<BanKey, Entry>::iterator it);

  const BanOptions options_;
  const BanStats stats_;
  const Clock clock_;
  // ipv6_aggregate_prefix is on (shorter than ipv6_prefix, not 0).
  const bool aggregating_;
  std::atomic<uint32_t> active_{0};

  std::mutex mutex_;
  absl::flat_hash_map<BanKey, Entry> entries_;
  // Unbanned entries, least recently failed first.
  std::list<BanKey> watch_;
  // Banned entries by the time their ban ends: all bans last `duration`, so the first is also
  // the oldest.
  std::multimap<TimePoint, BanKey> expiries_;
  // Per aggregate range, the banned keys inside it (fewer than ipv6_aggregate_threshold: at the
  // threshold they give way to the range's own ban).
  absl::flat_hash_map<BanKey, std::vector<BanKey>> banned_in_range_;
};

}  // namespace ban
}  // namespace sluice
