#include "filters/network/http2/headers.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace filters {
namespace http2 {
namespace {

std::string str(buffer::Buffer& b) {
  std::string s;
  while (!b.empty()) {
    std::string_view f = b.front();
    s.append(f);
    b.drain(f.size());
  }
  return s;
}

struct Block {
  std::vector<http1::HeaderField> fields;
  Block(std::initializer_list<std::pair<std::string_view, std::string_view>> list) {
    for (auto& [n, v] : list) fields.push_back({n, v, 0});
  }
  bool parse(RequestInfo& info, RequestError& err, bool websocket = false) {
    return parseRequest(fields.data(), static_cast<uint32_t>(fields.size()), info, err, websocket);
  }
};

TEST(ParseRequest, ForwardGet) {
  Block b{{":method", "GET"},
          {":scheme", "http"},
          {":authority", "example.com:8080"},
          {":path", "/a?b=c"},
          {"proxy-authorization", "Basic eA=="},
          {"accept", "*/*"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err)) << err.reason;
  EXPECT_EQ(info.kind, proxy::RequestKind::Forward);
  EXPECT_EQ(info.method, http1::Method::Get);
  EXPECT_EQ(info.host, "example.com");
  EXPECT_EQ(info.port, 8080);
  EXPECT_EQ(info.path, "/a?b=c");
  EXPECT_EQ(info.proxy_authorization, 4);
  // Pseudo-headers and Proxy-Authorization are not forwarded; accept is.
  for (int i = 0; i < 5; ++i) EXPECT_NE(b.fields[i].flags & http1::HeaderField::kHopByHop, 0);
  EXPECT_EQ(b.fields[5].flags, 0);
}

TEST(ParseRequest, DefaultPortAndIpv6) {
  Block b{{":method", "GET"}, {":scheme", "http"}, {":authority", "[::1]"}, {":path", "/"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err)) << err.reason;
  EXPECT_EQ(info.host, "::1");
  EXPECT_EQ(info.port, 80);
}

TEST(ParseRequest, Connect) {
  Block b{{":method", "CONNECT"}, {":authority", "example.com:443"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err)) << err.reason;
  EXPECT_EQ(info.kind, proxy::RequestKind::Tunnel);
  EXPECT_EQ(info.host, "example.com");
  EXPECT_EQ(info.port, 443);
}

TEST(ParseRequest, Refusals) {
  struct Case {
    Block block;
    uint16_t status;
  };
  std::vector<Case> cases = {
      {{{":method", "CONNECT"}, {":authority", "example.com"}}, 400},  // no port
      {{{":method", "CONNECT"}, {":authority", "a:1"}, {":path", "/"}}, 400},
      {{{":method", "CONNECT"},
        {":protocol", "websocket"},
        {":scheme", "http"},
        {":authority", "a:1"},
        {":path", "/"}},
       501},
      {{{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}, {":path", "/"}}, 400},
      {{{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}}, 400},  // no path
      {{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}}, 400},       // no authority
      {{{":method", "GET"}, {":scheme", "http"}, {":authority", "u@a"}, {":path", "/"}}, 400},
      {{{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "x"}}, 400},
      {{{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/ x"}}, 400},
      {{{":method", "G T"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}}, 400},
      {{{":method", "GET"},
        {":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"}},
       400},
      {{{":method", "GET"}, {"x", "1"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
       400},  // pseudo after regular
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {":status", "200"}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"X-Upper", "1"}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"x", "a\r\nb: c"}},
       400},  // header injection into the HTTP/1.1 head
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"x", std::string_view("a\0b", 3)}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"connection", "close"}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"transfer-encoding", "chunked"}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"te", "gzip"}},
       400},
      {{{":method", "POST"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"content-length", "1"},
        {"content-length", "2"}},
       400},
      {{{":method", "POST"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"content-length", "-1"}},
       400},
      {{{":method", "GET"},
        {":scheme", "http"},
        {":authority", "a"},
        {":path", "/"},
        {"host", "a"},
        {"host", "b"}},
       400},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    RequestInfo info;
    RequestError err;
    EXPECT_FALSE(cases[i].block.parse(info, err)) << "case " << i;
    EXPECT_EQ(err.status, cases[i].status) << "case " << i << ": " << err.reason;
  }
}

