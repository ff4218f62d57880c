#include "source/common/upstream/origin_exchange.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <openssl/sha.h>
#include <signal.h>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

#include "source/common/stats/stats.h"
#include "source/common/upstream/pool.h"
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

// The codec's role: records every callback.
class RecordingOwner : public ExchangeOwner {
 public:
  void onInterimResponse(const http1::ResponseHead& head) override {
    interim.push_back(head.status);
  }
  void onResponseHead(const http1::ResponseHead& head) override {
    status = head.status;
    ++heads;
  }
  void onResponseBody(buffer::Buffer& body, bool end) override {
    ++body_calls;
    this->body.append(body.linearize(body.length()));
    body.drain(body.length());
    if (end) ended = true;
  }
  void onUpgraded(const http1::ResponseHead& head, UpstreamHandle upstream,
                  buffer::Buffer& early_bytes, bool origin_ended) override {
    status = head.status;
    for (uint32_t i = 0; i < head.headers.size(); ++i) {
      if (http1::equalsIgnoreCase(head.headers[i].name, "sec-websocket-protocol")) {
        upgraded_protocol = std::string(head.headers[i].value);
      }
    }
    upgraded = std::move(upstream);
    early.append(early_bytes.linearize(early_bytes.length()));
    early_bytes.drain(early_bytes.length());
    early_ended = origin_ended;
  }
  void onRetry() override { ++retries; }
  void onExchangeError(ExchangeError e, std::string_view d) override {
    error = e;
    detail = std::string(d);
  }
  void onOriginBackedUp(bool backed_up) override { backed_up_calls += backed_up ? 1 : 0; }

  std::vector<uint16_t> interim;
  uint16_t status = 0;
  int heads = 0;
  int body_calls = 0;
  std::string body;
  bool ended = false;
  UpstreamHandle upgraded;
  std::string upgraded_protocol;
  std::string early;
  bool early_ended = false;
  int retries = 0;
  std::optional<ExchangeError> error;
  std::string detail;
  int backed_up_calls = 0;
};

