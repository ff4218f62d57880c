#include "source/common/proxy/request_filter.h"

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace proxy {
namespace {

// The chain only hands the worker to filters; these tests' filters never ask for it.
class AbortingWorker : public WorkerContext {
 public:
  event::Dispatcher& dispatcher() override { abort(); }
  dns::Resolver& resolver() override { abort(); }
  dns::Resolver& resolver(const network::Egress&) override { abort(); }
  upstream::Pool& pool() override { abort(); }
  uint32_t index() const override { return 7; }
  bool draining() const override { return false; }
};

class RecordingSink : public RequestSink {
 public:
  void onUpstreamReady(UpstreamHandle upstream) override {
    ++upstreams;
    last_info = upstream.info();
    got_connection = static_cast<bool>(upstream);
    if (on_outcome) on_outcome();
  }
  void onDenied(Denial denial, std::string_view reason) override {
    denials.push_back(denial);
    reasons.emplace_back(reason);
    if (on_outcome) on_outcome();
  }
  int outcomes() const { return upstreams + static_cast<int>(denials.size()); }

  int upstreams = 0;
  bool got_connection = false;
  UpstreamInfo last_info;
  std::vector<Denial> denials;
  std::vector<std::string> reasons;
  std::function<void()> on_outcome;
};

// A filter that logs its hooks and does what the test scripts.
class ScriptedFilter : public RequestFilter {
 public:
  using Action = std::function<RequestFilterStatus(RequestFilterCallbacks&, ProxyRequest&)>;
  ScriptedFilter(std::string name, std::vector<std::string>& log, Action action = nullptr)
      : name_(std::move(name)), log_(log), action_(std::move(action)) {}

  RequestFilterStatus onRequest(ProxyRequest& request) override {
    log_.push_back(name_);
    return action_ ? action_(*callbacks_, request) : RequestFilterStatus::Continue;
  }
  void onRequestEnd() override { log_.push_back(name_ + ".end"); }
  RequestFilterCallbacks& callbacks() { return *callbacks_; }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  Action action_;
};

RequestFilterStatus stop(RequestFilterCallbacks&, ProxyRequest&) {
  return RequestFilterStatus::StopIteration;
}

// The terminal filter: hands over an (absent) upstream connection.
RequestFilterStatus route(RequestFilterCallbacks& cb, ProxyRequest&) {
  UpstreamInfo info;
  info.reused = true;
  info.response_timeout = std::chrono::milliseconds(1234);
  cb.upstreamReady(UpstreamHandle(nullptr, nullptr, info));
  return RequestFilterStatus::StopIteration;
}

class RequestFilterChainTest : public testing::Test {
 protected:
  ScriptedFilter* add(const std::string& name, ScriptedFilter::Action action = nullptr) {
    auto filter = std::make_unique<ScriptedFilter>(name, log_, std::move(action));
    ScriptedFilter* raw = filter.get();
    chain_.addFilter(std::move(filter));
    return raw;
  }
  std::vector<std::string> takeLog() {
    std::vector<std::string> out;
    out.swap(log_);
    return out;
  }
  using Log = std::vector<std::string>;

  AbortingWorker worker_;
  RecordingSink sink_;
  RequestFilterChain chain_{worker_, sink_};
  std::vector<std::string> log_;
  ProxyRequest request_;
};

TEST_F(RequestFilterChainTest, RunsFiltersInOrderToTheTerminal) {
  add("a");
  add("b");
  add("router", route);
  EXPECT_FALSE(chain_.active());
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "b", "router"}), takeLog());
  EXPECT_EQ(1, sink_.upstreams);
  EXPECT_TRUE(sink_.last_info.reused);
  EXPECT_EQ(1234, sink_.last_info.response_timeout.count());
  EXPECT_TRUE(sink_.denials.empty());
  EXPECT_FALSE(chain_.active());
  EXPECT_EQ(7u, chain_.worker().index());
}

