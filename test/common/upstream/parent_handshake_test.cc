#include "source/common/upstream/parent_handshake.h"

#include <memory>
#include <optional>
#include <string>

#include <signal.h>

#include "gtest/gtest.h"

#include "test/common/network/loopback.h"

namespace sluice {
namespace upstream {
namespace {

using network::Connection;
using network::ConnectionPtr;
using std::chrono::milliseconds;
using test::RawPeer;
using test::runFor;
using test::runUntil;

class Idle : public network::ConnectionCallbacks {
 public:
  void onData(buffer::Buffer&, bool) override {}
  void onEvent(network::ConnectionEvent) override {}
};

// A raw socket plays the parent; the test writes its answers byte for byte.
class ParentHandshakeTest : public testing::Test, public ParentHandshakeCallbacks {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(listener_.ok());
  }
  void TearDown() override {
    if (connection_) {
      connection_->setCallbacks(nullptr);
      connection_->close(network::CloseType::NoFlush);
    }
    connection_.reset();
    handshake_.reset();
    ready_ = false;
    runFor(dispatcher_, milliseconds(1));
  }

  // Connects to the parent and starts the handshake toward the target.
  void begin(ParentProtocol protocol, const network::Address& address, std::string_view host = {},
             uint16_t port = 0, bool udp = false) {
    connection_ = Connection::connectTo(dispatcher_, listener_.address());
    ASSERT_NE(nullptr, connection_);
    connection_->setCallbacks(&idle_);
    const int fd = listener_.accept();
    ASSERT_GE(fd, 0);
    parent_.emplace(fd);
    Connection* raw = connection_.get();
    ASSERT_TRUE(runUntil(dispatcher_, [raw] { return !raw->connecting(); }));
    handshake_ = std::make_unique<ParentHandshake>(protocol, auth_, *this);
    if (udp) {
      handshake_->startUdpAssociate(*connection_);
    } else {
      handshake_->start(*connection_, address, host, port);
    }
  }

  // What the parent has received, once it holds `n` bytes.
  std::string parentReceived(size_t n) {
    EXPECT_TRUE(runUntil(dispatcher_,
                         [&] {
                           parent_->receive();
                           return parent_->received.size() >= n;
                         }))
        << "parent got: " << parent_->received;
    std::string got = parent_->received.substr(0, n);
    parent_->received.erase(0, n);
    return got;
  }
  bool ended() const { return ready_ || failure_.has_value(); }
  void waitEnd() {
    ASSERT_TRUE(runUntil(dispatcher_, [this] { return ended(); }));
  }

