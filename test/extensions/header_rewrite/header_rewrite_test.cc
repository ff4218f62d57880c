#include "extensions/header_rewrite/header_rewrite.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <strings.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "extensions/header_rewrite/header_rewrite.pb.h"
#include "source/common/extensions/registry.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace extensions {
namespace header_rewrite {
namespace {

using testing::HasSubstr;

bool sameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

using Fields = std::vector<std::pair<std::string, std::string>>;

// Behaves like the HTTP/1 codec's headers: remove() drops received and added headers alike,
// add() fails once a fixed number of headers were added.
class FakeHeaders : public proxy::RequestHeaders {
 public:
  explicit FakeHeaders(Fields received, size_t max_added = 16) : max_added_(max_added) {
    for (auto& [n, v] : received) fields_.push_back({n, v, false});
  }
  std::string_view get(std::string_view name) const override {
    for (const auto& f : fields_) {
      if (sameName(f.name, name)) return f.value;
    }
    return {};
  }
  void remove(std::string_view name) override {
    ++removes;
    std::vector<Field> kept;
    for (auto& f : fields_) {
      if (!sameName(f.name, name)) kept.push_back(f);
    }
    fields_.swap(kept);
  }
  bool add(std::string_view name, std::string_view value) override {
    if (added_ == max_added_) return false;
    ++added_;
    fields_.push_back({std::string(name), std::string(value), true});
    return true;
  }
  // "name: value" lines in wire order.
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    for (const auto& f : fields_) out.push_back(f.name + ": " + f.value);
    return out;
  }
  int removes = 0;

