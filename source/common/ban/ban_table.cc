#include "source/common/ban/ban_table.h"

#include <cstring>

#include <arpa/inet.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace ban {

namespace {

constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

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
    : options_(options), stats_(stats), clock_(std::move(clock)) {
  SLUICE_ASSERT(options_.max_failures >= 1 && options_.max_entries >= 1 &&
                    options_.ipv6_prefix >= 1 && options_.ipv6_prefix <= 128,
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
  const uint32_t whole = options_.ipv6_prefix / 8;
  memcpy(key.bytes.data(), a, whole);
  if (whole < 16) {
    const uint32_t rest = options_.ipv6_prefix % 8;
    key.bytes[whole] = static_cast<uint8_t>(a[whole] & (0xff << (8 - rest)));
  }
  return key;
}

bool BanTable::isBanned(const network::Address& client) {
  if (!anyBanned()) return false;
  const BanKey key = keyFor(client);
  if (key.family == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  expireLocked(now());
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.banned;
}

bool BanTable::recordFailure(const network::Address& client, std::string_view reason) {
  const BanKey key = keyFor(client);
  if (key.family == 0) return false;
  stats_.failures.inc();
  std::string banned_text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const TimePoint t = now();
    expireLocked(t);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= options_.max_entries) evictOneLocked();
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
    entry.banned = true;
    entry.ban_failures = static_cast<uint32_t>(entry.failures.size());
    entry.failures.clear();
    entry.failures.shrink_to_fit();
    entry.reason = std::string(reason);
    entry.expiry_position = expiries_.emplace(t + options_.duration, key);
    active_.fetch_add(1, std::memory_order_relaxed);
    stats_.active.inc();
    stats_.banned.inc();
    banned_text = key.asString();
  }
  SLUICE_LOG(Warn, "ban: %s banned for %gs after %d failures within %gs (%s)", banned_text,
             options_.duration.count() / 1000.0, options_.max_failures,
             options_.window.count() / 1000.0, reason);
  return true;
}

bool BanTable::unban(const network::Address& client) {
  const BanKey key = keyFor(client);
  if (key.family == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  expireLocked(now());
  auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.banned) return false;
  eraseLocked(it);
  return true;
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

void BanTable::evictOneLocked() {
  if (!watch_.empty()) {
    eraseLocked(entries_.find(watch_.front()));
  } else if (!expiries_.empty()) {
    eraseLocked(entries_.find(expiries_.begin()->second));
  } else {
    return;
  }
  stats_.evicted.inc();
}

void BanTable::eraseLocked(absl::flat_hash_map<BanKey, Entry>::iterator it) {
  if (it->second.banned) {
    expiries_.erase(it->second.expiry_position);
    active_.fetch_sub(1, std::memory_order_relaxed);
    stats_.active.dec();
  } else {
    watch_.erase(it->second.watch_position);
  }
  entries_.erase(it);
}

}  // namespace ban
}  // namespace sluice
