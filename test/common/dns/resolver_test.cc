#include "source/common/dns/resolver.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_format.h"
#include "event2/event.h"
#include "gtest/gtest.h"

#include "test/common/dns/test_dns_server.h"

namespace sluice {
namespace dns {
namespace {

using std::chrono::milliseconds;
using test::TestDnsServer;
using Clock = std::chrono::steady_clock;

struct Result {
  int calls = 0;
  absl::Status status = absl::UnknownError("callback not run");
  std::vector<std::string> ips;
  std::vector<network::Address> addresses;
};

std::vector<std::string> ipsOf(const std::vector<network::Address>& addresses) {
  std::vector<std::string> out;
  for (const auto& a : addresses) out.push_back(a.ipString());
  return out;
}

Resolver::Callback capture(Result& result) {
  return [&result](const absl::Status& status, const std::vector<network::Address>& addresses) {
    ++result.calls;
    result.status = status;
    result.addresses = addresses;
    result.ips = ipsOf(addresses);
  };
}

std::string tempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrFormat("%s/%s.%d", dir != nullptr ? dir : "/tmp", name, getpid());
}

std::string writeFile(const std::string& name, const std::string& content) {
  std::string path = tempPath(name);
  std::ofstream out(path, std::ios::trunc);
  out << content;
  return path;
}

google::protobuf::Duration millis(int64_t ms) {
  google::protobuf::Duration d;
  d.set_seconds(ms / 1000);
  d.set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
  return d;
}

class ResolverTest : public ::testing::Test {
 protected:
  ResolverTest() : server_(dispatcher_) {}

  // A resolver pointed at the test server, reading no hosts file unless given one.
  std::unique_ptr<Resolver> makeResolver(std::function<void(config::v1::Dns&)> tweak = nullptr,
                                         const std::string& hosts = "/nonexistent/hosts") {
    config::v1::Dns config;
    config.add_resolvers(server_.address());
    if (tweak) tweak(config);
    return std::make_unique<Resolver>(dispatcher_, config, hosts, "/nonexistent/resolv.conf");
  }

  // Runs the loop until pred() holds or the limit passes; returns pred().
  bool runUntil(const std::function<bool()>& pred, milliseconds limit = milliseconds(3000)) {
    bool expired = false;
    event::Timer guard(dispatcher_, [&expired] { expired = true; });
    guard.enable(limit);
    while (!pred() && !expired) dispatcher_.runOnce();
    return pred();
  }

  void runFor(milliseconds duration) {
    runUntil([] { return false; }, duration);
  }

  // Resolves asynchronously and waits for the answer.
  Result resolveAndWait(Resolver& resolver, std::string_view host) {
    Result result;
    Resolver::Query* query = resolver.resolve(host, capture(result));
    EXPECT_NE(query, nullptr) << host << " completed synchronously";
    EXPECT_EQ(result.calls, 0);
    EXPECT_TRUE(runUntil([&] { return result.calls > 0; })) << host;
    return result;
  }

  // Resolves and expects a synchronous answer.
  Result resolveNow(Resolver& resolver, std::string_view host) {
    Result result;
    Resolver::Query* query = resolver.resolve(host, capture(result));
    EXPECT_EQ(query, nullptr) << host << " did not complete synchronously";
    EXPECT_EQ(result.calls, 1) << host;
    if (query != nullptr) query->cancel();
    return result;
  }

