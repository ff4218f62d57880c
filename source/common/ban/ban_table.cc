#include "source/common/ban/ban_table.h"

#include <algorithm>
#include <cstring>

#include <arpa/inet.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace ban {

namespace {

constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// Keeps the first `prefix` bits of an address and zeroes the rest.
void maskTo(std::array<uint8_t, 16>& bytes, uint32_t prefix) {
  for (uint32_t i = 0; i < bytes.size(); ++i) {
    const uint32_t first_bit = i * 8;
    if (first_bit >= prefix) {
      bytes[i] = 0;
    } else if (prefix - first_bit < 8) {
      bytes[i] = static_cast<uint8_t>(bytes[i] & (0xff << (8 - (prefix - first_bit))));
    }
  }
}

}  // namespace

std::string BanKey::asString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    inet_ntop(AF_INET, bytes.data(), text, sizeof(text));
    return text;
  }
  inet_ntop(AF_INET6, bytes.data(), text, sizeof(text));
  if (prefix == 128) return text;
  return absl::StrFormat("%s/%d", text, prefix);
}

BanTable::BanTable(BanOptions options, BanStats stats, Clock clock)
    : options_(options),
      stats_(stats),
      clock_(std::move(clock)),
      aggregating_(options_.ipv6_aggregate_prefix != 0 &&
                   options_.ipv6_aggregate_prefix < options_.ipv6_prefix) {
  SLUICE_ASSERT(options_.max_failures >= 1 && options_.max_entries >= 1 &&
                    options_.ipv6_prefix >= 1 && options_.ipv6_prefix <= 128 &&
                    (!aggregating_ || options_.ipv6_aggregate_threshold >= 1),
                "invalid ban options");
}

BanKey BanTable::keyFor(const network::Address& client) const {
  BanKey key;
  if (client.family() == AF_INET) {
    key.family = AF_INET;
    key.prefix = 32;
    memcpy(key.bytes.data(), &client.v4().sin_addr, 4);
    return key;
  }
  if (client.family() != AF_INET6) return key;  // family 0: never banned, never recorded
  const uint8_t* a = client.v6().sin6_addr.s6_addr;
  if (memcmp(a, kMappedPrefix, sizeof(kMappedPrefix)) == 0) {
    key.family = AF_INET;
    key.prefix = 32;
    memcpy(key.bytes.data(), a + 12, 4);
    return key;
  }
  key.family = AF_INET6;
  key.prefix = static_cast<uint8_t>(options_.ipv6_prefix);
  memcpy(key.bytes.data(), a, key.bytes.size());
  maskTo(key.bytes, options_.ipv6_prefix);
  return key;
}

BanKey BanTable::aggregateKeyFor(const BanKey& key) const {
  if (!aggregating_ || key.family != AF_INET6) return BanKey();
  BanKey range = key;
  range.prefix = static_cast<uint8_t>(options_.ipv6_aggregate_prefix);
  maskTo(range.bytes, options_.ipv6_aggregate_prefix);
  return range;
}

bool BanTable::isBanned(const network::Address& client) {
  if (!anyBanned()) return false;
  const BanKey key = keyFor(client);
  if (key.family == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  expireLocked(now());
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.banned) return true;
  // Aggregate entries exist only as bans.
  const BanKey range = aggregateKeyFor(key);
  return range.family != 0 && entries_.contains(range);
}

bool BanTable::recordFailure(const network::Address& client, std::string_view reason) {
  const BanKey key = keyFor(client);
  if (key.family == 0) return false;
  stats_.failures.inc();
  std::string banned_text;
  std::optional<std::string> range_text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const TimePoint t = now();
    expireLocked(t);
    const BanKey range = aggregateKeyFor(key);
    if (range.family != 0 && entries_.contains(range)) return false;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      // A ban gives way only to a newer ban: a new address that would merely count failures
      // is not tracked while the table holds nothing else.
      if (entries_.size() >= options_.max_entries && !makeRoomLocked(options_.max_failures == 1)) {
        stats_.untracked.inc();
        return false;
      }
      it = entries_.try_emplace(key).first;
      it->second.watch_position = watch_.insert(watch_.end(), key);
    } else if (it->second.banned) {
      return false;
    } else {
      // Most recently failed goes last, so the front is always the stalest.
      watch_.splice(watch_.end(), watch_, it->second.watch_position);
    }
    Entry& entry = it->second;
    const TimePoint horizon = t - options_.window;
    size_t stale = 0;
    while (stale < entry.failures.size() && entry.failures[stale] <= horizon) ++stale;
    entry.failures.erase(entry.failures.begin(), entry.failures.begin() + stale);
    entry.failures.push_back(t);
    if (entry.failures.size() < options_.max_failures) return false;

    watch_.erase(entry.watch_position);
    entry.ban_failures = static_cast<uint32_t>(entry.failures.size());
    entry.failures.clear();
    entry.failures.shrink_to_fit();
    entry.reason = std::string(reason);
    startBanLocked(it, t);
    stats_.banned.inc();
    banned_text = key.asString();
    if (range.family != 0) range_text = aggregateLocked(key, range, reason, t);
  }
  SLUICE_LOG(Warn, "ban: %s banned for %gs after %d failures within %gs (%s)", banned_text,
             options_.duration.count() / 1000.0, options_.max_failures,
             options_.window.count() / 1000.0, reason);
  if (range_text) {
    SLUICE_LOG(Warn, "ban: %s banned for %gs: %d of its /%d blocks were banned", *range_text,
               options_.duration.count() / 1000.0, options_.ipv6_aggregate_threshold,
               options_.ipv6_prefix);
  }
  return true;
}

