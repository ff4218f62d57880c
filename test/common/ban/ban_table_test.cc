#include "source/common/ban/ban_table.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/ban/ban_config.h"
#include "source/common/network/address.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace ban {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

network::Address ip(const std::string& text) {
  auto a = network::Address::parseIp(text, 1234);
  EXPECT_TRUE(a.ok()) << text;
  return *a;
}

class BanTableTest : public testing::Test {
 protected:
  std::unique_ptr<BanTable> make(BanOptions options) {
    stats::Store& store = stats::Store::get();
    prefix_ = "test.bans." + std::to_string(++serial_) + ".";
    BanStats s;
    s.failures = store.counter(prefix_ + "failures");
    s.banned = store.counter(prefix_ + "banned");
    s.aggregated = store.counter(prefix_ + "aggregated");
    s.evicted = store.counter(prefix_ + "evicted");
    s.evicted_failures = store.counter(prefix_ + "evicted_failures");
    s.evicted_bans = store.counter(prefix_ + "evicted_bans");
    s.untracked = store.counter(prefix_ + "untracked");
    s.active = store.gauge(prefix_ + "active");
    return std::make_unique<BanTable>(options, s, [this] { return now_; });
  }
  uint64_t counter(const std::string& name) {
    return stats::Store::get().counterValue(prefix_ + name);
  }
  int64_t active() { return stats::Store::get().gaugeValue(prefix_ + "active"); }
  // n failures of `client`, one per `step`; the number of them that started a ban.
  int fail(BanTable& table, const network::Address& client, int n, milliseconds step = {}) {
    int bans = 0;
    for (int i = 0; i < n; ++i) {
      if (table.recordFailure(client, "invalid proxy credentials")) ++bans;
      now_ += step;
    }
    return bans;
  }

  static int serial_;
  std::string prefix_;
  BanTable::TimePoint now_ = BanTable::TimePoint() + std::chrono::hours(1000);
};
int BanTableTest::serial_ = 0;

TEST_F(BanTableTest, FifthFailureBans) {
  auto table = make(BanOptions());
  const auto a = ip("192.0.2.7");
  EXPECT_FALSE(table->anyBanned());
  EXPECT_EQ(0, fail(*table, a, 4));
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_FALSE(table->anyBanned());
  EXPECT_TRUE(table->recordFailure(a, "wrong key"));
  EXPECT_TRUE(table->anyBanned());
  EXPECT_TRUE(table->isBanned(a));
  EXPECT_EQ(5u, counter("failures"));
  EXPECT_EQ(1u, counter("banned"));
  EXPECT_EQ(1, active());
  // Another port of the same address is the same client; another address is not.
  EXPECT_TRUE(table->isBanned(ip("192.0.2.7")));
  EXPECT_FALSE(table->isBanned(ip("192.0.2.8")));
  // More failures while banned start nothing new.
  EXPECT_FALSE(table->recordFailure(a, "wrong key"));
  EXPECT_EQ(1u, counter("banned"));
  auto bans = table->bans();
  ASSERT_EQ(1u, bans.size());
  EXPECT_EQ("192.0.2.7", bans[0].address);
  EXPECT_EQ(5u, bans[0].failures);
  EXPECT_EQ(milliseconds(15 * 60 * 1000), bans[0].remaining);
  EXPECT_EQ("wrong key", bans[0].reason);
}

TEST_F(BanTableTest, MaxFailuresOfOneBansAtOnce) {
  BanOptions o;
  o.max_failures = 1;
  auto table = make(o);
  EXPECT_TRUE(table->recordFailure(ip("192.0.2.1"), "x"));
  EXPECT_TRUE(table->isBanned(ip("192.0.2.1")));
}

