#include "source/common/network/connection_limiter.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace network {
namespace {

using Admission = ConnectionLimiter::Admission;

ClientKey key(const char* host_port) {
  auto address = Address::parseHostPort(host_port);
  EXPECT_TRUE(address.ok()) << host_port;
  return ClientKey::of(*address);
}

TEST(ClientKeyTest, Ipv4IsTheAddressWithoutThePort) {
  EXPECT_EQ(key("192.0.2.7:1000"), key("192.0.2.7:2000"));
  EXPECT_FALSE(key("192.0.2.7:1000") == key("192.0.2.8:1000"));
  EXPECT_FALSE(key("10.0.0.1:1") == key("11.0.0.1:1"));
}

TEST(ClientKeyTest, Ipv6IsTheSlash64) {
  EXPECT_EQ(key("[2001:db8:1:2::1]:1"), key("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2"));
  EXPECT_FALSE(key("[2001:db8:1:2::1]:1") == key("[2001:db8:1:3::1]:1"));
  EXPECT_FALSE(key("[2001:db8:1:2::1]:1") == key("[2001:db9:1:2::1]:1"));
}

TEST(ClientKeyTest, MappedIpv4CountsAsIpv4) {
  EXPECT_EQ(key("[::ffff:192.0.2.7]:1"), key("192.0.2.7:2"));
  EXPECT_FALSE(key("[::ffff:192.0.2.7]:1") == key("[::ffff:192.0.2.8]:1"));
}

TEST(ClientKeyTest, FamiliesNeverCollide) {
  // The all-zero and ::ffff:0:0/96 IPv6 prefixes must not share a key with an IPv4 address.
  EXPECT_FALSE(key("0.0.0.0:1") == key("[::]:1"));
  EXPECT_FALSE(key("0.0.0.0:1") == key("[::1]:1"));
  EXPECT_FALSE(key("[::]:1") == key("[::ffff:0.0.0.0]:1"));
  EXPECT_EQ(key("[::ffff:0.0.0.0]:1"), key("0.0.0.0:1"));
  EXPECT_FALSE(key("127.0.0.1:1") == key("[::1]:1"));
}

TEST(ConnectionLimiterTest, PerClientLimitLeavesOtherClientsAlone) {
  ConnectionLimiter limiter(100, 3);
  const ClientKey a = key("127.0.0.1:1");
  const ClientKey b = key("127.0.0.2:1");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.tryAcquire(a), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(a), Admission::ClientFull);
  EXPECT_EQ(limiter.tryAcquire(a), Admission::ClientFull);
  EXPECT_EQ(limiter.activeFor(a), 3u);
  // A refused client does not hold on to the global place it briefly took.
  EXPECT_EQ(limiter.active(), 3u);
  EXPECT_EQ(limiter.tryAcquire(b), Admission::Admitted);
  EXPECT_EQ(limiter.active(), 4u);
  limiter.release(a);
  EXPECT_EQ(limiter.activeFor(a), 2u);
  EXPECT_EQ(limiter.tryAcquire(a), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(a), Admission::ClientFull);
}

TEST(ConnectionLimiterTest, GlobalLimitAcrossClients) {
  ConnectionLimiter limiter(4, 2);
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.1:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.1:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.2:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.3:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.4:1")), Admission::ListenerFull);
  // A full listener creates no table entry for the refused client.
  EXPECT_EQ(limiter.trackedClients(), 3u);
  EXPECT_EQ(limiter.activeFor(key("127.0.0.4:1")), 0u);
  EXPECT_EQ(limiter.active(), 4u);
  limiter.release(key("127.0.0.3:1"));
  EXPECT_EQ(limiter.tryAcquire(key("127.0.0.4:1")), Admission::Admitted);
}

