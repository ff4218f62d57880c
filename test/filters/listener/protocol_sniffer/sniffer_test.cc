#include <string>

#include "gtest/gtest.h"
#include "openssl/ssl.h"

#include "filters/listener/protocol_sniffer/sniffer.h"
#include "source/common/tls/client_hello.h"

namespace sluice {
namespace filters {
namespace protocol_sniffer {
namespace {

// The first flight of a real BoringSSL client, captured in memory.
std::string clientHello(const char* sni, std::string alpn_wire) {
  bssl::UniquePtr<SSL_CTX> ctx(SSL_CTX_new(TLS_method()));
  bssl::UniquePtr<SSL> ssl(SSL_new(ctx.get()));
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);
  SSL_set_connect_state(ssl.get());
  if (sni != nullptr) SSL_set_tlsext_host_name(ssl.get(), sni);
  if (!alpn_wire.empty()) {
    SSL_set_alpn_protos(ssl.get(), reinterpret_cast<const uint8_t*>(alpn_wire.data()),
                        alpn_wire.size());
  }
  EXPECT_EQ(SSL_do_handshake(ssl.get()), -1);
  const uint8_t* data;
  size_t len;
  BIO_mem_contents(out, &data, &len);
  return std::string(reinterpret_cast<const char*>(data), len);
}

const std::string kAlpnBoth = std::string("\x02h2\x08http/1.1", 12);

TEST(ClientHelloTest, ReadsSniAndAlpn) {
  std::string hello = clientHello("proxy.example.test", kAlpnBoth);
  tls::ClientHelloInfo info;
  ASSERT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Parsed);
  EXPECT_EQ(info.server_name, "proxy.example.test");
  EXPECT_TRUE(info.has_alpn);
  EXPECT_TRUE(info.offers_h2);
  EXPECT_TRUE(info.offers_http11);

  hello = clientHello(nullptr, std::string("\x08http/1.1", 9));
  ASSERT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Parsed);
  EXPECT_TRUE(info.server_name.empty());
  EXPECT_FALSE(info.offers_h2);
  EXPECT_TRUE(info.offers_http11);

  hello = clientHello("a.test", "");
  ASSERT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Parsed);
  EXPECT_FALSE(info.has_alpn);
}

TEST(ClientHelloTest, EveryPrefixNeedsMore) {
  std::string hello = clientHello("a.test", kAlpnBoth);
  tls::ClientHelloInfo info;
  for (size_t n = 0; n < hello.size(); ++n) {
    ASSERT_EQ(tls::parseClientHello(hello.substr(0, n), info), tls::ClientHelloResult::NeedMore)
        << n;
  }
}

TEST(ClientHelloTest, RejectsWhatIsNotAClientHello) {
  tls::ClientHelloInfo info;
  EXPECT_EQ(tls::parseClientHello("GET / HTTP/1.1\r\n", info), tls::ClientHelloResult::NotTls);
  EXPECT_EQ(tls::parseClientHello(std::string("\x16\x02", 2), info),
            tls::ClientHelloResult::NotTls);
  // A handshake record of length 0, and one longer than TLS allows.
  EXPECT_EQ(tls::parseClientHello(std::string("\x16\x03\x01\x00\x00", 5), info),
            tls::ClientHelloResult::Malformed);
  EXPECT_EQ(tls::parseClientHello(std::string("\x16\x03\x01\x48\x01", 5), info),
            tls::ClientHelloResult::Malformed);
  // A ServerHello (type 2) where a ClientHello must be.
  std::string hello = clientHello("a.test", kAlpnBoth);
  hello[5] = 0x02;
  EXPECT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Malformed);
  // The extensions block claiming one byte more than the message holds.
  hello = clientHello("a.test", kAlpnBoth);
  auto u8 = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(hello[i])); };
  size_t at = 5 + 4 + 2 + 32;           // record and handshake headers, version, random
  at += 1 + u8(at);                     // session id
  at += 2 + (u8(at) << 8 | u8(at + 1));  // cipher suites
  at += 1 + u8(at);                     // compression methods
  ASSERT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Parsed);
  const size_t ext_len = u8(at) << 8 | u8(at + 1);
  ASSERT_EQ(at + 2 + ext_len, hello.size()) << "the extensions end the record";
  hello[at + 1] = static_cast<char>((ext_len + 1) & 0xff);
  hello[at] = static_cast<char>((ext_len + 1) >> 8);
  EXPECT_EQ(tls::parseClientHello(hello, info), tls::ClientHelloResult::Malformed);
}

TEST(ClassifyTest, EachProtocol) {
  bool h2 = false;
  EXPECT_EQ(classify(clientHello("a.test", kAlpnBoth), h2), Verdict::Tls);
  EXPECT_TRUE(h2);
  EXPECT_EQ(classify(clientHello("a.test", std::string("\x08http/1.1", 9)), h2), Verdict::Tls);
  EXPECT_FALSE(h2);
  EXPECT_EQ(classify("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", h2), Verdict::H2c);
  EXPECT_EQ(classify(std::string("\x05\x01\x00", 3), h2), Verdict::Socks5);
  EXPECT_EQ(classify("GET http://a/ HTTP/1.1\r\n", h2), Verdict::Http1);
  EXPECT_EQ(classify("CONNECT a:443 HTTP/1.1\r\n", h2), Verdict::Http1);
  EXPECT_EQ(classify("\r\nPOST http://a/ HTTP/1.1\r\n", h2), Verdict::Http1);
  // "PRI " could still become the preface; "POST" cannot.
  EXPECT_EQ(classify("PRI * HTTP/2", h2), Verdict::NeedMore);
  EXPECT_EQ(classify("P", h2), Verdict::NeedMore);
  EXPECT_EQ(classify("POS", h2), Verdict::NeedMore);
  EXPECT_EQ(classify("", h2), Verdict::NeedMore);
}

TEST(ClassifyTest, Noise) {
  bool h2 = false;
  EXPECT_EQ(classify(std::string("\x04\x01\x00\x50", 4), h2), Verdict::Unknown);  // SOCKS4
  EXPECT_EQ(classify(std::string("\x00\x00\x00", 3), h2), Verdict::Unknown);
  EXPECT_EQ(classify(" GET / HTTP/1.1", h2), Verdict::Unknown);
  EXPECT_EQ(classify(std::string(200, 'A'), h2), Verdict::Unknown);
  // No method is that long, whether or not the space has arrived yet (the verdict of a longer
  // peek must not differ from a shorter one's).
  EXPECT_EQ(classify(std::string(25, 'A'), h2), Verdict::Unknown);
  EXPECT_EQ(classify(std::string(25, 'A') + " / HTTP/1.1", h2), Verdict::Unknown);
  EXPECT_EQ(classify("UPDATEREDIRECTREF / HTTP/1.1", h2), Verdict::Http1);
  EXPECT_EQ(classify(std::string("\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", 10), h2),
            Verdict::Unknown);
}

}  // namespace
}  // namespace protocol_sniffer
}  // namespace filters
}  // namespace sluice