  event::Dispatcher dispatcher_;
  TestDnsServer server_;
};

TEST_F(ResolverTest, LiteralIpv4IsSynchronous) {
  auto resolver = makeResolver();
  Result r = resolveNow(*resolver, "127.0.0.1");
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.addresses.size(), 1u);
  EXPECT_EQ(r.addresses[0].family(), AF_INET);
  EXPECT_EQ(r.addresses[0].port(), 0);
  EXPECT_EQ(r.ips, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(server_.totalQueries(), 0);
  EXPECT_EQ(resolver->counters().queries, 0u);
}

TEST_F(ResolverTest, LiteralIpv6IsSynchronous) {
  auto resolver = makeResolver();
  for (const char* ip : {"::1", "2001:db8::1", "::ffff:10.1.2.3"}) {
    Result r = resolveNow(*resolver, ip);
    ASSERT_TRUE(r.status.ok()) << ip << ": " << r.status;
    ASSERT_EQ(r.addresses.size(), 1u);
    EXPECT_EQ(r.addresses[0].family(), AF_INET6);
    EXPECT_EQ(r.addresses[0].port(), 0);
  }
  EXPECT_EQ(resolveNow(*resolver, "2001:DB8::1").ips, std::vector<std::string>{"2001:db8::1"});
  EXPECT_EQ(server_.totalQueries(), 0);
}

TEST_F(ResolverTest, LiteralFollowedByNulIsNotAnIp) {
  auto resolver = makeResolver();
  Result r = resolveNow(*resolver, std::string_view("10.0.0.1\0evil.test", 18));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  EXPECT_TRUE(r.addresses.empty());
}

TEST_F(ResolverTest, NestedLiteralResolveDoesNotClobberOuterAnswer) {
  auto resolver = makeResolver();
  std::vector<std::string> outer_before, outer_after, inner;
  resolver->resolve("10.0.0.1", [&](const absl::Status&, const std::vector<network::Address>& a) {
    outer_before = ipsOf(a);
    Result nested;
    resolver->resolve("10.0.0.2", capture(nested));
    inner = nested.ips;
    outer_after = ipsOf(a);
  });
  EXPECT_EQ(outer_before, std::vector<std::string>{"10.0.0.1"});
  EXPECT_EQ(outer_after, std::vector<std::string>{"10.0.0.1"});
  EXPECT_EQ(inner, std::vector<std::string>{"10.0.0.2"});
}

TEST_F(ResolverTest, AnswersIpv4FirstThenIpv6DeduplicatedInServerOrder) {
  server_.addHost("both.test", {"10.0.0.2", "10.0.0.1", "10.0.0.2"},
                  {"2001:db8::2", "2001:db8::1", "2001:db8::2"});
  auto resolver = makeResolver();
  Result r = resolveAndWait(*resolver, "both.test");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.ips,
            (std::vector<std::string>{"10.0.0.2", "10.0.0.1", "2001:db8::2", "2001:db8::1"}));
  for (const auto& a : r.addresses) EXPECT_EQ(a.port(), 0);
  EXPECT_EQ(server_.queries("both.test", TestDnsServer::kTypeA), 1);
  EXPECT_EQ(server_.queries("both.test", TestDnsServer::kTypeAaaa), 1);
  EXPECT_EQ(resolver->counters().queries, 1u);
  EXPECT_EQ(resolver->lookupsInFlight(), 0u);
}

TEST_F(ResolverTest, SingleFamilyAnswers) {
  server_.addHost("v4only.test", {"10.0.0.4"}, {});
  server_.addHost("v6only.test", {}, {"2001:db8::6"});
  auto resolver = makeResolver();
  Result v4 = resolveAndWait(*resolver, "v4only.test");
  ASSERT_TRUE(v4.status.ok()) << v4.status;
  EXPECT_EQ(v4.ips, std::vector<std::string>{"10.0.0.4"});
  Result v6 = resolveAndWait(*resolver, "v6only.test");
  ASSERT_TRUE(v6.status.ok()) << v6.status;
  EXPECT_EQ(v6.ips, std::vector<std::string>{"2001:db8::6"});
}

TEST_F(ResolverTest, CapsAtSixteenAddresses) {
  std::vector<std::string> a, aaaa;
  for (int i = 1; i <= 20; ++i) a.push_back(absl::StrFormat("10.0.1.%d", i));
  for (int i = 1; i <= 5; ++i) aaaa.push_back(absl::StrFormat("2001:db8::%d", i));
  server_.addHost("many.test", a, aaaa);
  auto resolver = makeResolver();
  Result r = resolveAndWait(*resolver, "many.test");
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.addresses.size(), Resolver::kMaxAddresses);
  EXPECT_EQ(r.ips.front(), "10.0.1.1");
  EXPECT_EQ(r.ips.back(), "10.0.1.16");
}

TEST_F(ResolverTest, CacheHitIsSynchronousAndSendsNoQuery) {
  server_.addHost("cached.test", {"10.0.0.7"}, {"2001:db8::7"});
  auto resolver = makeResolver();
  Result first = resolveAndWait(*resolver, "cached.test");
  ASSERT_TRUE(first.status.ok()) << first.status;
  Result second = resolveNow(*resolver, "cached.test");
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.ips, first.ips);
  // Case does not matter for the cache.
  Result third = resolveNow(*resolver, "CACHED.Test");
  EXPECT_EQ(third.ips, first.ips);
  EXPECT_EQ(server_.queries("cached.test"), 2);  // One A, one AAAA.
  EXPECT_EQ(resolver->counters().cache_hits, 2u);
  EXPECT_EQ(resolver->counters().queries, 1u);
}

// The resolver's sockets and timeouts are libevent's: while a query is in flight the loop waits
// in libevent; once none is, the turn waits in the sockets' set again (one call per turn).
TEST_F(ResolverTest, AResolverWithNoQueryInFlightLeavesTheLoopItsOwnWait) {
  server_.addHost("idle.test", {"10.0.0.9"}, {"2001:db8::9"});
  auto resolver = makeResolver();
  EXPECT_TRUE(dispatcher_.libeventIdle());
  Result result;
  Resolver::Query* query = resolver->resolve("idle.test", capture(result));
  ASSERT_NE(query, nullptr);
  EXPECT_FALSE(dispatcher_.libeventIdle());
  ASSERT_TRUE(runUntil([&] { return result.calls > 0; }));
  ASSERT_TRUE(result.status.ok()) << result.status;
  runFor(milliseconds(20));
  EXPECT_TRUE(dispatcher_.libeventIdle());
}