TEST_F(BanTableTest, FailuresOutsideTheWindowDoNotCount) {
  BanOptions o;
  o.window = seconds(60);
  auto table = make(o);
  const auto a = ip("198.51.100.1");
  // 4 failures, then a pause longer than the window: the count starts again.
  EXPECT_EQ(0, fail(*table, a, 4, seconds(1)));
  now_ += seconds(61);
  EXPECT_EQ(0, fail(*table, a, 4, seconds(1)));
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_FALSE(table->anyBanned());
  // The window slides: failures 20s apart keep at most 3 inside 60s (one falls out exactly
  // at the edge), so a slow guesser is never banned...
  auto slow = make(o);
  const auto b = ip("198.51.100.2");
  EXPECT_EQ(0, fail(*slow, b, 20, seconds(20)));
  EXPECT_FALSE(slow->isBanned(b));
  // ...while 5 within 59 s are.
  auto fast = make(o);
  EXPECT_EQ(1, fail(*fast, b, 5, milliseconds(14750)));
  EXPECT_TRUE(fast->isBanned(b));
}

TEST_F(BanTableTest, BanExpiresAfterDuration) {
  BanOptions o;
  o.duration = seconds(2);
  auto table = make(o);
  const auto a = ip("203.0.113.9");
  EXPECT_EQ(1, fail(*table, a, 5));
  now_ += milliseconds(1999);
  EXPECT_TRUE(table->isBanned(a));
  now_ += milliseconds(1);
  EXPECT_FALSE(table->isBanned(a));
  // The lookup removed the expired ban: back to the lock-free path.
  EXPECT_FALSE(table->anyBanned());
  EXPECT_EQ(0, active());
  EXPECT_EQ(0u, table->size());
  EXPECT_TRUE(table->bans().empty());
  // Failures start from zero after a ban.
  EXPECT_EQ(0, fail(*table, a, 4));
  EXPECT_EQ(1, fail(*table, a, 1));
}

