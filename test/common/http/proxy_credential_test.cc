#include "source/common/http/proxy_credential.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace http {
namespace {

std::string base64(std::string_view in, bool pad = true) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  while (pad && out.size() % 4 != 0) out += '=';
  return out;
}

// The key proxyAuthorizationKey finds, or "<none>" when it refuses.
std::string extract(std::string_view credential) {
  CredentialScratch scratch;
  std::string_view key;
  if (!proxyAuthorizationKey(credential, scratch, key)) return "<none>";
  return std::string(key);
}

TEST(Base64HelperTest, KnownVectors) {
  // The encoder the tests rely on, checked against RFC 4648 vectors.
  EXPECT_EQ("", base64(""));
  EXPECT_EQ("Zg==", base64("f"));
  EXPECT_EQ("Zm8=", base64("fo"));
  EXPECT_EQ("Zm9v", base64("foo"));
  EXPECT_EQ("Zm9vYmFy", base64("foobar"));
}

TEST(ExtractKeyTest, BasicUserAndKey) {
  EXPECT_EQ("s3cret", extract("Basic " + base64("alice:s3cret")));
  EXPECT_EQ("pw", extract("Basic " + base64("Aladdin:pw")));
  // Padding is optional.
  EXPECT_EQ("ab", extract("Basic " + base64("u:ab", /*pad=*/false)));
}

TEST(ExtractKeyTest, BasicEmptyUser) { EXPECT_EQ("k3y", extract("Basic " + base64(":k3y"))); }

TEST(ExtractKeyTest, BasicKeyContainingColons) {
  // The user name ends at the first colon; the key keeps the rest.
  EXPECT_EQ("ke:y:z", extract("Basic " + base64("user:ke:y:z")));
  EXPECT_EQ(":", extract("Basic " + base64("user::")));
}

TEST(ExtractKeyTest, BasicEmptyKeyIsRefused) {
  EXPECT_EQ("<none>", extract("Basic " + base64("user:")));
  EXPECT_EQ("<none>", extract("Basic " + base64(":")));
}

TEST(ExtractKeyTest, BasicWithoutColonIsRefused) {
  EXPECT_EQ("<none>", extract("Basic " + base64("justakey")));
  EXPECT_EQ("<none>", extract("Basic " + base64("")));
  EXPECT_EQ("<none>", extract("Basic "));
  EXPECT_EQ("<none>", extract("Basic"));
}

TEST(ExtractKeyTest, BadBase64IsRefused) {
  EXPECT_EQ("<none>", extract("Basic !!!!"));
  EXPECT_EQ("<none>", extract("Basic dXNlcjprZXk*"));
  EXPECT_EQ("<none>", extract("Basic dXNl cjprZXk="));     // space inside
  EXPECT_EQ("<none>", extract("Basic dXNlcj=prZXk="));     // padding inside
  EXPECT_EQ("<none>", extract("Basic dXNlc"));             // 5 chars: a dangling sextet
  EXPECT_EQ("<none>", extract("Basic dXNlcjprZXk=\r\n"));  // control characters
  EXPECT_EQ("<none>", extract("Basic -_-_"));              // URL-safe alphabet is not Basic
  EXPECT_EQ("<none>", extract(std::string("Basic dXNl\0cjprZXk=", 19)));
}

TEST(ExtractKeyTest, OversizedBasicIsRefused) {
  // 512 decoded bytes fit the scratch; 513 do not.
  const std::string fits = "u:" + std::string(510, 'k');
  const std::string over = "u:" + std::string(511, 'k');
  ASSERT_EQ(512u, fits.size());
  EXPECT_EQ(std::string(510, 'k'), extract("Basic " + base64(fits)));
  EXPECT_EQ("<none>", extract("Basic " + base64(over)));
  EXPECT_EQ("<none>", extract("Basic " + base64(std::string(100000, 'x'))));
}

TEST(ExtractKeyTest, Bearer) {
  EXPECT_EQ("tok-123", extract("Bearer tok-123"));
  EXPECT_EQ("tok", extract("Bearer    tok  \t"));
  EXPECT_EQ("<none>", extract("Bearer "));
  EXPECT_EQ("<none>", extract("Bearer    "));
  EXPECT_EQ("<none>", extract("Bearer"));
  EXPECT_EQ("<none>", extract("Bearertok"));
}

TEST(ExtractKeyTest, SchemesAreCaseInsensitive) {
  const std::string b = base64("u:KeY");
  EXPECT_EQ("KeY", extract("basic " + b));
  EXPECT_EQ("KeY", extract("BASIC " + b));
  EXPECT_EQ("KeY", extract("bAsIc " + b));
  EXPECT_EQ("Tok", extract("bearer Tok"));
  EXPECT_EQ("Tok", extract("BEARER Tok"));
  EXPECT_EQ("Tok", extract("BeArEr Tok"));
  // The key itself keeps its case.
  EXPECT_NE("key", extract("Basic " + b));
}

TEST(ExtractKeyTest, SurroundingWhitespaceIsIgnored) {
  EXPECT_EQ("k", extract("  Basic   " + base64("u:k") + "  "));
  EXPECT_EQ("t", extract("\tBearer t\t"));
}

TEST(ExtractKeyTest, UnknownSchemeIsRefused) {
  EXPECT_EQ("<none>", extract("Digest username=\"u\""));
  EXPECT_EQ("<none>", extract("Negotiate abc"));
  EXPECT_EQ("<none>", extract(base64("u:k")));  // no scheme
  EXPECT_EQ("<none>", extract(""));
  EXPECT_EQ("<none>", extract("Basi c " + base64("u:k")));
  EXPECT_EQ("<none>", extract("XBasic " + base64("u:k")));
}

}  // namespace
}  // namespace http
}  // namespace sluice
