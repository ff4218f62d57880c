// Destination and proxy URLs as sluice-load's command line takes them.

#include "tools/load/url.h"

#include "gtest/gtest.h"

namespace sluice {
namespace load {
namespace {

TEST(UrlTest, Http) {
  Url u;
  std::string err;
  ASSERT_TRUE(parseUrl("http://127.0.0.1:9900/hi?x=1", u, err)) << err;
  EXPECT_EQ(u.scheme, "http");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 9900);
  EXPECT_EQ(u.path, "/hi?x=1");
  EXPECT_EQ(u.authority(), "127.0.0.1:9900");
  EXPECT_FALSE(u.tls());
}

TEST(UrlTest, DefaultsAndCase) {
  Url u;
  std::string err;
  ASSERT_TRUE(parseUrl("HTTPS://Example.com", u, err)) << err;
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.port, 443);
  EXPECT_EQ(u.path, "/");
  EXPECT_EQ(u.authority(), "Example.com");
  EXPECT_EQ(u.hostPort(), "Example.com:443");
  EXPECT_TRUE(u.tls());
  ASSERT_TRUE(parseUrl("http://a?q", u, err));
  EXPECT_EQ(u.path, "/?q");
  ASSERT_TRUE(parseUrl("ws://h/ws", u, err));
  EXPECT_EQ(u.port, 80);
}

TEST(UrlTest, Ipv6) {
  Url u;
  std::string err;
  ASSERT_TRUE(parseUrl("http://[::1]:8080/x", u, err)) << err;
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 8080);
  EXPECT_EQ(u.authority(), "[::1]:8080");
  ASSERT_TRUE(parseUrl("https://[2001:db8::1]/", u, err));
  EXPECT_EQ(u.hostPort(), "[2001:db8::1]:443");
  EXPECT_FALSE(parseUrl("http://[::1/", u, err));
  EXPECT_FALSE(parseUrl("http://[::1]x/", u, err));
}

TEST(UrlTest, Userinfo) {
  Url u;
  std::string err;
  ASSERT_TRUE(parseUrl("http://user:k%40y%3Ax@proxy:3128", u, err)) << err;
  EXPECT_TRUE(u.has_userinfo);
  EXPECT_EQ(u.user, "user");
  EXPECT_EQ(u.password, "k@y:x");
  EXPECT_EQ(u.host, "proxy");
  // The last @ separates: an unencoded @ in the key still works.
  ASSERT_TRUE(parseUrl("socks5://u:a@b@h:1", u, err)) << err;
  EXPECT_EQ(u.password, "a@b");
  EXPECT_EQ(u.host, "h");
  ASSERT_TRUE(parseUrl("http://onlyuser@h", u, err));
  EXPECT_EQ(u.user, "onlyuser");
  EXPECT_EQ(u.password, "");
  EXPECT_FALSE(parseUrl("http://u:%zz@h", u, err));
  EXPECT_FALSE(parseUrl("http://u:%4@h", u, err));
}

TEST(UrlTest, Rejects) {
  Url u;
  std::string err;
  EXPECT_FALSE(parseUrl("127.0.0.1:80", u, err));
  EXPECT_FALSE(parseUrl("ftp://h/", u, err));
  EXPECT_FALSE(parseUrl("http://:80/", u, err));
  EXPECT_FALSE(parseUrl("http://h:/", u, err));
  EXPECT_FALSE(parseUrl("http://h:0/", u, err));
  EXPECT_FALSE(parseUrl("http://h:65536/", u, err));
  EXPECT_FALSE(parseUrl("http://h:8x/", u, err));
}

TEST(ProxyTest, Kinds) {
  Proxy p;
  std::string err;
  ASSERT_TRUE(parseProxy("", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Direct);
  ASSERT_TRUE(parseProxy("direct", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Direct);
  // gosst: a bare host:port is SOCKS5.
  ASSERT_TRUE(parseProxy("127.0.0.1:6789", p, err)) << err;
  EXPECT_EQ(p.kind, ProxyKind::Socks5);
  EXPECT_EQ(p.url.port, 6789);
  ASSERT_TRUE(parseProxy("http://u:key@127.0.0.1:8080", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Http);
  EXPECT_EQ(p.url.password, "key");
  ASSERT_TRUE(parseProxy("https://proxy", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Https);
  EXPECT_EQ(p.url.port, 443);
  ASSERT_TRUE(parseProxy("socks5h://h", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Socks5h);
  EXPECT_EQ(p.url.port, 1080);
  ASSERT_TRUE(parseProxy("h2://h:8443", p, err));
  EXPECT_EQ(p.kind, ProxyKind::Http2);
}

TEST(ProxyTest, Rejects) {
  Proxy p;
  std::string err;
  EXPECT_FALSE(parseProxy("ws://h:1", p, err));
  EXPECT_FALSE(parseProxy("http://h:1/path", p, err));
  EXPECT_FALSE(parseProxy("socks5://" + std::string(256, 'u') + ":k@h:1", p, err));
}

TEST(Base64Test, Rfc4648Vectors) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foob"), "Zm9vYg==");
  EXPECT_EQ(base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
}

}  // namespace
}  // namespace load
}  // namespace sluice
