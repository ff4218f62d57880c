#include "filters/request/auth/api_keys.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace filters {
namespace auth {
namespace {

// sha256("abc"), as `printf %s abc | sha256sum` prints it.
constexpr char kAbcHex[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

std::string error(const absl::StatusOr<Digest>& d) {
  return d.ok() ? "ok" : std::string(d.status().message());
}

TEST(ConfiguredKeyDigestTest, ClearKeysAreHashed) {
  auto d = configuredKeyDigest("abc");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(sha256("abc"), *d);
  EXPECT_EQ(0xba, (*d)[0]);
  EXPECT_EQ(0xad, (*d)[31]);
}

TEST(ConfiguredKeyDigestTest, Sha256FormIsTheDigestItself) {
  auto d = configuredKeyDigest(std::string("sha256:") + kAbcHex);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(sha256("abc"), *d);
  // Upper-case hex is the same digest.
  std::string upper = kAbcHex;
  for (char& c : upper) c = static_cast<char>(toupper(c));
  auto u = configuredKeyDigest("sha256:" + upper);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*d, *u);
  // Not the digest of the text "sha256:...".
  EXPECT_NE(sha256(std::string("sha256:") + kAbcHex), *d);
}

TEST(ConfiguredKeyDigestTest, MalformedSha256IsAnError) {
  const std::string hex = kAbcHex;
  EXPECT_NE("ok", error(configuredKeyDigest("sha256:")));
  EXPECT_NE("ok", error(configuredKeyDigest("sha256:" + hex.substr(1))));  // 63
  EXPECT_NE("ok", error(configuredKeyDigest("sha256:" + hex + "0")));      // 65
  EXPECT_NE("ok", error(configuredKeyDigest("sha256:" + hex.substr(0, 63) + "g")));
  EXPECT_NE("ok", error(configuredKeyDigest("sha256: " + hex.substr(1))));
  EXPECT_NE("ok", error(configuredKeyDigest("sha256:" + hex.substr(0, 62) + "\0a")));
  // The error explains without quoting the key.
  const std::string e = error(configuredKeyDigest("sha256:secretsecret"));
  EXPECT_NE(std::string::npos, e.find("64 hex digits")) << e;
  EXPECT_EQ(std::string::npos, e.find("secretsecret")) << e;
  // Only the exact lower-case prefix makes the form: anything else is a clear key.
  EXPECT_EQ("ok", error(configuredKeyDigest("SHA256:abc")));
  EXPECT_EQ("ok", error(configuredKeyDigest("sha256abc")));
}

std::string parseError(std::string_view text) {
  auto r = parseApiKeysFile(text, "keys.txt");
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST(ParseApiKeysFileTest, GoodLines) {
  auto r = parseApiKeysFile(
      "# a comment\n"
      "\n"
      "   \t  \n"
      "ci:key-one\n"
      "bare-key\n"
      "  ops :  spaced-key  \r\n"
      "\t# indented comment\n"
      "colons:a:b:c\n"
      "sha256:" +
          std::string(kAbcHex) +
          "\n"
          "named:sha256:" +
          std::string(kAbcHex) +
          "\n"
          "key with # inside and spaces\n"
          "last-line-without-newline",
      "keys.txt");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(8u, r->size());
  const auto& e = *r;
  EXPECT_EQ("ci", e[0].name);
  EXPECT_EQ("key-one", e[0].key);
  EXPECT_EQ(4, e[0].line);
  EXPECT_EQ("", e[1].name);
  EXPECT_EQ("bare-key", e[1].key);
  EXPECT_EQ(5, e[1].line);
  EXPECT_EQ("ops", e[2].name);
  EXPECT_EQ("spaced-key", e[2].key);
  EXPECT_EQ("colons", e[3].name);
  EXPECT_EQ("a:b:c", e[3].key);
  EXPECT_EQ(8, e[3].line);
  EXPECT_EQ("", e[4].name);  // a bare digest, not a key named "sha256"
  EXPECT_EQ("sha256:" + std::string(kAbcHex), e[4].key);
  EXPECT_EQ("named", e[5].name);
  EXPECT_EQ("sha256:" + std::string(kAbcHex), e[5].key);
  EXPECT_EQ("key with # inside and spaces", e[6].key);
  EXPECT_EQ("last-line-without-newline", e[7].key);
  EXPECT_EQ(12, e[7].line);
}

TEST(ParseApiKeysFileTest, ATrailingGroupNamesTheKeysPolicyGroup) {
  auto r = parseApiKeysFile(
      "ci:key-one group=builders\n"
      "bare-key\tgroup=staff  \n"
      "sha256:" +
          std::string(kAbcHex) +
          "   group=ops\n"
          "plain:key-two\n"
          "spaced key group=x\n"
          "groupie:group=inside\n",
      "keys.txt");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(6u, r->size());
  const auto& e = *r;
  EXPECT_EQ("ci", e[0].name);
  EXPECT_EQ("key-one", e[0].key);
  EXPECT_EQ("builders", e[0].group);
  EXPECT_EQ("bare-key", e[1].key);
  EXPECT_EQ("staff", e[1].group);
  EXPECT_EQ("sha256:" + std::string(kAbcHex), e[2].key);
  EXPECT_EQ("ops", e[2].group);
  EXPECT_EQ("key-two", e[3].key);
  EXPECT_EQ("", e[3].group);
  EXPECT_EQ("spaced key", e[4].key);
  EXPECT_EQ("x", e[4].group);
  // No blank before it: part of the key.
  EXPECT_EQ("group=inside", e[5].key);
  EXPECT_EQ("", e[5].group);
}

TEST(ParseApiKeysFileTest, BadGroupsNameTheLineAndNeverTheKey) {
  EXPECT_EQ("keys.txt:2: group=: a group name of 1 to 64 characters",
            parseError("a:k1\nb:supersecret group=\n"));
  const std::string bad = parseError("a:supersecret group=no.dots\n");
  EXPECT_EQ("keys.txt:1: group=: a group name is letters, digits, '_' and '-'", bad);
  EXPECT_NE(std::string::npos,
            parseError("a:k group=" + std::string(65, 'g')).find("keys.txt:1: group=: "));
  // Only a group: the key is missing.
  EXPECT_EQ("keys.txt:1: empty key", parseError("a: group=ci\n"));
}

TEST(ParseApiKeysFileTest, EmptyFileHasNoKeys) {
  auto r = parseApiKeysFile("", "k");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  r = parseApiKeysFile("# nothing\n\n\n", "k");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(ParseApiKeysFileTest, BadLinesNameFileAndLine) {
  EXPECT_EQ("keys.txt:2: empty name before ':'", parseError("a:k1\n:k2\n"));
  EXPECT_EQ("keys.txt:1: empty key", parseError("a:\n"));
  EXPECT_EQ("keys.txt:1: empty key", parseError("a:   \n"));
  EXPECT_NE(std::string::npos, parseError("ok:k\n\n\nbad name:secret\n").find("keys.txt:4: "));
  EXPECT_NE(std::string::npos, parseError("n.x:k\n").find("keys.txt:1: "));
  EXPECT_NE(std::string::npos,
            parseError(std::string(65, 'n') + ":k\n").find("keys.txt:1: name longer than 64"));
  EXPECT_EQ("ok", parseError(std::string(64, 'n') + ":k\n"));
  EXPECT_NE(std::string::npos,
            parseError("a:" + std::string(1025, 'k')).find("keys.txt:1: key longer than 1024"));
  EXPECT_EQ("ok", parseError("a:" + std::string(1024, 'k')));
  EXPECT_EQ("keys.txt:1: key contains control characters", parseError("a:se\x01"
                                                                      "cret\n"));
  EXPECT_EQ("keys.txt:1: key contains control characters", parseError("a:se\tcret\n"));
  EXPECT_EQ("keys.txt:1: key contains control characters",
            parseError(std::string("a:se\0cret\n", 10)));
  EXPECT_EQ("keys.txt:1: key contains control characters", parseError("a:x\ry\n"));
  EXPECT_NE(std::string::npos, parseError("sha256:12\n").find("keys.txt:1: sha256: takes"));
  EXPECT_NE(std::string::npos,
            parseError("a:sha256:" + std::string(64, 'z')).find("keys.txt:1: sha256: takes"));
}

TEST(ParseApiKeysFileTest, ErrorsNeverQuoteTheKey) {
  for (const std::string text :
       {"we!rd:supersecret\n", "a:supersecret\x01\n", "supersecret:\n", "bad name:supersecret\n"}) {
    const std::string e = parseError(text);
    ASSERT_NE("ok", e) << text;
    EXPECT_EQ(std::string::npos, e.find("supersecret")) << e;
  }
}

TEST(ReadApiKeysFileTest, ReadsAFile) {
  const std::string path = testing::TempDir() + "/keys_ok.txt";
  {
    std::ofstream out(path);
    out << "# keys\nci:abc\n";
  }
  auto r = readApiKeysFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(1u, r->size());
  EXPECT_EQ("ci", (*r)[0].name);
  EXPECT_EQ(2, (*r)[0].line);
  std::remove(path.c_str());
}

TEST(ReadApiKeysFileTest, Failures) {
  const std::string missing = testing::TempDir() + "/no_such_keys_file";
  auto r = readApiKeysFile(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string::npos, std::string(r.status().message()).find(missing + ": cannot open"));

  auto dir = readApiKeysFile(testing::TempDir());
  EXPECT_FALSE(dir.ok());

  const std::string big = testing::TempDir() + "/keys_big.txt";
  {
    std::ofstream out(big);
    for (int i = 0; i < 70000; ++i) out << "key-" << i << "-abcdefgh\n";  // > 1 MiB
  }
  auto b = readApiKeysFile(big);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string::npos, std::string(b.status().message()).find("larger than"));
  std::remove(big.c_str());

  const std::string bad = testing::TempDir() + "/keys_bad.txt";
  {
    std::ofstream out(bad);
    out << "a:k\n\n:x\n";
  }
  auto e = readApiKeysFile(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(bad + ":3: empty name before ':'", std::string(e.status().message()));
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace auth
}  // namespace filters
}  // namespace sluice