TEST_F(ResolverTest, LookupsSentToNameServersAreTimed) {
  auto lookups = [] {
    return stats::Store::get()
        .histogramValue("dns.lookup_duration_seconds")
        .value_or(stats::Store::HistogramValue{})
        .count();
  };
  server_.addHost("timed.test", {"10.0.0.8"}, {});
  auto resolver = makeResolver();
  const uint64_t before = lookups();
  ASSERT_TRUE(resolveAndWait(*resolver, "timed.test").status.ok());
  EXPECT_EQ(lookups(), before + 1);
  // Answers from the cache or a literal are not lookups.
  resolveNow(*resolver, "timed.test");
  resolveNow(*resolver, "10.1.2.3");
  EXPECT_EQ(lookups(), before + 1);
  // A failed lookup is one too.
  EXPECT_FALSE(resolveAndWait(*resolver, "absent.test").status.ok());
  EXPECT_EQ(lookups(), before + 2);
}

TEST_F(ResolverTest, CacheEntryExpiresAfterRecordTtl) {
  server_.addHost("short.test", {"10.0.0.8"}, {}, /*ttl=*/1);
  auto resolver = makeResolver();
  ASSERT_TRUE(resolveAndWait(*resolver, "short.test").status.ok());
  EXPECT_TRUE(resolveNow(*resolver, "short.test").status.ok());
  EXPECT_EQ(server_.queries("short.test", TestDnsServer::kTypeA), 1);
  runFor(milliseconds(1100));
  Result again = resolveAndWait(*resolver, "short.test");
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(server_.queries("short.test", TestDnsServer::kTypeA), 2);
  EXPECT_EQ(resolver->cacheEntries(), 1u);  // Replaced, not duplicated.
}

TEST_F(ResolverTest, MaxCacheTtlCapsRecordTtl) {
  server_.addHost("long.test", {"10.0.0.9"}, {}, /*ttl=*/3600);
  auto resolver =
      makeResolver([](config::v1::Dns& c) { *c.mutable_max_cache_ttl() = millis(1000); });
  ASSERT_TRUE(resolveAndWait(*resolver, "long.test").status.ok());
  EXPECT_TRUE(resolveNow(*resolver, "long.test").status.ok());
  runFor(milliseconds(1100));
  ASSERT_TRUE(resolveAndWait(*resolver, "long.test").status.ok());
  EXPECT_EQ(server_.queries("long.test", TestDnsServer::kTypeA), 2);
}

TEST_F(ResolverTest, ZeroTtlIsNotCached) {
  server_.addHost("zero.test", {"10.0.0.10"}, {}, /*ttl=*/0);
  auto resolver = makeResolver();
  ASSERT_TRUE(resolveAndWait(*resolver, "zero.test").status.ok());
  ASSERT_TRUE(resolveAndWait(*resolver, "zero.test").status.ok());
  EXPECT_EQ(server_.queries("zero.test", TestDnsServer::kTypeA), 2);
  EXPECT_EQ(resolver->cacheEntries(), 0u);
}

TEST_F(ResolverTest, ZeroMaxCacheTtlDisablesCaching) {
  server_.addHost("nocache.test", {"10.0.0.11"}, {});
  auto resolver = makeResolver([](config::v1::Dns& c) { *c.mutable_max_cache_ttl() = millis(0); });
  ASSERT_TRUE(resolveAndWait(*resolver, "nocache.test").status.ok());
  ASSERT_TRUE(resolveAndWait(*resolver, "nocache.test").status.ok());
  EXPECT_EQ(server_.queries("nocache.test", TestDnsServer::kTypeA), 2);
}