TEST_F(RequestFilterChainTest, AKeyRevokedWhileTheChainRanGetsNoUpstream) {
  KeyGrant grant("ci", KeyDigest{});
  add("auth", [&](RequestFilterCallbacks&, ProxyRequest& r) {
    r.grant = &grant;
    return RequestFilterStatus::Continue;
  });
  ScriptedFilter* dns = add("dns", stop);
  add("router", route);
  chain_.start(request_);
  // A reload revokes the key during the lookup.
  grant.revoke();
  dns->callbacks().continueRequest();
  EXPECT_EQ(0, sink_.upstreams);
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::Unauthorized, sink_.denials[0]);
  EXPECT_EQ(kRevokedReason, sink_.reasons[0]);
}

TEST_F(RequestFilterChainTest, FiltersSeeEarlierEdits) {
  add("a", [](RequestFilterCallbacks&, ProxyRequest& r) {
    r.principal = "alice";
    return RequestFilterStatus::Continue;
  });
  std::string seen;
  add("b", [&](RequestFilterCallbacks&, ProxyRequest& r) {
    seen = std::string(r.principal);
    return RequestFilterStatus::Continue;
  });
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ("alice", seen);
}

TEST_F(RequestFilterChainTest, StopIterationPausesUntilContinue) {
  add("a");
  ScriptedFilter* b = add("b", stop);
  add("c");
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "b"}), takeLog());
  EXPECT_TRUE(chain_.active());
  EXPECT_EQ(0, sink_.outcomes());
  b->callbacks().continueRequest();
  // Resumes at the filter after b; a and b do not run again.
  EXPECT_EQ((Log{"c", "router"}), takeLog());
  EXPECT_EQ(1, sink_.upstreams);
  EXPECT_FALSE(chain_.active());
  // A stray continue after the end does nothing.
  b->callbacks().continueRequest();
  EXPECT_TRUE(takeLog().empty());
  EXPECT_EQ(1, sink_.outcomes());
}

TEST_F(RequestFilterChainTest, SeveralPauses) {
  ScriptedFilter* a = add("a", stop);
  ScriptedFilter* b = add("b", stop);
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ((Log{"a"}), takeLog());
  a->callbacks().continueRequest();
  EXPECT_EQ((Log{"b"}), takeLog());
  b->callbacks().continueRequest();
  EXPECT_EQ((Log{"router"}), takeLog());
  EXPECT_EQ(1, sink_.upstreams);
}

TEST_F(RequestFilterChainTest, ContinueWhileRunningIsIgnored) {
  // A filter may not resume the chain from inside its own onRequest: it is not paused yet.
  add("a", [](RequestFilterCallbacks& cb, ProxyRequest&) {
    cb.continueRequest();
    return RequestFilterStatus::Continue;
  });
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "router"}), takeLog());  // the router ran once, not twice
  EXPECT_EQ(1, sink_.upstreams);
}

TEST_F(RequestFilterChainTest, DenyInsideOnRequestStopsTheChain) {
  add("a");
  add("auth", [](RequestFilterCallbacks& cb, ProxyRequest&) {
    cb.deny(Denial::Unauthorized, "no key");
    cb.deny(Denial::Forbidden, "second deny");  // ignored: already finished
    // Even a filter that wrongly says Continue after denying does not run the rest.
    return RequestFilterStatus::Continue;
  });
  add("c");
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "auth"}), takeLog());
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::Unauthorized, sink_.denials[0]);
  EXPECT_EQ("no key", sink_.reasons[0]);
  EXPECT_EQ(0, sink_.upstreams);
  EXPECT_FALSE(chain_.active());
}

TEST_F(RequestFilterChainTest, DenyWhilePausedEndsTheRequest) {
  ScriptedFilter* dns = add("dns", stop);
  add("router", route);
  chain_.start(request_);
  EXPECT_TRUE(chain_.active());
  dns->callbacks().deny(Denial::BadGateway, "lookup failed");
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::BadGateway, sink_.denials[0]);
  EXPECT_FALSE(chain_.active());
  // Late completions of the async work change nothing.
  dns->callbacks().continueRequest();
  dns->callbacks().deny(Denial::GatewayTimeout, "late");
  dns->callbacks().upstreamReady(UpstreamHandle());
  EXPECT_EQ((Log{"dns"}), takeLog());
  EXPECT_EQ(1, sink_.outcomes());
}

