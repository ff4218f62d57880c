#include "filters/listener/ban/ban.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/ban/ban_table.h"
#include "source/common/event/dispatcher.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace filters {
namespace ban {
namespace {

network::Address ip(const char* text) { return *network::Address::parseIp(text, 1234); }

class FakeSocket : public network::ListenerFilterCallbacks, public network::ListenerFilterManager {
 public:
  explicit FakeSocket(network::Address peer) : peer_(peer) {}
  // ListenerFilterCallbacks
  int fd() const override { return -1; }
  const network::Address& peer() const override { return peer_; }
  void setPeer(const network::Address& client) override { peer_ = client; }
  network::SocketFacts& facts() override { return facts_; }
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  void continueFilterChain(bool success) override {
    ++continued;
    last_success = success;
  }
  // ListenerFilterManager
  void addListenerFilter(network::ListenerFilterPtr filter) override {
    filters.push_back(std::move(filter));
  }

  int continued = 0;
  bool last_success = true;
  std::vector<network::ListenerFilterPtr> filters;

 private:
  network::Address peer_;
  network::SocketFacts facts_;
  event::Dispatcher dispatcher_;
};

class BanFilterTest : public testing::Test {
 protected:
  void SetUp() override {
    sluice::ban::BanOptions options;
    options.max_failures = 2;
    config_ = std::make_shared<BanFilterConfig>();
    config_->table = std::make_shared<sluice::ban::BanTable>(options, sluice::ban::BanStats());
    config_->refused = stats::Store::get().counter("test.ban_filter.refused");
  }
  uint64_t refused() { return stats::Store::get().counterValue("test.ban_filter.refused"); }

  std::shared_ptr<BanFilterConfig> config_;
};

TEST_F(BanFilterTest, NoFilterIsAddedWhileNobodyIsBanned) {
  FakeSocket socket(ip("192.0.2.1"));
  addBanFilter(config_, socket);
  EXPECT_TRUE(socket.filters.empty());
  // Failures below the threshold are not bans either.
  config_->table->recordFailure(ip("192.0.2.1"), "x");
  addBanFilter(config_, socket);
  EXPECT_TRUE(socket.filters.empty());
}

TEST_F(BanFilterTest, ClosesBannedClientsAndAdmitsOthers) {
  config_->table->recordFailure(ip("192.0.2.1"), "x");
  ASSERT_TRUE(config_->table->recordFailure(ip("192.0.2.1"), "x"));
  const uint64_t before = refused();

  FakeSocket banned(ip("192.0.2.1"));
  addBanFilter(config_, banned);
  ASSERT_EQ(1u, banned.filters.size());
  EXPECT_EQ(network::FilterStatus::StopIteration, banned.filters[0]->onAccept(banned));
  EXPECT_EQ(1, banned.continued);
  EXPECT_FALSE(banned.last_success);

  FakeSocket other(ip("192.0.2.2"));
  addBanFilter(config_, other);
  ASSERT_EQ(1u, other.filters.size());
  EXPECT_EQ(network::FilterStatus::Continue, other.filters[0]->onAccept(other));
  EXPECT_EQ(0, other.continued);
  EXPECT_EQ(before + 1, refused());

  // Lifted: the same client passes again, and no filter is even added.
  ASSERT_TRUE(config_->table->unban(ip("192.0.2.1")));
  FakeSocket again(ip("192.0.2.1"));
  addBanFilter(config_, again);
  EXPECT_TRUE(again.filters.empty());
  BanFilter direct(config_);
  EXPECT_EQ(network::FilterStatus::Continue, direct.onAccept(again));
  EXPECT_EQ(before + 1, refused());
}

TEST_F(BanFilterTest, Ipv6NeighboursInTheBannedPrefixAreClosed) {
  config_->table->recordFailure(ip("2001:db8:5::1"), "x");
  ASSERT_TRUE(config_->table->recordFailure(ip("2001:db8:5::2"), "x"));
  BanFilter filter(config_);
  FakeSocket neighbour(ip("2001:db8:5::abcd"));
  EXPECT_EQ(network::FilterStatus::StopIteration, filter.onAccept(neighbour));
  FakeSocket elsewhere(ip("2001:db8:6::1"));
  EXPECT_EQ(network::FilterStatus::Continue, filter.onAccept(elsewhere));
}

}  // namespace
}  // namespace ban
}  // namespace filters
}  // namespace sluice
