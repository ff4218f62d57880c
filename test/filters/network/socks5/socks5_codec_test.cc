#include "source/common/socks5/wire.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

#include "filters/network/socks5/socks5_proxy.h"

namespace sluice {
namespace filters {
namespace socks5 {
namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list) s.push_back(static_cast<char>(b));
  return s;
}

TEST(Socks5GreetingTest, MethodsAndSize) {
  Greeting g;
  ASSERT_EQ(parseGreeting(bytes({5, 2, 0, 2}), g), ParseStatus::Ok);
  EXPECT_TRUE(g.offers_no_auth);
  EXPECT_TRUE(g.offers_user_pass);
  EXPECT_EQ(g.size, 4u);
  // Bytes after the greeting (an optimistic client's next message) are not part of it.
  ASSERT_EQ(parseGreeting(bytes({5, 1, 2, 1, 4}), g), ParseStatus::Ok);
  EXPECT_FALSE(g.offers_no_auth);
  EXPECT_TRUE(g.offers_user_pass);
  EXPECT_EQ(g.size, 3u);
  // GSSAPI only: parsed, nothing we offer.
  ASSERT_EQ(parseGreeting(bytes({5, 1, 1}), g), ParseStatus::Ok);
  EXPECT_FALSE(g.offers_no_auth || g.offers_user_pass);
}

TEST(Socks5GreetingTest, IncompleteAndErrors) {
  Greeting g;
  EXPECT_EQ(parseGreeting("", g), ParseStatus::Incomplete);
  EXPECT_EQ(parseGreeting(bytes({5}), g), ParseStatus::Incomplete);
  EXPECT_EQ(parseGreeting(bytes({5, 3, 0, 2}), g), ParseStatus::Incomplete);
  EXPECT_EQ(parseGreeting(bytes({4, 1, 0}), g), ParseStatus::Error);  // SOCKS4
  EXPECT_EQ(parseGreeting(bytes({4}), g), ParseStatus::Error);        // known at once
  EXPECT_EQ(parseGreeting("GET / HTTP/1.1\r\n", g), ParseStatus::Error);
  EXPECT_EQ(parseGreeting(bytes({5, 0}), g), ParseStatus::Error);  // no methods
  // 255 methods is the most there can be.
  std::string big = bytes({5, 255}) + std::string(255, '\x02');
  ASSERT_EQ(parseGreeting(big, g), ParseStatus::Ok);
  EXPECT_EQ(g.size, kMaxGreetingBytes);
}

TEST(Socks5UserPassTest, Parses) {
  UserPass up;
  // The parsed views point into the input: it must outlive them.
  const std::string input = bytes({1, 4}) + "user" + bytes({3}) + "key" + "rest";
  ASSERT_EQ(parseUserPass(input, up), ParseStatus::Ok);
  EXPECT_EQ(up.user, "user");
  EXPECT_EQ(up.password, "key");
  EXPECT_EQ(up.size, 10u);
  // Empty user and password are well-formed (the auth filter refuses the empty key).
  ASSERT_EQ(parseUserPass(bytes({1, 0, 0}), up), ParseStatus::Ok);
  EXPECT_EQ(up.password, "");
  EXPECT_EQ(up.size, 3u);
}

TEST(Socks5UserPassTest, IncompleteAndErrors) {
  UserPass up;
  EXPECT_EQ(parseUserPass("", up), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPass(bytes({1}), up), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPass(bytes({1, 4}) + "us", up), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPass(bytes({1, 4}) + "user", up), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPass(bytes({1, 4}) + "user" + bytes({3}) + "ke", up), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPass(bytes({5, 1, 2}), up), ParseStatus::Error);
  std::string longest =
      bytes({1, 255}) + std::string(255, 'u') + bytes({255}) + std::string(255, 'p');
  ASSERT_EQ(parseUserPass(longest, up), ParseStatus::Ok);
  EXPECT_EQ(up.size, kMaxAuthBytes);
}

TEST(Socks5RequestTest, AddressTypes) {
  Request r;
  Reply reply;
  ASSERT_EQ(parseRequest(bytes({5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90}), r, reply), ParseStatus::Ok);
  EXPECT_EQ(r.command, 1);
  EXPECT_EQ(r.target.type, AddressType::IPv4);
  EXPECT_EQ(r.target.port, 8080);
  EXPECT_EQ(r.size, 10u);
  EXPECT_EQ(r.target.address().asString(), "127.0.0.1:8080");
  char buf[64];
  EXPECT_EQ(r.target.hostText(buf, sizeof(buf)), "127.0.0.1");
  EXPECT_FALSE(r.target.unspecified());

  ASSERT_EQ(parseRequest(bytes({5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80}),
                         r, reply),
            ParseStatus::Ok);
  EXPECT_EQ(r.command, 3);
  EXPECT_EQ(r.target.type, AddressType::IPv6);
  EXPECT_EQ(r.target.hostText(buf, sizeof(buf)), "::1");
  EXPECT_EQ(r.target.address().asString(), "[::1]:80");
  EXPECT_EQ(r.size, 22u);

  // The domain points into the input: keep it alive.
  const std::string domain_request = bytes({5, 1, 0, 3, 11}) + "example.com" + bytes({1, 187});
  ASSERT_EQ(parseRequest(domain_request, r, reply), ParseStatus::Ok);
  EXPECT_EQ(r.target.type, AddressType::Domain);
  EXPECT_EQ(r.target.domain, "example.com");
  EXPECT_EQ(r.target.port, 443);
  EXPECT_EQ(r.target.hostText(buf, sizeof(buf)), "example.com");
  EXPECT_FALSE(r.target.address().valid());

  ASSERT_EQ(parseRequest(bytes({5, 2, 0, 1, 0, 0, 0, 0, 0, 0}), r, reply), ParseStatus::Ok);
  EXPECT_TRUE(r.target.unspecified());
}

TEST(Socks5RequestTest, IncompleteAtEveryLength) {
  const std::string full = bytes({5, 1, 0, 3, 11}) + "example.com" + bytes({1, 187});
  Request r;
  Reply reply;
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_EQ(parseRequest(full.substr(0, n), r, reply), ParseStatus::Incomplete);
  }
  EXPECT_EQ(parseRequest(full, r, reply), ParseStatus::Ok);
}