TEST_F(ResolverTest, NxDomainIsNotFoundAndCachedBriefly) {
  auto resolver =
      makeResolver([](config::v1::Dns& c) { *c.mutable_max_cache_ttl() = millis(1000); });
  Result r = resolveAndWait(*resolver, "missing.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
  EXPECT_EQ(r.status.message(), "missing.test: no such host");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_EQ(resolver->counters().failures, 1u);
  const int sent = server_.queries("missing.test");
  EXPECT_EQ(sent, 2);

  Result cached = resolveNow(*resolver, "missing.test");
  EXPECT_EQ(cached.status.code(), absl::StatusCode::kNotFound) << cached.status;
  EXPECT_EQ(server_.queries("missing.test"), sent);
  EXPECT_EQ(resolver->counters().cache_hits, 1u);

  // The negative entry lives min(5s, max_cache_ttl) = 1s.
  runFor(milliseconds(1100));
  Result again = resolveAndWait(*resolver, "missing.test");
  EXPECT_EQ(again.status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_.queries("missing.test"), 2 * sent);
}

TEST_F(ResolverTest, NameWithoutAddressesIsNotFound) {
  server_.addHost("empty.test", {}, {});
  auto resolver = makeResolver();
  Result r = resolveAndWait(*resolver, "empty.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
}

TEST_F(ResolverTest, ServerFailureIsUnavailableAndNotCached) {
  server_.addHost("broken.test", {"10.0.0.12"}, {});
  server_.setBehaviour("broken.test", TestDnsServer::Behaviour::ServFail);
  auto resolver = makeResolver();  // Timeout 5s.
  const auto start = Clock::now();
  Result r = resolveAndWait(*resolver, "broken.test");
  // evdns reports SERVFAIL as a timeout; it must not read as one, nor wait for the deadline.
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(r.status.message(), "broken.test: lookup failed: server failed");
  EXPECT_EQ(resolver->counters().timeouts, 0u);
  EXPECT_EQ(resolver->counters().failures, 1u);
  EXPECT_EQ(resolver->cacheEntries(), 0u);
  const int sent = server_.queries("broken.test");
  Result again = resolveAndWait(*resolver, "broken.test");
  EXPECT_EQ(again.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_GT(server_.queries("broken.test"), sent);
}

TEST_F(ResolverTest, SilentServerTimesOut) {
  server_.addHost("slow.test", {"10.0.0.13"}, {});
  server_.setBehaviour("slow.test", TestDnsServer::Behaviour::Silent);
  auto resolver = makeResolver([](config::v1::Dns& c) { *c.mutable_timeout() = millis(300); });
  const auto start = Clock::now();
  Result r = resolveAndWait(*resolver, "slow.test");
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_EQ(r.status.message(), "slow.test: lookup timed out");
  EXPECT_GE(elapsed, milliseconds(250));
  EXPECT_LT(elapsed, milliseconds(2000));
  EXPECT_EQ(resolver->counters().timeouts, 1u);
  EXPECT_EQ(resolver->counters().failures, 0u);
  EXPECT_EQ(resolver->cacheEntries(), 0u);
  EXPECT_EQ(r.calls, 1);
  // Late evdns timeouts must not call back a second time.
  runFor(milliseconds(400));
  EXPECT_EQ(r.calls, 1);
}

TEST_F(ResolverTest, SilentAaaaCostsOnlyTheFamilySkew) {
  server_.addHost("noaaaa.test", {"10.0.0.14"}, {"2001:db8::14"});
  server_.setSilentFor("noaaaa.test", TestDnsServer::kTypeAaaa);
  auto resolver = makeResolver();  // Timeout 5s.
  const auto start = Clock::now();
  Result r = resolveAndWait(*resolver, "noaaaa.test");
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.ips, std::vector<std::string>{"10.0.0.14"});
  EXPECT_GE(elapsed, Resolver::kFamilySkew - milliseconds(50));
  EXPECT_LT(elapsed, milliseconds(2000));
}

TEST_F(ResolverTest, MalformedReplyFailsWithoutCrashing) {
  server_.addHost("garbage.test", {"10.0.0.15"}, {});
  server_.setBehaviour("garbage.test", TestDnsServer::Behaviour::Garbage);
  auto resolver = makeResolver([](config::v1::Dns& c) { *c.mutable_timeout() = millis(400); });
  Result r = resolveAndWait(*resolver, "garbage.test");
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_GT(server_.repliesSent(), 0);
}

TEST_F(ResolverTest, CancelledQueryNeverCallsBack) {
  server_.addHost("cancel.test", {"10.0.0.16"}, {});
  auto resolver = makeResolver();
  Result r;
  Resolver::Query* query = resolver->resolve("cancel.test", capture(r));
  ASSERT_NE(query, nullptr);
  query->cancel();
  EXPECT_EQ(resolver->lookupsInFlight(), 0u);
  runFor(milliseconds(300));
  EXPECT_EQ(r.calls, 0);
  // The name still resolves afterwards.
  Result again = resolveAndWait(*resolver, "cancel.test");
  EXPECT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(r.calls, 0);
}

TEST_F(ResolverTest, CancelAfterServerRepliedButBeforeDelivery) {
  server_.addHost("late.test", {"10.0.0.17"}, {"2001:db8::17"});
  auto resolver = makeResolver();
  Result r;
  Resolver::Query* query = resolver->resolve("late.test", capture(r));
  ASSERT_NE(query, nullptr);
  // The replies are on the wire (or already read by evdns) when the query is cancelled.
  ASSERT_TRUE(runUntil([&] { return server_.repliesSent() >= 1 || r.calls > 0; }));
  const bool cancelled = r.calls == 0;
  if (cancelled) query->cancel();
  runFor(milliseconds(200));
  EXPECT_EQ(r.calls, cancelled ? 0 : 1);
}

TEST_F(ResolverTest, ConcurrentLookupsOfOneNameShareOneQuery) {
  server_.addHost("shared.test", {"10.0.0.18"}, {"2001:db8::18"});
  auto resolver = makeResolver();
  Result r1, r2;
  Resolver::Query* q1 = resolver->resolve("shared.test", capture(r1));
  Resolver::Query* q2 = resolver->resolve("SHARED.test", capture(r2));
  ASSERT_NE(q1, nullptr);
  ASSERT_NE(q2, nullptr);
  EXPECT_NE(q1, q2);
  EXPECT_EQ(resolver->lookupsInFlight(), 1u);
  ASSERT_TRUE(runUntil([&] { return r1.calls > 0 && r2.calls > 0; }));
  EXPECT_TRUE(r1.status.ok()) << r1.status;
  EXPECT_EQ(r1.ips, r2.ips);
  EXPECT_EQ(r1.ips, (std::vector<std::string>{"10.0.0.18", "2001:db8::18"}));
  EXPECT_EQ(server_.queries("shared.test", TestDnsServer::kTypeA), 1);
  EXPECT_EQ(server_.queries("shared.test", TestDnsServer::kTypeAaaa), 1);
  EXPECT_EQ(resolver->counters().queries, 1u);
}

TEST_F(ResolverTest, CancellingOneWaiterKeepsTheOther) {
  server_.addHost("two.test", {"10.0.0.19"}, {});
  auto resolver = makeResolver();
  Result r1, r2;
  Resolver::Query* q1 = resolver->resolve("two.test", capture(r1));
  Resolver::Query* q2 = resolver->resolve("two.test", capture(r2));
  ASSERT_NE(q1, nullptr);
  ASSERT_NE(q2, nullptr);
  q1->cancel();
  EXPECT_EQ(resolver->lookupsInFlight(), 1u);
  ASSERT_TRUE(runUntil([&] { return r2.calls > 0; }));
  runFor(milliseconds(50));
  EXPECT_EQ(r1.calls, 0);
  EXPECT_EQ(r2.calls, 1);
  EXPECT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(server_.queries("two.test", TestDnsServer::kTypeA), 1);
}

TEST_F(ResolverTest, CallbackMayCancelAnotherWaiterOrItself) {
  server_.addHost("reentrant.test", {"10.0.0.20"}, {});
  auto resolver = makeResolver();
  Resolver::Query* q1 = nullptr;
  Resolver::Query* q2 = nullptr;
  int calls1 = 0, calls2 = 0;
  q1 = resolver->resolve("reentrant.test", [&](const absl::Status&, const auto&) {
    ++calls1;
    q1->cancel();  // Its own query: a no-op once delivery started.
    q2->cancel();
  });
  q2 = resolver->resolve("reentrant.test", [&](const absl::Status&, const auto&) { ++calls2; });
  ASSERT_TRUE(runUntil([&] { return calls1 > 0; }));
  runFor(milliseconds(50));
  EXPECT_EQ(calls1, 1);
  EXPECT_EQ(calls2, 0);
}

TEST_F(ResolverTest, CallbackMayResolveAgain) {
  server_.addHost("again.test", {"10.0.0.21"}, {});
  server_.addHost("other.test", {"10.0.0.22"}, {});
  auto resolver = makeResolver();
  Result same, other;
  Resolver::Query* nested_query = nullptr;
  bool outer_done = false;
  resolver->resolve("again.test", [&](const absl::Status& status, const auto&) {
    ASSERT_TRUE(status.ok());
    // Already cached: answered inside this callback.
    EXPECT_EQ(resolver->resolve("again.test", capture(same)), nullptr);
    nested_query = resolver->resolve("other.test", capture(other));
    outer_done = true;
  });
  ASSERT_TRUE(runUntil([&] { return outer_done; }));
  EXPECT_EQ(same.calls, 1);
  EXPECT_EQ(same.ips, std::vector<std::string>{"10.0.0.21"});
  EXPECT_NE(nested_query, nullptr);
  ASSERT_TRUE(runUntil([&] { return other.calls > 0; }));
  EXPECT_EQ(other.ips, std::vector<std::string>{"10.0.0.22"});
}

TEST_F(ResolverTest, HostsFileAnswersWithoutQuery) {
  std::string hosts = writeFile("hosts",
                                "# comment line\n"
                                "127.0.0.1   localhost\n"
                                "10.9.9.9\tMyHost.Test  alias.test # trailing comment\n"
                                "2001:db8::99 myhost.test\n"
                                "10.9.9.8 myhost.test\n"
                                "10.9.9.9 myhost.test\n"
                                "fe80::1%eth0 scoped.test\n"
                                "not-an-ip broken.test\n"
                                "10.1.1.1 bad..name good.test\n"
                                "10.2.2.2 dotted.test.\n"
                                "   \n"
                                "10.3.3.3");  // No newline at the end, no name.
  server_.addHost("dns.test", {"10.0.0.23"}, {});
  server_.addHost("broken.test", {"10.0.0.24"}, {});
  auto resolver = makeResolver(nullptr, hosts);

  Result r = resolveNow(*resolver, "myhost.test");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.ips, (std::vector<std::string>{"10.9.9.9", "10.9.9.8", "2001:db8::99"}));
  EXPECT_EQ(resolveNow(*resolver, "ALIAS.test").ips, std::vector<std::string>{"10.9.9.9"});
  EXPECT_EQ(resolveNow(*resolver, "myhost.test.").ips.size(), 3u);
  EXPECT_EQ(resolveNow(*resolver, "localhost").ips, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(resolveNow(*resolver, "good.test").ips, std::vector<std::string>{"10.1.1.1"});
  EXPECT_EQ(resolveNow(*resolver, "dotted.test").ips, std::vector<std::string>{"10.2.2.2"});
  EXPECT_EQ(server_.totalQueries(), 0);
  EXPECT_EQ(resolver->counters().hosts_hits, 6u);

  // Lines with a bad address are skipped; those names go to DNS.
  EXPECT_EQ(resolveAndWait(*resolver, "broken.test").ips, std::vector<std::string>{"10.0.0.24"});
  EXPECT_EQ(resolveAndWait(*resolver, "dns.test").ips, std::vector<std::string>{"10.0.0.23"});
  EXPECT_EQ(resolveAndWait(*resolver, "scoped.test").status.code(), absl::StatusCode::kNotFound);
  unlink(hosts.c_str());
}

TEST_F(ResolverTest, IgnoreHostsFileGoesToDns) {
  std::string hosts = writeFile("hosts_ignored", "10.9.9.9 myhost.test\n");
  server_.addHost("myhost.test", {"10.0.0.25"}, {});
  auto resolver = makeResolver([](config::v1::Dns& c) { c.set_ignore_hosts_file(true); }, hosts);
  EXPECT_EQ(resolveAndWait(*resolver, "myhost.test").ips, std::vector<std::string>{"10.0.0.25"});
  EXPECT_EQ(resolver->counters().hosts_hits, 0u);
  unlink(hosts.c_str());
}

TEST_F(ResolverTest, InvalidNamesAreRejectedSynchronously) {
  auto resolver = makeResolver();
  const std::string label64(64, 'a');
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefghi.";
  long_name = long_name.substr(0, 254);
  if (long_name.back() == '.') long_name.back() = 'x';
  const std::vector<std::string> bad = {
      "",
      ".",
      "..",
      "a..b",
      ".leading.test",
      "trailing.test..",
      "sp ace.test",
      "slash/test",
      "under:score.test",
      "percent%.test",
      "fe80::1%eth0",
      "[::1]",
      std::string("nul\0.test", 9),
      "\xc3\xa9t\xc3\xa9.test",
      label64 + ".test",
      long_name,
      "127.1",
      "1.2.3.04",
      "010.0.0.1",
      "0x7f.1",
      "0x7f.0x1",
      "127.0.0.0XAB",
      "host.123",
  };
  for (const std::string& name : bad) {
    Result r = resolveNow(*resolver, name);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument)
        << "'" << name << "': " << r.status;
    EXPECT_TRUE(r.addresses.empty());
  }
  EXPECT_EQ(resolver->counters().invalid_names, bad.size());
  EXPECT_EQ(server_.totalQueries(), 0);
  // The message shows a bounded, escaped prefix only.
  Result r = resolveNow(*resolver, std::string(10000, 'x') + "\n");
  EXPECT_LT(r.status.message().size(), 200u);
  EXPECT_EQ(r.status.message().find('\n'), std::string_view::npos);
}

TEST_F(ResolverTest, ValidHostnameEdges) {
  const std::string label63(63, 'a');
  std::string name253;
  while (name253.size() + 64 <= 253) name253 += label63 + ".";
  name253 += std::string(253 - name253.size(), 'b');
  ASSERT_EQ(name253.size(), 253u);
  for (const std::string& name :
       {label63 + ".test", name253, name253 + ".", std::string("a_b-c.Test"), std::string("x"),
        std::string("0x7f.test"), std::string("a.0xgg"), std::string("123.test.")}) {
    EXPECT_TRUE(Resolver::validateHostname(name).ok()) << name;
  }
  EXPECT_FALSE(Resolver::validateHostname(name253 + "c").ok());
}

TEST_F(ResolverTest, TrailingDotNameResolves) {
  server_.addHost("fqdn.test", {"10.0.0.26"}, {});
  auto resolver = makeResolver();
  Result r = resolveAndWait(*resolver, "fqdn.test.");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.ips, std::vector<std::string>{"10.0.0.26"});
  EXPECT_TRUE(resolveNow(*resolver, "fqdn.test.").status.ok());
}

