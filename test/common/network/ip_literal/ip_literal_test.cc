#include "source/common/network/ip_literal.h"

#include <string>

#include <arpa/inet.h>

#include "gtest/gtest.h"

namespace sluice {
namespace network {
namespace {

// The canonical text of what `host` parses to, or "<not a literal>".
std::string literal(std::string_view host) {
  Address out;
  if (!parseIpLiteral(host, out)) return "<not a literal>";
  EXPECT_EQ(out.port(), 0) << host;
  return out.ipString();
}

std::string zoneOf(std::string_view host) {
  Address out;
  std::string_view zone = "stale";
  if (!parseIpLiteral(host, out, &zone)) return "<not a literal>";
  return std::string(zone);
}

TEST(IpLiteralTest, CanonicalForms) {
  EXPECT_EQ(literal("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(literal("8.8.4.4"), "8.8.4.4");
  EXPECT_EQ(literal("0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(literal("255.255.255.255"), "255.255.255.255");
  EXPECT_EQ(literal("::1"), "::1");
  EXPECT_EQ(literal("2001:db8::7"), "2001:db8::7");
  EXPECT_EQ(literal("::ffff:127.0.0.1"), "::ffff:127.0.0.1");
  EXPECT_EQ(literal("::"), "::");
}

TEST(IpLiteralTest, EveryInetAtonNotationOfLoopback) {
  for (const char* form : {"2130706433",  "0x7f000001",  "0X7F000001",       "017700000001",
                           "0x7f.1",      "127.1",       "127.0.1",          "0177.0.0.1",
                           "0177.0.0.01", "0x7f.0.0.1",  "0x7F.0x0.0x0.0x1", "0177.1",
                           "0x7f.0.1",    "127.0x0.0.1", "127.000.000.001",  "0000177.0.0.1",
                           "0x00007f.1",  "127.0.0.1.",  "2130706433.",      "127.1.",
                           "0x7f.1."}) {
    EXPECT_EQ(literal(form), "127.0.0.1") << form;
  }
}

TEST(IpLiteralTest, PlainDottedQuads) {
  EXPECT_EQ(literal("0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(literal("255.255.255.255"), "255.255.255.255");
  EXPECT_EQ(literal("10.20.30.40"), "10.20.30.40");
  EXPECT_EQ(literal("1.2.3.4."), "1.2.3.4");
  EXPECT_EQ(literal("010.0.0.1"), "8.0.0.1");  // octal, read the long way
  for (const char* junk : {"256.0.0.1", "1.256.0.1", "1.2.256.1", "1.2.3.256", "1.2.3.4.5",
                           "1..2.3", ".1.2.3", "1.2.3.4..", "1111.2.3.4"}) {
    EXPECT_EQ(literal(junk), "<not a literal>") << junk;
  }
}

TEST(IpLiteralTest, MixedNotations) {
  EXPECT_EQ(literal("10.0x10.020.1"), "10.16.16.1");
  EXPECT_EQ(literal("192.168.257"), "192.168.1.1");   // the last part fills two bytes
  EXPECT_EQ(literal("192.11010305"), "192.168.1.1");  // ... or three
  EXPECT_EQ(literal("0xc0.0xa80101"), "192.168.1.1");
  EXPECT_EQ(literal("0"), "0.0.0.0");
  EXPECT_EQ(literal("0x0"), "0.0.0.0");
  EXPECT_EQ(literal("00"), "0.0.0.0");
  EXPECT_EQ(literal("4294967295"), "255.255.255.255");
  EXPECT_EQ(literal("0xffffffff"), "255.255.255.255");
  EXPECT_EQ(literal("037777777777"), "255.255.255.255");
  EXPECT_EQ(literal("1.16777215"), "1.255.255.255");
  EXPECT_EQ(literal("1.2.65535"), "1.2.255.255");
  EXPECT_EQ(literal("1.2.3.255"), "1.2.3.255");
  EXPECT_EQ(literal("169.254.43518"), "169.254.169.254");
  EXPECT_EQ(literal("0xa9fea9fe"), "169.254.169.254");
}

TEST(IpLiteralTest, JunkIsNotALiteral) {
  for (const char* junk : {"",
                           ".",
                           "..",
                           "1.2.3.4.5",
                           "0x",
                           "0x.1",
                           "08.1",
                           "09",
                           "0x7g",
                           "4294967296",
                           "0x100000000",
                           "040000000000",
                           "1..2",
                           ".1.2",
                           "1.2.3.4..",
                           "256.1.1.1",
                           "1.256.1.1",
                           "1.2.256.1",
                           "1.2.3.256",
                           "1.16777216",
                           "1.2.65536",
                           "1.2.3.4 ",
                           " 1.2.3.4",
                           "1.2.3.-4",
                           "+1.2.3.4",
                           "1e3",
                           "one.two",
                           "example.com",
                           "localhost",
                           "0x7f.example",
                           "127.0.0.1a",
                           "a127.0.0.1",
                           "1.2.3.4/8",
                           "1.2.3.4:80",
                           "99999999999999999999",
                           "0xffffffffffffffff1",
                           "12345678901234567890123",
                           "::g",
                           ":::",
                           "1:2:3:4:5:6:7:8:9",
                           "[::1",
                           "::1]",
                           "[]",
                           "[1.2.3.4]",
                           "1.2.3.4%eth0",
                           "fe80::1%",
                           "fe80::1%a/b",
                           "fe80::1%eth0%eth1",
                           "fe80::1%0123456789abcdef"}) {
    EXPECT_EQ(literal(junk), "<not a literal>") << "'" << junk << "'";
  }
  // An embedded NUL must not end the text early.
  EXPECT_EQ(literal(std::string_view("127.0.0.1\0.com", 15)), "<not a literal>");
  EXPECT_EQ(literal(std::string_view("::1\0x", 5)), "<not a literal>");
}

TEST(IpLiteralTest, LeavesOutputAloneWhenNotALiteral) {
  Address out = Address::ipv4(0x01020304, 9);
  EXPECT_FALSE(parseIpLiteral("example.com", out));
  EXPECT_EQ(out.asString(), "1.2.3.4:9");
}

TEST(IpLiteralTest, BracketedIpv6) {
  EXPECT_EQ(literal("[::1]"), "::1");
  EXPECT_EQ(literal("[2001:db8::1]"), "2001:db8::1");
  EXPECT_EQ(literal("[::ffff:10.0.0.1]"), "::ffff:10.0.0.1");
  EXPECT_EQ(literal("[0:0:0:0:0:0:0:1]"), "::1");
}

TEST(IpLiteralTest, ZoneIds) {
  EXPECT_EQ(literal("fe80::1%eth0"), "fe80::1");
  EXPECT_EQ(zoneOf("fe80::1%eth0"), "eth0");
  EXPECT_EQ(literal("[fe80::1%lo]"), "fe80::1");
  EXPECT_EQ(zoneOf("[fe80::1%lo]"), "lo");
  EXPECT_EQ(zoneOf("fe80::1%2"), "2");
  EXPECT_EQ(literal("::1%lo"), "::1");
  EXPECT_EQ(zoneOf("fe80::1%0123456789abcde"), "0123456789abcde");  // IF_NAMESIZE - 1
  // Without a zone, the zone output is cleared.
  EXPECT_EQ(zoneOf("fe80::1"), "");
  EXPECT_EQ(zoneOf("10.0.0.1"), "");
}

TEST(IpLiteralTest, FamiliesAndPort) {
  Address out;
  ASSERT_TRUE(parseIpLiteral("0x7f.1", out));
  EXPECT_EQ(out.family(), AF_INET);
  EXPECT_EQ(out, Address::ipv4(0x7f000001, 0));
  ASSERT_TRUE(parseIpLiteral("[::1]", out));
  EXPECT_EQ(out.family(), AF_INET6);
  EXPECT_EQ(out.port(), 0);
}

}  // namespace
}  // namespace network
}  // namespace sluice