TEST_F(BanTableTest, Ipv6IsBannedByPrefix) {
  auto table = make(BanOptions());
  const auto a = ip("2001:db8:1:2::1");
  EXPECT_EQ(1, fail(*table, a, 5));
  // Same /64: same ban, even with other interface bits.
  EXPECT_TRUE(table->isBanned(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
  EXPECT_TRUE(table->isBanned(ip("2001:db8:1:2::99")));
  // Neighbouring /64s are not.
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:3::1")));
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:1:ffff:ffff:ffff:ffff")));
  auto bans = table->bans();
  ASSERT_EQ(1u, bans.size());
  EXPECT_EQ("2001:db8:1:2::/64", bans[0].address);
}

TEST_F(BanTableTest, Ipv6FailuresAddUpAcrossThePrefix) {
  auto table = make(BanOptions());
  // Five hosts of one /64, one failure each: one client to the table.
  for (int i = 1; i <= 4; ++i) {
    EXPECT_FALSE(table->recordFailure(ip("2001:db8::" + std::to_string(i)), "x"));
  }
  EXPECT_FALSE(table->recordFailure(ip("2001:db8:0:1::1"), "x"));  // another /64
  EXPECT_TRUE(table->recordFailure(ip("2001:db8::5"), "x"));
  EXPECT_EQ(2u, table->size());
}

TEST_F(BanTableTest, OtherIpv6Prefixes) {
  BanOptions o;
  o.ipv6_prefix = 56;
  auto table = make(o);
  EXPECT_EQ(1, fail(*table, ip("2001:db8:0:ab::1"), 5));
  EXPECT_TRUE(table->isBanned(ip("2001:db8:0:ff::1")));    // same /56 (0x00ab vs 0x00ff)
  EXPECT_FALSE(table->isBanned(ip("2001:db8:0:1ab::1")));  // bits 48-55 differ
  EXPECT_EQ("2001:db8::/56", table->bans()[0].address);

  o.ipv6_prefix = 128;
  auto exact = make(o);
  EXPECT_EQ(1, fail(*exact, ip("2001:db8::1"), 5));
  EXPECT_FALSE(exact->isBanned(ip("2001:db8::2")));
  EXPECT_EQ("2001:db8::1", exact->bans()[0].address);

  o.ipv6_prefix = 61;  // not a multiple of 8
  auto odd = make(o);
  EXPECT_EQ(1, fail(*odd, ip("2001:db8:0:7::1"), 5));
  EXPECT_TRUE(odd->isBanned(ip("2001:db8:0:0::1")));
  EXPECT_FALSE(odd->isBanned(ip("2001:db8:0:8::1")));
}

TEST_F(BanTableTest, Ipv4MappedIpv6IsItsIpv4Address) {
  auto table = make(BanOptions());
  EXPECT_EQ(1, fail(*table, ip("::ffff:192.0.2.33"), 5));
  EXPECT_TRUE(table->isBanned(ip("192.0.2.33")));
  EXPECT_EQ("192.0.2.33", table->bans()[0].address);
  EXPECT_TRUE(table->unban(ip("192.0.2.33")));
  EXPECT_FALSE(table->isBanned(ip("::ffff:192.0.2.33")));
}

TEST_F(BanTableTest, InvalidAddressIsIgnored) {
  auto table = make(BanOptions());
  const network::Address none;
  EXPECT_EQ(0, fail(*table, none, 10));
  EXPECT_FALSE(table->isBanned(none));
  EXPECT_EQ(0u, table->size());
  EXPECT_EQ(0u, counter("failures"));
}

TEST_F(BanTableTest, Unban) {
  auto table = make(BanOptions());
  const auto a = ip("192.0.2.50");
  EXPECT_FALSE(table->unban(a));  // not banned
  EXPECT_EQ(1, fail(*table, a, 5));
  EXPECT_TRUE(table->unban(a));
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_FALSE(table->anyBanned());
  EXPECT_EQ(0, active());
  EXPECT_FALSE(table->unban(a));  // already lifted
  // An address only counting failures is not "banned": unban leaves it alone.
  EXPECT_EQ(0, fail(*table, a, 3));
  EXPECT_FALSE(table->unban(a));
  EXPECT_EQ(1u, table->size());
  // ...and its count is not reset by the unban: two more ban it.
  EXPECT_EQ(1, fail(*table, a, 2));
}

TEST_F(BanTableTest, EvictsTheOldestTrackedAddressFirst) {
  BanOptions o;
  o.max_entries = 3;
  auto table = make(o);
  const auto a = ip("192.0.2.1"), b = ip("192.0.2.2"), c = ip("192.0.2.3"), d = ip("192.0.2.4");
  fail(*table, a, 1, seconds(1));
  fail(*table, b, 1, seconds(1));
  fail(*table, c, 1, seconds(1));
  fail(*table, a, 1, seconds(1));  // a is now the most recent, b the oldest
  EXPECT_EQ(3u, table->size());
  fail(*table, d, 1, seconds(1));
  EXPECT_EQ(3u, table->size());
  EXPECT_EQ(1u, counter("evicted"));
  // b was evicted: it needs 5 new failures; a kept its 2 and needs 3.
  EXPECT_EQ(0, fail(*table, a, 2));
  EXPECT_EQ(1, fail(*table, a, 1));
  EXPECT_EQ(0, fail(*table, b, 4));
}

TEST_F(BanTableTest, BansAreEvictedOnlyForNewerBans) {
  BanOptions o;
  o.max_entries = 2;
  o.max_failures = 1;
  auto table = make(o);
  const auto a = ip("192.0.2.1"), b = ip("192.0.2.2"), c = ip("192.0.2.3");
  EXPECT_EQ(1, fail(*table, a, 1, seconds(1)));
  EXPECT_EQ(1, fail(*table, b, 1, seconds(1)));
  // The table is full of bans and c's failure bans at once: the oldest ban (a) makes room.
  EXPECT_EQ(1, fail(*table, c, 1));
  EXPECT_EQ(1u, counter("evicted"));
  EXPECT_EQ(1u, counter("evicted_bans"));
  EXPECT_EQ(0u, counter("evicted_failures"));
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_TRUE(table->isBanned(b));
  EXPECT_TRUE(table->isBanned(c));
  EXPECT_EQ(2, active());
}

TEST_F(BanTableTest, FailureCountsAreEvictedBeforeBans) {
  BanOptions o;
  o.max_entries = 2;
  auto table = make(o);
  const auto a = ip("192.0.2.1"), b = ip("192.0.2.2"), c = ip("192.0.2.3");
  EXPECT_EQ(1, fail(*table, a, 5));
  fail(*table, b, 1);
  fail(*table, c, 1);  // evicts b's failure count, not a's ban
  EXPECT_TRUE(table->isBanned(a));
  EXPECT_EQ(2u, table->size());
  EXPECT_EQ(1u, counter("evicted_failures"));
  EXPECT_EQ(0u, counter("evicted_bans"));
  // Many more addresses, one wrong key each: they evict each other, never the ban.
  for (uint32_t i = 0; i < 1000; ++i) {
    table->recordFailure(network::Address::ipv4(0x0a000000 + i, 1), "x");
  }
  EXPECT_TRUE(table->isBanned(a));
  EXPECT_EQ(1001u, counter("evicted_failures"));
  EXPECT_EQ(0u, counter("evicted_bans"));
}

TEST_F(BanTableTest, ATableFullOfBansDoesNotTrackNewcomers) {
  BanOptions o;
  o.max_entries = 2;
  auto table = make(o);
  const auto a = ip("192.0.2.1"), b = ip("192.0.2.2"), c = ip("192.0.2.3");
  EXPECT_EQ(1, fail(*table, a, 5, seconds(1)));
  EXPECT_EQ(1, fail(*table, b, 5, seconds(1)));
  // c only counts failures: no ban gives way to it.
  EXPECT_EQ(0, fail(*table, c, 10));
  EXPECT_EQ(10u, counter("untracked"));
  EXPECT_EQ(0u, counter("evicted"));
  EXPECT_TRUE(table->isBanned(a));
  EXPECT_TRUE(table->isBanned(b));
  EXPECT_FALSE(table->isBanned(c));
  EXPECT_EQ(2u, table->size());
  // Once a ban ends there is room again.
  now_ += o.duration - seconds(5);
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_TRUE(table->isBanned(b));
  EXPECT_EQ(1, fail(*table, c, 5));
  EXPECT_TRUE(table->isBanned(c));
}

TEST_F(BanTableTest, ManyAddressesStayWithinMaxEntries) {
  BanOptions o;
  o.max_entries = 100;
  auto table = make(o);
  for (uint32_t i = 0; i < 10000; ++i) {
    table->recordFailure(network::Address::ipv4(0x0a000000 + i, 1), "x");
  }
  EXPECT_EQ(100u, table->size());
  EXPECT_EQ(9900u, counter("evicted"));
}

TEST_F(BanTableTest, StaleFailureCountsAreDropped) {
  auto table = make(BanOptions());
  fail(*table, ip("192.0.2.1"), 2);
  fail(*table, ip("192.0.2.2"), 2);
  EXPECT_EQ(2u, table->size());
  now_ += seconds(61);
  fail(*table, ip("192.0.2.3"), 1);
  EXPECT_EQ(1u, table->size());
  EXPECT_EQ(0u, counter("evicted"));  // aged out, not evicted
}

TEST_F(BanTableTest, BansListSoonestFirst) {
  BanOptions o;
  o.max_failures = 1;
  auto table = make(o);
  fail(*table, ip("192.0.2.2"), 1, seconds(10));
  fail(*table, ip("192.0.2.1"), 1, seconds(10));
  auto bans = table->bans();
  ASSERT_EQ(2u, bans.size());
  EXPECT_EQ("192.0.2.2", bans[0].address);
  EXPECT_EQ(milliseconds(15 * 60 * 1000 - 20000), bans[0].remaining);
  EXPECT_EQ("192.0.2.1", bans[1].address);
  EXPECT_EQ(milliseconds(15 * 60 * 1000 - 10000), bans[1].remaining);
}

TEST_F(BanTableTest, ThirdBannedSlash64BansItsSlash48) {
  auto table = make(BanOptions());
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:1::1"), 5));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:2::1"), 5));
  // Two banned /64s: the rest of the /48 is still open.
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:4::1")));
  EXPECT_EQ(2u, table->bans().size());
  EXPECT_EQ(0u, counter("aggregated"));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:3::1"), 5));
  EXPECT_EQ(1u, counter("aggregated"));
  EXPECT_EQ(3u, counter("banned"));
  // Every address of the /48 is banned now, and nothing outside it.
  for (const char* inside : {"2001:db8:1::", "2001:db8:1:4::1", "2001:db8:1:ffff:ffff::1",
                             "2001:db8:1:1::1", "2001:db8:1:3::9"}) {
    EXPECT_TRUE(table->isBanned(ip(inside))) << inside;
  }
  for (const char* outside : {"2001:db8:2::1", "2001:db8::1", "2001:db8:0:ffff::1"}) {
    EXPECT_FALSE(table->isBanned(ip(outside))) << outside;
  }
  // The /48's ban took the place of its /64s' bans: one entry, with their failures.
  auto bans = table->bans();
  ASSERT_EQ(1u, bans.size());
  EXPECT_EQ("2001:db8:1::/48", bans[0].address);
  EXPECT_EQ(15u, bans[0].failures);
  EXPECT_EQ(milliseconds(15 * 60 * 1000), bans[0].remaining);
  EXPECT_EQ("3 of its /64 blocks banned: invalid proxy credentials", bans[0].reason);
  EXPECT_EQ(1u, table->size());
  EXPECT_EQ(1, active());
  // A fresh /64 of the range records nothing: it is banned already.
  EXPECT_EQ(0, fail(*table, ip("2001:db8:1:9::1"), 5));
  EXPECT_EQ(1u, table->size());
}