TEST_F(ResolverTest, CacheSizeBoundEvictsLeastRecentlyUsed) {
  for (const char* name : {"a.test", "b.test", "c.test"}) server_.addHost(name, {"10.0.0.27"}, {});
  auto resolver = makeResolver([](config::v1::Dns& c) { c.set_cache_size(2); });
  ASSERT_TRUE(resolveAndWait(*resolver, "a.test").status.ok());
  ASSERT_TRUE(resolveAndWait(*resolver, "b.test").status.ok());
  EXPECT_TRUE(resolveNow(*resolver, "a.test").status.ok());  // a is now the most recent.
  ASSERT_TRUE(resolveAndWait(*resolver, "c.test").status.ok());
  EXPECT_EQ(resolver->cacheEntries(), 2u);
  EXPECT_TRUE(resolveNow(*resolver, "a.test").status.ok());
  EXPECT_TRUE(resolveNow(*resolver, "c.test").status.ok());
  // b was the least recently used: evicted, asked again.
  ASSERT_TRUE(resolveAndWait(*resolver, "b.test").status.ok());
  EXPECT_EQ(server_.queries("b.test", TestDnsServer::kTypeA), 2);
  EXPECT_EQ(server_.queries("a.test", TestDnsServer::kTypeA), 1);
  EXPECT_EQ(resolver->cacheEntries(), 2u);
}

