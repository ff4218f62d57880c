#include "source/common/upstream/upstream_budget.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace sluice {
namespace upstream {
namespace {

network::Address ip(uint32_t host_order) { return network::Address::ipv4(host_order, 40000); }

TEST(UpstreamBudgetTest, EachClientHoldsAtMostItsShare) {
  UpstreamBudget budget;
  budget.configure(3, 0);
  EXPECT_EQ(budget.perClient(), 3u);
  std::vector<network::ConnectionSlot> held(3);
  for (auto& slot : held) EXPECT_TRUE(budget.admit(ip(0x7f000001), slot));
  network::ConnectionSlot over;
  EXPECT_FALSE(budget.admit(ip(0x7f000001), over));
  EXPECT_FALSE(over.held());
  // Another address has its own share.
  network::ConnectionSlot other;
  EXPECT_TRUE(budget.admit(ip(0x7f000002), other));
  EXPECT_EQ(budget.held(), 4u);
  // A place given back can be taken again.
  held[0].reset();
  EXPECT_TRUE(budget.admit(ip(0x7f000001), over));
}

// A place given back stays with its thread as the client's spare: the client's next place on
// that thread takes it (no lock shared with other threads), and the thread's end gives it back.
TEST(UpstreamBudgetTest, AThreadKeepsAClientsSpareUntilItEnds) {
  UpstreamBudget budget;
  budget.configure(2, 0);
  std::thread worker([&] {
    network::ConnectionSlot slot;
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(budget.admit(ip(0x7f000001), slot));
      slot.reset();
    }
    EXPECT_EQ(budget.held(), 1u);  // the spare
  });
  worker.join();
  EXPECT_EQ(budget.held(), 0u);
  // Here: the spare of this thread counts; a place in use on another thread and this spare fill
  // the client's share.
  network::ConnectionSlot mine;
  ASSERT_TRUE(budget.admit(ip(0x7f000001), mine));
  mine.reset();
  std::thread other([&] {
    network::ConnectionSlot a;
    network::ConnectionSlot b;
    EXPECT_TRUE(budget.admit(ip(0x7f000001), a));
    EXPECT_FALSE(budget.admit(ip(0x7f000001), b));
  });
  other.join();
  EXPECT_TRUE(budget.admit(ip(0x7f000001), mine));
}

TEST(UpstreamBudgetTest, AutomaticLimitsFollowTheOpenFilesLimit) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  UpstreamBudget budget;
  budget.configure(0, 0);
  const uint64_t nofile = limit.rlim_cur == RLIM_INFINITY ? (1u << 30) : limit.rlim_cur;
  const uint64_t reserve = std::min<uint64_t>(UpstreamBudget::kDefaultReserve, nofile / 4);
  EXPECT_EQ(budget.reserve(), reserve);
  EXPECT_EQ(static_cast<uint64_t>(budget.descriptorCeiling()),
            std::min<uint64_t>(nofile, 1u << 30) - reserve);
  EXPECT_EQ(budget.perClient(),
            std::max<uint64_t>(
                1, std::min<uint64_t>(UpstreamBudget::kDefaultPerClient, (nofile - reserve) / 4)));
  // An explicit reserve is taken as it is.
  budget.configure(0, 1000);
  EXPECT_EQ(budget.reserve(), 1000u);
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