TEST(ConnectionLimiterTest, ClientsOfOneSlash64ShareTheirLimit) {
  ConnectionLimiter limiter(100, 2);
  EXPECT_EQ(limiter.tryAcquire(key("[2001:db8::1]:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("[2001:db8::2]:1")), Admission::Admitted);
  EXPECT_EQ(limiter.tryAcquire(key("[2001:db8::3]:1")), Admission::ClientFull);
  EXPECT_EQ(limiter.tryAcquire(key("[2001:db8:0:1::3]:1")), Admission::Admitted);
}

TEST(ConnectionLimiterTest, EntriesGoAwayWithTheirLastConnection) {
  ConnectionLimiter limiter(1000, 1000);
  for (int i = 1; i <= 200; ++i) {
    const ClientKey k =
        key(("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":1").c_str());
    EXPECT_EQ(limiter.tryAcquire(k), Admission::Admitted);
    EXPECT_EQ(limiter.tryAcquire(k), Admission::Admitted);
  }
  EXPECT_EQ(limiter.trackedClients(), 200u);
  EXPECT_EQ(limiter.active(), 400u);
  for (int i = 1; i <= 200; ++i) {
    const ClientKey k =
        key(("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":1").c_str());
    limiter.release(k);
    limiter.release(k);
  }
  EXPECT_EQ(limiter.trackedClients(), 0u);
  EXPECT_EQ(limiter.active(), 0u);
}

TEST(ConnectionSlotTest, ReleasesExactlyOnce) {
  ConnectionLimiter limiter(10, 10);
  const ClientKey a = key("127.0.0.1:1");
  {
    ASSERT_EQ(limiter.tryAcquire(a), Admission::Admitted);
    ConnectionSlot slot(limiter, a);
    EXPECT_TRUE(slot.held());
    ConnectionSlot moved(std::move(slot));
    EXPECT_FALSE(slot.held());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_TRUE(moved.held());
    EXPECT_EQ(limiter.active(), 1u);
  }
  EXPECT_EQ(limiter.active(), 0u);
  EXPECT_EQ(limiter.activeFor(a), 0u);

  ASSERT_EQ(limiter.tryAcquire(a), Admission::Admitted);
  ASSERT_EQ(limiter.tryAcquire(a), Admission::Admitted);
  ConnectionSlot first(limiter, a);
  ConnectionSlot second(limiter, a);
  first = std::move(second);  // the place `first` held goes back now
  EXPECT_EQ(limiter.active(), 1u);
  first.reset();
  EXPECT_EQ(limiter.active(), 0u);
  first.reset();  // idempotent
  EXPECT_EQ(limiter.active(), 0u);
  ConnectionSlot empty;
  EXPECT_FALSE(empty.held());
}

TEST(ConnectionSlotTest, AListenerPlaceTakesItsClientsLaterAndGivesBothBack) {
  // A PROXY protocol listener counts a connection for its client once the header named it.
  ConnectionLimiter limiter(10, 1);
  const ClientKey a = key("127.0.0.1:1");
  ASSERT_EQ(limiter.tryAcquireGlobal(), Admission::Admitted);
  ConnectionSlot slot(limiter);
  EXPECT_EQ(limiter.activeFor(a), 0u);
  ASSERT_TRUE(slot.attachClient(a));
  EXPECT_TRUE(slot.attachClient(a)) << "attached already: nothing more taken";
  EXPECT_EQ(limiter.activeFor(a), 1u);
  // The client is at its limit: a second connection keeps only its listener place.
  ASSERT_EQ(limiter.tryAcquireGlobal(), Admission::Admitted);
  ConnectionSlot other(limiter);
  EXPECT_FALSE(other.attachClient(a));
  EXPECT_EQ(limiter.active(), 2u);
  other.reset();
  EXPECT_EQ(limiter.active(), 1u);
  EXPECT_EQ(limiter.activeFor(a), 1u);
  ConnectionSlot moved(std::move(slot));
  moved.reset();
  EXPECT_EQ(limiter.active(), 0u);
  EXPECT_EQ(limiter.activeFor(a), 0u);
}

TEST(ConnectionLimiterTest, ConcurrentWorkersNeverExceedTheLimits) {
  // Each thread holds up to 13 places over 3 clients: both limits are reached even if the
  // threads happen to run one after the other.
  constexpr uint32_t kMax = 10;
  constexpr uint32_t kPerClient = 4;
  constexpr int kClients = 3;
  ConnectionLimiter limiter(kMax, kPerClient);
  std::vector<ClientKey> keys;
  for (int c = 0; c < kClients; ++c)
    keys.push_back(key(("127.0.0." + std::to_string(c) + ":1").c_str()));
  // What the test itself holds: counted up after an admission and down before a release, so it
  // never exceeds what the limiter admitted (the limiter's own count may overshoot briefly).
  std::atomic<uint32_t> in_use{0};
  std::vector<std::atomic<uint32_t>> in_use_by(kClients);
  std::atomic<bool> over{false};
  std::atomic<uint64_t> admitted{0};
  std::atomic<uint64_t> listener_full{0};
  std::atomic<uint64_t> client_full{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int> held;
      auto drop = [&] {
        int c = held.front();
        held.erase(held.begin());
        in_use.fetch_sub(1);
        in_use_by[c].fetch_sub(1);
        limiter.release(keys[c]);
      };
      for (int i = 0; i < 20000; ++i) {
        const int c = (i * 7 + t) % kClients;
        const Admission admission = limiter.tryAcquire(keys[c]);
        if (admission == Admission::Admitted) {
          admitted.fetch_add(1);
          if (in_use.fetch_add(1) + 1 > kMax) over = true;
          if (in_use_by[c].fetch_add(1) + 1 > kPerClient) over = true;
          held.push_back(c);
        } else {
          (admission == Admission::ListenerFull ? listener_full : client_full).fetch_add(1);
        }
        if (held.size() > 12 || (i % 3 == 0 && !held.empty())) drop();
      }
      while (!held.empty()) drop();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_GT(admitted.load(), 1000u);
  // Both limits were actually reached.
  EXPECT_GT(listener_full.load(), 0u);
  EXPECT_GT(client_full.load(), 0u);
  EXPECT_EQ(limiter.active(), 0u);
  EXPECT_EQ(limiter.trackedClients(), 0u);
}

TEST(ConnectionLimiterTest, NewLimitsHoldForTheNextAdmissions) {
  ConnectionLimiter limiter(10, 2);
  const ClientKey a = ClientKey::of(*Address::parseIp("192.0.2.1", 1));
  ASSERT_EQ(ConnectionLimiter::Admission::Admitted, limiter.tryAcquire(a));
  ASSERT_EQ(ConnectionLimiter::Admission::Admitted, limiter.tryAcquire(a));
  limiter.setLimits(10, 1);
  EXPECT_EQ(1u, limiter.maxConnectionsPerClient());
  // Both open ones stay; a third waits until the client is under the new limit.
  EXPECT_EQ(ConnectionLimiter::Admission::ClientFull, limiter.tryAcquire(a));
  limiter.release(a);
  EXPECT_EQ(ConnectionLimiter::Admission::ClientFull, limiter.tryAcquire(a));
  limiter.release(a);
  EXPECT_EQ(ConnectionLimiter::Admission::Admitted, limiter.tryAcquire(a));
  limiter.setLimits(1, 5);
  EXPECT_EQ(ConnectionLimiter::Admission::ListenerFull,
            limiter.tryAcquire(ClientKey::of(*Address::parseIp("192.0.2.2", 1))));
}

TEST(LimiterLeasesTest, APlaceGivenBackIsTheClientsSpareOnThisThread) {
  ConnectionLimiter limiter(100, 20);
  LimiterLeases leases(limiter);
  const ClientKey a = key("192.0.2.1:1");
  ConnectionSlot first;
  ASSERT_EQ(Admission::Admitted, leases.tryAcquire(a, first));
  EXPECT_EQ(1u, limiter.activeFor(a));
  first.reset();
  // Still counted: the thread keeps it for the client's next request.
  EXPECT_EQ(1u, limiter.activeFor(a));
  EXPECT_EQ(1u, leases.spares());
  ConnectionSlot again;
  ASSERT_EQ(Admission::Admitted, leases.tryAcquire(a, again));
  EXPECT_EQ(1u, limiter.activeFor(a));
  EXPECT_EQ(0u, leases.spares());
  again.reset();
  // At most kMaxSpares: of more places given back, the others go to the limiter.
  std::vector<ConnectionSlot> many(LimiterLeases::kMaxSpares + 3);
  for (auto& slot : many) ASSERT_EQ(Admission::Admitted, leases.tryAcquire(a, slot));
  EXPECT_EQ(many.size(), limiter.activeFor(a));
  many.clear();
  EXPECT_EQ(LimiterLeases::kMaxSpares, limiter.activeFor(a));
  EXPECT_EQ(LimiterLeases::kMaxSpares, leases.spares());
}

TEST(LimiterLeasesTest, TheClientsLimitHoldsAndSparesCountForIt) {
  ConnectionLimiter limiter(100, 2);
  LimiterLeases mine(limiter);
  LimiterLeases other(limiter);  // another worker's
  const ClientKey a = key("192.0.2.1:1");
  std::vector<ConnectionSlot> held(3);
  ASSERT_EQ(Admission::Admitted, mine.tryAcquire(a, held[0]));
  ASSERT_EQ(Admission::Admitted, mine.tryAcquire(a, held[1]));
  EXPECT_EQ(Admission::ClientFull, mine.tryAcquire(a, held[2]));
  EXPECT_FALSE(held[2].held());
  // Both given back, both this worker's spares: places held, so the other worker is refused.
  held[0].reset();
  held[1].reset();
  EXPECT_EQ(2u, limiter.activeFor(a));
  EXPECT_EQ(Admission::ClientFull, other.tryAcquire(a, held[2]));
  // This worker takes them again without asking the limiter.
  ASSERT_EQ(Admission::Admitted, mine.tryAcquire(a, held[0]));
  ASSERT_EQ(Admission::Admitted, mine.tryAcquire(a, held[1]));
  EXPECT_EQ(0u, mine.spares());
  EXPECT_EQ(2u, limiter.activeFor(a));
  // Another client is not touched.
  ConnectionSlot b;
  EXPECT_EQ(Admission::Admitted, other.tryAcquire(key("192.0.2.2:1"), b));
}

TEST(LimiterLeasesTest, SparesOfClientsWithNothingInUseGoBackAsPlacesAre) {
  ConnectionLimiter limiter(100, 5);
  LimiterLeases leases(limiter);
  const ClientKey gone = key("192.0.2.1:1");
  const ClientKey busy = key("192.0.2.2:1");
  ConnectionSlot slot;
  ASSERT_EQ(Admission::Admitted, leases.tryAcquire(gone, slot));
  slot.reset();
  EXPECT_EQ(1u, limiter.activeFor(gone));
  ConnectionSlot kept;
  ASSERT_EQ(Admission::Admitted, leases.tryAcquire(busy, kept));
  for (uint32_t i = 0; i < LimiterLeases::kSweepEvery; ++i) {
    ASSERT_EQ(Admission::Admitted, leases.tryAcquire(busy, slot));
    slot.reset();
  }
  // The client that left has nothing counted any more; the busy one keeps its place and spare.
  EXPECT_EQ(0u, limiter.activeFor(gone));
  EXPECT_EQ(2u, limiter.activeFor(busy));
  EXPECT_EQ(1u, leases.spares());
}

TEST(LimiterLeasesTest, AnOrphanGivesItsSparesBackAndItsPlacesStraightBack) {
  ConnectionLimiter limiter(100, 5);
  auto leases = std::make_unique<LimiterLeases>(limiter);
  const ClientKey a = key("192.0.2.1:1");
  ConnectionSlot spare, in_use;
  ASSERT_EQ(Admission::Admitted, leases->tryAcquire(a, spare));
  ASSERT_EQ(Admission::Admitted, leases->tryAcquire(a, in_use));
  spare.reset();
  EXPECT_EQ(2u, limiter.activeFor(a));
  leases->orphan();  // the thread ended
  EXPECT_EQ(1u, limiter.activeFor(a));
  in_use.reset();
  EXPECT_EQ(0u, limiter.activeFor(a));
  ConnectionSlot late;
  ASSERT_EQ(Admission::Admitted, leases->tryAcquire(a, late));
  leases.reset();  // a slot taken after orphan() belongs to the limiter itself
  late.reset();
  EXPECT_EQ(0u, limiter.activeFor(a));
  EXPECT_EQ(0u, limiter.active());
}

}  // namespace
}  // namespace network
}  // namespace sluice
