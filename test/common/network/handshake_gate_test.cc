#include "source/common/network/handshake_gate.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/event/dispatcher.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace network {
namespace {

// A handshake that records when its turn came.
class FakeHandshake : public HandshakeGate::Waiter {
 public:
  FakeHandshake(std::vector<int>& turns, int id) : turns_(turns), id_(id) {}
  ~FakeHandshake() = default;
  void onHandshakeTurn() override { turns_.push_back(id_); }

 private:
  std::vector<int>& turns_;
  const int id_;
};

class HandshakeGateTest : public testing::Test {
 protected:
  // One iteration of the loop: the gate's next turn (its timer is due at once).
  void turn() { dispatcher_.runOnce(false); }
  stats::Counter counter(const std::string& name) { return stats::Store::get().counter(name); }
  uint64_t value(const std::string& name) { return stats::Store::get().counterValue(name); }

  // What admit() answered each, in order.
  static std::vector<bool> admitEach(HandshakeGate& gate,
                                     const std::vector<std::unique_ptr<FakeHandshake>>& hs) {
    std::vector<bool> admitted;
    for (const auto& h : hs) admitted.push_back(gate.admit(*h));
    return admitted;
  }

  std::vector<std::unique_ptr<FakeHandshake>> make(int n) {
    std::vector<std::unique_ptr<FakeHandshake>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<FakeHandshake>(turns_, i));
    return v;
  }

  event::Dispatcher dispatcher_;
  std::vector<int> turns_;
};

TEST_F(HandshakeGateTest, StartsItsSharePerTurnAndTheRestInArrivalOrder) {
  HandshakeGate gate(dispatcher_, 2, counter("gate_test_order.waited"));
  auto h = make(5);
  EXPECT_EQ(admitEach(gate, h), (std::vector<bool>{true, true, false, false, false}));
  // Asking again while queued keeps the place (and counts once).
  EXPECT_FALSE(gate.admit(*h[3]));
  EXPECT_EQ(gate.waitingCount(), 3u);
  EXPECT_EQ(value("gate_test_order.waited"), 3u);
  EXPECT_TRUE(h[2]->waiting());
  EXPECT_TRUE(turns_.empty());  // never on the caller's stack

  turn();
  EXPECT_EQ(turns_, (std::vector<int>{2, 3}));
  EXPECT_FALSE(h[2]->waiting());
  EXPECT_TRUE(h[4]->waiting());
  turn();
  EXPECT_EQ(turns_, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(gate.waitingCount(), 0u);
  // That turn used one start of two: one more may start at once, the next waits.
  EXPECT_EQ(admitEach(gate, make(2)), (std::vector<bool>{true, false}));
  EXPECT_EQ(value("gate_test_order.waited"), 4u);
}

TEST_F(HandshakeGateTest, AWaiterThatGoesAwayLeavesTheQueue) {
  HandshakeGate gate(dispatcher_, 1, counter("gate_test_leave.waited"));
  auto h = make(4);
  EXPECT_EQ(admitEach(gate, h), (std::vector<bool>{true, false, false, false}));
  h[1].reset();                 // destroyed while waiting (a connection closed)
  h[2]->leaveHandshakeQueue();  // or closed and not yet deleted
  EXPECT_FALSE(h[2]->waiting());
  EXPECT_EQ(gate.waitingCount(), 1u);
  turn();
  EXPECT_EQ(turns_, (std::vector<int>{3}));
}

TEST_F(HandshakeGateTest, ZeroIsNoBoundAndAReloadToZeroWakesEveryone) {
  HandshakeGate open_gate(dispatcher_, 0, counter("gate_test_open.waited"));
  auto h = make(100);
  EXPECT_EQ(admitEach(open_gate, h), std::vector<bool>(100, true));
  EXPECT_EQ(value("gate_test_open.waited"), 0u);

  HandshakeGate gate(dispatcher_, 1, counter("gate_test_reload.waited"));
  auto q = make(5);
  EXPECT_EQ(admitEach(gate, q), (std::vector<bool>{true, false, false, false, false}));
  EXPECT_EQ(gate.waitingCount(), 4u);
  gate.setPerTurn(0);
  turn();
  EXPECT_EQ(turns_, (std::vector<int>{1, 2, 3, 4}));
}

TEST_F(HandshakeGateTest, WaitersOutliveTheirGateSafely) {
  auto h = make(3);
  {
    HandshakeGate gate(dispatcher_, 1, counter("gate_test_gone.waited"));
    EXPECT_EQ(admitEach(gate, h), (std::vector<bool>{true, false, false}));
    EXPECT_TRUE(h[2]->waiting());
  }
  // A worker's connections deleted after its gate: unqueued, nothing to touch.
  EXPECT_FALSE(h[1]->waiting());
  EXPECT_FALSE(h[2]->waiting());
  h.clear();
  turn();
  EXPECT_TRUE(turns_.empty());
}

}  // namespace
}  // namespace network
}  // namespace sluice
