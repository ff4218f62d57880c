// The client side of the SOCKS5 wire format, checked against the server side's parsers (and
// the server side's writers against the client's parsers): what sluice says to a SOCKS5 parent
// is what its own SOCKS5 port understands.
#include <string>

#include "gtest/gtest.h"

#include "source/common/socks5/wire.h"

namespace sluice {
namespace socks5 {
namespace {

std::string_view view(const uint8_t* p, size_t n) {
  return std::string_view(reinterpret_cast<const char*>(p), n);
}

TEST(Socks5ClientTest, GreetingOffersUserPassOnlyWithCredentials) {
  uint8_t out[kMaxClientMessageBytes];
  Greeting g;
  size_t n = writeGreeting(out, false);
  ASSERT_EQ(parseGreeting(view(out, n), g), ParseStatus::Ok);
  EXPECT_TRUE(g.offers_no_auth);
  EXPECT_FALSE(g.offers_user_pass);
  EXPECT_EQ(g.size, n);
  n = writeGreeting(out, true);
  ASSERT_EQ(parseGreeting(view(out, n), g), ParseStatus::Ok);
  EXPECT_TRUE(g.offers_user_pass);
  EXPECT_EQ(g.size, n);
}

TEST(Socks5ClientTest, MethodSelection) {
  uint8_t method = 0xaa;
  size_t size = 0;
  EXPECT_EQ(parseMethodSelection("", method, size), ParseStatus::Incomplete);
  EXPECT_EQ(parseMethodSelection("\x05", method, size), ParseStatus::Incomplete);
  EXPECT_EQ(parseMethodSelection("\x04\x00", method, size), ParseStatus::Error);
  ASSERT_EQ(parseMethodSelection(std::string_view("\x05\x02tail", 6), method, size),
            ParseStatus::Ok);
  EXPECT_EQ(method, kMethodUserPass);
  EXPECT_EQ(size, 2u);
  ASSERT_EQ(parseMethodSelection("\x05\xff", method, size), ParseStatus::Ok);
  EXPECT_EQ(method, kMethodNoneAcceptable);
}

TEST(Socks5ClientTest, UserPassRoundTrip) {
  uint8_t out[kMaxClientMessageBytes];
  const std::string user(255, 'u');
  const std::string password(255, 'p');
  const size_t n = writeUserPass(out, user, password);
  EXPECT_EQ(n, 3u + 255 + 255);
  UserPass parsed;
  ASSERT_EQ(parseUserPass(view(out, n), parsed), ParseStatus::Ok);
  EXPECT_EQ(parsed.user, user);
  EXPECT_EQ(parsed.password, password);
  EXPECT_EQ(parsed.size, n);
  // Empty fields are legal on the wire.
  const size_t m = writeUserPass(out, "", "");
  ASSERT_EQ(parseUserPass(view(out, m), parsed), ParseStatus::Ok);
  EXPECT_EQ(parsed.size, 3u);
}

TEST(Socks5ClientTest, UserPassStatus) {
  bool accepted = false;
  size_t size = 0;
  EXPECT_EQ(parseUserPassStatus("\x01", accepted, size), ParseStatus::Incomplete);
  EXPECT_EQ(parseUserPassStatus(std::string_view("\x05\x00", 2), accepted, size),
            ParseStatus::Error);
  ASSERT_EQ(parseUserPassStatus(std::string_view("\x01\x00", 2), accepted, size), ParseStatus::Ok);
  EXPECT_TRUE(accepted);
  EXPECT_EQ(size, 2u);
  ASSERT_EQ(parseUserPassStatus("\x01\x01", accepted, size), ParseStatus::Ok);
  EXPECT_FALSE(accepted);
}

TEST(Socks5ClientTest, UdpAssociateParsesAsTheServerSeesIt) {
  uint8_t out[kMaxClientMessageBytes];
  Request parsed;
  Reply reply;
  // Not known yet: all zeros.
  size_t n = writeUdpAssociate(out, network::Address());
  ASSERT_EQ(parseRequest(view(out, n), parsed, reply), ParseStatus::Ok);
  EXPECT_EQ(parsed.command, static_cast<uint8_t>(Command::UdpAssociate));
  EXPECT_EQ(parsed.target.type, AddressType::IPv4);
  EXPECT_TRUE(parsed.target.unspecified());
  EXPECT_EQ(parsed.target.port, 0);
  EXPECT_EQ(parsed.size, n);
  auto v6 = network::Address::parseHostPort("[2001:db8::5]:4000");
  ASSERT_TRUE(v6.ok());
  n = writeUdpAssociate(out, *v6);
  ASSERT_EQ(parseRequest(view(out, n), parsed, reply), ParseStatus::Ok);
  EXPECT_EQ(parsed.target.type, AddressType::IPv6);
  EXPECT_EQ(parsed.target.address(), *v6);
}

TEST(Socks5ClientTest, ConnectToAnAddressOrAName) {
  uint8_t out[kMaxClientMessageBytes];
  Request parsed;
  Reply reply;
  auto v4 = network::Address::parseHostPort("192.0.2.7:8443");
  ASSERT_TRUE(v4.ok());
  size_t n = writeConnect(out, *v4, "ignored.example", 1);
  ASSERT_EQ(parseRequest(view(out, n), parsed, reply), ParseStatus::Ok);
  EXPECT_EQ(parsed.command, static_cast<uint8_t>(Command::Connect));
  EXPECT_EQ(parsed.target.type, AddressType::IPv4);
  EXPECT_EQ(parsed.target.address(), *v4);
  EXPECT_EQ(parsed.size, n);

  auto v6 = network::Address::parseHostPort("[2001:db8::5]:443");
  ASSERT_TRUE(v6.ok());
  n = writeConnect(out, *v6, {}, 0);
  ASSERT_EQ(parseRequest(view(out, n), parsed, reply), ParseStatus::Ok);
  EXPECT_EQ(parsed.target.type, AddressType::IPv6);
  EXPECT_EQ(parsed.target.address(), *v6);

  const std::string name(255, 'n');
  n = writeConnect(out, network::Address(), name, 80);
  EXPECT_LE(n, kMaxClientMessageBytes);
  ASSERT_EQ(parseRequest(view(out, n), parsed, reply), ParseStatus::Ok);
  EXPECT_EQ(parsed.target.type, AddressType::Domain);
  EXPECT_EQ(parsed.target.domain, name);
  EXPECT_EQ(parsed.target.port, 80);
}

TEST(Socks5ClientTest, ReplyAsTheServerWritesIt) {
  uint8_t out[kMaxReplyBytes];
  auto bound = network::Address::parseHostPort("127.0.0.1:40000");
  ASSERT_TRUE(bound.ok());
  const size_t n = writeReply(out, Reply::ConnectionRefused, *bound);
  uint8_t code = 0;
  Target target;
  size_t size = 0;
  for (size_t cut = 0; cut < n; ++cut) {
    EXPECT_EQ(parseReply(view(out, cut), code, target, size), ParseStatus::Incomplete) << cut;
  }
  ASSERT_EQ(parseReply(view(out, n), code, target, size), ParseStatus::Ok);
  EXPECT_EQ(code, static_cast<uint8_t>(Reply::ConnectionRefused));
  EXPECT_EQ(target.address(), *bound);
  EXPECT_EQ(size, n);
  // A domain BND.ADDR (allowed by RFC 1928) parses too; an unknown ATYP does not.
  const std::string domain_reply("\x05\x00\x00\x03\x04host\x01\xbb", 11);
  ASSERT_EQ(parseReply(domain_reply, code, target, size), ParseStatus::Ok);
  EXPECT_EQ(target.domain, "host");
  EXPECT_EQ(size, domain_reply.size());
  EXPECT_EQ(parseReply(std::string_view("\x05\x00\x00\x09\x00\x00", 6), code, target, size),
            ParseStatus::Error);
  EXPECT_EQ(parseReply(std::string_view("\x04\x5a\x00\x00", 4), code, target, size),
            ParseStatus::Error);
}

}  // namespace
}  // namespace socks5
}  // namespace sluice
