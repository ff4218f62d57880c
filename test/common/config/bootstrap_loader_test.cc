#include "source/common/config/bootstrap_loader.h"

#include <fstream>
#include <string>

#include <stdlib.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "api/sluice/filters/v1/http1.pb.h"
#include "api/sluice/filters/v1/router.pb.h"
#include "extensions/header_rewrite/header_rewrite.pb.h"

namespace sluice {
namespace config {
namespace {

using ::testing::HasSubstr;

// One listener, one chain, one http1 filter whose request filters are auth-less: just a router.
v1::Bootstrap minimal() {
  v1::Bootstrap b;
  b.mutable_admin()->set_address("127.0.0.1:9901");
  v1::Listener* l = b.add_listeners();
  l->set_name("http");
  l->set_address("127.0.0.1:8080");
  v1::Filter* f = l->add_filter_chains()->add_filters();
  f->set_name("sluice.http1");
  filters::v1::Http1ProxyConfig http1;
  v1::Filter* router = http1.add_request_filters();
  router->set_name("sluice.router");
  router->mutable_typed_config()->PackFrom(filters::v1::RouterConfig());
  f->mutable_typed_config()->PackFrom(http1);
  return b;
}

std::string validateError(const v1::Bootstrap& b) {
  absl::Status status = validateBootstrap(b);
  return status.ok() ? "" : std::string(status.message());
}

TEST(ValidateBootstrapTest, MinimalIsValid) { EXPECT_EQ(validateError(minimal()), ""); }

TEST(ValidateBootstrapTest, NeedsAListener) {
  v1::Bootstrap b = minimal();
  b.clear_listeners();
  EXPECT_EQ(validateError(b), "listeners: at least one listener is required");
}

TEST(ValidateBootstrapTest, ListenerNames) {
  v1::Bootstrap b = minimal();
  b.mutable_listeners(0)->set_name("");
  EXPECT_EQ(validateError(b), "listeners[0].name: required");
  b.mutable_listeners(0)->set_name("a.b");
  EXPECT_THAT(validateError(b), HasSubstr("listeners[0].name: \"a.b\" may hold only"));
  b.mutable_listeners(0)->set_name("web_1-A");
  EXPECT_EQ(validateError(b), "");
  *b.add_listeners() = b.listeners(0);
  b.mutable_listeners(1)->set_address("127.0.0.1:8081");
  EXPECT_EQ(validateError(b), "listeners[1].name: \"web_1-A\" is already the name of listeners[0]");
}

TEST(ValidateBootstrapTest, Addresses) {
  v1::Bootstrap b = minimal();
  b.mutable_listeners(0)->set_address("");
  EXPECT_EQ(validateError(b), "listeners[0].address: required");
  b.mutable_listeners(0)->set_address("localhost:8080");
  EXPECT_THAT(validateError(b), HasSubstr("listeners[0].address: "));
  b.mutable_listeners(0)->set_address("127.0.0.1");
  EXPECT_THAT(validateError(b), HasSubstr("listeners[0].address: "));
  b.mutable_listeners(0)->set_address("[::1]:8080");
  EXPECT_EQ(validateError(b), "");
  b.mutable_admin()->set_address("[::1]:8080");
  EXPECT_EQ(validateError(b), "listeners[0].address: same address as admin.address ([::1]:8080)");
  b.mutable_admin()->set_address("nope");
  EXPECT_THAT(validateError(b), HasSubstr("admin.address: "));
  b.mutable_admin()->set_address("");  // Disabled.
  EXPECT_EQ(validateError(b), "");
  *b.add_listeners() = b.listeners(0);
  b.mutable_listeners(1)->set_name("other");
  EXPECT_EQ(validateError(b),
            "listeners[1].address: same address as listeners[0].address "
            "([::1]:8080)");
  // Port 0 is refused: the proxy's address must be known to its clients.
  b.mutable_listeners(1)->set_address("127.0.0.1:0");
  EXPECT_THAT(validateError(b), HasSubstr("listeners[1].address: port 0"));
}

TEST(ValidateBootstrapTest, ChainsAndFilters) {
  v1::Bootstrap b = minimal();
  b.mutable_listeners(0)->clear_filter_chains();
  EXPECT_EQ(validateError(b), "listeners[0].filter_chains: at least one filter chain is required");
  b = minimal();
  b.mutable_listeners(0)->add_filter_chains();
  EXPECT_EQ(validateError(b),
            "listeners[0].filter_chains[1].filters: at least one filter is "
            "required");
  b = minimal();
  b.mutable_listeners(0)->mutable_filter_chains(0)->mutable_filters(0)->set_name("");
  EXPECT_EQ(validateError(b), "listeners[0].filter_chains[0].filters[0].name: required");
  b = minimal();
  b.mutable_listeners(0)->mutable_filter_chains(0)->mutable_filters(0)->clear_typed_config();
  EXPECT_EQ(validateError(b),
            "listeners[0].filter_chains[0].filters[0].typed_config: required "
            "(a map with an \"@type\" key)");
  b = minimal();
  b.mutable_listeners(0)->add_listener_filters()->set_name("sluice.tls");
  EXPECT_EQ(validateError(b),
            "listeners[0].listener_filters[0].typed_config: required (a map "
            "with an \"@type\" key)");
}

TEST(ValidateBootstrapTest, FiltersInsideAnyPayloadsAreChecked) {
  v1::Bootstrap b = minimal();
  v1::Filter* codec = b.mutable_listeners(0)->mutable_filter_chains(0)->mutable_filters(0);
  filters::v1::Http1ProxyConfig http1;
  ASSERT_TRUE(codec->typed_config().UnpackTo(&http1));
  http1.add_request_filters()->set_name("sluice.auth");
  codec->mutable_typed_config()->PackFrom(http1);
  EXPECT_EQ(validateError(b),
            "listeners[0].filter_chains[0].filters[0].typed_config."
            "request_filters[1].typed_config: required (a map with an "
            "\"@type\" key)");
  http1.mutable_request_filters(1)->set_name("");
  codec->mutable_typed_config()->PackFrom(http1);
  EXPECT_THAT(validateError(b), HasSubstr("typed_config.request_filters[1].name: required"));
}

TEST(ValidateBootstrapTest, OtherTopLevelFields) {
  v1::Bootstrap b = minimal();
  b.set_log_level("verbose");
  EXPECT_THAT(validateError(b), HasSubstr("log_level: expected error, warn, info or debug"));
  b.set_log_level("debug");
  EXPECT_EQ(validateError(b), "");
  b.mutable_dns()->add_resolvers("127.0.0.53");
  b.mutable_dns()->add_resolvers("[::1]:5353");
  EXPECT_EQ(validateError(b), "");
  b.mutable_dns()->add_resolvers("dns.example");
  EXPECT_THAT(validateError(b), HasSubstr("dns.resolvers[2]: expected a literal IP"));
}

TEST(LoadBootstrapTest, FullFormIsTakenAsIs) {
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(R"(listeners:
  - name: web
    address: 127.0.0.1:18080
    filter_chains:
      - filters:
          - name: sluice.http1
            typed_config:
              "@type": type.googleapis.com/sluice.filters.v1.Http1ProxyConfig
)",
                                                        "f.yaml");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->listeners(0).name(), "web");
  EXPECT_FALSE(b->has_admin());  // No short-form defaults are applied to the full form.
  EXPECT_FALSE(b->has_dns());
}

TEST(LoadBootstrapTest, FullFormWithEveryFilter) {
  // The header_rewrite example of docs/configuration.md, in a whole file.
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(R"(listeners:
  - name: web
    address: "[::1]:3128"
    filter_chains:
      - filters:
          - name: "sluice.http1"
            typed_config:
              "@type": "type.googleapis.com/sluice.filters.v1.Http1ProxyConfig"
              request_filters:
                - name: "sluice.auth"
                  typed_config:
                    "@type": "type.googleapis.com/sluice.filters.v1.AuthConfig"
                    api_keys: [{name: "ci", key: "replace-me"}]
                - name: "sluice.header_rewrite"
                  typed_config:
                    "@type": "type.googleapis.com/sluice.extensions.header_rewrite.v1.HeaderRewriteConfig"
                    remove: ["via", "x-forwarded-for"]
                    add: [{name: "x-proxied-by", value: "sluice"}]
                - name: "sluice.router"
                  typed_config: {"@type": "type.googleapis.com/sluice.filters.v1.RouterConfig"}
)",
                                                        "f.yaml");
  ASSERT_TRUE(b.ok()) << b.status().message();
  filters::v1::Http1ProxyConfig http1;
  ASSERT_TRUE(b->listeners(0).filter_chains(0).filters(0).typed_config().UnpackTo(&http1));
  ASSERT_EQ(http1.request_filters_size(), 3);
  sluice::extensions::header_rewrite::v1::HeaderRewriteConfig rewrite;
  ASSERT_TRUE(http1.request_filters(1).typed_config().UnpackTo(&rewrite));
  EXPECT_EQ(rewrite.remove(1), "x-forwarded-for");
  EXPECT_EQ(rewrite.add(0).name(), "x-proxied-by");
}

