#include <string>
#include <string_view>

#include "benchmark/benchmark.h"
#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"

namespace sluice::http1 {
namespace {

// What `curl -x http://proxy:3128 -U user:password http://example.com/...` sends: ~250 bytes,
// 6 headers.
constexpr std::string_view kCurlProxyRequest =
    "GET http://www.example.com/static/app/index.html?lang=en&v=42 HTTP/1.1\r\n"
    "Host: www.example.com\r\n"
    "Proxy-Authorization: Basic dXNlcjpwYXNzd29yZA==\r\n"
    "User-Agent: curl/7.88.1\r\n"
    "Accept: */*\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Proxy-Connection: Keep-Alive\r\n"
    "\r\n";

constexpr std::string_view kOriginResponse =
    "HTTP/1.1 200 OK\r\n"
    "Date: Mon, 27 Jul 2009 12:28:53 GMT\r\n"
    "Server: Apache\r\n"
    "Last-Modified: Wed, 22 Jul 2009 19:15:56 GMT\r\n"
    "ETag: \"34aa387-d-1568eb00\"\r\n"
    "Accept-Ranges: bytes\r\n"
    "Content-Length: 51\r\n"
    "Vary: Accept-Encoding\r\n"
    "Content-Type: text/plain\r\n"
    "\r\n";

void BM_ParseCurlProxyRequest(benchmark::State& state) {
  RequestHead head;
  ParseError err;
  const ParseLimits limits;
  for (auto _ : state) {
    ParseStatus s = parseRequestHead(kCurlProxyRequest, limits, head, err);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(head.headers.size());
    benchmark::ClobberMemory();
  }
  if (parseRequestHead(kCurlProxyRequest, limits, head, err) != ParseStatus::Complete) {
    state.SkipWithError("request did not parse");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kCurlProxyRequest.size()));
}
BENCHMARK(BM_ParseCurlProxyRequest);

void BM_ParseOriginResponse(benchmark::State& state) {
  ResponseHead head;
  ParseError err;
  const ParseLimits limits;
  for (auto _ : state) {
    ParseStatus s = parseResponseHead(kOriginResponse, limits, Method::Get, head, err);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(head.headers.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kOriginResponse.size()));
}
BENCHMARK(BM_ParseOriginResponse);

// A 64 KiB body in 4 KiB chunks, each with an extension and a trailer at the end.
void BM_ChunkedDecoder(benchmark::State& state) {
  std::string body;
  for (int i = 0; i < 16; ++i) {
    body += "1000;i=" + std::to_string(i) + "\r\n" + std::string(4096, 'x') + "\r\n";
  }
  body += "0\r\nX-Checksum: 0123456789abcdef\r\n\r\n";
  ChunkedDecoder decoder;
  for (auto _ : state) {
    decoder.reset();
    size_t consumed = 0;
    ChunkedDecoder::Status s = decoder.consume(body, consumed);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(consumed);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChunkedDecoder);

}  // namespace
}  // namespace sluice::http1