TEST(ParseRequest, WebSocketExtendedConnect) {
  Block b{{":method", "CONNECT"}, {":protocol", "websocket"},   {":scheme", "http"},
          {":path", "/chat"},     {":authority", "ws.example"}, {"sec-websocket-version", "13"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err, true)) << err.reason;
  EXPECT_TRUE(info.websocket);
  EXPECT_EQ(info.kind, proxy::RequestKind::Forward);
  EXPECT_EQ(info.port, 80);
  EXPECT_EQ(info.path, "/chat");
  // Not allowed by config: 501, as for any :protocol.
  ASSERT_FALSE(b.parse(info, err, false));
  EXPECT_EQ(err.status, 501);
  Block wss{{":method", "CONNECT"},
            {":protocol", "websocket"},
            {":scheme", "https"},
            {":path", "/"},
            {":authority", "a"}};
  ASSERT_FALSE(wss.parse(info, err, true));
  EXPECT_EQ(err.status, 400);
  Block other{{":method", "CONNECT"},
              {":protocol", "webtransport"},
              {":scheme", "http"},
              {":path", "/"},
              {":authority", "a"}};
  ASSERT_FALSE(other.parse(info, err, true));
  EXPECT_EQ(err.status, 501);
  Block nopath{
      {":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "http"}, {":authority", "a"}};
  ASSERT_FALSE(nopath.parse(info, err, true));
  EXPECT_EQ(err.status, 400);
}

TEST(ParseRequest, HostHeaderWhenNoAuthority) {
  Block b{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {"host", "h.example:81"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err)) << err.reason;
  EXPECT_EQ(info.host, "h.example");
  EXPECT_EQ(info.port, 81);
  EXPECT_EQ(info.authority, "h.example:81");
}

TEST(WriteHttp1Head, TranslatesAndJoinsCookies) {
  Block b{{":method", "POST"},
          {":scheme", "http"},
          {":authority", "example.com"},
          {":path", "/p"},
          {"cookie", "a=1"},
          {"x-keep", "yes"},
          {"proxy-authorization", "Basic eA=="},
          {"cookie", "b=2"},
          {"x-drop", "1"},
          {"te", "trailers"},
          {"content-length", "5"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err)) << err.reason;
  b.fields[8].flags |= http1::HeaderField::kRemoved;  // a filter removed x-drop
  AddedHeader added[] = {{"x-added", "v"}};
  buffer::Buffer out;
  writeHttp1Head(info, b.fields.data(), static_cast<uint32_t>(b.fields.size()), added, 1, false,
                 out);
  EXPECT_EQ(str(out),
            "POST /p HTTP/1.1\r\n"
            "host: example.com\r\n"
            "cookie: a=1; b=2\r\n"
            "x-keep: yes\r\n"
            "x-added: v\r\n"
            "content-length: 5\r\n"
            "\r\n");
}

TEST(WriteHttp1Head, ChunkedWhenLengthUnknown) {
  Block b{{":method", "PUT"}, {":scheme", "http"}, {":authority", "a:8080"}, {":path", "/"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err));
  buffer::Buffer out;
  writeHttp1Head(info, b.fields.data(), static_cast<uint32_t>(b.fields.size()), nullptr, 0, true,
                 out);
  EXPECT_EQ(str(out), "PUT / HTTP/1.1\r\nhost: a:8080\r\ntransfer-encoding: chunked\r\n\r\n");
}

TEST(DropResponseField, ConnectionSpecific) {
  EXPECT_TRUE(dropResponseField({"Transfer-Encoding", "chunked", 0}));
  EXPECT_TRUE(dropResponseField({"Connection", "keep-alive", 0}));
  EXPECT_TRUE(dropResponseField({"Keep-Alive", "timeout=5", 0}));
  EXPECT_TRUE(dropResponseField({"Content-Length", "5", 0}));  // re-emitted from the parse
  EXPECT_TRUE(dropResponseField({"X-Listed", "1", http1::HeaderField::kHopByHop}));
  EXPECT_FALSE(dropResponseField({"Content-Type", "text/plain", 0}));
}

Dechunker::Status dechunk(Dechunker& d, std::string_view in, std::string& out_text,
                          size_t piece = 0) {
  Dechunker::Status st = Dechunker::Status::NeedMore;
  size_t at = 0;
  while (at < in.size()) {
    size_t n = piece == 0 ? in.size() : std::min(piece, in.size() - at);
    buffer::Buffer b, out;
    b.add(in.substr(at, n));
    st = d.decode(b, out);
    out_text += str(out);
    at += n - b.length();
    if (st != Dechunker::Status::NeedMore) return st;
    if (!b.empty()) break;
  }
  return st;
}

TEST(Dechunker, WholeAndByteAtATime) {
  const std::string body =
      "5;ext=\"q\"\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\n";
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}, size_t{7}}) {
    Dechunker d;
    std::string out;
    EXPECT_EQ(dechunk(d, body, out, piece), Dechunker::Status::Done) << piece;
    EXPECT_EQ(out, "helloabcdefghijklmnopqrstuvwxyz") << piece;
  }
}

TEST(Dechunker, LeavesWhatFollows) {
  Dechunker d;
  buffer::Buffer in, out;
  in.add(std::string_view("3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(d.decode(in, out), Dechunker::Status::Done);
  EXPECT_EQ(str(out), "abc");
  EXPECT_EQ(str(in), "HTTP/1.1 200 OK\r\n");
}

TEST(Dechunker, RejectsBadFraming) {
  for (std::string_view bad :
       {"x\r\n", "3\r\nabcX\r\n", "3\nabc\r\n", "-1\r\n", "11111111111111111\r\n"}) {
    Dechunker d;
    std::string out;
    EXPECT_EQ(dechunk(d, bad, out), Dechunker::Status::Error) << bad;
  }
}

TEST(Methods, Idempotent) {
  EXPECT_TRUE(idempotent(methodOf("GET")));
  EXPECT_TRUE(idempotent(methodOf("PUT")));
  EXPECT_FALSE(idempotent(methodOf("POST")));
  EXPECT_FALSE(idempotent(methodOf("get")));  // HTTP/2 methods are case-sensitive
  EXPECT_EQ(methodOf("CONNECT"), http1::Method::Connect);
}

}  // namespace
}  // namespace http2
}  // namespace filters
}  // namespace sluice