std::optional<BanKey> BanTable::unban(const network::Address& client, uint32_t prefix) {
  const BanKey key = keyFor(client);
  if (key.family == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  expireLocked(now());
  for (const BanKey& candidate : {key, aggregateKeyFor(key)}) {
    if (candidate.family == 0 || (prefix != 0 && candidate.prefix != prefix)) continue;
    auto it = entries_.find(candidate);
    if (it == entries_.end() || !it->second.banned) continue;
    eraseLocked(it);
    return candidate;
  }
  return std::nullopt;
}

std::vector<BanTable::BanInfo> BanTable::bans() {
  std::vector<BanInfo> out;
  std::lock_guard<std::mutex> lock(mutex_);
  const TimePoint t = now();
  expireLocked(t);
  out.reserve(expiries_.size());
  for (const auto& [until, key] : expiries_) {
    const Entry& entry = entries_.find(key)->second;
    out.push_back(BanInfo{key.asString(), entry.ban_failures,
                          std::chrono::duration_cast<std::chrono::milliseconds>(until - t),
                          entry.reason});
  }
  return out;
}

size_t BanTable::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void BanTable::expireLocked(TimePoint t) {
  while (!expiries_.empty() && expiries_.begin()->first <= t) {
    eraseLocked(entries_.find(expiries_.begin()->second));
  }
  // The watch list is ordered by last failure: its front is the first to go stale.
  const TimePoint horizon = t - options_.window;
  while (!watch_.empty()) {
    auto it = entries_.find(watch_.front());
    if (it->second.failures.back() > horizon) break;
    eraseLocked(it);
  }
}

bool BanTable::makeRoomLocked(bool for_ban) {
  if (!watch_.empty()) {
    eraseLocked(entries_.find(watch_.front()));
    stats_.evicted_failures.inc();
  } else if (for_ban && !expiries_.empty()) {
    eraseLocked(entries_.find(expiries_.begin()->second));
    stats_.evicted_bans.inc();
  } else {
    return false;
  }
  stats_.evicted.inc();
  return true;
}

void BanTable::startBanLocked(absl::flat_hash_map<BanKey, Entry>::iterator it, TimePoint t) {
  it->second.banned = true;
  it->second.expiry_position = expiries_.emplace(t + options_.duration, it->first);
  active_.fetch_add(1, std::memory_order_relaxed);
  stats_.active.inc();
}

std::optional<std::string> BanTable::aggregateLocked(const BanKey& key, const BanKey& range,
                                                     std::string_view reason, TimePoint t) {
  std::vector<BanKey>& inside = banned_in_range_[range];
  inside.push_back(key);
  if (inside.size() < options_.ipv6_aggregate_threshold) return std::nullopt;
  // The range's ban replaces its blocks' bans: one entry covers them all.
  const std::vector<BanKey> blocks = std::move(inside);
  banned_in_range_.erase(range);
  uint32_t failures = 0;
  for (const BanKey& block : blocks) {
    auto member = entries_.find(block);
    failures += member->second.ban_failures;
    eraseLocked(member);
  }
  auto it = entries_.try_emplace(range).first;
  it->second.ban_failures = failures;
  it->second.reason = absl::StrFormat("%d of its /%d blocks banned: %s", blocks.size(),
                                      options_.ipv6_prefix, reason);
  startBanLocked(it, t);
  stats_.aggregated.inc();
  return range.asString();
}

size_t BanTable::adoptBans(BanTable& from) {
  if (&from == this) return 0;
  struct Moved {
    BanKey key;
    uint32_t failures;
    std::string reason;
    TimePoint until;
  };
  std::vector<Moved> moved;
  {
    std::lock_guard<std::mutex> lock(from.mutex_);
    from.expireLocked(from.now());
    while (!from.expiries_.empty()) {
      auto it = from.entries_.find(from.expiries_.begin()->second);
      moved.push_back(Moved{it->first, it->second.ban_failures, std::move(it->second.reason),
                            from.expiries_.begin()->first});
      from.eraseLocked(it);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  size_t count = 0;
  for (Moved& m : moved) {
    if (entries_.size() >= options_.max_entries && !makeRoomLocked(true)) break;
    auto [it, inserted] = entries_.try_emplace(m.key);
    if (!inserted) {
      if (it->second.banned) continue;
      watch_.erase(it->second.watch_position);
    }
    it->second.failures.clear();
    it->second.banned = true;
    it->second.ban_failures = m.failures;
    it->second.reason = std::move(m.reason);
    it->second.expiry_position = expiries_.emplace(m.until, it->first);
    active_.fetch_add(1, std::memory_order_relaxed);
    stats_.active.inc();
    ++count;
  }
  return count;
}

void BanTable::eraseLocked(absl::flat_hash_map<BanKey, Entry>::iterator it) {
  if (it->second.banned) {
    expiries_.erase(it->second.expiry_position);
    active_.fetch_sub(1, std::memory_order_relaxed);
    stats_.active.dec();
    if (it->first.family == AF_INET6 && it->first.prefix == options_.ipv6_prefix) {
      auto range = banned_in_range_.find(aggregateKeyFor(it->first));
      if (range != banned_in_range_.end()) {
        std::vector<BanKey>& inside = range->second;
        auto pos = std::find(inside.begin(), inside.end(), it->first);
        if (pos != inside.end()) inside.erase(pos);
        if (inside.empty()) banned_in_range_.erase(range);
      }
    }
  } else {
    watch_.erase(it->second.watch_position);
  }
  entries_.erase(it);
}

}  // namespace ban
}  // namespace sluice
