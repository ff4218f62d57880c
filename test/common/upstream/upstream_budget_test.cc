#include "source/common/upstream/upstream_budget.h"

#include <algorithm>
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