TEST_F(RequestFilterChainTest, DenyBeforeStartIsIgnored) {
  ScriptedFilter* a = add("a");
  a->callbacks().deny(Denial::Forbidden, "nothing running");
  a->callbacks().upstreamReady(UpstreamHandle());
  EXPECT_EQ(0, sink_.outcomes());
}

TEST_F(RequestFilterChainTest, RequestEndReachesOnlyFiltersThatSawTheRequest) {
  add("a");
  add("b", [](RequestFilterCallbacks& cb, ProxyRequest&) {
    cb.deny(Denial::Forbidden, "blocked");
    return RequestFilterStatus::StopIteration;
  });
  add("c");
  add("router", route);
  chain_.start(request_);
  takeLog();
  chain_.end();
  EXPECT_EQ((Log{"a.end", "b.end"}), takeLog());
  chain_.end();  // twice: nothing more
  EXPECT_TRUE(takeLog().empty());
}

TEST_F(RequestFilterChainTest, RequestEndWhilePaused) {
  add("a");
  ScriptedFilter* b = add("b", stop);
  add("router", route);
  chain_.start(request_);
  takeLog();
  chain_.end();  // e.g. the client left during a DNS lookup
  EXPECT_EQ((Log{"a.end", "b.end"}), takeLog());
  EXPECT_FALSE(chain_.active());
  b->callbacks().continueRequest();  // the lookup completes late
  EXPECT_TRUE(takeLog().empty());
  EXPECT_EQ(0, sink_.outcomes());
}

TEST_F(RequestFilterChainTest, NextRequestEndsThePreviousOne) {
  add("a");
  add("router", route);
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "router"}), takeLog());
  ProxyRequest second;
  chain_.start(second);
  EXPECT_EQ((Log{"a.end", "router.end", "a", "router"}), takeLog());
  EXPECT_EQ(2, sink_.upstreams);
}

TEST_F(RequestFilterChainTest, WithoutATerminalFilterDeniesBadGateway) {
  add("a");
  add("b");
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "b"}), takeLog());
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::BadGateway, sink_.denials[0]);
  EXPECT_EQ(0, sink_.upstreams);
}

TEST_F(RequestFilterChainTest, EmptyChainDeniesBadGateway) {
  chain_.start(request_);
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::BadGateway, sink_.denials[0]);
  chain_.end();
  EXPECT_TRUE(takeLog().empty());
}

TEST_F(RequestFilterChainTest, ContinuePastTheLastFilterDeniesBadGateway) {
  ScriptedFilter* a = add("a", stop);
  chain_.start(request_);
  EXPECT_EQ(0, sink_.outcomes());
  a->callbacks().continueRequest();
  ASSERT_EQ(1u, sink_.denials.size());
  EXPECT_EQ(Denial::BadGateway, sink_.denials[0]);
}

TEST_F(RequestFilterChainTest, SinkMayEndTheRequestFromItsCallback) {
  add("a");
  add("auth", [](RequestFilterCallbacks& cb, ProxyRequest&) {
    cb.deny(Denial::Unauthorized, "no");
    return RequestFilterStatus::StopIteration;
  });
  add("router", route);
  // A codec answering the denial at once ends the request inside the deny call.
  sink_.on_outcome = [&] { chain_.end(); };
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "auth", "a.end", "auth.end"}), takeLog());
  EXPECT_EQ(1, sink_.outcomes());
  EXPECT_FALSE(chain_.active());
}

TEST_F(RequestFilterChainTest, SinkMayStartTheNextRequestFromItsCallback) {
  int started = 0;
  ProxyRequest second;
  add("a");
  add("router", route);
  // A pipelined request starts from inside the previous one's outcome.
  sink_.on_outcome = [&] {
    if (++started == 1) chain_.start(second);
  };
  chain_.start(request_);
  EXPECT_EQ((Log{"a", "router", "a.end", "router.end", "a", "router"}), takeLog());
  EXPECT_EQ(2, sink_.upstreams);
  EXPECT_FALSE(chain_.active());
}

}  // namespace
}  // namespace proxy
}  // namespace sluice