TEST(LoadBootstrapTest, FullFormErrorsCarrySource) {
  EXPECT_EQ(std::string(loadBootstrapString("listeners: []\n", "f.yaml").status().message()),
            "f.yaml: listeners: at least one listener is required");
  EXPECT_THAT(
      std::string(loadBootstrapString("listeners: []\nserver: {}\n", "f.yaml").status().message()),
      HasSubstr("f.yaml: server: unknown field"));
  // Short-form shorthands are not accepted in the full form.
  EXPECT_THAT(std::string(loadBootstrapString("listeners: [web]\n", "f.yaml").status().message()),
              HasSubstr("f.yaml: listeners[0]: expected a map"));
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string templ = std::string(tmp ? tmp : "/tmp") + "/cfgXXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

using LoadBootstrapFileTest = TempDir;

TEST_F(LoadBootstrapFileTest, ReadsAndNamesTheFileInErrors) {
  const std::string good = write("good.yaml", "server: {listen: 127.0.0.1:18080}\n");
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapFile(good);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->listeners(0).address(), "127.0.0.1:18080");
  const std::string bad = write("bad.yaml", "server: {lsten: x}\n");
  EXPECT_EQ(std::string(loadBootstrapFile(bad).status().message()),
            bad + ": server.lsten: unknown field; did you mean listen? (line 1, column 10)");
  const std::string missing = dir_ + "/missing.yaml";
  absl::Status status = loadBootstrapFile(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing + ": cannot open"));
  EXPECT_FALSE(loadBootstrapFile(dir_).ok());  // A directory.
  const std::string huge = write("huge.yaml", "# " + std::string(5 * 1024 * 1024, 'x') + "\n");
  EXPECT_THAT(std::string(loadBootstrapFile(huge).status().message()),
              HasSubstr("not a config file"));
}