TEST_F(BanTableTest, AggregateBanExpiresAndIsLiftedLikeOthers) {
  BanOptions o;
  o.duration = seconds(10);
  auto table = make(o);
  for (const char* block : {"2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"}) {
    EXPECT_EQ(1, fail(*table, ip(block), 5));
  }
  ASSERT_TRUE(table->isBanned(ip("2001:db8:1:7::1")));
  now_ += seconds(10);
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:7::1")));
  EXPECT_FALSE(table->anyBanned());
  EXPECT_EQ(0u, table->size());

  for (const char* block : {"2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"}) {
    EXPECT_EQ(1, fail(*table, ip(block), 5));
  }
  // Asked for the /64, nothing: the ban in force is the /48's.
  EXPECT_FALSE(table->unban(ip("2001:db8:1:7::1"), 64));
  auto lifted = table->unban(ip("2001:db8:1:7::1"), 48);
  ASSERT_TRUE(lifted);
  EXPECT_EQ("2001:db8:1::/48", lifted->asString());
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:1::1")));
  EXPECT_FALSE(table->anyBanned());
  // Without a length, unban lifts whichever ban covers the address.
  for (const char* block : {"2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:3::1"}) {
    EXPECT_EQ(1, fail(*table, ip(block), 5));
  }
  lifted = table->unban(ip("2001:db8:1:1::1"));
  ASSERT_TRUE(lifted);
  EXPECT_EQ("2001:db8:1::/48", lifted->asString());
  EXPECT_FALSE(table->unban(ip("2001:db8:1:1::1")));
}

