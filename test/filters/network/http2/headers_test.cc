#include "filters/network/http2/headers.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/upstream/origin_exchange.h"

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

// The request a stream hands to the origin exchange, as Stream::sendRequest builds it.
upstream::OriginRequest originRequest(const RequestInfo& info, const Block& b) {
  upstream::OriginRequest r;
  r.method_text = info.method_text;
  r.method = info.method;
  r.path = info.path;
  r.host = info.authority;
  r.fields = b.fields.data();
  r.field_count = static_cast<uint32_t>(b.fields.size());
  if (info.has_content_length) {
    r.body = upstream::RequestBody::Length;
    r.content_length = info.content_length;
  }
  return r;
}

std::string head(const upstream::OriginRequest& r) {
  buffer::Buffer out;
  upstream::OriginExchange::writeRequestHead(r, {}, upstream::UpstreamInfo(), out);
  return str(out);
}

TEST(OriginHead, TranslatesAndJoinsCookies) {
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
  upstream::AddedField added[] = {{"x-added", "v"}};
  upstream::OriginRequest r = originRequest(info, b);
  r.added = added;
  r.added_count = 1;
  EXPECT_EQ(head(r),
            "POST /p HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "cookie: a=1; b=2\r\n"
            "x-keep: yes\r\n"
            "x-added: v\r\n"
            "Content-Length: 5\r\n"
            "\r\n");
}

TEST(OriginHead, ChunkedWhenLengthUnknown) {
  Block b{{":method", "PUT"}, {":scheme", "http"}, {":authority", "a:8080"}, {":path", "/"}};
  RequestInfo info;
  RequestError err;
  ASSERT_TRUE(b.parse(info, err));
  upstream::OriginRequest r = originRequest(info, b);
  r.body = upstream::RequestBody::ChunkEncode;
  EXPECT_EQ(head(r), "PUT / HTTP/1.1\r\nHost: a:8080\r\nTransfer-Encoding: chunked\r\n\r\n");
}

TEST(DropResponseField, ConnectionSpecific) {
  EXPECT_TRUE(dropResponseField({"Transfer-Encoding", "chunked", 0}));
  EXPECT_TRUE(dropResponseField({"Connection", "keep-alive", 0}));
  EXPECT_TRUE(dropResponseField({"Keep-Alive", "timeout=5", 0}));
  EXPECT_TRUE(dropResponseField({"Content-Length", "5", 0}));  // re-emitted from the parse
  EXPECT_TRUE(dropResponseField({"X-Listed", "1", http1::HeaderField::kHopByHop}));
  EXPECT_FALSE(dropResponseField({"Content-Type", "text/plain", 0}));
}

TEST(Methods, Idempotent) {
  EXPECT_TRUE(http1::idempotent(methodOf("GET")));
  EXPECT_TRUE(http1::idempotent(methodOf("PUT")));
  EXPECT_FALSE(http1::idempotent(methodOf("POST")));
  EXPECT_FALSE(http1::idempotent(methodOf("get")));  // HTTP/2 methods are case-sensitive
  EXPECT_EQ(methodOf("CONNECT"), http1::Method::Connect);
}

}  // namespace
}  // namespace http2
}  // namespace filters
}  // namespace sluice