class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    const char* v = getenv(name);
    had_ = v != nullptr;
    if (had_) old_ = v;
  }
  ~EnvGuard() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_;
  std::string old_;
};

TEST(DefaultConfigPathTest, XdgThenHome) {
  EnvGuard xdg("XDG_CONFIG_HOME");
  EnvGuard home("HOME");
  setenv("XDG_CONFIG_HOME", "/x/conf", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(defaultConfigPath(), "/x/conf/sluice/config.yaml");
  unsetenv("XDG_CONFIG_HOME");
  EXPECT_EQ(defaultConfigPath(), "/home/u/.config/sluice/config.yaml");
  setenv("XDG_CONFIG_HOME", "", 1);
  EXPECT_EQ(defaultConfigPath(), "/home/u/.config/sluice/config.yaml");
  setenv("XDG_CONFIG_HOME", "relative/dir", 1);  // Invalid per the XDG spec: ignored.
  EXPECT_EQ(defaultConfigPath(), "/home/u/.config/sluice/config.yaml");
  setenv("HOME", "/home/u/", 1);
  EXPECT_EQ(defaultConfigPath(), "/home/u/.config/sluice/config.yaml");
  unsetenv("HOME");
  const std::string fallback = defaultConfigPath();
  EXPECT_THAT(fallback, HasSubstr(".config/sluice/config.yaml"));
}

}  // namespace
}  // namespace config
}  // namespace sluice