TEST_F(BanTableTest, OnlyBansInForceCountTowardTheAggregate) {
  BanOptions o;
  o.duration = seconds(10);
  auto table = make(o);
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:1::1"), 5));
  now_ += seconds(3);
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:2::1"), 5));
  // The first ban ends; a lifted one does not count either.
  now_ += seconds(7);
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:1::1")));
  ASSERT_TRUE(table->unban(ip("2001:db8:1:2::1")));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:3::1"), 5));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:4::1"), 5));
  EXPECT_EQ(0u, counter("aggregated"));
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:5::1")));
  // Failure counts do not count: only bans.
  EXPECT_EQ(0, fail(*table, ip("2001:db8:1:6::1"), 4));
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:5::1")));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:6::1"), 1));
  EXPECT_TRUE(table->isBanned(ip("2001:db8:1:5::1")));
  // The /48's ban took the three /64 bans' place; the failure count of none is left over.
  EXPECT_EQ(1u, table->size());
}

TEST_F(BanTableTest, AnEvictedBanNoLongerCountsTowardItsAggregate) {
  BanOptions o;
  o.max_entries = 3;
  o.max_failures = 1;
  auto table = make(o);
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:1::1"), 1, seconds(1)));
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:2::1"), 1, seconds(1)));
  EXPECT_EQ(1, fail(*table, ip("192.0.2.1"), 1, seconds(1)));
  // Full: the next ban evicts the oldest, 2001:db8:1:1::/64, leaving two /64s of the /48.
  EXPECT_EQ(1, fail(*table, ip("2001:db8:1:3::1"), 1));
  EXPECT_EQ(1u, counter("evicted_bans"));
  EXPECT_EQ(0u, counter("aggregated"));
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:1::1")));
  EXPECT_FALSE(table->isBanned(ip("2001:db8:1:9::1")));
  EXPECT_TRUE(table->isBanned(ip("2001:db8:1:2::1")));
  EXPECT_TRUE(table->isBanned(ip("2001:db8:1:3::1")));
}

