// The streaming response parser, fed whole and one byte at a time.

#include "tools/load/response_parser.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace load {
namespace {

struct Outcome {
  ResponseParser::Result result;
  size_t consumed;  // total
};

Outcome feedAll(ResponseParser& p, const std::string& in, size_t step) {
  size_t total = 0;
  ResponseParser::Result r = ResponseParser::Result::More;
  while (total < in.size()) {
    const size_t n = std::min(step, in.size() - total);
    size_t used = 0;
    r = p.feed(in.data() + total, n, used);
    total += used;
    if (r != ResponseParser::Result::More) break;
  }
  return {r, total};
}

TEST(ResponseParserTest, ContentLengthAnySplit) {
  const std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    ResponseParser p;
    p.reset(false);
    const Outcome o = feedAll(p, resp, step);
    EXPECT_EQ(o.result, ResponseParser::Result::Done) << step;
    EXPECT_EQ(o.consumed, resp.size() - 5) << step;  // EXTRA is left
    EXPECT_EQ(p.status(), 200);
    EXPECT_EQ(p.bodyBytes(), 5u);
    EXPECT_FALSE(p.close());
  }
}

TEST(ResponseParserTest, ChunkedWithExtensionsAndTrailers) {
  const std::string resp =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
  for (size_t step : {1, 4, 1000}) {
    ResponseParser p;
    p.reset(false);
    const Outcome o = feedAll(p, resp, step);
    EXPECT_EQ(o.result, ResponseParser::Result::Done) << step;
    EXPECT_EQ(o.consumed, resp.size());
    EXPECT_EQ(p.bodyBytes(), 15u);
  }
}

TEST(ResponseParserTest, InterimAndNoBodyStatuses) {
  ResponseParser p;
  p.reset(false);
  std::string resp =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n";
  Outcome o = feedAll(p, resp, 1000);
  EXPECT_EQ(o.result, ResponseParser::Result::Done);
  EXPECT_EQ(p.status(), 204);
  EXPECT_EQ(o.consumed, resp.size());
  // HEAD and CONNECT replies have no body whatever the headers say.
  p.reset(true);
  resp = "HTTP/1.1 200 Connection established\r\nContent-Length: 10\r\n\r\n";
  o = feedAll(p, resp, 1000);
  EXPECT_EQ(o.result, ResponseParser::Result::Done);
  EXPECT_EQ(o.consumed, resp.size());
}

TEST(ResponseParserTest, UntilCloseAndHttp10) {
  ResponseParser p;
  p.reset(false);
  const std::string resp = "HTTP/1.0 200 OK\r\n\r\nabc";
  const Outcome o = feedAll(p, resp, 1000);
  EXPECT_EQ(o.result, ResponseParser::Result::More);
  EXPECT_TRUE(p.close());
  EXPECT_TRUE(p.finishOnClose());
  EXPECT_EQ(p.bodyBytes(), 3u);
}

TEST(ResponseParserTest, ConnectionClose) {
  ResponseParser p;
  p.reset(false);
  EXPECT_EQ(
      feedAll(p, "HTTP/1.1 503 x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 1000).result,
      ResponseParser::Result::Done);
  EXPECT_TRUE(p.close());
  EXPECT_EQ(p.status(), 503);
}

TEST(ResponseParserTest, WebSocketAccept) {
  ResponseParser p;
  p.reset(false);
  ASSERT_EQ(feedAll(p,
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                    3)
                .result,
            ResponseParser::Result::Done);
  EXPECT_EQ(p.status(), 101);
  EXPECT_TRUE(p.websocketAccepted());
}

TEST(ResponseParserTest, Errors) {
  for (const char* bad : {
           "HTTP/2 200 OK\r\n\r\n",
           "HTTP/1.1 2x0 OK\r\n\r\n",
           "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY",
       }) {
    ResponseParser p;
    p.reset(false);
    EXPECT_EQ(feedAll(p, bad, 1000).result, ResponseParser::Result::Error) << bad;
  }
  ResponseParser p;
  p.reset(false);
  const std::string huge = "HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a');
  EXPECT_EQ(feedAll(p, huge, 4096).result, ResponseParser::Result::Error);
}

}  // namespace
}  // namespace load
}  // namespace sluice