std::string webSocketAccept(std::string_view key) {
  std::string in(key);
  in += "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  uint8_t digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const uint8_t*>(in.data()), in.size(), digest);
  return absl::Base64Escape(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

class OriginExchangeTest : public testing::Test {
 protected:
  OriginExchangeTest() : pool_(dispatcher_, 4, std::chrono::seconds(30)) {}

  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(listener_.ok());
    http::registerProxyStats(stats::Scope("exchange_test", "chain", "t"), stats_);
    for (const char* name : {"upstream_rs_bad", "upstream_rs_timeout", "upstream_reset", "rq_retry",
                             "downstream_rs_timeout"}) {
      base_[name] = stats::Store::get().counterValue(std::string("exchange_test.t.") + name);
    }
    options_.stats = &stats_;
    options_.request_body_timeout = milliseconds(200);
  }
  void TearDown() override {
    exchange_.reset();
    owner_.upgraded.release(false);
    pool_.closeAll();
    runFor(dispatcher_, milliseconds(1));
  }

  // A connected origin connection and the origin's raw socket.
  UpstreamHandle connect(bool reused = false, milliseconds response_timeout = milliseconds(5000)) {
    ConnectionPtr up = Connection::connectTo(dispatcher_, listener_.address());
    EXPECT_NE(nullptr, up);
    up->setCallbacks(&connecting_);
    const int fd = listener_.accept();
    EXPECT_GE(fd, 0);
    origin_.emplace(fd);
    Connection* raw = up.get();
    EXPECT_TRUE(runUntil(dispatcher_, [raw] { return !raw->connecting(); }));
    UpstreamInfo info;
    info.reused = reused;
    info.response_timeout = response_timeout;
    return UpstreamHandle(std::move(up), &pool_, info);
  }

  OriginRequest get(std::string_view path = "/x") {
    OriginRequest r;
    r.method_text = "GET";
    r.method = http1::Method::Get;
    r.path = path;
    r.host = "origin.test";
    return r;
  }

  // A request with a body of this framing.
  OriginRequest post(RequestBody body, uint64_t content_length = 0) {
    OriginRequest r = get();
    r.method = http1::Method::Post;
    r.method_text = "POST";
    r.body = body;
    r.content_length = content_length;
    return r;
  }

  // Starts `request` on a fresh exchange; `body` is what the client sent of its body so far.
  BodyProgress start(const OriginRequest& request, UpstreamHandle upstream,
                     std::string_view body = {}) {
    exchange_ = std::make_unique<OriginExchange>(owner_, options_);
    buffer::Buffer from_client;
    from_client.add(body);
    BodyProgress progress = exchange_->start(std::move(upstream), request, timer_, from_client);
    left_in_client_ = std::string(from_client.linearize(from_client.length()));
    return progress;
  }

  // What the origin received once it holds `n` bytes (or what it has after a while).
  std::string originReceives(size_t n) {
    runUntil(dispatcher_, [&] {
      origin_->receive();
      return origin_->received.size() >= n;
    });
    return origin_->received;
  }

  bool run(const std::function<bool()>& done) { return runUntil(dispatcher_, done); }
  // A counter's growth since the test started.
  uint64_t stat(const std::string& name) {
    return stats::Store::get().counterValue("exchange_test.t." + name) - base_[name];
  }

  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_;
  Pool pool_;
  http::ProxyStats stats_;
  ExchangeOptions options_;
  RecordingOwner owner_;
  test::RecordingCallbacks connecting_;
  event::Timer timer_{dispatcher_, [this] {
                        if (exchange_) exchange_->onTimer();
                      }};
  std::unique_ptr<OriginExchange> exchange_;
  std::optional<RawPeer> origin_;
  std::string left_in_client_;
  std::map<std::string, uint64_t> base_;
};

TEST_F(OriginExchangeTest, LengthResponseIsDeliveredAndTheConnectionPooled) {
  EXPECT_EQ(start(get(), connect()), BodyProgress::Done);
  const std::string head = "GET /x HTTP/1.1\r\nHost: origin.test\r\n\r\n";
  EXPECT_EQ(originReceives(head.size()), head);
  origin_->send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel");
  ASSERT_TRUE(run([&] { return owner_.body == "hel"; }));
  EXPECT_EQ(owner_.status, 200);
  EXPECT_FALSE(owner_.ended);
  origin_->send("lo");
  ASSERT_TRUE(run([&] { return owner_.ended; }));
  EXPECT_EQ(owner_.body, "hello");
  EXPECT_FALSE(exchange_->active());
  EXPECT_EQ(pool_.idleCount(), 1u);
  EXPECT_EQ(exchange_->bytesToOrigin(), head.size());
  EXPECT_EQ(exchange_->bytesFromOrigin(), 43u);
}

TEST_F(OriginExchangeTest, ChunkedResponseFramedOrAsPayload) {
  const std::string chunked = "5\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n";
  for (ResponseBody mode : {ResponseBody::Framed, ResponseBody::Payload}) {
    owner_ = RecordingOwner();
    options_.response_body = mode;
    start(get(), connect());
    originReceives(1);
    // Split across the head, a chunk line and the trailer.
    origin_->send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
    runFor(dispatcher_, milliseconds(20));
    origin_->send(chunked.substr(6));
    ASSERT_TRUE(run([&] { return owner_.ended; }));
    EXPECT_EQ(owner_.body, mode == ResponseBody::Framed ? chunked : "hello world");
    pool_.closeAll();
  }
}

TEST_F(OriginExchangeTest, CloseDelimitedResponseEndsAtTheOriginsCloseAndIsNotPooled) {
  start(get(), connect());
  originReceives(1);
  origin_->send("HTTP/1.1 200 OK\r\n\r\nuntil");
  runFor(dispatcher_, milliseconds(20));
  origin_->send(" close");
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return owner_.ended; }));
  EXPECT_EQ(owner_.body, "until close");
  EXPECT_EQ(pool_.idleCount(), 0u);
}

