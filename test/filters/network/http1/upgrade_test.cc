#include <string>

#include "gtest/gtest.h"

#include "source/common/buffer/buffer.h"
#include "source/common/http/h1_parser.h"
#include "source/common/http/upgrade.h"

namespace sluice::http {
namespace {

class UpgradeTest : public testing::Test {
 protected:
  const http1::RequestHead& request(const std::string& text) {
    text_ = text;
    http1::ParseError err;
    EXPECT_EQ(http1::parseRequestHead(text_, limits_, req_, err), http1::ParseStatus::Complete)
        << err.reason;
    return req_;
  }
  const http1::ResponseHead& response(const std::string& text) {
    text_ = text;
    http1::ParseError err;
    EXPECT_EQ(http1::parseResponseHead(text_, limits_, http1::Method::Get, resp_, err),
              http1::ParseStatus::Complete)
        << err.reason;
    return resp_;
  }

  std::string text_;
  http1::ParseLimits limits_;
  http1::RequestHead req_;
  http1::ResponseHead resp_;
};

TEST_F(UpgradeTest, WebSocketRequest) {
  const auto& h = request(
      "GET ws://a.example/chat HTTP/1.1\r\nHost: a.example\r\nUpgrade: WebSocket\r\n"
      "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: k\r\n\r\n");
  EXPECT_EQ(h.port, 80);
  EXPECT_EQ(upgradeRequestKind(h), UpgradeRequestKind::WebSocket);
  EXPECT_EQ(checkWebSocketRequest(h), nullptr);
}

TEST_F(UpgradeTest, UpgradeNeedsConnectionToken) {
  EXPECT_EQ(upgradeRequestKind(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                       "Upgrade: websocket\r\n\r\n")),
            UpgradeRequestKind::None);
  // Proxy-Connection does not count: only Connection is the hop's own.
  EXPECT_EQ(upgradeRequestKind(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                       "Upgrade: websocket\r\nProxy-Connection: upgrade\r\n\r\n")),
            UpgradeRequestKind::None);
}

TEST_F(UpgradeTest, OtherProtocolsAndHttp10) {
  EXPECT_EQ(upgradeRequestKind(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                       "Upgrade: h2c\r\nConnection: Upgrade\r\n\r\n")),
            UpgradeRequestKind::Other);
  EXPECT_EQ(upgradeRequestKind(request("GET http://a/ HTTP/1.0\r\n"
                                       "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")),
            UpgradeRequestKind::None);
}

TEST_F(UpgradeTest, BodiesAndMethodsRefused) {
  EXPECT_STREQ(checkWebSocketRequest(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                             "Content-Length: 1\r\n\r\n")),
               "websocket upgrade with a body");
  EXPECT_STREQ(checkWebSocketRequest(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                             "Transfer-Encoding: chunked\r\n\r\n")),
               "websocket upgrade with a body");
  EXPECT_EQ(checkWebSocketRequest(request("GET http://a/ HTTP/1.1\r\nHost: a\r\n"
                                          "Content-Length: 0\r\n\r\n")),
            nullptr);
  EXPECT_STREQ(checkWebSocketRequest(request("POST http://a/ HTTP/1.1\r\nHost: a\r\n\r\n")),
               "websocket upgrade needs GET");
}

TEST_F(UpgradeTest, EncoderDropsControlledFields) {
  buffer::Buffer out;
  UpgradeRequestEncoder e(out, "/chat?x=1");
  e.header("Host", "a.example");
  e.header("Connection", "close");
  e.header("content-length", "0");
  e.header("Proxy-Authorization", "Basic x");
  e.header("Upgrade", "h2c");
  e.header("Sec-WebSocket-Key", "k");
  e.finish();
  EXPECT_EQ(out.linearize(out.length()),
            "GET /chat?x=1 HTTP/1.1\r\nHost: a.example\r\nSec-WebSocket-Key: k\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
}

TEST_F(UpgradeTest, AcceptsOnly101WebSocket) {
  EXPECT_TRUE(acceptsUpgrade(response("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                      "Connection: upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")));
  EXPECT_FALSE(acceptsUpgrade(response("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                                       "Connection: upgrade\r\n\r\n")));
  EXPECT_FALSE(acceptsUpgrade(response("HTTP/1.1 101 Switching Protocols\r\n"
                                       "Upgrade: websocket\r\n\r\n")));
  EXPECT_FALSE(acceptsUpgrade(response("HTTP/1.1 101 Switching Protocols\r\n"
                                       "Connection: upgrade\r\n\r\n")));
  EXPECT_FALSE(acceptsUpgrade(response("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                       "Upgrade: h2c\r\nConnection: upgrade\r\n\r\n")));
  EXPECT_FALSE(acceptsUpgrade(response("HTTP/1.1 200 OK\r\nUpgrade: websocket\r\n"
                                       "Connection: upgrade\r\nContent-Length: 0\r\n\r\n")));
}

}  // namespace
}  // namespace sluice::http
