#include "source/common/config/redact.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "api/sluice/filters/v1/http1.pb.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/yaml_loader.h"
#include "test/common/config/test_config.pb.h"

namespace sluice {
namespace config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RedactTest, ApiKeysInsideNestedAnyAreReplaced) {
  absl::StatusOr<v1::Bootstrap> b = loadBootstrapString(
      "auth:\n  api_keys: [first-secret-key, {name: ci, key: second-secret-key}]\n", "r.yaml");
  ASSERT_TRUE(b.ok()) << b.status().message();
  v1::Bootstrap copy = *b;
  redact(copy);
  const std::string yaml = toYaml(copy);
  EXPECT_THAT(yaml, Not(HasSubstr("first-secret-key")));
  EXPECT_THAT(yaml, Not(HasSubstr("second-secret-key")));
  EXPECT_THAT(yaml, HasSubstr("name: \"ci\""));
  EXPECT_THAT(yaml, HasSubstr("key: \"<redacted>\""));
  // Everything else is untouched.
  filters::v1::Http1ProxyConfig http1;
  ASSERT_TRUE(copy.listeners(0).filter_chains(0).filters(0).typed_config().UnpackTo(&http1));
  filters::v1::AuthConfig auth;
  ASSERT_TRUE(http1.request_filters(0).typed_config().UnpackTo(&auth));
  ASSERT_EQ(auth.api_keys_size(), 2);
  EXPECT_EQ(auth.api_keys(0).name(), "key1");
  EXPECT_EQ(auth.api_keys(0).key(), "<redacted>");
  EXPECT_EQ(auth.realm(), "sluice");
  EXPECT_EQ(http1.max_request_head_bytes(), 65536u);
  EXPECT_EQ(copy.listeners(0).address(), b->listeners(0).address());
}

TEST(RedactTest, MapsRepeatedNonStringAndUnknownAny) {
  test::Kitchen k;
  k.set_s("visible");
  auto& inner = (*k.mutable_inners())["x"];
  inner.set_secret("map-secret");
  inner.add_tokens("tok-1");
  inner.add_tokens("tok-2");
  inner.set_pin(1234);
  inner.set_level(7);
  k.add_inner_list()->set_secret("list-secret");
  k.mutable_inner();  // Present but empty: stays empty, no "<redacted>" appears.
  test::Kitchen::Inner packed;
  packed.set_secret("any-secret");
  k.add_anys()->PackFrom(packed);
  k.mutable_any()->set_type_url("type.googleapis.com/not.in.this.Build");
  k.mutable_any()->set_value("opaque-maybe-secret");
  redact(k);
  const auto& r = k.inners().at("x");
  EXPECT_EQ(r.secret(), "<redacted>");
  ASSERT_EQ(r.tokens_size(), 2);
  EXPECT_EQ(r.tokens(0), "<redacted>");
  EXPECT_EQ(r.tokens(1), "<redacted>");
  EXPECT_EQ(r.pin(), 0u);
  EXPECT_EQ(r.level(), 7);
  EXPECT_EQ(k.inner_list(0).secret(), "<redacted>");
  EXPECT_EQ(k.inner().secret(), "");
  test::Kitchen::Inner unpacked;
  ASSERT_TRUE(k.anys(0).UnpackTo(&unpacked));
  EXPECT_EQ(unpacked.secret(), "<redacted>");
  EXPECT_EQ(k.any().type_url(), "type.googleapis.com/not.in.this.Build");
  EXPECT_EQ(k.any().value(), "");
  EXPECT_EQ(k.s(), "visible");
}

}  // namespace
}  // namespace config
}  // namespace sluice