TEST_F(BanTableTest, AggregationSettings) {
  BanOptions o;
  o.ipv6_aggregate_prefix = 0;  // off
  auto off = make(o);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(1, fail(*off, ip("2001:db8:1:" + std::to_string(i) + "::1"), 5));
  }
  EXPECT_FALSE(off->isBanned(ip("2001:db8:1:9::1")));
  EXPECT_EQ(5u, off->bans().size());

  o.ipv6_aggregate_prefix = 64;  // the table's own prefix: off too
  auto same = make(o);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(1, fail(*same, ip("2001:db8:1:" + std::to_string(i) + "::1"), 5));
  }
  EXPECT_FALSE(same->isBanned(ip("2001:db8:1:9::1")));

  // A prefix that is not a multiple of 8, and a threshold of 1: one banned /64 bans its /44.
  o.ipv6_aggregate_prefix = 44;
  o.ipv6_aggregate_threshold = 1;
  auto wide = make(o);
  EXPECT_EQ(1, fail(*wide, ip("2001:db8:1:2::1"), 5));
  EXPECT_TRUE(wide->isBanned(ip("2001:db8:f:ffff::1")));
  EXPECT_FALSE(wide->isBanned(ip("2001:db8:10::1")));
  EXPECT_EQ("2001:db8::/44", wide->bans()[0].address);

  // IPv4 clients are never aggregated.
  o.ipv6_aggregate_prefix = 48;
  o.ipv6_aggregate_threshold = 3;
  o.max_failures = 1;
  auto v4 = make(o);
  for (const char* a : {"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}) {
    EXPECT_EQ(1, fail(*v4, ip(a), 1));
  }
  EXPECT_FALSE(v4->isBanned(ip("192.0.2.5")));
  EXPECT_EQ(0u, counter("aggregated"));
}