TEST_F(OriginExchangeTest, BodylessResponsesEndWithTheirHead) {
  struct Case {
    http1::Method method;
    std::string_view method_text;
    std::string response;
  };
  const Case cases[] = {
      {http1::Method::Head, "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"},
      {http1::Method::Get, "GET", "HTTP/1.1 204 No Content\r\n\r\n"},
      {http1::Method::Get, "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"},
  };
  for (const Case& c : cases) {
    owner_ = RecordingOwner();
    OriginRequest r = get();
    r.method = c.method;
    r.method_text = c.method_text;
    start(r, connect());
    originReceives(1);
    origin_->send(c.response);
    ASSERT_TRUE(run([&] { return owner_.ended; })) << c.response;
    EXPECT_EQ(owner_.body, "");
    EXPECT_EQ(owner_.body_calls, 1);
    EXPECT_EQ(pool_.idleCount(), 1u) << c.response;
    pool_.closeAll();
  }
}

TEST_F(OriginExchangeTest, InterimResponsesComeBeforeTheFinalOne) {
  start(get(), connect());
  originReceives(1);
  origin_->send(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_TRUE(run([&] { return owner_.ended; }));
  EXPECT_EQ(owner_.interim, (std::vector<uint16_t>{100, 103}));
  EXPECT_EQ(owner_.status, 200);
  EXPECT_EQ(owner_.body, "ok");
}

TEST_F(OriginExchangeTest, UpgradeHandsTheConnectionOverWithWhatFollowedThe101) {
  OriginRequest r = get("/ws");
  http1::HeaderField fields[] = {{"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", 0}};
  r.fields = fields;
  r.field_count = 1;
  r.upgrade = Upgrade::WebSocket;
  start(r, connect());
  const std::string sent = originReceives(1);
  EXPECT_NE(sent.find("Upgrade: websocket\r\nConnection: Upgrade\r\n"), std::string::npos) << sent;
  EXPECT_NE(sent.find("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), std::string::npos);
  origin_->send(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Protocol: chat\r\n\r\n\x81\x02hi");
  ASSERT_TRUE(run([&] { return bool(owner_.upgraded); }));
  EXPECT_EQ(owner_.status, 101);
  EXPECT_EQ(owner_.upgraded_protocol, "chat");
  EXPECT_EQ(owner_.early, "\x81\x02hi");
  EXPECT_FALSE(owner_.early_ended);
  EXPECT_FALSE(exchange_->active());
  EXPECT_TRUE(exchange_->responseStarted());
}

TEST_F(OriginExchangeTest, OwnKeyHandshakeChecksTheAcceptValue) {
  for (bool good : {true, false}) {
    owner_ = RecordingOwner();
    OriginRequest r = get("/ws");
    r.upgrade = Upgrade::WebSocketOwnKey;
    start(r, connect());
    const std::string sent = originReceives(1);
    const size_t at = sent.find("Sec-WebSocket-Key: ");
    ASSERT_NE(at, std::string::npos) << sent;
    const std::string key = sent.substr(at + 19, 24);
    origin_->send(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Accept: " +
        (good ? webSocketAccept(key) : std::string("bm90IHRoZSByaWdodCBvbmU=")) + "\r\n\r\n");
    ASSERT_TRUE(run([&] { return bool(owner_.upgraded) || owner_.error.has_value(); }));
    EXPECT_EQ(bool(owner_.upgraded), good);
    if (!good) {
      EXPECT_EQ(owner_.error, ExchangeError::BadResponse);
    }
    owner_.upgraded.release(false);
  }
}

TEST_F(OriginExchangeTest, A101NobodyAskedForIsABadResponse) {
  start(get(), connect());
  originReceives(1);
  origin_->send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n");
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.error, ExchangeError::BadResponse);
  EXPECT_EQ(owner_.detail, "origin switched protocols without an upgrade request");
  EXPECT_EQ(stat("upstream_rs_bad"), 1u);
}

TEST_F(OriginExchangeTest, DeadPooledConnectionIsRetriedOnceForIdempotentRequestsOnly) {
  start(get(), connect(/*reused=*/true));
  originReceives(1);
  origin_->closeNow();
  ASSERT_TRUE(run([&] { return owner_.retries == 1 || owner_.error.has_value(); }));
  EXPECT_EQ(owner_.retries, 1);
  EXPECT_EQ(stat("rq_retry"), 1u);

  // The retry itself (retry_allowed off), a POST, and a fresh connection are not retried.
  for (int i = 0; i < 3; ++i) {
    owner_ = RecordingOwner();
    OriginRequest r = get();
    bool reused = true;
    if (i == 0) r.retry_allowed = false;
    if (i == 1) r = post(RequestBody::None);
    if (i == 2) reused = false;
    start(r, connect(reused));
    originReceives(1);
    origin_->closeNow();
    ASSERT_TRUE(run([&] { return owner_.retries == 1 || owner_.error.has_value(); })) << i;
    EXPECT_EQ(owner_.retries, 0) << i;
    EXPECT_EQ(owner_.error, ExchangeError::OriginClosed) << i;
    EXPECT_EQ(owner_.detail, "origin closed the connection");
  }
}

TEST_F(OriginExchangeTest, APartialAnswerIsNeverRetried) {
  start(get(), connect(/*reused=*/true));
  originReceives(1);
  origin_->send("HTTP/1.1 200");
  runFor(dispatcher_, milliseconds(20));
  origin_->closeNow();
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.retries, 0);
  EXPECT_EQ(owner_.error, ExchangeError::OriginClosed);
}

TEST_F(OriginExchangeTest, TruncatedBodyIsDeliveredThenReported) {
  start(get(), connect());
  originReceives(1);
  origin_->send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  origin_->shutWrite();
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.body, "abc");
  EXPECT_FALSE(owner_.ended);
  EXPECT_EQ(owner_.error, ExchangeError::OriginClosed);
  EXPECT_EQ(stat("upstream_reset"), 1u);
}

TEST_F(OriginExchangeTest, BytesAfterTheResponseSpoilTheConnection) {
  start(get(), connect());
  originReceives(1);
  origin_->send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\n");
  ASSERT_TRUE(run([&] { return owner_.ended; }));
  EXPECT_EQ(owner_.body, "hi");
  EXPECT_EQ(pool_.idleCount(), 0u);
}

TEST_F(OriginExchangeTest, SilentOriginTimesOut) {
  start(get(), connect(false, milliseconds(100)));
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.error, ExchangeError::ResponseTimeout);
  EXPECT_EQ(stat("upstream_rs_timeout"), 1u);
  EXPECT_EQ(pool_.idleCount(), 0u);
}