TEST_F(ResolverTest, ManyNamesStayWithinCacheSize) {
  auto resolver = makeResolver([](config::v1::Dns& c) { c.set_cache_size(8); });
  for (int i = 0; i < 40; ++i) {
    std::string name = absl::StrFormat("n%d.test", i);
    server_.addHost(name, {"10.0.0.28"}, {});
    ASSERT_TRUE(resolveAndWait(*resolver, name).status.ok()) << name;
    EXPECT_LE(resolver->cacheEntries(), 8u);
  }
  EXPECT_EQ(resolver->cacheEntries(), 8u);
}

TEST_F(ResolverTest, DestructionWithLookupsInFlightCallsNothing) {
  server_.addHost("inflight1.test", {"10.0.0.29"}, {});
  server_.addHost("inflight2.test", {"10.0.0.30"}, {});
  server_.setBehaviour("inflight2.test", TestDnsServer::Behaviour::Silent);
  auto resolver = makeResolver();
  int calls = 0;
  auto count = [&calls](const absl::Status&, const std::vector<network::Address>&) { ++calls; };
  ASSERT_NE(resolver->resolve("inflight1.test", count), nullptr);
  ASSERT_NE(resolver->resolve("inflight1.test", count), nullptr);
  ASSERT_NE(resolver->resolve("inflight2.test", count), nullptr);
  ASSERT_NE(resolver->resolve("missing.test", count), nullptr);
  // Let the server answer some of them before the resolver goes away.
  ASSERT_TRUE(runUntil([&] { return server_.repliesSent() >= 2; }));
  ASSERT_EQ(calls, 0);
  resolver.reset();
  runFor(milliseconds(300));
  EXPECT_EQ(calls, 0);
}