TEST(Socks5RequestTest, Errors) {
  Request r;
  Reply reply = Reply::Succeeded;
  EXPECT_EQ(parseRequest(bytes({4, 1, 0, 1}), r, reply), ParseStatus::Error);
  EXPECT_EQ(reply, Reply::GeneralFailure);
  EXPECT_EQ(parseRequest(bytes({5, 1, 0, 9, 1, 2, 3, 4, 0, 80}), r, reply), ParseStatus::Error);
  EXPECT_EQ(reply, Reply::AddressTypeNotSupported);
  // The address type is known bad before its bytes arrive.
  EXPECT_EQ(parseRequest(bytes({5, 1, 0, 2}), r, reply), ParseStatus::Error);
  EXPECT_EQ(reply, Reply::AddressTypeNotSupported);
  EXPECT_EQ(parseRequest(bytes({5, 1, 0, 3, 0, 0, 80}), r, reply), ParseStatus::Error);
  EXPECT_EQ(reply, Reply::GeneralFailure);
  // An unknown command is parsed; the caller answers 0x07.
  EXPECT_EQ(parseRequest(bytes({5, 9, 0, 1, 1, 2, 3, 4, 0, 80}), r, reply), ParseStatus::Ok);
  EXPECT_EQ(r.command, 9);
}

TEST(Socks5UdpHeaderTest, Parses) {
  UdpHeader h;
  const std::string d = bytes({0, 0, 0, 1, 10, 0, 0, 1, 0, 53}) + "payload";
  ASSERT_EQ(parseUdpHeader(d, h), ParseStatus::Ok);
  EXPECT_EQ(h.frag, 0);
  EXPECT_EQ(h.size, 10u);
  EXPECT_EQ(d.substr(h.size), "payload");
  const std::string fragment = bytes({0, 0, 1, 3, 1, 'a', 0, 53});
  ASSERT_EQ(parseUdpHeader(fragment, h), ParseStatus::Ok);
  EXPECT_EQ(h.frag, 1);
  EXPECT_EQ(h.target.domain, "a");
  // A datagram is never Incomplete: short means malformed.
  EXPECT_EQ(parseUdpHeader(bytes({0, 0, 0, 1, 10, 0}), h), ParseStatus::Error);
  EXPECT_EQ(parseUdpHeader(bytes({0, 0, 0}), h), ParseStatus::Error);
  EXPECT_EQ(parseUdpHeader(bytes({1, 0, 0, 1, 10, 0, 0, 1, 0, 53}), h), ParseStatus::Error);
  EXPECT_EQ(parseUdpHeader(bytes({0, 0, 0, 7, 10, 0, 0, 1, 0, 53}), h), ParseStatus::Error);
}

