#include "source/common/config/api_key.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace sluice {
namespace config {
namespace {

TEST(ApiKeyTest, LengthCharsetAndFreshness) {
  const std::string a = generateApiKey();
  const std::string b = generateApiKey();
  EXPECT_EQ(a.size(), 43u);  // 32 bytes, base64 without padding.
  EXPECT_NE(a, b);
  for (char c : a + b) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    EXPECT_TRUE(ok) << "unexpected character '" << c << "'";
  }
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(a, &raw));
  EXPECT_EQ(raw.size(), 32u);
}

TEST(ApiKeyTest, BytesLookRandom) {
  // Over 64 keys (2048 bytes) every bit position is set in some byte and clear in another; a
  // constant or mostly-zero source would fail this.
  unsigned all_or = 0;
  unsigned all_and = 0xFF;
  for (int i = 0; i < 64; ++i) {
    std::string raw;
    ASSERT_TRUE(absl::WebSafeBase64Unescape(generateApiKey(), &raw));
    for (unsigned char c : raw) {
      all_or |= c;
      all_and &= c;
    }
  }
  EXPECT_EQ(all_or, 0xFFu);
  EXPECT_EQ(all_and, 0u);
}

}  // namespace
}  // namespace config
}  // namespace sluice