TEST_F(ResolverTest, DestructionRightAfterResolve) {
  auto resolver = makeResolver();
  int calls = 0;
  resolver->resolve("quick.test", [&calls](const auto&, const auto&) { ++calls; });
  resolver.reset();
  runFor(milliseconds(100));
  EXPECT_EQ(calls, 0);
}

TEST_F(ResolverTest, NoNameServersFailsLookupsButNotLiterals) {
  config::v1::Dns config;
  Resolver resolver(dispatcher_, config, "/nonexistent/hosts", "/nonexistent/resolv.conf");
  EXPECT_FALSE(resolver.hasNameServers());
  Result r = resolveNow(resolver, "anything.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_TRUE(resolveNow(resolver, "10.0.0.1").status.ok());
  EXPECT_EQ(server_.totalQueries(), 0);
}

TEST_F(ResolverTest, ResolvConfWithoutNameServerIsNoNameServer) {
  std::string conf = writeFile("resolv_empty", "search example.test\noptions ndots:1\n");
  config::v1::Dns config;
  Resolver resolver(dispatcher_, config, "/nonexistent/hosts", conf);
  EXPECT_FALSE(resolver.hasNameServers());
  EXPECT_EQ(resolveNow(resolver, "anything.test").status.code(), absl::StatusCode::kUnavailable);
  unlink(conf.c_str());
}

TEST_F(ResolverTest, NameServerFromResolvConf) {
  std::string conf = writeFile(
      "resolv",
      absl::StrFormat("nameserver %s\noptions timeout:30 attempts:5\n", server_.address()));
  server_.addHost("viaconf.test", {"10.0.0.31"}, {});
  server_.setBehaviour("silentconf.test", TestDnsServer::Behaviour::Silent);
  config::v1::Dns config;
  *config.mutable_timeout() = millis(300);
  Resolver resolver(dispatcher_, config, "/nonexistent/hosts", conf);
  EXPECT_TRUE(resolver.hasNameServers());
  EXPECT_EQ(resolveAndWait(resolver, "viaconf.test").ips, std::vector<std::string>{"10.0.0.31"});
  // The file's "options timeout:30" does not override the configured timeout.
  const auto start = Clock::now();
  EXPECT_EQ(resolveAndWait(resolver, "silentconf.test").status.code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  unlink(conf.c_str());
}

TEST_F(ResolverTest, ConfigValidation) {
  config::v1::Dns good;
  good.add_resolvers("127.0.0.1");
  good.add_resolvers("127.0.0.1:5353");
  good.add_resolvers("::1");
  good.add_resolvers("[::1]:53");
  *good.mutable_timeout() = millis(300);
  *good.mutable_max_cache_ttl() = millis(0);
  EXPECT_TRUE(Resolver::validateConfig(good).ok()) << Resolver::validateConfig(good);
  EXPECT_TRUE(Resolver::validateConfig(config::v1::Dns()).ok());

  for (const char* server : {"dns.example", "127.0.0.1:0", "127.0.0.1:99999", "1.2.3.4:dns", ""}) {
    config::v1::Dns bad;
    bad.add_resolvers(server);
    EXPECT_EQ(Resolver::validateConfig(bad).code(), absl::StatusCode::kInvalidArgument) << server;
  }
  config::v1::Dns zero_timeout;
  *zero_timeout.mutable_timeout() = millis(0);
  EXPECT_FALSE(Resolver::validateConfig(zero_timeout).ok());
  config::v1::Dns negative_ttl;
  negative_ttl.mutable_max_cache_ttl()->set_seconds(-1);
  EXPECT_FALSE(Resolver::validateConfig(negative_ttl).ok());
}

TEST_F(ResolverTest, InvalidNameServersAreSkipped) {
  config::v1::Dns config;
  config.add_resolvers("dns.example");
  config.add_resolvers("127.0.0.1:0");
  Resolver only_bad(dispatcher_, config, "/nonexistent/hosts", "/nonexistent/resolv.conf");
  EXPECT_FALSE(only_bad.hasNameServers());

  config.add_resolvers(server_.address());
  server_.addHost("mixed.test", {"10.0.0.32"}, {});
  Resolver mixed(dispatcher_, config, "/nonexistent/hosts", "/nonexistent/resolv.conf");
  EXPECT_TRUE(mixed.hasNameServers());
  EXPECT_EQ(resolveAndWait(mixed, "mixed.test").ips, std::vector<std::string>{"10.0.0.32"});
}

network::Egress egressOf(const char* v4, const char* v6) {
  network::Egress egress;
  if (v4 != nullptr) egress.ipv4 = *network::Address::parseIp(v4, 0);
  if (v6 != nullptr) egress.ipv6 = *network::Address::parseIp(v6, 0);
  return egress;
}

TEST_F(ResolverTest, AnEgressResolverAsksOnlyTheNameServersOfItsFamilies) {
  server_.addHost("egress.test", {"192.0.2.7"}, {});
  auto base = makeResolver();
  // The only name server is IPv4; the egress has only an IPv6 address.
  Resolver egress(*base, egressOf(nullptr, "::1"));
  EXPECT_FALSE(egress.hasNameServers());
  Result r = resolveNow(egress, "egress.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("no DNS name server of the egress address's family"),
            std::string::npos)
      << r.status;
  EXPECT_EQ(server_.totalQueries(), 0);
  EXPECT_EQ(egress.source(), egressOf(nullptr, "::1"));
}

TEST_F(ResolverTest, AnEgressResolverKeepsItsOwnCache) {
  server_.addHost("egress.test", {"192.0.2.7"}, {});
  auto base = makeResolver();
  Resolver egress(*base, egressOf("127.0.0.2", nullptr));
  ASSERT_TRUE(egress.hasNameServers());
  EXPECT_EQ(resolveAndWait(egress, "egress.test").ips, std::vector<std::string>{"192.0.2.7"});
  const int asked = server_.queries("egress.test");
  EXPECT_GT(asked, 0);
  EXPECT_EQ(resolveNow(egress, "egress.test").ips, std::vector<std::string>{"192.0.2.7"});
  EXPECT_EQ(egress.counters().cache_hits, 1u);
  EXPECT_EQ(server_.queries("egress.test"), asked);
  // Another group's resolver has not seen the answer (nor how fast it came): it asks itself.
  EXPECT_EQ(resolveAndWait(*base, "egress.test").ips, std::vector<std::string>{"192.0.2.7"});
  EXPECT_EQ(server_.queries("egress.test"), 2 * asked);
  EXPECT_EQ(base->counters().cache_hits, 0u);
}

TEST_F(ResolverTest, AnEgressResolverSharesTheHostsFileAndTheTimeout) {
  const std::string hosts = writeFile("egress-hosts", "10.1.2.3 myhost.test\n");
  auto base = makeResolver([](config::v1::Dns& c) { *c.mutable_timeout() = millis(300); }, hosts);
  Resolver egress(*base, egressOf("127.0.0.2", nullptr));
  EXPECT_EQ(resolveNow(egress, "myhost.test").ips, std::vector<std::string>{"10.1.2.3"});
  EXPECT_EQ(egress.counters().hosts_hits, 1u);
  server_.setBehaviour("silent.test", TestDnsServer::Behaviour::Silent);
  const auto start = Clock::now();
  Result r = resolveAndWait(egress, "silent.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST_F(ResolverTest, AnEgressSourceThatCannotBeBoundFailsItsLookups) {
  // 192.0.2.0/24 is no address of this host: the bind fails, so nothing is ever sent to the
  // name server (which does not exist either).
  config::v1::Dns config;
  config.add_resolvers("192.0.2.53:53");
  Resolver base(dispatcher_, config, "/nonexistent/hosts", "/nonexistent/resolv.conf");
  Resolver egress(base, egressOf("192.0.2.1", nullptr));
  EXPECT_FALSE(egress.hasNameServers());
  Result r = resolveNow(egress, "any.test");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("cannot send DNS queries to 192.0.2.53:53 from egress "
                                    "192.0.2.1: Cannot assign requested address"),
            std::string::npos)
      << r.status;
  EXPECT_EQ(egress.counters().failures, 1u);
  EXPECT_EQ(egress.counters().queries, 0u);
}

}  // namespace
}  // namespace dns
}  // namespace sluice