// A client that stops taking the response holds the origin back (the codec pauses it): the
// silence that follows is the client's, not the origin's.
TEST_F(OriginExchangeTest, AClientThatStopsReadingIsTheClientsTimeout) {
  start(get(), connect(false, milliseconds(100)));
  originReceives(1);
  origin_->send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  ASSERT_TRUE(run([&] { return owner_.body == "abc"; }));
  exchange_->pauseResponse(true);
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.error, ExchangeError::ClientStalled);
  EXPECT_EQ(stat("downstream_rs_timeout"), 1u);
  EXPECT_EQ(stat("upstream_rs_timeout"), 0u);
  EXPECT_EQ(pool_.idleCount(), 0u);
}

// Not held back, the same silence is the origin's.
TEST_F(OriginExchangeTest, AnOriginSilentMidBodyTimesOut) {
  start(get(), connect(false, milliseconds(100)));
  originReceives(1);
  origin_->send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.body, "abc");
  EXPECT_EQ(owner_.error, ExchangeError::ResponseTimeout);
  EXPECT_EQ(stat("upstream_rs_timeout"), 1u);
  EXPECT_EQ(stat("downstream_rs_timeout"), 0u);
}

TEST_F(OriginExchangeTest, StalledRequestBodyIsTheClientsTimeout) {
  OriginRequest r = post(RequestBody::Length, 10);
  EXPECT_EQ(start(r, connect(), "abc"), BodyProgress::More);
  EXPECT_EQ(originReceives(1).substr(originReceives(1).size() - 3), "abc");
  ASSERT_TRUE(run([&] { return owner_.error.has_value(); }));
  EXPECT_EQ(owner_.error, ExchangeError::BodyTimeout);
  EXPECT_EQ(stat("upstream_rs_timeout"), 0u);
}

TEST_F(OriginExchangeTest, ChunkedRequestBodyPassesAndLeavesTheNextRequest) {
  OriginRequest r = post(RequestBody::Chunked);
  EXPECT_EQ(start(r, connect(), "3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\n"), BodyProgress::Done);
  EXPECT_EQ(left_in_client_, "GET /next HTTP/1.1\r\n");
  const std::string expected = "POST /x HTTP/1.1\r\nHost: origin.test\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  EXPECT_EQ(originReceives(expected.size()), expected);
}

