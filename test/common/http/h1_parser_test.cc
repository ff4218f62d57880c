#include "source/common/http/h1_parser.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::http1 {
namespace {

using namespace std::string_literals;

// A valid request around the given header lines (each ending in CRLF).
std::string req(std::string_view request_line, std::string_view headers) {
  return std::string(request_line) + "\r\n" + std::string(headers) + "\r\n";
}

class H1RequestTest : public testing::Test {
 protected:
  ParseStatus parse(std::string_view data, ParseLimits limits = {}) {
    return parseRequestHead(data, limits, head_, err_);
  }

  // The fixture owns the buffer: the parsed head points into it.
  void expectComplete(std::string data, ParseLimits limits = {}) {
    SCOPED_TRACE(data);
    buffer_ = std::move(data);
    ASSERT_EQ(parse(buffer_, limits), ParseStatus::Complete) << err_.status << " " << err_.reason;
    EXPECT_EQ(head_.head_size, buffer_.size());
  }

  void expectError(std::string data, uint16_t status, std::string_view reason,
                   ParseLimits limits = {}) {
    SCOPED_TRACE(data);
    buffer_ = std::move(data);
    ASSERT_EQ(parse(buffer_, limits), ParseStatus::Error);
    EXPECT_EQ(err_.status, status);
    EXPECT_EQ(std::string_view(err_.reason), reason);
  }

  // Checks that the header at `index` is flagged hop-by-hop or not.
  bool hopByHop(std::string_view name) {
    const int32_t i = findHeader(head_.headers.data(), head_.headers.size(), name);
    EXPECT_GE(i, 0) << name;
    return i >= 0 && (head_.headers[i].flags & HeaderField::kHopByHop) != 0;
  }