TEST(Socks5WriteTest, ReplyAndUdpHeader) {
  uint8_t out[kMaxReplyBytes];
  size_t n = writeReply(out, Reply::Succeeded, network::Address::ipv4(0x7f000001, 1080));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), n), bytes({5, 0, 0, 1, 127, 0, 0, 1, 4, 56}));
  n = writeReply(out, Reply::ConnectionRefused, network::Address());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), n), bytes({5, 5, 0, 1, 0, 0, 0, 0, 0, 0}));
  auto v6 = network::Address::parseHostPort("[2001:db8::1]:443");
  ASSERT_TRUE(v6.ok());
  n = writeReply(out, Reply::Succeeded, *v6);
  ASSERT_EQ(n, 22u);
  EXPECT_EQ(out[3], 4);
  EXPECT_EQ(out[4], 0x20);
  EXPECT_EQ(out[20], 1);
  EXPECT_EQ(out[21], 187);
  // IPv4-mapped IPv6 (a dual-stack socket) is written as the IPv4 address it is.
  auto mapped = network::Address::parseHostPort("[::ffff:10.1.2.3]:53");
  ASSERT_TRUE(mapped.ok());
  n = writeUdpHeader(out, *mapped);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), n), bytes({0, 0, 0, 1, 10, 1, 2, 3, 0, 53}));
  // What is written parses back.
  UdpHeader h;
  ASSERT_EQ(parseUdpHeader(std::string_view(reinterpret_cast<char*>(out), n), h), ParseStatus::Ok);
  EXPECT_EQ(h.target.address().asString(), "10.1.2.3:53");
}

proxy::ProxyRequest failedWith(upstream::FailureKind kind, int error = 0) {
  proxy::ProxyRequest request;
  request.failure = {kind, error};
  return request;
}

TEST(Socks5DenialTest, ReplyCodesFromTypedFailures) {
  using upstream::FailureKind;
  EXPECT_EQ(replyForDenial(proxy::Denial::Forbidden, proxy::ProxyRequest()), Reply::NotAllowed);
  EXPECT_EQ(replyForDenial(proxy::Denial::Unauthorized, proxy::ProxyRequest()), Reply::NotAllowed);
  EXPECT_EQ(replyForDenial(proxy::Denial::GatewayTimeout, failedWith(FailureKind::Timeout)),
            Reply::TtlExpired);
  EXPECT_EQ(replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::DnsFailure)),
            Reply::HostUnreachable);
  EXPECT_EQ(
      replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::Refused, ECONNREFUSED)),
      Reply::ConnectionRefused);
  EXPECT_EQ(
      replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::Unreachable, ENETUNREACH)),
      Reply::NetworkUnreachable);
  EXPECT_EQ(
      replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::Unreachable, EHOSTUNREACH)),
      Reply::HostUnreachable);
  // A connection closed during the connect, or sluice out of descriptors: a general failure.
  EXPECT_EQ(replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::Reset)),
            Reply::GeneralFailure);
  EXPECT_EQ(replyForDenial(proxy::Denial::BadGateway, failedWith(FailureKind::Local, EMFILE)),
            Reply::GeneralFailure);
  EXPECT_EQ(replyForDenial(proxy::Denial::ServiceUnavailable, proxy::ProxyRequest()),
            Reply::GeneralFailure);
  EXPECT_EQ(replyForDenial(proxy::Denial::BadRequest, proxy::ProxyRequest()),
            Reply::GeneralFailure);
}

TEST(UpstreamFailureTest, ConnectErrorsByKind) {
  using upstream::FailureKind;
  EXPECT_EQ(upstream::kindForConnectError(ECONNREFUSED), FailureKind::Refused);
  EXPECT_EQ(upstream::kindForConnectError(ENETUNREACH), FailureKind::Unreachable);
  EXPECT_EQ(upstream::kindForConnectError(EHOSTUNREACH), FailureKind::Unreachable);
  EXPECT_EQ(upstream::kindForConnectError(ETIMEDOUT), FailureKind::Timeout);
  EXPECT_EQ(upstream::kindForConnectError(EMFILE), FailureKind::Local);
  EXPECT_EQ(upstream::kindForConnectError(ECONNRESET), FailureKind::Reset);
  EXPECT_STREQ(upstream::failureName(FailureKind::DnsFailure), "dns_failure");
}

}  // namespace
}  // namespace socks5
}  // namespace filters
}  // namespace sluice