  void onParentReady() override { ready_ = true; }
  void onParentFailed(Failure failure, std::string_view reason) override {
    failure_ = failure;
    reason_ = std::string(reason);
  }

  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_;
  ParentAuth auth_;
  Idle idle_;
  ConnectionPtr connection_;
  std::optional<RawPeer> parent_;
  std::unique_ptr<ParentHandshake> handshake_;
  bool ready_ = false;
  std::optional<Failure> failure_;
  std::string reason_;
};

network::Address addr(const char* text) { return *network::Address::parseHostPort(text); }

TEST_F(ParentHandshakeTest, HttpConnectToTheCheckedAddressWithCredentials) {
  auth_.proxy_authorization = "Basic dXNlcjpwYXNz";
  begin(ParentProtocol::Http, addr("192.0.2.9:443"), "example.com", 443);
  const std::string expected =
      "CONNECT 192.0.2.9:443 HTTP/1.1\r\nHost: 192.0.2.9:443\r\n"
      "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n";
  EXPECT_EQ(parentReceived(expected.size()), expected);
  runFor(dispatcher_, milliseconds(20));
  EXPECT_FALSE(ended());
  // The answer in two pieces, with the target's first bytes right behind it.
  parent_->send("HTTP/1.1 200 Connection established\r\n");
  runFor(dispatcher_, milliseconds(20));
  EXPECT_FALSE(ended());
  parent_->send("Via: parent\r\n\r\nSSH-2.0-early");
  waitEnd();
  ASSERT_TRUE(ready_);
  EXPECT_EQ(connection_->callbacks(), nullptr);
  EXPECT_EQ(connection_->readBuffer().linearize(connection_->readBuffer().length()),
            "SSH-2.0-early");
}

TEST_F(ParentHandshakeTest, HttpConnectToANameAndToIpv6) {
  begin(ParentProtocol::Http, network::Address(), "example.com", 8443);
  const std::string by_name = "CONNECT example.com:8443 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n";
  EXPECT_EQ(parentReceived(by_name.size()), by_name);
  TearDown();
  begin(ParentProtocol::Http, addr("[2001:db8::1]:443"));
  const std::string v6 = "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n";
  EXPECT_EQ(parentReceived(v6.size()), v6);
}

TEST_F(ParentHandshakeTest, HttpRefusalsAreTyped) {
  const struct {
    const char* answer;
    FailureKind kind;
  } cases[] = {
      {"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
       FailureKind::ParentRefused},
      {"HTTP/1.1 403 Forbidden\r\n\r\n", FailureKind::ParentRefused},
      {"HTTP/1.1 504 Gateway Timeout\r\n\r\n", FailureKind::Timeout},
      {"HTTP/1.1 502 Bad Gateway\r\n\r\n", FailureKind::Unreachable},
      {"HTTP/1.1 400 Bad Request\r\n\r\n", FailureKind::ProtocolError},
      {"SSH-2.0-OpenSSH\r\n", FailureKind::ProtocolError},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.answer);
    failure_.reset();
    begin(ParentProtocol::Http, addr("192.0.2.9:443"));
    parent_->send(c.answer);
    waitEnd();
    ASSERT_TRUE(failure_.has_value());
    EXPECT_EQ(failure_->kind, c.kind);
    EXPECT_FALSE(reason_.empty());
    EXPECT_FALSE(ready_);
    TearDown();
  }
}

TEST_F(ParentHandshakeTest, AnOversizedAnswerIsAProtocolError) {
  begin(ParentProtocol::Http, addr("192.0.2.9:443"));
  std::string answer = "HTTP/1.1 200 OK\r\n";
  while (answer.size() <= kMaxParentResponseHeadBytes) answer += "X-Pad: aaaaaaaaaaaaaaaa\r\n";
  parent_->send(answer);
  waitEnd();
  ASSERT_TRUE(failure_.has_value());
  EXPECT_EQ(failure_->kind, FailureKind::ProtocolError);
}

TEST_F(ParentHandshakeTest, TheParentClosingMidAnswerIsAReset) {
  begin(ParentProtocol::Http, addr("192.0.2.9:443"));
  parent_->send("HTTP/1.1 200 OK\r\n");
  parent_->shutWrite();
  waitEnd();
  ASSERT_TRUE(failure_.has_value());
  EXPECT_EQ(failure_->kind, FailureKind::Reset);
}

TEST_F(ParentHandshakeTest, Socks5WithUsernameAndPassword) {
  auth_.user = "sluice";
  auth_.password = "secret";
  begin(ParentProtocol::Socks5, addr("192.0.2.9:443"), "example.com", 443);
  EXPECT_EQ(parentReceived(4), std::string("\x05\x02\x00\x02", 4));
  parent_->send(std::string("\x05\x02", 2));
  EXPECT_EQ(parentReceived(15), std::string("\x01\x06sluice\x06secret", 15));
  parent_->send(std::string("\x01\x00", 2));
  EXPECT_EQ(parentReceived(10), std::string("\x05\x01\x00\x01\xc0\x00\x02\x09\x01\xbb", 10));
  // The reply and the target's first bytes in one segment.
  parent_->send(std::string("\x05\x00\x00\x01\x7f\x00\x00\x01\x9c\x40hello", 15));
  waitEnd();
  ASSERT_TRUE(ready_);
  EXPECT_EQ(connection_->readBuffer().linearize(connection_->readBuffer().length()), "hello");
}

TEST_F(ParentHandshakeTest, Socks5ByNameWithoutCredentials) {
  begin(ParentProtocol::Socks5, network::Address(), "example.com", 80);
  EXPECT_EQ(parentReceived(3), std::string("\x05\x01\x00", 3));
  parent_->send(std::string("\x05\x00", 2));
  EXPECT_EQ(parentReceived(18), std::string("\x05\x01\x00\x03\x0b"
                                            "example.com\x00\x50",
                                            18));
  parent_->send(std::string("\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10));
  waitEnd();
  EXPECT_TRUE(ready_);
}

TEST_F(ParentHandshakeTest, Socks5RefusalsAreTyped) {
  const struct {
    std::string method;  // the parent's method selection
    std::string status;  // its answer to the credentials (if asked)
    std::string reply;   // its reply to CONNECT (if it gets there)
    FailureKind kind;
  } cases[] = {
      {std::string("\x05\xff", 2), "", "", FailureKind::ParentRefused},
      {std::string("\x05\x02", 2), std::string("\x01\x01", 2), "", FailureKind::ParentRefused},
      {std::string("\x05\x02", 2), std::string("\x01\x00", 2),
       std::string("\x05\x05\x00\x01\0\0\0\0\0\0", 10), FailureKind::Refused},
      {std::string("\x05\x02", 2), std::string("\x01\x00", 2),
       std::string("\x05\x04\x00\x01\0\0\0\0\0\0", 10), FailureKind::Unreachable},
      {std::string("\x05\x02", 2), std::string("\x01\x00", 2),
       std::string("\x05\x02\x00\x01\0\0\0\0\0\0", 10), FailureKind::ParentRefused},
      {std::string("\x05\x02", 2), std::string("\x01\x00", 2),
       std::string("\x05\x06\x00\x01\0\0\0\0\0\0", 10), FailureKind::Timeout},
      {std::string("\x04\x5a", 2), "", "", FailureKind::ProtocolError},
      {std::string("\x05\x02", 2), std::string("\x01\x00", 2),
       std::string("\x05\x00\x00\x09\0\0", 6), FailureKind::ProtocolError},
  };
  auth_.user = "u";
  auth_.password = "p";
  for (const auto& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.kind));
    failure_.reset();
    begin(ParentProtocol::Socks5, addr("192.0.2.9:443"));
    parentReceived(4);
    parent_->send(c.method);
    if (!c.status.empty()) {
      parentReceived(5);  // 01 01 u 01 p
      parent_->send(c.status);
    }
    if (!c.reply.empty()) {
      parentReceived(10);
      parent_->send(c.reply);
    }
    waitEnd();
    ASSERT_TRUE(failure_.has_value());
    EXPECT_EQ(failure_->kind, c.kind);
    EXPECT_FALSE(ready_);
    TearDown();
  }
}

TEST_F(ParentHandshakeTest, Socks5UdpAssociateGivesTheParentsRelay) {
  auth_.user = "sluice";
  auth_.password = "secret";
  begin(ParentProtocol::Socks5, network::Address(), {}, 0, /*udp=*/true);
  EXPECT_EQ(parentReceived(4), std::string("\x05\x02\x00\x02", 4));
  parent_->send(std::string("\x05\x02", 2));
  EXPECT_EQ(parentReceived(15), std::string("\x01\x06sluice\x06secret", 15));
  parent_->send(std::string("\x01\x00", 2));
  // UDP ASSOCIATE, sluice's source not named.
  EXPECT_EQ(parentReceived(10), std::string("\x05\x03\x00\x01\0\0\0\0\0\0", 10));
  parent_->send(std::string("\x05\x00\x00\x01\x7f\x00\x00\x02\x9c\x41", 10));
  waitEnd();
  ASSERT_TRUE(ready_);
  EXPECT_EQ(handshake_->udpRelay().asString(), "127.0.0.2:40001");
}

TEST_F(ParentHandshakeTest, Socks5UdpRelayOfAnyAddressIsTheParents) {
  begin(ParentProtocol::Socks5, network::Address(), {}, 0, /*udp=*/true);
  parentReceived(3);
  parent_->send(std::string("\x05\x00", 2));
  parentReceived(10);
  parent_->send(std::string("\x05\x00\x00\x01\0\0\0\0\x9c\x41", 10));
  waitEnd();
  ASSERT_TRUE(ready_);
  network::Address expected = connection_->peer();
  expected.setPort(40001);
  EXPECT_EQ(handshake_->udpRelay(), expected);
}

TEST_F(ParentHandshakeTest, Socks5UdpRelayOfPortZeroIsRefused) {
  begin(ParentProtocol::Socks5, network::Address(), {}, 0, /*udp=*/true);
  parentReceived(3);
  parent_->send(std::string("\x05\x00", 2));
  parentReceived(10);
  parent_->send(std::string("\x05\x00\x00\x01\x7f\0\0\x01\0\0", 10));
  waitEnd();
  ASSERT_TRUE(failure_.has_value());
  EXPECT_EQ(failure_->kind, FailureKind::ProtocolError);
}

TEST_F(ParentHandshakeTest, Socks5AskingForCredentialsSluiceLacks) {
  begin(ParentProtocol::Socks5, addr("192.0.2.9:443"));
  parentReceived(3);
  parent_->send(std::string("\x05\x02", 2));
  waitEnd();
  ASSERT_TRUE(failure_.has_value());
  EXPECT_EQ(failure_->kind, FailureKind::ParentRefused);
  EXPECT_NE(reason_.find("username"), std::string::npos);
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
