#include "source/common/network/proxy_protocol.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace network {
namespace {

const std::string kSig("\r\n\r\n\0\r\nQUIT\n", 12);

std::string v2(uint8_t command, uint8_t family, const std::string& body) {
  std::string out = kSig;
  out += static_cast<char>(0x20 | command);
  out += static_cast<char>(family);
  out += static_cast<char>(body.size() >> 8);
  out += static_cast<char>(body.size() & 0xff);
  return out + body;
}

std::string tcp4Body() {
  // 192.0.2.7:56324 -> 198.51.100.1:8080
  return std::string("\xc0\x00\x02\x07\xc6\x33\x64\x01\xdc\x04\x1f\x90", 12);
}

ProxyParse parse(const std::string& data, ProxyHeader& out, size_t max = 1024) {
  std::string_view error;
  return parseProxyHeader(data, max, out, error);
}

TEST(ProxyProtocolTest, V1Tcp4) {
  ProxyHeader h;
  const std::string header = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 8080\r\n";
  ASSERT_EQ(ProxyParse::Header, parse(header + "GET / HTTP/1.1\r\n", h));
  EXPECT_FALSE(h.local);
  EXPECT_EQ(header.size(), h.length);
  EXPECT_EQ("192.0.2.7:56324", h.source.asString());
  EXPECT_EQ("198.51.100.1:8080", h.destination.asString());
}

TEST(ProxyProtocolTest, V1Tcp6AndUnknown) {
  ProxyHeader h;
  ASSERT_EQ(ProxyParse::Header, parse("PROXY TCP6 2001:db8::7 2001:db8::1 1 443\r\n", h));
  EXPECT_EQ("[2001:db8::7]:1", h.source.asString());
  ASSERT_EQ(ProxyParse::Header, parse("PROXY UNKNOWN\r\n", h));
  EXPECT_TRUE(h.local);
  ASSERT_EQ(ProxyParse::Header, parse("PROXY UNKNOWN whatever follows\r\n", h));
  EXPECT_TRUE(h.local);
}

TEST(ProxyProtocolTest, V1PrefixesWaitAndOthersAreNotProxy) {
  ProxyHeader h;
  const std::string header = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 8080\r\n";
  for (size_t n = 0; n < header.size(); ++n) {
    EXPECT_EQ(ProxyParse::Incomplete, parse(header.substr(0, n), h)) << n;
  }
  EXPECT_EQ(ProxyParse::NotProxy, parse("GET / HTTP/1.1\r\n", h));
  EXPECT_EQ(ProxyParse::NotProxy, parse("POST / HTTP/1.1\r\n", h));
  EXPECT_EQ(ProxyParse::NotProxy, parse("PUT", h));
  EXPECT_EQ(ProxyParse::NotProxy, parse(std::string("\x05\x01\x00", 3), h));
  EXPECT_EQ(ProxyParse::NotProxy, parse(std::string("\x16\x03\x01", 3), h));
}

TEST(ProxyProtocolTest, V1Malformed) {
  ProxyHeader h;
  for (const char* bad : {
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n",       // a field short
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324 80 9\r\n",  // a field more
           "PROXY TCP4 2001:db8::7 198.51.100.1 1 2\r\n",       // wrong family
           "PROXY TCP4 192.0.2.7 198.51.100.1 65536 80\r\n",    // port too large
           "PROXY TCP4 192.0.2.7 198.51.100.1 080 80\r\n",      // leading zero
           "PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",        // two spaces
           "PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",         // not TCP
           "PROXY TCP4 192.0.2.7\n198.51.100.1 1 2\r\n",        // a bare LF
       }) {
    EXPECT_EQ(ProxyParse::Malformed, parse(bad, h)) << bad;
  }
  // No CRLF within the longest header: never waited for.
  EXPECT_EQ(ProxyParse::Malformed, parse("PROXY " + std::string(200, 'x'), h));
}

TEST(ProxyProtocolTest, V2Tcp4WithTlvsAndData) {
  ProxyHeader h;
  const std::string header = v2(1, 0x11, tcp4Body() + std::string("\x01\x00\x02h2", 5));
  ASSERT_EQ(ProxyParse::Header, parse(header + "\x05\x01\x00", h));
  EXPECT_EQ(header.size(), h.length);
  EXPECT_FALSE(h.local);
  EXPECT_EQ("192.0.2.7:56324", h.source.asString());
  EXPECT_EQ("198.51.100.1:8080", h.destination.asString());
  for (size_t n = 0; n < header.size(); ++n) {
    EXPECT_EQ(ProxyParse::Incomplete, parse(header.substr(0, n), h)) << n;
  }
}

TEST(ProxyProtocolTest, V2Tcp6) {
  std::string body(36, '\0');
  body[0] = 0x20;
  body[1] = 0x01;
  body[15] = 0x07;  // 2001::7
  body[16] = 0x20;
  body[17] = 0x01;
  body[31] = 0x01;
  body[32] = 0x01;  // port 256
  body[35] = 0x50;  // port 80
  ProxyHeader h;
  ASSERT_EQ(ProxyParse::Header, parse(v2(1, 0x21, body), h));
  EXPECT_EQ("[2001::7]:256", h.source.asString());
  EXPECT_EQ("[2001::1]:80", h.destination.asString());
}

TEST(ProxyProtocolTest, V2LocalUnixAndUdpKeepTheSocketsAddress) {
  ProxyHeader h;
  ASSERT_EQ(ProxyParse::Header, parse(v2(0, 0x00, ""), h));
  EXPECT_TRUE(h.local);
  ASSERT_EQ(ProxyParse::Header, parse(v2(1, 0x31, std::string(216, '\0')), h));
  EXPECT_TRUE(h.local);
  ASSERT_EQ(ProxyParse::Header, parse(v2(1, 0x12, tcp4Body()), h));
  EXPECT_TRUE(h.local);
}

TEST(ProxyProtocolTest, V2Malformed) {
  ProxyHeader h;
  std::string wrong_version = v2(1, 0x11, tcp4Body());
  wrong_version[12] = 0x11;
  EXPECT_EQ(ProxyParse::Malformed, parse(wrong_version, h));
  EXPECT_EQ(ProxyParse::Malformed, parse(v2(2, 0x11, tcp4Body()), h));  // unknown command
  EXPECT_EQ(ProxyParse::Malformed, parse(v2(1, 0x41, tcp4Body()), h));  // unknown family
  EXPECT_EQ(ProxyParse::Malformed, parse(v2(1, 0x11, "\x01\x02"), h));  // short addresses
  EXPECT_EQ(ProxyParse::Malformed, parse(v2(1, 0x21, tcp4Body()), h));  // short for IPv6
  // Longer than allowed: refused from its fixed part, not waited for.
  const std::string big = v2(1, 0x11, tcp4Body() + std::string(2000, '\0'));
  EXPECT_EQ(ProxyParse::Malformed, parse(big.substr(0, 16), h, 1024));
  EXPECT_EQ(ProxyParse::Header, parse(big, h, 4096));
}

Address at(const char* text) {
  auto a = Address::parseHostPort(text);
  EXPECT_TRUE(a.ok()) << text;
  return a.ok() ? *a : Address();
}

// What sluice writes toward a parent, read back by the parser its own PROXY listener runs.
TEST(ProxyProtocolWriteTest, RoundTripsBothVersionsAndFamilies) {
  const struct {
    const char* source;
    const char* destination;
    const char* parsed_source;  // after the one-family rule
    const char* parsed_destination;
  } cases[] = {
      {"192.0.2.7:56324", "198.51.100.1:8080", "192.0.2.7:56324", "198.51.100.1:8080"},
      {"[2001:db8::7]:1", "[2001:db8::1]:443", "[2001:db8::7]:1", "[2001:db8::1]:443"},
      // Mixed: IPv6, the IPv4 one mapped.
      {"192.0.2.7:65535", "[2001:db8::1]:443", "[::ffff:192.0.2.7]:65535", "[2001:db8::1]:443"},
      {"[2001:db8::7]:2", "198.51.100.1:80", "[2001:db8::7]:2", "[::ffff:198.51.100.1]:80"},
      // A mapped IPv6 address with an IPv4 one: both IPv4.
      {"[::ffff:192.0.2.7]:3", "198.51.100.1:80", "192.0.2.7:3", "198.51.100.1:80"},
  };
  for (const auto& c : cases) {
    for (int version : {1, 2}) {
      SCOPED_TRACE(std::string(c.source) + " v" + std::to_string(version));
      const std::string header = writeProxyHeader(version, at(c.source), at(c.destination));
      ProxyHeader h;
      ASSERT_EQ(ProxyParse::Header, parse(header + "GET / HTTP/1.1\r\n", h));
      EXPECT_FALSE(h.local);
      EXPECT_EQ(header.size(), h.length);
      EXPECT_EQ(c.parsed_source, h.source.asString());
      EXPECT_EQ(c.parsed_destination, h.destination.asString());
      if (version == 1) {
        EXPECT_EQ(0u, header.rfind("PROXY TCP", 0)) << header;
        EXPECT_LE(header.size(), kProxyV1MaxBytes);
      } else {
        EXPECT_EQ(kSig, header.substr(0, 12));
      }
    }
  }
}

TEST(ProxyProtocolWriteTest, V1IsTheSpecsText) {
  EXPECT_EQ("PROXY TCP4 192.0.2.7 198.51.100.1 56324 8080\r\n",
            writeProxyHeader(1, at("192.0.2.7:56324"), at("198.51.100.1:8080")));
  EXPECT_EQ(v2(1, 0x11, tcp4Body()),
            writeProxyHeader(2, at("192.0.2.7:56324"), at("198.51.100.1:8080")));
}

TEST(ProxyProtocolWriteTest, UnknownDestinationAndUnknownSource) {
  for (int version : {1, 2}) {
    ProxyHeader h;
    ASSERT_EQ(ProxyParse::Header,
              parse(writeProxyHeader(version, at("192.0.2.7:9"), Address()), h));
    EXPECT_EQ("192.0.2.7:9", h.source.asString());
    EXPECT_EQ("0.0.0.0:0", h.destination.asString());
    ASSERT_EQ(ProxyParse::Header, parse(writeProxyHeader(version, Address(), Address()), h));
    EXPECT_TRUE(h.local);
  }
}

}  // namespace
}  // namespace network
}  // namespace sluice