  std::string buffer_;
  RequestHead head_;
  ParseError err_;
};

TEST_F(H1RequestTest, OriginForm) {
  const std::string msg =
      req("GET /a/b?c=d HTTP/1.1", "Host: example.com\r\nUser-Agent: t\r\nAccept: */*\r\n");
  expectComplete(msg);
  EXPECT_EQ(head_.method_text, "GET");
  EXPECT_EQ(head_.method, Method::Get);
  EXPECT_EQ(head_.target, "/a/b?c=d");
  EXPECT_EQ(head_.form, TargetForm::Origin);
  EXPECT_EQ(head_.path, "/a/b?c=d");
  EXPECT_EQ(head_.version_minor, 1);
  EXPECT_TRUE(head_.scheme.empty());
  EXPECT_TRUE(head_.host.empty());
  EXPECT_EQ(head_.port, 0);
  ASSERT_EQ(head_.headers.size(), 3u);
  EXPECT_EQ(head_.headers[0].name, "Host");
  EXPECT_EQ(head_.headers[0].value, "example.com");
  EXPECT_EQ(head_.headers[2].name, "Accept");
  EXPECT_EQ(head_.headers[2].value, "*/*");
  EXPECT_EQ(head_.host_header, 0);
  EXPECT_EQ(head_.proxy_authorization, -1);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  EXPECT_TRUE(head_.keep_alive);
  EXPECT_FALSE(head_.expect_continue);
  EXPECT_FALSE(head_.upgrade);
  // In place: every span points into the caller's buffer.
  EXPECT_EQ(head_.target.data(), buffer_.data() + 4);
  EXPECT_EQ(head_.headers[1].value.data(), buffer_.data() + buffer_.find("t\r\nAccept"));
}

TEST_F(H1RequestTest, AbsoluteForm) {
  expectComplete(req("GET http://Example.com:8080/a/b?c=d HTTP/1.1", "Host: example.COM:8080\r\n"));
  EXPECT_EQ(head_.form, TargetForm::Absolute);
  EXPECT_EQ(head_.scheme, "http");
  EXPECT_EQ(head_.host, "Example.com");
  EXPECT_EQ(head_.port, 8080);
  EXPECT_EQ(head_.path, "/a/b?c=d");
  EXPECT_EQ(head_.target, "http://Example.com:8080/a/b?c=d");
}

TEST_F(H1RequestTest, AbsoluteFormDefaults) {
  expectComplete(req("GET http://a HTTP/1.1", "Host: a\r\n"));
  EXPECT_EQ(head_.path, "/");
  EXPECT_EQ(head_.port, 80);
  expectComplete(req("GET https://a/x HTTP/1.1", "Host: a\r\n"));
  EXPECT_EQ(head_.port, 443);
  expectComplete(req("GET ws://a/x HTTP/1.1", "Host: a:80\r\n"));
  EXPECT_EQ(head_.port, 80);
  expectComplete(req("GET WSS://a/x HTTP/1.1", "Host: a\r\n"));
  EXPECT_EQ(head_.port, 443);
  EXPECT_EQ(head_.scheme, "WSS");
  // Any scheme is parsed; one without a known default has port 0.
  expectComplete(req("GET ftp+x.y-z://a/f HTTP/1.1", "Host: a\r\n"));
  EXPECT_EQ(head_.scheme, "ftp+x.y-z");
  EXPECT_EQ(head_.port, 0);
  expectComplete(req("GET http://[::1]:8080/ HTTP/1.1", "Host: [::1]:8080\r\n"));
  EXPECT_EQ(head_.host, "::1");
  EXPECT_EQ(head_.port, 8080);
  expectComplete(req("GET http://127.0.0.1/ HTTP/1.1", "Host: 127.0.0.1\r\n"));
  EXPECT_EQ(head_.host, "127.0.0.1");
}

TEST_F(H1RequestTest, AuthorityForm) {
  expectComplete(req("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443\r\n"));
  EXPECT_EQ(head_.method, Method::Connect);
  EXPECT_EQ(head_.form, TargetForm::Authority);
  EXPECT_EQ(head_.host, "example.com");
  EXPECT_EQ(head_.port, 443);
  EXPECT_TRUE(head_.path.empty());
  EXPECT_TRUE(head_.scheme.empty());
  expectComplete(req("CONNECT [2001:db8::1]:8443 HTTP/1.1", "Host: [2001:DB8::1]:8443\r\n"));
  EXPECT_EQ(head_.host, "2001:db8::1");
  EXPECT_EQ(head_.port, 8443);
  // A port-less Host names the same host: CONNECT has no scheme to default the port from.
  expectComplete(req("CONNECT example.com:443 HTTP/1.1", "Host: EXAMPLE.com\r\n"));
  // HTTP/1.0 CONNECT without Host.
  expectComplete(req("CONNECT example.com:443 HTTP/1.0", ""));
}

TEST_F(H1RequestTest, AsteriskForm) {
  expectComplete(req("OPTIONS * HTTP/1.1", "Host: a\r\n"));
  EXPECT_EQ(head_.form, TargetForm::Asterisk);
  EXPECT_EQ(head_.method, Method::Options);
  EXPECT_EQ(head_.path, "*");
  expectError(req("GET * HTTP/1.1", "Host: a\r\n"), 400, "asterisk-form only with options");
}

TEST_F(H1RequestTest, Methods) {
  const std::vector<std::pair<std::string, Method>> cases = {
      {"GET", Method::Get},     {"HEAD", Method::Head},     {"POST", Method::Post},
      {"PUT", Method::Put},     {"DELETE", Method::Delete}, {"OPTIONS", Method::Options},
      {"TRACE", Method::Trace}, {"PATCH", Method::Patch},   {"PROPFIND", Method::Other},
      {"get", Method::Other},   {"GETS", Method::Other},    {"X-Y!#$%&'*+.^_`|~", Method::Other},
  };
  for (const auto& [text, method] : cases) {
    expectComplete(req(text + " / HTTP/1.1", "Host: a\r\n"));
    EXPECT_EQ(head_.method, method) << text;
    EXPECT_EQ(head_.method_text, text);
  }
}

TEST_F(H1RequestTest, Http10) {
  expectComplete(req("GET / HTTP/1.0", ""));
  EXPECT_EQ(head_.version_minor, 0);
  EXPECT_FALSE(head_.keep_alive);
  EXPECT_EQ(head_.host_header, -1);
}

TEST_F(H1RequestTest, LeadingEmptyLines) {
  expectComplete("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(head_.method, Method::Get);
  expectComplete("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(head_.target, "/");
  expectError("\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400,
              "too many empty lines before request line");
  expectError("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bare lf");
}

TEST_F(H1RequestTest, RequestLineErrors) {
  const std::string h = "Host: a\r\n";
  expectError(req("GET  / HTTP/1.1", h), 400, "malformed request line");
  expectError(req("GET / HTTP/1.1 ", h), 400, "malformed request line");
  expectError(req("GET /  HTTP/1.1", h), 400, "malformed request line");
  expectError(req(" GET / HTTP/1.1", h), 400, "malformed request line");
  expectError(req("GET", h), 400, "malformed request line");
  expectError(req("GET /", h), 400, "malformed request line");
  expectError(req("GET\t/ HTTP/1.1", h), 400, "invalid method");
  expectError(req("G(T / HTTP/1.1", h), 400, "invalid method");
  expectError(req("GET /a b HTTP/1.1", h), 400, "malformed request line");
  expectError(req("GET /a\x01 HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET /a\x7f HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET /\x80 HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET /a\tb HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET /a#frag HTTP/1.1", h), 400, "fragment in request target");
  expectError(req("GET / http/1.1", h), 400, "malformed request line");
  expectError(req("GET / HTTP/1", h), 400, "malformed request line");
  expectError(req("GET / HTTP/1.10", h), 400, "malformed request line");
  expectError(req("GET / HTTP/1.a", h), 400, "malformed request line");
  expectError(req("GET / HTTPS/1.1", h), 400, "malformed request line");
  expectError(req("GET / HTTP/1.2", h), 505, "unsupported http version");
  expectError(req("GET / HTTP/2.0", h), 505, "unsupported http version");
  expectError(req("GET / HTTP/0.9", h), 505, "unsupported http version");
  expectError("GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "bare lf");
  expectError("GET / HTTP/1.1\r\rHost: a\r\n\r\n", 400, "malformed request line");
  expectError("GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid request target");
  expectError("GE\0T / HTTP/1.1\r\nHost: a\r\n\r\n"s, 400, "invalid method");
}

TEST_F(H1RequestTest, LineEndingAndCharacterErrors) {
  expectError("GET / HTTP/1.1\r\nHost: a\n\r\n", 400, "bare lf");
  expectError("GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "bare lf");
  expectError("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "bare cr");
  expectError("GET / HTTP/1.1\r\nHo\rst: a\r\n\r\n", 400, "bare cr");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"s, 400, "invalid header value");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01\r\n\r\n", 400, "invalid header value");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400, "invalid header value");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX\0: a\r\n\r\n"s, 400, "invalid header name");
  // HTAB, SP and obs-text are fine inside a value.
  expectComplete("GET / HTTP/1.1\r\nHost: a\r\nX: a\tb c\x80\xff\r\n\r\n");
  EXPECT_EQ(head_.headers[1].value, "a\tb c\x80\xff");
}

TEST_F(H1RequestTest, HeaderFieldSyntax) {
  expectComplete(
      "GET / HTTP/1.1\r\nHost: a\r\nX-A:b\r\nX-B: \t c d \t \r\nX-C:\r\nX-D:   \r\n\r\n");
  ASSERT_EQ(head_.headers.size(), 5u);
  EXPECT_EQ(head_.headers[1].value, "b");
  EXPECT_EQ(head_.headers[2].value, "c d");
  EXPECT_EQ(head_.headers[3].value, "");
  EXPECT_EQ(head_.headers[4].value, "");
  expectError("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "whitespace before colon");
  expectError("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400, "whitespace before colon");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n  c\r\n\r\n", 400, "obs-fold");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\tc\r\n\r\n", 400, "obs-fold");
  expectError("GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400, "obs-fold");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, "header without colon");
  expectError("GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n", 400, "empty header name");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nA(b: v\r\n\r\n", 400, "invalid header name");
  expectError("GET / HTTP/1.1\r\nHost: a\r\nA\x80: v\r\n\r\n", 400, "invalid header name");
}

TEST_F(H1RequestTest, HeaderCountLimit) {
  ParseLimits limits;
  limits.max_headers = 3;
  expectComplete("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n", limits);
  expectError("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 431, "too many headers",
              limits);
  limits.max_headers = 0;
  expectError("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 431, "too many headers", limits);
  expectComplete("GET / HTTP/1.0\r\n\r\n", limits);

  // A configured limit above the hard capacity acts as the capacity.
  limits.max_headers = 1000;
  limits.max_head_bytes = 1 << 20;
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (uint32_t i = 1; i < kMaxHeaderCapacity; ++i) {
    many += "X: " + std::to_string(i) + "\r\n";
  }
  expectComplete(many + "\r\n", limits);
  EXPECT_EQ(head_.headers.size(), kMaxHeaderCapacity);
  expectError(many + "Y: z\r\n\r\n", 431, "too many headers", limits);
}

TEST_F(H1RequestTest, HeadSizeLimit) {
  const std::string msg = "GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789\r\n\r\n";
  ParseLimits limits;
  limits.max_head_bytes = static_cast<uint32_t>(msg.size());
  expectComplete(msg, limits);
  limits.max_head_bytes = static_cast<uint32_t>(msg.size() - 1);
  expectError(msg, 431, "head too large", limits);
  // Incomplete but already larger than the limit.
  limits.max_head_bytes = 20;
  expectError(std::string("GET /") + std::string(30, 'a'), 431, "head too large", limits);
  expectError("GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(30, 'b'), 431, "head too large",
              limits);
  // Exactly at the limit and incomplete: still waiting for more.
  EXPECT_EQ(parse(msg.substr(0, 20), limits), ParseStatus::Incomplete);
  // Trailing bytes after a complete head do not count.
  limits.max_head_bytes = static_cast<uint32_t>(msg.size());
  expectComplete(msg, limits);
  EXPECT_EQ(parse(msg + "body bytes", limits), ParseStatus::Complete);
  EXPECT_EQ(head_.head_size, msg.size());
}

TEST_F(H1RequestTest, TargetErrors) {
  const std::string h = "Host: a\r\n";
  expectError(req("CONNECT /x HTTP/1.1", h), 400, "invalid host");
  expectError(req("CONNECT example.com HTTP/1.1", "Host: example.com\r\n"), 400,
              "connect target without port");
  expectError(req("CONNECT http://example.com:80/ HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT a:0 HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT a:65536 HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT a:123456 HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT a:8a HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT a: HTTP/1.1", h), 400, "invalid port");
  expectError(req("CONNECT :443 HTTP/1.1", h), 400, "empty host");
  expectError(req("CONNECT user@a:443 HTTP/1.1", h), 400, "userinfo in authority");
  expectError(req("CONNECT [::1] HTTP/1.1", h), 400, "connect target without port");
  expectError(req("CONNECT []:443 HTTP/1.1", h), 400, "invalid host");
  expectError(req("CONNECT [zz::1]:443 HTTP/1.1", h), 400, "invalid host");
  expectError(req("CONNECT [127.0.0.1]:443 HTTP/1.1", h), 400, "invalid host");
  expectError(req("CONNECT [::1:443 HTTP/1.1", h), 400, "invalid host");
  expectError(req("CONNECT a%41:443 HTTP/1.1", h), 400, "invalid host");
  expectError(req("GET a:443 HTTP/1.1", h), 400, "authority-form only with connect");
  expectError(req("GET example.com HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET 1http://a/ HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET http:/a/ HTTP/1.1", h), 400, "invalid request target");
  expectError(req("GET http://user@a/ HTTP/1.1", h), 400, "userinfo in authority");
  expectError(req("GET http://u:p@a/ HTTP/1.1", h), 400, "userinfo in authority");
  expectError(req("GET http:/// HTTP/1.1", h), 400, "empty host");
  expectError(req("GET http:// HTTP/1.1", h), 400, "empty host");
  expectError(req("GET http://:80/ HTTP/1.1", h), 400, "empty host");
  expectError(req("GET http://a:/ HTTP/1.1", h), 400, "invalid port");
  expectError(req("GET http://a:0/ HTTP/1.1", h), 400, "invalid port");
  expectError(req("GET http://a:99999/ HTTP/1.1", h), 400, "invalid port");
  expectError(req("GET http://a:-1/ HTTP/1.1", h), 400, "invalid port");
  expectError(req("GET http://a?x HTTP/1.1", h), 400, "absolute-form query without path");
  expectError(req("GET http://a!b/ HTTP/1.1", h), 400, "invalid host");
}

TEST_F(H1RequestTest, HostHeader) {
  expectError(req("GET / HTTP/1.1", ""), 400, "missing host header");
  expectError(req("GET / HTTP/1.1", "Host: a\r\nhost: a\r\n"), 400, "multiple host headers");
  expectError(req("GET / HTTP/1.0", "Host: a\r\nHost: b\r\n"), 400, "multiple host headers");
  expectComplete(req("GET / HTTP/1.1", "X: y\r\nHost: a\r\n"));
  EXPECT_EQ(head_.host_header, 1);
  // Empty Host is allowed for origin-form; a malformed one is not.
  expectComplete(req("GET / HTTP/1.1", "Host:\r\n"));
  expectError(req("GET / HTTP/1.1", "Host: a b\r\n"), 400, "invalid host header");
  expectError(req("GET / HTTP/1.1", "Host: u@a\r\n"), 400, "invalid host header");
  expectError(req("GET / HTTP/1.1", "Host: a:0\r\n"), 400, "invalid host header");
  expectError(req("GET / HTTP/1.1", "Host: a,b\r\n"), 400, "invalid host header");
  // absolute-form: Host must name the target's host and port.
  const std::string abs = "GET http://example.com/ HTTP/1.1";
  expectComplete(req(abs, "Host: EXAMPLE.com\r\n"));
  expectComplete(req(abs, "Host: example.com:80\r\n"));
  expectError(req(abs, "Host: other.com\r\n"), 400, "host header does not match target");
  expectError(req(abs, "Host: example.com:8080\r\n"), 400, "host header does not match target");
  expectError(req(abs, "Host:\r\n"), 400, "host header does not match target");
  expectError(req(abs, "Host: example.com.\r\n"), 400, "host header does not match target");
  expectError(req("GET http://example.com:8080/ HTTP/1.1", "Host: example.com\r\n"), 400,
              "host header does not match target");
  expectComplete(req("GET https://example.com/ HTTP/1.1", "Host: example.com:443\r\n"));
  expectError(req("GET https://example.com/ HTTP/1.1", "Host: example.com:80\r\n"), 400,
              "host header does not match target");
  // authority-form.
  expectError(req("CONNECT example.com:443 HTTP/1.1", "Host: example.com:444\r\n"), 400,
              "host header does not match target");
  expectError(req("CONNECT example.com:443 HTTP/1.1", "Host: evil.com:443\r\n"), 400,
              "host header does not match target");
  expectError(req("CONNECT [::1]:443 HTTP/1.1", "Host: ::1:443\r\n"), 400,
              "host header does not match target");
}

TEST_F(H1RequestTest, HostHeaderRequiredEvenWithAbsoluteForm) {
  // RFC 9112 §3.2: an HTTP/1.1 request without Host is rejected whatever the target form.
  expectError(req("GET http://example.com/ HTTP/1.1", ""), 400, "missing host header");
  expectError(req("CONNECT example.com:443 HTTP/1.1", ""), 400, "missing host header");
}

TEST_F(H1RequestTest, ContentLength) {
  const std::string rl = "POST / HTTP/1.1";
  expectComplete(req(rl, "Host: a\r\nContent-Length: 42\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
  EXPECT_EQ(head_.content_length, 42u);
  expectComplete(req(rl, "Host: a\r\nContent-Length: 0\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
  EXPECT_EQ(head_.content_length, 0u);
  expectComplete(req(rl, "Host: a\r\ncontent-length:   7  \r\n"));
  EXPECT_EQ(head_.content_length, 7u);
  expectComplete(req(rl, "Host: a\r\nContent-Length: 5, 5\r\n"));
  EXPECT_EQ(head_.content_length, 5u);
  expectComplete(req(rl, "Host: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n"));
  EXPECT_EQ(head_.content_length, 5u);
  expectComplete(req(rl, "Host: a\r\nContent-Length: 9999999999999999999\r\n"));
  EXPECT_EQ(head_.content_length, 9999999999999999999ull);
  expectComplete(req(rl, "Host: a\r\nContent-Length: 0000000000000000005\r\n"));
  EXPECT_EQ(head_.content_length, 5u);

  expectError(req(rl, "Host: a\r\nContent-Length: 10000000000000000000\r\n"), 400,
              "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 99999999999999999999\r\n"), 400,
              "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: +5\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: -5\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 0x10\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 5 5\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 5.0\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length:\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 5,\r\n"), 400, "invalid content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 5, 6\r\n"), 400, "conflicting content-length");
  expectError(req(rl, "Host: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n"), 400,
              "conflicting content-length");
}

TEST_F(H1RequestTest, TransferEncoding) {
  const std::string rl = "POST / HTTP/1.1";
  for (const char* te : {"chunked", "CHUNKED", "Chunked", "chunked\t", "gzip, chunked",
                         "gzip;q=1, chunked", "x;a=\"b,c\" ; d = e, chunked"}) {
    expectComplete(req(rl, std::string("Host: a\r\nTransfer-Encoding: ") + te + "\r\n"));
    EXPECT_EQ(head_.framing, BodyFraming::Chunked) << te;
  }
  // Several field lines form one list.
  expectComplete(req(rl, "Host: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
  // Transfer-Encoding is end-to-end for this proxy: the chunked body is forwarded verbatim.
  EXPECT_FALSE(hopByHop("transfer-encoding"));

  expectError(req(rl, "Host: a\r\nTransfer-Encoding: gzip\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked;q=1\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding:\r\n"), 400, "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: ,chunked\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked chunked\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: \"chunked\"\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: gzip;q=\"1, chunked\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked, chunked\r\n"), 400,
              "chunked applied twice");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
              400, "chunked applied twice");
  expectError(req("POST / HTTP/1.0", "Transfer-Encoding: chunked\r\n"), 400,
              "transfer-encoding in http/1.0");
}

// The request-smuggling regressions found in Tinyproxy and its peers.
TEST_F(H1RequestTest, SmugglingRegressions) {
  const std::string rl = "POST / HTTP/1.1";
  expectComplete(req(rl, "Host: a\r\nTransfer-Encoding: cHuNkEd\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
  expectError(req(rl, "Host: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"), 400,
              "content-length with transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n"), 400,
              "content-length with transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n"), 400,
              "content-length with transfer-encoding");
  expectError(req(rl, "Host: a\r\nContent-Length: 5\r\nContent-Length: 50\r\n"), 400,
              "conflicting content-length");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked,\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked, gzip\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: xchunked\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunkedx\r\n"), 501,
              "unsupported transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked;foo\r\n"), 400,
              "invalid transfer-encoding");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding : chunked\r\n"), 400,
              "whitespace before colon");
  expectError(req(rl, "Host: a\r\nTransfer-Encoding: chunked\r\n x\r\n"), 400, "obs-fold");
  expectError(req(rl,
                  "Host: a\r\nTransfer-Encoding:\x0b"
                  "chunked\r\n"),
              400, "invalid header value");
  expectError(req(rl,
                  "Host: a\r\nContent-Length: 5\r\nConnection: content-length\r\n"
                  "Transfer-Encoding: chunked\r\n"),
              400, "content-length with transfer-encoding");
}

TEST_F(H1RequestTest, KeepAlive) {
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\n"));
  EXPECT_TRUE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nConnection: close\r\n"));
  EXPECT_FALSE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nConnection: Keep-Alive, CLOSE\r\n"));
  EXPECT_FALSE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nConnection: closed\r\n"));
  EXPECT_TRUE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nProxy-Connection: close\r\n"));
  EXPECT_FALSE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.0", "Connection: keep-alive\r\n"));
  EXPECT_TRUE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.0", "Proxy-Connection: Keep-Alive\r\n"));
  EXPECT_TRUE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.0", "Connection: keep-alive\r\nProxy-Connection: close\r\n"));
  EXPECT_FALSE(head_.keep_alive);
  expectComplete(req("GET / HTTP/1.0", "Connection: foo\r\n"));
  EXPECT_FALSE(head_.keep_alive);
}

TEST_F(H1RequestTest, ExpectAndUpgrade) {
  expectComplete(
      req("POST / HTTP/1.1", "Host: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n"));
  EXPECT_TRUE(head_.expect_continue);
  expectComplete(req("POST / HTTP/1.1", "Host: a\r\nExpect: 100-continued\r\n"));
  EXPECT_FALSE(head_.expect_continue);

  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"));
  EXPECT_TRUE(head_.upgrade);
  EXPECT_TRUE(hopByHop("upgrade"));
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nUpgrade: websocket\r\n"));
  EXPECT_FALSE(head_.upgrade);
  expectComplete(req("GET / HTTP/1.1", "Host: a\r\nConnection: keep-alive, upgrade\r\n"));
  EXPECT_FALSE(head_.upgrade);
}

TEST_F(H1RequestTest, HopByHopFlags) {
  expectComplete(
      req("GET / HTTP/1.1",
          "Host: a\r\nConnection: X-Foo, close, content-length, host, "
          "transfer-encoding\r\nProxy-Connection: keep-alive\r\nKeep-Alive: 5\r\n"
          "TE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\nProxy-Authorization: Basic x\r\n"
          "Proxy-Authenticate: Basic\r\nx-foo: 1\r\nX-Bar: 2\r\nContent-Length: 0\r\n"));
  for (const char* name : {"connection", "proxy-connection", "keep-alive", "te", "trailer",
                           "upgrade", "proxy-authorization", "proxy-authenticate", "X-FOO"}) {
    EXPECT_TRUE(hopByHop(name)) << name;
  }
  // Naming them in Connection must not let a client strip the framing or Host headers.
  for (const char* name : {"host", "x-bar", "content-length"}) {
    EXPECT_FALSE(hopByHop(name)) << name;
  }
  EXPECT_EQ(head_.proxy_authorization, 7);
  EXPECT_EQ(head_.headers[7].value, "Basic x");
}

TEST_F(H1RequestTest, ProxyAuthorizationIndexIsFirst) {
  expectComplete(
      req("GET / HTTP/1.1",
          "Proxy-Authorization: Basic a\r\nHost: a\r\nProxy-Authorization: Basic b\r\n"));
  EXPECT_EQ(head_.proxy_authorization, 0);
}

TEST_F(H1RequestTest, ReusedHeadIsReset) {
  expectComplete(
      req("POST http://a/x HTTP/1.1",
          "Host: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\nConnection: upgrade\r\n"
          "Upgrade: x\r\nProxy-Authorization: y\r\n"));
  EXPECT_TRUE(head_.upgrade);
  expectComplete(req("GET / HTTP/1.0", ""));
  EXPECT_EQ(head_.headers.size(), 0u);
  EXPECT_TRUE(head_.scheme.empty());
  EXPECT_TRUE(head_.host.empty());
  EXPECT_EQ(head_.port, 0);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  EXPECT_EQ(head_.content_length, 0u);
  EXPECT_FALSE(head_.expect_continue);
  EXPECT_FALSE(head_.upgrade);
  EXPECT_EQ(head_.host_header, -1);
  EXPECT_EQ(head_.proxy_authorization, -1);
}

TEST_F(H1RequestTest, IncompleteAndPipelined) {
  EXPECT_EQ(parse(""), ParseStatus::Incomplete);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n"), ParseStatus::Incomplete);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n\r"), ParseStatus::Incomplete);
  const std::string first = req("GET /1 HTTP/1.1", "Host: a\r\n");
  const std::string both = first + req("GET /2 HTTP/1.1", "Host: a\r\n");
  ASSERT_EQ(parse(both), ParseStatus::Complete);
  EXPECT_EQ(head_.head_size, first.size());
  EXPECT_EQ(head_.target, "/1");
  ASSERT_EQ(parse(std::string_view(both).substr(head_.head_size)), ParseStatus::Complete);
  EXPECT_EQ(head_.target, "/2");
}

TEST_F(H1RequestTest, EarlyRejectionOfNonHttp) {
  // A TLS ClientHello or other binary sent to the plain port is refused before any LF arrives.
  expectError("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "invalid method");
  expectError("GET\x01", 400, "invalid method");
  EXPECT_EQ(parse("GET /"), ParseStatus::Incomplete);
  EXPECT_EQ(parse("\r\n\r"), ParseStatus::Incomplete);
}

// --- Responses ---

class H1ResponseTest : public testing::Test {
 protected:
  ParseStatus parse(std::string_view data, Method method = Method::Get, ParseLimits limits = {}) {
    return parseResponseHead(data, limits, method, head_, err_);
  }

  void expectComplete(std::string data, Method method = Method::Get) {
    SCOPED_TRACE(data);
    buffer_ = std::move(data);
    ASSERT_EQ(parse(buffer_, method), ParseStatus::Complete) << err_.status << " " << err_.reason;
    EXPECT_EQ(head_.head_size, buffer_.size());
  }

  void expectError(std::string data, std::string_view reason, Method method = Method::Get,
                   ParseLimits limits = {}) {
    SCOPED_TRACE(data);
    buffer_ = std::move(data);
    ASSERT_EQ(parse(buffer_, method, limits), ParseStatus::Error);
    EXPECT_EQ(err_.status, 502);
    EXPECT_EQ(std::string_view(err_.reason), reason);
  }

  std::string buffer_;
  ResponseHead head_;
  ParseError err_;
};

TEST_F(H1ResponseTest, StatusLine) {
  expectComplete("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(head_.version_minor, 1);
  EXPECT_EQ(head_.status, 200);
  EXPECT_EQ(head_.reason, "OK");
  ASSERT_EQ(head_.headers.size(), 1u);
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
  EXPECT_EQ(head_.content_length, 2u);
  EXPECT_TRUE(head_.keep_alive);
  expectComplete("HTTP/1.0 404 Not  Found\t\x80\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(head_.version_minor, 0);
  EXPECT_EQ(head_.status, 404);
  EXPECT_EQ(head_.reason, "Not  Found\t\x80");
  expectComplete("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(head_.reason, "");
  // Missing SP + reason is tolerated for old origins.
  expectComplete("HTTP/1.1 204\r\n\r\n");
  EXPECT_EQ(head_.status, 204);
  EXPECT_EQ(head_.reason, "");
  expectComplete("HTTP/1.1 999 Weird\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(head_.status, 999);
  expectComplete("HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(head_.status, 100);

  expectError("HTTP/1.1 099 X\r\n\r\n", "invalid status code");
  expectError("HTTP/1.1 20 OK\r\n\r\n", "invalid status code");
  expectError("HTTP/1.1 2x0 OK\r\n\r\n", "invalid status code");
  expectError("HTTP/1.1 2000 OK\r\n\r\n", "malformed status line");
  expectError("HTTP/1.1  200 OK\r\n\r\n", "invalid status code");
  expectError("HTTP/1.1\t200 OK\r\n\r\n", "malformed status line");
  expectError("HTTP/1.1 200\tOK\r\n\r\n", "malformed status line");
  expectError("HTTP/1.1 200 O\x01K\r\n\r\n", "invalid reason phrase");
  expectError("HTTP/1.1 200 OK\rX\r\n\r\n", "invalid reason phrase");
  expectError("HTTP/2.0 200 OK\r\n\r\n", "unsupported http version");
  expectError("HTTP/1.2 200 OK\r\n\r\n", "unsupported http version");
  expectError("http/1.1 200 OK\r\n\r\n", "malformed status line");
  expectError("HTTP/1 200 OK\r\n\r\n", "malformed status line");
  expectError("HTTP/1.1\r\n\r\n", "malformed status line");
  expectError("ICY 200 OK\r\n\r\n", "malformed status line");
  expectError("HTTP/1.1 200 OK\n\r\n", "bare lf");
  // No empty lines are skipped before a status line.
  expectError("\r\nHTTP/1.1 200 OK\r\n\r\n", "malformed status line");
  // Garbage is refused as soon as the first bytes show it cannot be a status line.
  expectError("<html>", "malformed status line");
  EXPECT_EQ(parse("HTTP/1."), ParseStatus::Incomplete);
  EXPECT_EQ(parse("HTT"), ParseStatus::Incomplete);
}

TEST_F(H1ResponseTest, HeaderErrors) {
  expectError("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "obs-fold");
  expectError("HTTP/1.1 200 OK\r\nX : a\r\n\r\n", "whitespace before colon");
  expectError("HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n", "bare lf");
  expectError("HTTP/1.1 200 OK\r\nX: a\0\r\n\r\n"s, "invalid header value");
  ParseLimits limits;
  limits.max_headers = 1;
  expectError("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n", "too many headers", Method::Get, limits);
  limits.max_head_bytes = 10;
  expectError("HTTP/1.1 200 OK\r\n\r\n", "head too large", Method::Get, limits);
}

TEST_F(H1ResponseTest, Framing) {
  expectComplete("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", Method::Head);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  EXPECT_EQ(head_.content_length, 10u);
  EXPECT_TRUE(head_.keep_alive);
  expectComplete("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Method::Head);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  for (const char* line :
       {"HTTP/1.1 100 Continue", "HTTP/1.1 101 Switching Protocols", "HTTP/1.1 103 Early Hints",
        "HTTP/1.1 204 No Content", "HTTP/1.1 304 Not Modified"}) {
    expectComplete(std::string(line) + "\r\nContent-Length: 10\r\n\r\n");
    EXPECT_EQ(head_.framing, BodyFraming::None) << line;
    EXPECT_TRUE(head_.keep_alive) << line;
  }
  expectComplete("HTTP/1.1 200 Connection established\r\n\r\n", Method::Connect);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  expectComplete("HTTP/1.1 299 X\r\nContent-Length: 4\r\n\r\n", Method::Connect);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  expectComplete("HTTP/1.1 407 Auth\r\nContent-Length: 4\r\n\r\n", Method::Connect);
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);

  expectComplete("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
  EXPECT_TRUE(head_.keep_alive);
  expectComplete("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
  // A body whose codings do not end in chunked could be read two ways: never relayed.
  for (const char* te : {"gzip", "chunked, gzip", "xchunked", "chunked;x=1"}) {
    expectError(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: ") + te + "\r\n\r\n",
                "transfer-encoding does not end in chunked");
  }
  // Where there is no body, the field frames nothing.
  expectComplete("HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::None);
  expectComplete("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", Method::Head);
  EXPECT_EQ(head_.framing, BodyFraming::None);
  expectComplete("HTTP/1.1 200 OK\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::UntilClose);
  EXPECT_FALSE(head_.keep_alive);
  expectComplete("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
  EXPECT_EQ(head_.content_length, 5u);

  expectError("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
              "content-length with transfer-encoding");
  expectError("HTTP/1.1 204 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
              "content-length with transfer-encoding");
  expectError("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
              "conflicting content-length");
  expectError("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "invalid content-length");
  expectError("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n",
              "invalid transfer-encoding");
  expectError("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
              "chunked applied twice");
}

TEST_F(H1ResponseTest, KeepAliveAndHopByHop) {
  expectComplete("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  EXPECT_FALSE(head_.keep_alive);
  expectComplete("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
  EXPECT_FALSE(head_.keep_alive);
  expectComplete("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
  EXPECT_TRUE(head_.keep_alive);
  // Transfer-Encoding in HTTP/1.0 means faulty framing: follow it, then close.
  expectComplete("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
  EXPECT_FALSE(head_.keep_alive);
  // Proxy-Connection is not a response keep-alive signal, but it is hop-by-hop.
  expectComplete("HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n");
  EXPECT_TRUE(head_.keep_alive);
  EXPECT_TRUE(head_.headers[0].flags & HeaderField::kHopByHop);

  expectComplete(
      "HTTP/1.1 200 OK\r\nConnection: x-a\r\nX-A: 1\r\nX-B: 2\r\n"
      "Proxy-Authenticate: Basic\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(head_.headers[0].flags & HeaderField::kHopByHop);
  EXPECT_TRUE(head_.headers[1].flags & HeaderField::kHopByHop);
  EXPECT_FALSE(head_.headers[2].flags & HeaderField::kHopByHop);
  EXPECT_TRUE(head_.headers[3].flags & HeaderField::kHopByHop);
  EXPECT_FALSE(head_.headers[4].flags & HeaderField::kHopByHop);
}

TEST_F(H1ResponseTest, InterimThenFinal) {
  const std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
  const std::string final_head = "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
  const std::string both = interim + final_head;
  ASSERT_EQ(parse(both, Method::Post), ParseStatus::Complete);
  EXPECT_EQ(head_.status, 100);
  EXPECT_EQ(head_.head_size, interim.size());
  ASSERT_EQ(parse(std::string_view(both).substr(head_.head_size), Method::Post),
            ParseStatus::Complete);
  EXPECT_EQ(head_.status, 201);
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
}

// --- Helpers ---

TEST(H1HelpersTest, EqualsIgnoreCase) {
  EXPECT_TRUE(equalsIgnoreCase("Content-Length", "content-LENGTH"));
  EXPECT_TRUE(equalsIgnoreCase("", ""));
  EXPECT_FALSE(equalsIgnoreCase("abc", "abd"));
  EXPECT_FALSE(equalsIgnoreCase("abc", "ab"));
  // Only ASCII letters fold: '@' (0x40) and '`' (0x60) differ by 0x20 but are not letters.
  EXPECT_FALSE(equalsIgnoreCase("@", "`"));
  EXPECT_FALSE(equalsIgnoreCase("[", "{"));
  EXPECT_FALSE(equalsIgnoreCase("\xc0", "\xe0"));
}

// Only ASCII letters fold, at any place of a name: every pair of bytes at every place of names
// from 1 to 20 bytes (the rest equal letters in mixed case).
// The names the parser acts on are recognised in any case, and a name that differs from one in
// any other byte is just another header: each hop-by-hop name, every position, every tchar.
TEST_F(H1RequestTest, KnownNamesInAnyCaseAndNoOtherByte) {
  const auto fold = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  for (const std::string lower :
       {"te", "trailer", "upgrade", "connection", "keep-alive", "proxy-connection",
        "proxy-authenticate", "proxy-authorization"}) {
    for (size_t at = 0; at < lower.size(); ++at) {
      for (int c = 0; c < 256; ++c) {
        if (!detail::is(static_cast<char>(c), detail::kTchar)) continue;
        std::string name = lower;
        name[at] = static_cast<char>(c);
        // Every other letter in upper case too: the case of the rest must not matter.
        for (size_t k = 0; k < name.size(); k += 2) {
          if (k != at && name[k] >= 'a' && name[k] <= 'z')
            name[k] = static_cast<char>(name[k] - 32);
        }
        const bool same = fold(static_cast<char>(c)) == lower[at];
        buffer_ = req("GET / HTTP/1.1", "Host: a\r\n" + name + ": x\r\n");
        ASSERT_EQ(parse(buffer_), ParseStatus::Complete) << name;
        ASSERT_EQ(head_.headers.size(), 2u);
        const bool flagged = (head_.headers[1].flags & HeaderField::kHopByHop) != 0;
        if (flagged != same) FAIL() << lower << " written " << name;
      }
    }
  }
  // And the ones that decide framing, the host and the expectation.
  expectComplete(
      req("POST / HTTP/1.1", "hOST: a\r\ncONTENT-lENGTH: 5\r\nExPeCt: 100-continue\r\n"));
  EXPECT_EQ(head_.host_header, 0);
  EXPECT_EQ(head_.framing, BodyFraming::ContentLength);
  EXPECT_TRUE(head_.expect_continue);
  expectComplete(
      req("POST / HTTP/1.1", "Host: a\r\nContent-Lengti: 5\r\nExpecu: 100-continue\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::None);
  EXPECT_FALSE(head_.expect_continue);
  expectComplete(req("POST / HTTP/1.1", "Host: a\r\nTRANSFER-ENCODING: chunked\r\n"));
  EXPECT_EQ(head_.framing, BodyFraming::Chunked);
}

// A field line is scanned in one pass when it is whole and well formed, and checked line by line
// otherwise: the two agree. Names and values of every length around the 16- and 8-byte steps,
// with a tab, trailing whitespace, obs-text or a bad byte at every place, each head also parsed
// from every prefix (a prefix ends mid-line, so its last line takes the line-by-line way).
TEST_F(H1RequestTest, OnePassAndLineByLineAgree) {
  const std::string bad_bytes = std::string("\t \x7f\x01\r\n\x80\"", 8);
  for (size_t name_len = 1; name_len <= 34; name_len += 3) {
    for (size_t value_len = 0; value_len <= 40; value_len += 1) {
      for (size_t at = 0; at <= name_len + value_len; at += 5) {
        for (char b : bad_bytes) {
          std::string line = std::string(name_len, 'n') + ": " + std::string(value_len, 'v');
          if (at < line.size()) line[at] = b;
          const std::string data = req("GET / HTTP/1.1", "Host: a\r\n" + line + "\r\nX: y\r\n");
          RequestHead whole;
          ParseError whole_err;
          const ParseStatus want = parseRequestHead(data, ParseLimits{}, whole, whole_err);
          for (size_t cut = 0; cut < data.size(); ++cut) {
            RequestHead part;
            ParseError part_err;
            const ParseStatus got = parseRequestHead(std::string_view(data).substr(0, cut),
                                                     ParseLimits{}, part, part_err);
            if (got == ParseStatus::Incomplete) continue;
            ASSERT_EQ(got, want) << testing::PrintToString(data) << " cut at " << cut;
            ASSERT_EQ(std::string_view(part_err.reason), std::string_view(whole_err.reason))
                << testing::PrintToString(data) << " cut at " << cut;
          }
          if (want != ParseStatus::Complete) continue;
          ASSERT_EQ(whole.headers.size(), 3u) << testing::PrintToString(data);
          // What the byte rule says the value is: OWS-trimmed.
          const size_t colon = line.find(':');
          std::string_view value = std::string_view(line).substr(colon + 1);
          while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
            value.remove_prefix(1);
          }
          while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
            value.remove_suffix(1);
          }
          EXPECT_EQ(whole.headers[1].name, std::string_view(line).substr(0, colon));
          EXPECT_EQ(whole.headers[1].value, value) << testing::PrintToString(data);
        }
      }
    }
  }
}

// isFieldName is equalsIgnoreCase for a lowercase name, at every length around the eight-byte
// words, every position and every byte value, in either case elsewhere.
TEST(H1HelpersTest, IsFieldNameAgreesWithEqualsIgnoreCase) {
  const std::string names[] = {"a",
                               "te",
                               "wss",
                               "host",
                               "expect",
                               "upgrade",
                               "trailer",
                               "x-sluice",
                               "keep-alive",
                               "content-length",
                               "proxy-connection",
                               "transfer-encoding",
                               "proxy-authorization",
                               "sec-websocket-9-key"};
  for (const std::string& lower : names) {
    ASSERT_TRUE(isFieldName(lower, lower));
    EXPECT_FALSE(isFieldName(lower + "s", lower));
    EXPECT_FALSE(isFieldName(lower.substr(1), lower));
    for (size_t at = 0; at < lower.size(); ++at) {
      for (int c = 0; c < 256; ++c) {
        std::string name = lower;
        for (size_t k = 1; k < name.size(); k += 2) {
          if (name[k] >= 'a' && name[k] <= 'z') name[k] = static_cast<char>(name[k] - 32);
        }
        name[at] = static_cast<char>(c);
        if (isFieldName(name, lower) != equalsIgnoreCase(name, lower)) {
          FAIL() << lower << " at " << at << ": byte " << c;
        }
      }
    }
  }
}

TEST(H1HelpersTest, EqualsIgnoreCaseAgreesWithTheByteRule) {
  const auto fold = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  for (size_t n : {1, 7, 8, 9, 14, 16, 19, 20}) {
    std::string a(n, 'x');
    std::string b(n, 'x');
    for (size_t k = 0; k < n; ++k) {
      a[k] = static_cast<char>(k % 2 == 0 ? 'A' + k : 'a' + k);
      b[k] = static_cast<char>('a' + k);
    }
    ASSERT_TRUE(equalsIgnoreCase(a, b)) << n;
    for (size_t at = 0; at < n; ++at) {
      std::string x = a;
      std::string y = b;
      for (int c = 0; c < 256; ++c) {
        for (int d = 0; d < 256; ++d) {
          x[at] = static_cast<char>(c);
          y[at] = static_cast<char>(d);
          const bool want =
              fold(static_cast<unsigned char>(c)) == fold(static_cast<unsigned char>(d));
          if (equalsIgnoreCase(x, y) != want) {
            FAIL() << "length " << n << " at " << at << ": " << c << " vs " << d;
          }
        }
      }
    }
  }
}

TEST(H1HelpersTest, FindHeader) {
  HeaderField h[3];
  h[0] = {"Host", "a"};
  h[1] = {"X-Foo", "1"};
  h[2] = {"x-foo", "2"};
  EXPECT_EQ(findHeader(h, 3, "x-FOO"), 1);
  EXPECT_EQ(findHeader(h, 3, "host"), 0);
  EXPECT_EQ(findHeader(h, 3, "missing"), -1);
  EXPECT_EQ(findHeader(h, 1, "x-foo"), -1);
  h[1].flags = HeaderField::kRemoved;
  EXPECT_EQ(findHeader(h, 3, "x-foo"), 2);
}

TEST(H1HelpersTest, HeaderHasToken) {
  EXPECT_TRUE(headerHasToken("close", "close"));
  EXPECT_TRUE(headerHasToken(" Keep-Alive ,\tCLOSE\t", "close"));
  EXPECT_TRUE(headerHasToken("a,,upgrade", "Upgrade"));
  EXPECT_FALSE(headerHasToken("closed", "close"));
  EXPECT_FALSE(headerHasToken("c lose", "close"));
  EXPECT_FALSE(headerHasToken("", "close"));
  EXPECT_FALSE(headerHasToken("x-close, closex", "close"));
}

TEST(H1HelpersTest, ParseAuthority) {
  std::string_view host;
  uint16_t port = 1;
  bool has_port = true;
  EXPECT_TRUE(parseAuthority("Example.com", host, port, has_port));
  EXPECT_EQ(host, "Example.com");
  EXPECT_FALSE(has_port);
  EXPECT_EQ(port, 0);
  EXPECT_TRUE(parseAuthority("a:65535", host, port, has_port));
  EXPECT_EQ(port, 65535);
  EXPECT_TRUE(has_port);
  EXPECT_TRUE(parseAuthority("[fe80::1:2]:1", host, port, has_port));
  EXPECT_EQ(host, "fe80::1:2");
  EXPECT_EQ(port, 1);
  EXPECT_TRUE(parseAuthority("[::ffff:1.2.3.4]", host, port, has_port));
  EXPECT_EQ(host, "::ffff:1.2.3.4");
  for (const char* bad : {"", ":80", "a:", "a:0", "a:65536", "a:1x", "u@a", "[::1", "[]", "[a]",
                          "[::1]x", "a b", "a/b", "a:80:80", "[::1%25eth0]:80"}) {
    EXPECT_FALSE(parseAuthority(bad, host, port, has_port)) << bad;
  }
}

// --- Split at every byte boundary ---

// For every proper prefix: Incomplete, or (for a bad message) the one-shot error; once an error
// is reported, every longer prefix reports it too. The whole message gives the one-shot result.
template <class Parse>
void checkEveryPrefix(const std::string& msg, Parse parse) {
  SCOPED_TRACE(msg);
  ParseError whole_err;
  uint32_t whole_size = 0;
  const ParseStatus whole = parse(msg, whole_err, whole_size);
  bool error_seen = false;
  for (size_t k = 0; k < msg.size(); ++k) {
    // A copy of exactly k bytes, so reading past the prefix would be caught by ASan.
    const std::string prefix = msg.substr(0, k);
    ParseError err;
    uint32_t size = 0;
    const ParseStatus s = parse(prefix, err, size);
    if (whole == ParseStatus::Complete) {
      ASSERT_EQ(s, ParseStatus::Incomplete) << "prefix " << k;
      continue;
    }
    if (error_seen) {
      ASSERT_EQ(s, ParseStatus::Error) << "prefix " << k;
    }
    if (s == ParseStatus::Error) {
      error_seen = true;
      ASSERT_EQ(whole, ParseStatus::Error);
      EXPECT_EQ(err.status, whole_err.status) << "prefix " << k;
      EXPECT_EQ(std::string_view(err.reason), std::string_view(whole_err.reason)) << "prefix " << k;
    } else {
      ASSERT_EQ(s, ParseStatus::Incomplete) << "prefix " << k;
    }
  }
  // Bytes after the head (the body, a pipelined request) change nothing.
  ParseError more_err;
  uint32_t more_size = 0;
  const ParseStatus more = parse(msg + "XYZ\r\n\r\n", more_err, more_size);
  EXPECT_EQ(more, whole);
  if (whole == ParseStatus::Complete) {
    EXPECT_EQ(more_size, whole_size);
    EXPECT_EQ(whole_size, msg.size());
  } else {
    EXPECT_EQ(std::string_view(more_err.reason), std::string_view(whole_err.reason));
  }
}

TEST(H1SplitTest, RequestsAtEveryByte) {
  const std::vector<std::string> messages = {
      "GET http://example.com/index.html?q=1 HTTP/1.1\r\nHost: example.com\r\n"
      "User-Agent: curl/8.0\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n",
      "\r\n\r\nCONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
      "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\nX:\r\n\r\n",
      "OPTIONS * HTTP/1.0\r\n\r\n",
      // Invalid ones, each failing at a different stage.
      "\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n",
      "G@T / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n",
      "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      "GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
      "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\n\r\n"s,
  };
  for (const std::string& msg : messages) {
    RequestHead head;
    checkEveryPrefix(msg, [&](const std::string& data, ParseError& err, uint32_t& size) {
      const ParseStatus s = parseRequestHead(data, ParseLimits{}, head, err);
      size = head.head_size;
      return s;
    });
  }
}

TEST(H1SplitTest, LimitErrorsAtEveryByte) {
  ParseLimits limits;
  limits.max_head_bytes = 40;
  limits.max_headers = 2;
  const std::vector<std::string> messages = {
      "GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789abcdef\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
      // A bad first line longer than the limit: the bad byte decides, whatever is buffered.
      "G@T /" + std::string(60, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /" + std::string(60, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n",
  };
  for (const std::string& msg : messages) {
    RequestHead head;
    checkEveryPrefix(msg, [&](const std::string& data, ParseError& err, uint32_t& size) {
      const ParseStatus s = parseRequestHead(data, limits, head, err);
      size = head.head_size;
      return s;
    });
  }
}

TEST(H1SplitTest, ResponsesAtEveryByte) {
  const std::vector<std::string> messages = {
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n",
      "HTTP/1.1 204\r\n\r\n",
      "HTTP/1.0 301 Moved\r\nLocation: http://a/\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n",
      "HTTP/2.0 200 OK\r\n\r\n",
      "HTXP/1.1 200 OK\r\n\r\n",
      "HTTP/1.1 200 OK\nX: y\r\n\r\n",
      "HTTP/1.1 200 " + std::string(70000, 'r') + "\r\n\r\n",
      "HTTX/1.1 200 " + std::string(70000, 'r') + "\r\n\r\n",
  };
  for (const std::string& msg : messages) {
    ResponseHead head;
    checkEveryPrefix(msg, [&](const std::string& data, ParseError& err, uint32_t& size) {
      const ParseStatus s = parseResponseHead(data, ParseLimits{}, Method::Get, head, err);
      size = head.head_size;
      return s;
    });
  }
}

}  // namespace
}  // namespace sluice::http1
