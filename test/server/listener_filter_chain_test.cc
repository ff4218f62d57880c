#include "source/server/listener_filter_chain.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "source/common/network/connection.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace server {
namespace {

using network::FilterStatus;
using network::ListenerFilterCallbacks;

// Passes or refuses at accept.
class Verdict : public network::ListenerFilter {
 public:
  explicit Verdict(bool pass) : pass_(pass) {}
  FilterStatus onAccept(ListenerFilterCallbacks& cb) override {
    if (pass_) return FilterStatus::Continue;
    cb.continueFilterChain(false);
    return FilterStatus::StopIteration;
  }

 private:
  bool pass_;
};

// Pauses at accept; the test resumes it.
class Pause : public network::ListenerFilter {
 public:
  FilterStatus onAccept(ListenerFilterCallbacks& cb) override {
    callbacks = &cb;
    return FilterStatus::StopIteration;
  }
  ListenerFilterCallbacks* callbacks = nullptr;
};

// Wants the first 4 bytes; passes on "PING", refuses anything else.
class Sniff : public network::ListenerFilter {
 public:
  FilterStatus onAccept(ListenerFilterCallbacks&) override { return FilterStatus::Continue; }
  size_t maxReadBytes() const override { return 4; }
  FilterStatus onData(std::string_view peeked, ListenerFilterCallbacks& cb) override {
    ++calls;
    if (std::string_view("PING").substr(0, peeked.size()) != peeked) {
      cb.continueFilterChain(false);
      return FilterStatus::StopIteration;
    }
    if (peeked.size() < 4) return FilterStatus::StopIteration;
    cb.facts().application_protocol = "ping";
    return FilterStatus::Continue;
  }
  int calls = 0;
};

// Wants 4 bytes but never decides.
class Undecided : public network::ListenerFilter {
 public:
  FilterStatus onAccept(ListenerFilterCallbacks&) override { return FilterStatus::Continue; }
  size_t maxReadBytes() const override { return 4; }
  FilterStatus onData(std::string_view, ListenerFilterCallbacks&) override {
    return FilterStatus::StopIteration;
  }
};

class ListenerFilterChainTest : public testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    server_ = fds[0];
    client_ = fds[1];
  }
  void TearDown() override {
    chain_.reset();
    if (server_ >= 0) close(server_);
    if (client_ >= 0) close(client_);
  }
  void start(std::vector<network::ListenerFilterFactoryCb> factories,
             std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    chain_ = std::make_unique<ListenerFilterChain>(dispatcher_, server_, network::Address(),
                                                   timeout, [this](bool ok) {
                                                     ++done_calls_;
                                                     success_ = ok;
                                                   });
    chain_->run(factories);
  }
  template <class F>
  static network::ListenerFilterFactoryCb add(F* filter) {
    return [filter](network::ListenerFilterManager& m) {
      m.addListenerFilter(network::ListenerFilterPtr(filter));
    };
  }
  void send(std::string_view s) {
    ASSERT_EQ(write(client_, s.data(), s.size()), ssize_t(s.size()));
  }
  bool finished() { return done_calls_ > 0; }

  event::Dispatcher dispatcher_;
  int server_ = -1;
  int client_ = -1;
  std::unique_ptr<ListenerFilterChain> chain_;
  int done_calls_ = 0;
  bool success_ = false;
};

TEST_F(ListenerFilterChainTest, NoFiltersPassAtOnce) {
  start({});
  EXPECT_EQ(done_calls_, 1);
  EXPECT_TRUE(success_);
}

TEST_F(ListenerFilterChainTest, SynchronousVerdicts) {
  start({add(new Verdict(true)), add(new Verdict(false)), add(new Verdict(true))});
  EXPECT_EQ(done_calls_, 1);
  EXPECT_FALSE(success_);
  EXPECT_FALSE(chain_->timedOut());
}

TEST_F(ListenerFilterChainTest, PausedFilterResumes) {
  auto* pause = new Pause();
  start({add(pause), add(new Verdict(true))});
  EXPECT_EQ(done_calls_, 0);
  ASSERT_NE(pause->callbacks, nullptr);
  pause->callbacks->continueFilterChain(true);
  EXPECT_EQ(done_calls_, 1);
  EXPECT_TRUE(success_);
}

TEST_F(ListenerFilterChainTest, PeekWaitsForBytesAndLeavesThemUnread) {
  auto* sniff = new Sniff();
  start({add(sniff), add(new Verdict(true))});
  EXPECT_FALSE(finished());  // nothing sent yet
  send("PI");
  ASSERT_TRUE(sluice::test::runUntil(dispatcher_, [&] { return sniff->calls >= 1; }));
  EXPECT_FALSE(finished());
  send("NG and more");
  ASSERT_TRUE(sluice::test::runUntil(dispatcher_, [&] { return finished(); }));
  EXPECT_TRUE(success_);
  EXPECT_TRUE(chain_->peeked());
  EXPECT_EQ(chain_->facts().application_protocol, "ping");
  // Peeking consumed nothing: the connection reads every byte.
  char buf[64];
  ssize_t n = read(server_, buf, sizeof(buf));
  EXPECT_EQ(std::string_view(buf, n > 0 ? n : 0), "PING and more");
}

TEST_F(ListenerFilterChainTest, PeekRefusesOtherProtocols) {
  send("GET / HTTP/1.1\r\n");
  start({add(new Sniff())});
  EXPECT_EQ(done_calls_, 1);
  EXPECT_FALSE(success_);
}

TEST_F(ListenerFilterChainTest, PeerClosingBeforeDecisionRefuses) {
  start({add(new Sniff())});
  close(client_);
  client_ = -1;
  ASSERT_TRUE(sluice::test::runUntil(dispatcher_, [&] { return finished(); }));
  EXPECT_FALSE(success_);
  EXPECT_FALSE(chain_->timedOut());
}

TEST_F(ListenerFilterChainTest, FilterThatCannotDecideWithAllItAskedForRefuses) {
  send("ABCDEFGH");
  start({add(new Undecided())});
  EXPECT_EQ(done_calls_, 1);
  EXPECT_FALSE(success_);
}

TEST_F(ListenerFilterChainTest, SilentClientTimesOut) {
  start({add(new Sniff())}, std::chrono::milliseconds(100));
  ASSERT_TRUE(sluice::test::runUntil(dispatcher_, [&] { return finished(); }));
  EXPECT_FALSE(success_);
  EXPECT_TRUE(chain_->timedOut());
  EXPECT_EQ(done_calls_, 1);
}

}  // namespace
}  // namespace server
}  // namespace sluice