 private:
  struct Field {
    std::string name;
    std::string value;
    bool added;
  };
  std::vector<Field> fields_;
  size_t max_added_;
  size_t added_ = 0;
};

class FakeCallbacks : public proxy::RequestFilterCallbacks {
 public:
  proxy::WorkerContext& worker() override { abort(); }
  void continueRequest() override {}
  void deny(proxy::Denial denial, std::string_view) override { denials.push_back(denial); }
  void upstreamReady(upstream::UpstreamHandle) override {}
  std::vector<proxy::Denial> denials;
};

using Lines = std::vector<std::string>;

class HeaderRewriteFilterTest : public testing::Test {
 protected:
  std::shared_ptr<HeaderRewriteConfig> config(std::vector<std::string> remove,
                                              std::vector<std::pair<std::string, std::string>> add,
                                              bool replace) {
    auto c = std::make_shared<HeaderRewriteConfig>();
    c->remove = std::move(remove);
    c->add = std::move(add);
    c->replace = replace;
    c->rewritten = stats::Store::get().counter("test.header_rewrite.rewritten");
    return c;
  }
  proxy::RequestFilterStatus run(std::shared_ptr<HeaderRewriteConfig> c, proxy::ProxyRequest& r) {
    HeaderRewriteFilter filter(std::move(c));
    filter.setCallbacks(callbacks_);
    return filter.onRequest(r);
  }
  uint64_t rewritten() { return stats::Store::get().counterValue("test.header_rewrite.rewritten"); }
  FakeCallbacks callbacks_;
};

TEST_F(HeaderRewriteFilterTest, RemovesThenAdds) {
  FakeHeaders headers(
      Fields{{"Host", "a"}, {"X-Secret", "1"}, {"x-secret", "2"}, {"Accept", "*/*"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  const uint64_t before = rewritten();
  EXPECT_EQ(proxy::RequestFilterStatus::Continue,
            run(config({"X-SECRET"}, {{"X-Via", "sluice"}}, false), request));
  EXPECT_EQ((Lines{"Host: a", "Accept: */*", "X-Via: sluice"}), headers.lines());
  EXPECT_TRUE(callbacks_.denials.empty());
  EXPECT_EQ(before + 1, rewritten());
}

TEST_F(HeaderRewriteFilterTest, RemoveThenAddTheSameName) {
  // Removal comes first, so a removed-and-added name ends up with only the configured value.
  FakeHeaders headers(Fields{{"User-Agent", "curl"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  run(config({"user-agent"}, {{"User-Agent", "sluice"}}, false), request);
  EXPECT_EQ((Lines{"User-Agent: sluice"}), headers.lines());
}

TEST_F(HeaderRewriteFilterTest, WithoutReplaceExistingHeadersStay) {
  FakeHeaders headers(Fields{{"Via", "1.1 client"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  run(config({}, {{"Via", "1.1 sluice"}}, false), request);
  EXPECT_EQ((Lines{"Via: 1.1 client", "Via: 1.1 sluice"}), headers.lines());
}

TEST_F(HeaderRewriteFilterTest, ReplaceRemovesExistingFirst) {
  FakeHeaders headers(Fields{{"via", "1.1 client"}, {"Host", "h"}, {"VIA", "1.0 other"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  run(config({}, {{"Via", "1.1 sluice"}, {"X-Other", "o"}}, true), request);
  EXPECT_EQ((Lines{"Host: h", "Via: 1.1 sluice", "X-Other: o"}), headers.lines());
}

TEST_F(HeaderRewriteFilterTest, ReplaceKeepsEveryConfiguredValueOfOneName) {
  // Replace drops what the client sent, not the values this filter adds itself.
  FakeHeaders headers(Fields{{"X-Tag", "client"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  run(config({}, {{"X-Tag", "a"}, {"X-Tag", "b"}}, true), request);
  EXPECT_EQ((Lines{"X-Tag: a", "X-Tag: b"}), headers.lines());
}

TEST_F(HeaderRewriteFilterTest, TunnelsPassUntouched) {
  proxy::ProxyRequest request;
  request.kind = proxy::RequestKind::Tunnel;
  request.headers = nullptr;
  const uint64_t before = rewritten();
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config({"A"}, {{"B", "c"}}, true), request));
  EXPECT_TRUE(callbacks_.denials.empty());
  EXPECT_EQ(before, rewritten());  // nothing was edited
}

TEST_F(HeaderRewriteFilterTest, EmptyConfigEditsNothing) {
  FakeHeaders headers(Fields{{"A", "1"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  EXPECT_EQ(proxy::RequestFilterStatus::Continue, run(config({}, {}, false), request));
  EXPECT_EQ((Lines{"A: 1"}), headers.lines());
  EXPECT_EQ(0, headers.removes);
}

TEST_F(HeaderRewriteFilterTest, NoRoomForAddedHeadersIsDenied) {
  FakeHeaders headers(Fields{{"A", "1"}}, /*max_added=*/1);
  proxy::ProxyRequest request;
  request.headers = &headers;
  const uint64_t before = rewritten();
  EXPECT_EQ(proxy::RequestFilterStatus::StopIteration,
            run(config({}, {{"X-1", "a"}, {"X-2", "b"}}, false), request));
  ASSERT_EQ(1u, callbacks_.denials.size());
  EXPECT_EQ(proxy::Denial::ServiceUnavailable, callbacks_.denials[0]);
  EXPECT_EQ(before, rewritten());
}

// The factory, as the config loader reaches it through the registry.
class HeaderRewriteConfigTest : public testing::Test {
 protected:
  absl::StatusOr<proxy::RequestFilterFactoryCb> build(const v1::HeaderRewriteConfig& proto) {
    const RequestFilterFactory* f = Registry<RequestFilterFactory>::byName("sluice.header_rewrite");
    if (f == nullptr) return absl::NotFoundError("not linked");
    FactoryContext context{"main", "main", "rf[0]"};
    return f->createFilterFactory(proto, context);
  }
  std::string error(const v1::HeaderRewriteConfig& proto) {
    auto r = build(proto);
    return r.ok() ? "<ok>" : std::string(r.status().message());
  }
};

TEST_F(HeaderRewriteConfigTest, RegisteredWithItsConfigType) {
  const RequestFilterFactory* f = Registry<RequestFilterFactory>::byName("sluice.header_rewrite");
  ASSERT_NE(nullptr, f);
  EXPECT_EQ("sluice.extensions.header_rewrite.v1.HeaderRewriteConfig", f->configType());
  EXPECT_FALSE(f->terminal());
}

TEST_F(HeaderRewriteConfigTest, RejectsBadHeaderNames) {
  const std::vector<std::string> names = {"",      "Bad Header",          "x:y", "a\r",
                                          "a\nb",  "caf\xc3\xa9",         "(x)", "a/b",
                                          "\"q\"", std::string("a\0b", 3)};
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    v1::HeaderRewriteConfig add;
    auto* h = add.add_add();
    h->set_name(name);
    h->set_value("v");
    EXPECT_THAT(error(add), HasSubstr("rf[0].typed_config.add[0].name"));

    v1::HeaderRewriteConfig remove;
    remove.add_remove("Good");
    remove.add_remove(name);
    EXPECT_THAT(error(remove), HasSubstr("rf[0].typed_config.remove[1]"));
  }
}

TEST_F(HeaderRewriteConfigTest, RejectsControlCharactersInValues) {
  const std::vector<std::string> values = {
      "a\r\nInjected: yes", "a\nb", "a\rb", "\x01", "a\x7f", "x\x1f", std::string("a\0b", 3)};
  for (const std::string& value : values) {
    SCOPED_TRACE(testing::PrintToString(value));
    v1::HeaderRewriteConfig proto;
    auto* h = proto.add_add();
    h->set_name("X-Ok");
    h->set_value(value);
    EXPECT_THAT(error(proto), HasSubstr("rf[0].typed_config.add[0].value"));
  }
}

TEST_F(HeaderRewriteConfigTest, AcceptsTokensAndVisibleValues) {
  v1::HeaderRewriteConfig proto;
  proto.add_remove("X-Forwarded-For");
  proto.add_remove("a!#$%&'*+-.^_`|~0");
  auto* h = proto.add_add();
  h->set_name("X-Note");
  h->set_value("visible text\twith tab; \"quotes\", obs-text \xc3\xa9");
  auto* empty = proto.add_add();
  empty->set_name("X-Empty");
  empty->set_value("");
  EXPECT_EQ("<ok>", error(proto));
}

// The factory's callback adds a working filter to a chain.
class NullWorker : public proxy::WorkerContext {
 public:
  event::Dispatcher& dispatcher() override { abort(); }
  dns::Resolver& resolver() override { abort(); }
  dns::Resolver& resolver(const network::Egress&) override { abort(); }
  upstream::Pool& pool() override { abort(); }
  uint32_t index() const override { return 0; }
  bool draining() const override { return false; }
};

class NullSink : public proxy::RequestSink {
 public:
  void onUpstreamReady(upstream::UpstreamHandle) override {}
  void onDenied(proxy::Denial, std::string_view) override { ++denied; }
  int denied = 0;
};

TEST_F(HeaderRewriteConfigTest, FactoryCallbackAddsTheFilter) {
  v1::HeaderRewriteConfig proto;
  proto.add_remove("Cookie");
  auto* h = proto.add_add();
  h->set_name("X-Proxy");
  h->set_value("sluice");
  proto.set_replace(true);
  auto cb = build(proto);
  ASSERT_TRUE(cb.ok()) << cb.status();
  NullWorker worker;
  NullSink sink;
  proxy::RequestFilterChain chain(worker, sink);
  (*cb)(chain);
  FakeHeaders headers(Fields{{"Cookie", "c=1"}, {"X-Proxy", "spoofed"}, {"Host", "h"}});
  proxy::ProxyRequest request;
  request.headers = &headers;
  chain.start(request);
  EXPECT_EQ((Lines{"Host: h", "X-Proxy: sluice"}), headers.lines());
  EXPECT_EQ(1, sink.denied);  // no router after it in this chain
  chain.end();
}

}  // namespace
}  // namespace header_rewrite
}  // namespace extensions
}  // namespace sluice
