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
    s.evicted = store.counter(prefix_ + "evicted");
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

TEST_F(BanTableTest, BansAreEvictedOnlyWhenNothingElseIs) {
  BanOptions o;
  o.max_entries = 2;
  o.max_failures = 1;
  auto table = make(o);
  const auto a = ip("192.0.2.1"), b = ip("192.0.2.2"), c = ip("192.0.2.3");
  EXPECT_EQ(1, fail(*table, a, 1, seconds(1)));
  EXPECT_EQ(1, fail(*table, b, 1, seconds(1)));
  // The table is full of bans: the one ending soonest (a) goes.
  EXPECT_EQ(1, fail(*table, c, 1));
  EXPECT_EQ(1u, counter("evicted"));
  EXPECT_FALSE(table->isBanned(a));
  EXPECT_TRUE(table->isBanned(b));
  EXPECT_TRUE(table->isBanned(c));
  EXPECT_EQ(2, active());

  o.max_failures = 5;
  auto mixed = make(o);
  EXPECT_EQ(1, fail(*mixed, a, 5));
  fail(*mixed, b, 1);
  fail(*mixed, c, 1);  // evicts b's failure count, not a's ban
  EXPECT_TRUE(mixed->isBanned(a));
  EXPECT_EQ(2u, mixed->size());
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

}  // namespace
}  // namespace ban
}  // namespace sluice