TEST_F(OriginExchangeTest, ChunkedRequestBodyErrorsAndLimitSendNothing) {
  OriginRequest r = post(RequestBody::Chunked);
  EXPECT_EQ(start(r, connect(), "zz\r\nabc\r\n"), BodyProgress::Error);
  EXPECT_STRNE(exchange_->requestBodyError(), "");
  runFor(dispatcher_, milliseconds(20));
  origin_->receive();
  EXPECT_EQ(origin_->received, "");
  EXPECT_TRUE(origin_->eof);

  options_.max_request_body_bytes = 4;
  EXPECT_EQ(start(r, connect(), "5\r\nabcde\r\n0\r\n\r\n"), BodyProgress::TooLarge);
  runFor(dispatcher_, milliseconds(20));
  origin_->receive();
  EXPECT_EQ(origin_->received, "");
}

TEST_F(OriginExchangeTest, ChunkEncodeFramesEachPieceAndTheEnd) {
  OriginRequest r = get();
  r.method = http1::Method::Put;
  r.method_text = "PUT";
  r.body = RequestBody::ChunkEncode;
  EXPECT_EQ(start(r, connect(), "abc"), BodyProgress::More);
  buffer::Buffer more;
  more.add(std::string_view("defgh"));
  EXPECT_EQ(exchange_->sendBody(more, true), BodyProgress::Done);
  const std::string expected =
      "PUT /x HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n5\r\ndefgh\r\n0\r\n\r\n";
  EXPECT_EQ(originReceives(expected.size()), expected);
  EXPECT_TRUE(exchange_->requestDone());
}

TEST(OriginRequestHead, Http10KeepsItsVersionAndAsksForKeepAlive) {
  http1::HeaderField fields[] = {{"Content-Length", "5", 0},
                                 {"Content-Length", "5", 0},
                                 {"X-Hop", "1", http1::HeaderField::kHopByHop},
                                 {"Cookie", "a=1", 0},
                                 {"Cookie", "b=2", 0}};
  AddedField added[] = {{"Via", "1.0 sluice"}};
  OriginRequest r;
  r.method_text = "POST";
  r.method = http1::Method::Post;
  r.path = "/p";
  r.host = "[::1]:8080";
  r.version_minor = 0;
  r.keep_alive_10 = true;
  r.fields = fields;
  r.field_count = 5;
  r.added = added;
  r.added_count = 1;
  r.body = RequestBody::Length;
  r.content_length = 5;
  buffer::Buffer out;
  OriginExchange::writeRequestHead(r, {}, UpstreamInfo(), out);
  EXPECT_EQ(std::string(out.linearize(out.length())),
            "POST /p HTTP/1.0\r\nHost: [::1]:8080\r\nCookie: a=1; b=2\r\nVia: 1.0 sluice\r\n"
            "Connection: keep-alive\r\nContent-Length: 5\r\n\r\n");
}

// Through an HTTP parent: absolute-form for the checked address (the Host field keeps the
// name) or, with resolve: parent, for the name; sluice's credentials for the parent follow Host.
TEST(OriginExchangeHeadTest, ThroughAnHttpParent) {
  OriginRequest r;
  r.method_text = "GET";
  r.method = http1::Method::Get;
  r.path = "/p?q=1";
  r.host = "example.com";
  UpstreamInfo info;
  info.via_http_parent = true;
  info.parent_target = *network::Address::parseHostPort("93.184.216.34:80");
  info.parent_authorization = "Basic dTpw";
  buffer::Buffer out;
  OriginExchange::writeRequestHead(r, {}, info, out);
  EXPECT_EQ(std::string(out.linearize(out.length())),
            "GET http://93.184.216.34:80/p?q=1 HTTP/1.1\r\nHost: example.com\r\n"
            "Proxy-Authorization: Basic dTpw\r\n\r\n");
  info.parent_target = network::Address();
  info.parent_target_host = "2001:db8::1";
  info.parent_target_port = 8080;
  info.parent_authorization = {};
  buffer::Buffer named;
  OriginExchange::writeRequestHead(r, {}, info, named);
  EXPECT_EQ(std::string(named.linearize(named.length())),
            "GET http://[2001:db8::1]:8080/p?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n");
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