TEST_F(BanTableTest, ConcurrentFailuresBanExactlyOnce) {
  // Real clock: threads hammer one table as workers would.
  BanOptions o;
  o.max_failures = 50;
  stats::Store& store = stats::Store::get();
  BanStats s;
  s.banned = store.counter("test.bans.concurrent.banned");
  BanTable table(o, s);
  std::atomic<int> bans{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&table, &bans, t] {
      for (int i = 0; i < 1000; ++i) {
        if (table.recordFailure(ip("192.0.2.1"), "x")) ++bans;
        table.recordFailure(network::Address::ipv4(0x0a000000 + t * 1000 + i, 1), "x");
        table.isBanned(ip("192.0.2.1"));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(1, bans.load());
  EXPECT_TRUE(table.isBanned(ip("192.0.2.1")));
  EXPECT_EQ(1u, store.counterValue("test.bans.concurrent.banned"));
}

TEST(BanConfigTest, Defaults) {
  auto o = banOptionsFromProto(config::v1::Bans());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(5u, o->max_failures);
  EXPECT_EQ(milliseconds(60000), o->window);
  EXPECT_EQ(milliseconds(900000), o->duration);
  EXPECT_EQ(64u, o->ipv6_prefix);
  EXPECT_EQ(100000u, o->max_entries);
  EXPECT_EQ(48u, o->ipv6_aggregate_prefix);
  EXPECT_EQ(3u, o->ipv6_aggregate_threshold);
  auto table = createBanTable(config::v1::Bans());
  ASSERT_TRUE(table.ok());
  EXPECT_NE(nullptr, *table);
}

TEST(BanConfigTest, ValuesAndLimits) {
  config::v1::Bans p;
  p.set_max_failures(3);
  p.mutable_window()->set_seconds(10);
  p.mutable_duration()->set_seconds(2);
  p.set_ipv6_prefix(48);
  p.set_max_entries(7);
  auto o = banOptionsFromProto(p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(3u, o->max_failures);
  EXPECT_EQ(milliseconds(10000), o->window);
  EXPECT_EQ(milliseconds(2000), o->duration);
  EXPECT_EQ(48u, o->ipv6_prefix);
  EXPECT_EQ(7u, o->max_entries);

  auto bad = [](auto edit) {
    config::v1::Bans b;
    edit(b);
    auto r = banOptionsFromProto(b);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ("ok", bad([](config::v1::Bans& b) { b.set_max_failures(1000); }));
  EXPECT_NE(std::string::npos,
            bad([](config::v1::Bans& b) { b.set_max_failures(1001); }).find("bans.max_failures"));
  EXPECT_NE(std::string::npos,
            bad([](config::v1::Bans& b) { b.set_ipv6_prefix(8); }).find("bans.ipv6_prefix"));
  EXPECT_NE(std::string::npos,
            bad([](config::v1::Bans& b) { b.set_ipv6_prefix(129); }).find("bans.ipv6_prefix"));
  EXPECT_EQ("ok", bad([](config::v1::Bans& b) { b.set_ipv6_prefix(128); }));
  EXPECT_NE(std::string::npos,
            bad([](config::v1::Bans& b) { b.set_max_entries(10000001); }).find("max_entries"));
  EXPECT_NE(std::string::npos, bad([](config::v1::Bans& b) {
                                 b.mutable_window()->set_seconds(86401);
                               }).find("bans.window"));
  EXPECT_NE(std::string::npos, bad([](config::v1::Bans& b) {
                                 b.mutable_duration()->set_seconds(-1);
                               }).find("bans.duration"));
}

TEST(BanConfigTest, AggregatePrefix) {
  auto options = [](auto edit) {
    config::v1::Bans b;
    edit(b);
    return banOptionsFromProto(b);
  };
  auto error = [&](auto edit) {
    auto r = options(edit);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  // 0 is a value, not "unset": it turns aggregation off.
  auto off = options([](config::v1::Bans& b) { b.set_ipv6_aggregate_prefix(0); });
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(0u, off->ipv6_aggregate_prefix);
  // Unset, the default follows a shorter ipv6_prefix instead of failing.
  auto short_prefix = options([](config::v1::Bans& b) { b.set_ipv6_prefix(40); });
  ASSERT_TRUE(short_prefix.ok());
  EXPECT_EQ(40u, short_prefix->ipv6_aggregate_prefix);
  EXPECT_EQ("ok", error([](config::v1::Bans& b) { b.set_ipv6_aggregate_prefix(64); }));
  EXPECT_EQ("ok", error([](config::v1::Bans& b) { b.set_ipv6_aggregate_prefix(16); }));
  EXPECT_EQ(
      "bans.ipv6_aggregate_prefix: 65 is longer than bans.ipv6_prefix (64); use 0 to 64 (0 or 64 "
      "turns aggregation off)",
      error([](config::v1::Bans& b) { b.set_ipv6_aggregate_prefix(65); }));
  EXPECT_NE(std::string::npos, error([](config::v1::Bans& b) {
                                 b.set_ipv6_aggregate_prefix(129);
                               }).find("bans.ipv6_aggregate_prefix"));
  EXPECT_NE(std::string::npos, error([](config::v1::Bans& b) {
                                 b.set_ipv6_prefix(48);
                                 b.set_ipv6_aggregate_prefix(56);
                               }).find("bans.ipv6_aggregate_prefix"));
  EXPECT_NE(std::string::npos, error([](config::v1::Bans& b) {
                                 b.set_ipv6_aggregate_prefix(8);
                               }).find("bans.ipv6_aggregate_prefix: 8 is outside 16-64"));

  auto threshold = options([](config::v1::Bans& b) { b.set_ipv6_aggregate_threshold(10); });
  ASSERT_TRUE(threshold.ok());
  EXPECT_EQ(10u, threshold->ipv6_aggregate_threshold);
  EXPECT_EQ("ok", error([](config::v1::Bans& b) { b.set_ipv6_aggregate_threshold(1000); }));
  EXPECT_NE(std::string::npos, error([](config::v1::Bans& b) {
                                 b.set_ipv6_aggregate_threshold(1001);
                               }).find("bans.ipv6_aggregate_threshold"));
  // A /63 holds two /64s: a threshold of 3 could never be met.
  EXPECT_EQ("bans.ipv6_aggregate_threshold: at most 2 (a /63 holds 2 blocks of /64)",
            error([](config::v1::Bans& b) {
              b.set_ipv6_aggregate_prefix(63);
              b.set_ipv6_aggregate_threshold(3);
            }));
}

TEST(BanConfigTest, DisabledMeansNoTable) {
  config::v1::Bans p;
  p.set_disabled(true);
  auto table = createBanTable(p);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(nullptr, *table);
  // Even disabled, a bad value is an error.
  p.set_ipv6_prefix(200);
  EXPECT_FALSE(createBanTable(p).ok());
}

TEST_F(BanTableTest, AdoptedBansKeepTheirEndAndReason) {
  BanOptions o;
  o.duration = seconds(100);
  auto running = make(o);
  const auto a = ip("192.0.2.7");
  const auto counting = ip("192.0.2.8");
  fail(*running, a, 5);
  fail(*running, counting, 2);
  now_ += seconds(40);
  BanOptions changed = o;
  changed.max_failures = 3;
  auto next = make(changed);
  EXPECT_EQ(1u, next->adoptBans(*running));
  // Moved, not copied: the old table holds no ban and its gauge went back down.
  EXPECT_FALSE(running->anyBanned());
  EXPECT_TRUE(next->isBanned(a));
  EXPECT_FALSE(next->isBanned(counting));
  const auto bans = next->bans();
  ASSERT_EQ(1u, bans.size());
  EXPECT_EQ("invalid proxy credentials", bans[0].reason);
  EXPECT_EQ(5u, bans[0].failures);
  EXPECT_EQ(milliseconds(60000), bans[0].remaining);
  EXPECT_EQ(1, active());
  now_ += seconds(60);
  EXPECT_FALSE(next->isBanned(a));
  // The failures counted under the old options start afresh under the new ones (3 now).
  EXPECT_EQ(0, fail(*next, counting, 2));
  EXPECT_EQ(1, fail(*next, counting, 1));
  EXPECT_EQ(0u, next->adoptBans(*next));
}

}  // namespace
}  // namespace ban
}  // namespace sluice
