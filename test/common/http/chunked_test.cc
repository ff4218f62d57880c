#include "source/common/http/chunked.h"

#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::http1 {
namespace {

using namespace std::string_literals;
using Status = ChunkedDecoder::Status;

struct Outcome {
  Status status = Status::NeedMore;
  size_t consumed = 0;  // total over all calls
  uint64_t payload = 0;
  std::string error;

  bool operator==(const Outcome& o) const {
    return status == o.status && consumed == o.consumed && payload == o.payload && error == o.error;
  }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "status=" << static_cast<int>(o.status) << " consumed=" << o.consumed
            << " payload=" << o.payload << " error=" << o.error;
}

// Feeds the pieces in order, as a connection would deliver them; stops at Done or Error.
Outcome feed(const std::vector<std::string_view>& pieces, ChunkedDecoder::Limits limits = {}) {
  ChunkedDecoder decoder(limits);
  Outcome out;
  for (std::string_view piece : pieces) {
    // A copy of exactly this piece, so reading past it would be caught by ASan.
    const std::string copy(piece);
    size_t consumed = 0;
    out.status = decoder.consume(copy, consumed);
    out.consumed += consumed;
    if (out.status == Status::NeedMore) {
      EXPECT_EQ(consumed, copy.size());
      continue;
    }
    EXPECT_LE(consumed, copy.size());
    break;
  }
  out.payload = decoder.payloadBytes();
  out.error = decoder.error();
  return out;
}

Outcome feedWhole(std::string_view data, ChunkedDecoder::Limits limits = {}) {
  return feed({data}, limits);
}

void expectDone(std::string_view body, uint64_t payload, size_t extra = 0) {
  SCOPED_TRACE(std::string(body));
  const Outcome o = feedWhole(body);
  EXPECT_EQ(o.status, Status::Done) << o.error;
  EXPECT_EQ(o.consumed, body.size() - extra);
  EXPECT_EQ(o.payload, payload);
}

void expectError(std::string_view body, std::string_view reason,
                 ChunkedDecoder::Limits limits = {}) {
  SCOPED_TRACE(std::string(body));
  const Outcome o = feedWhole(body, limits);
  EXPECT_EQ(o.status, Status::Error);
  EXPECT_EQ(o.error, reason);
}

TEST(ChunkedDecoderTest, Basic) {
  expectDone("5\r\nhello\r\n0\r\n\r\n", 5);
  expectDone("0\r\n\r\n", 0);
  expectDone("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 11);
  expectDone("a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n", 20);
  expectDone("1f\r\n" + std::string(31, 'x') + "\r\n0\r\n\r\n", 31);
  // Chunk data is opaque: CR, LF and NUL inside it are payload.
  expectDone("4\r\n\r\n\0\n\r\n0\r\n\r\n"s, 4);
  // Leading zeros are digits like any other.
  expectDone("0005\r\nhello\r\n000\r\n\r\n", 5);
  expectDone("0000000000000005\r\nhello\r\n0\r\n\r\n", 5);
}

TEST(ChunkedDecoderTest, StopsAtEndOfBody) {
  const std::string body = "3\r\nabc\r\n0\r\n\r\n";
  expectDone(body + "GET / HTTP/1.1\r\n", 3, 16);
  ChunkedDecoder decoder;
  size_t consumed = 99;
  ASSERT_EQ(decoder.consume(body + "NEXT", consumed), Status::Done);
  EXPECT_EQ(consumed, body.size());
  // Once done, nothing more belongs to the body.
  EXPECT_EQ(decoder.consume("more", consumed), Status::Done);
  EXPECT_EQ(consumed, 0u);
}

TEST(ChunkedDecoderTest, NeedMore) {
  ChunkedDecoder decoder;
  size_t consumed = 0;
  EXPECT_EQ(decoder.consume("", consumed), Status::NeedMore);
  EXPECT_EQ(consumed, 0u);
  EXPECT_EQ(decoder.consume("10\r\n0123", consumed), Status::NeedMore);
  EXPECT_EQ(consumed, 8u);
  EXPECT_EQ(decoder.payloadBytes(), 4u);
  EXPECT_EQ(decoder.consume("456789abcdef\r\n0\r\n", consumed), Status::NeedMore);
  EXPECT_EQ(decoder.payloadBytes(), 16u);
  EXPECT_EQ(decoder.consume("\r\n", consumed), Status::Done);
  EXPECT_EQ(consumed, 2u);
}

TEST(ChunkedDecoderTest, LargestChunkSize) {
  ChunkedDecoder decoder;
  size_t consumed = 0;
  EXPECT_EQ(decoder.consume("FFFFFFFFFFFFFFFF\r\n", consumed), Status::NeedMore);
  const std::string data(1000, 'd');
  EXPECT_EQ(decoder.consume(data, consumed), Status::NeedMore);
  EXPECT_EQ(consumed, data.size());
  EXPECT_EQ(decoder.payloadBytes(), 1000u);
  expectError("10000000000000000\r\n", "chunk size too large");
  expectError("00000000000000000\r\n", "chunk size too large");
}

TEST(ChunkedDecoderTest, ChunkSizeErrors) {
  expectError("\r\n", "invalid chunk size");
  expectError(" 5\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
  expectError("+5\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
  expectError("-5\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
  expectError("0x5\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
  expectError("5g\r\nhello\r\n0\r\n\r\n", "invalid chunk size");
  expectError("5 \r\nhello\r\n0\r\n\r\n", "invalid chunk extension");
  expectError("5\t\r\nhello\r\n0\r\n\r\n", "invalid chunk extension");
  expectError("5\nhello\r\n0\r\n\r\n", "bare lf in chunked body");
  expectError("5\rhello\r\n0\r\n\r\n", "bare cr in chunked body");
  expectError("\0"s, "invalid chunk size");
}

TEST(ChunkedDecoderTest, Extensions) {
  for (const char* line : {"5;a", "5;a=b", "5 ;a=b", "5\t; a = b", "5;a=b;c=d", "5;a;b", "5;a=\"\"",
                           "5;a=\"x y;z=\\\"q\\\\\"", "5;a=\"\x80\t\"", "5;a=\"x\" ;b",
                           "5;a = b ;c", "5;a ;b", "5;!#$%&'*+-.^_`|~=!#$%&'*+-.^_`|~"}) {
    expectDone(std::string(line) + "\r\nhello\r\n0\r\n\r\n", 5);
  }
  expectDone("0;last=1\r\n\r\n", 0);
  for (const char* line :
       {"5;", "5; ", "5;=b", "5;a=", "5;a= ", "5;a b", "5;a=b c", "5;a=\"x", "5;a=\"x\"y",
        "5;a=\"x\" ", "5;a=b ", "5;a ", "5;a,b", "5;a=b,c", "5;a=\"\x01\"", "5;a=\"\\\x01\"",
        "5;(a)", "5;a=(b)", "5;a=\"x\"\"y\""}) {
    expectError(std::string(line) + "\r\nhello\r\n0\r\n\r\n", "invalid chunk extension");
  }
  expectError("5;a\nhello\r\n0\r\n\r\n", "bare lf in chunked body");
  expectError("5;a=b\nhello\r\n0\r\n\r\n", "bare lf in chunked body");
  expectError("5;a=b\rhello\r\n0\r\n\r\n", "bare cr in chunked body");
}

TEST(ChunkedDecoderTest, DataFraming) {
  expectError("5\r\nhelloX\r\n0\r\n\r\n", "missing crlf after chunk data");
  expectError("5\r\nhello\n0\r\n\r\n", "missing crlf after chunk data");
  expectError("5\r\nhello\rX0\r\n\r\n", "missing crlf after chunk data");
  expectError("5\r\nhello\r\n\r\n", "invalid chunk size");
  // The data is counted exactly: one byte too many is caught where the CRLF should be.
  expectError("4\r\nhello\r\n0\r\n\r\n", "missing crlf after chunk data");
}

TEST(ChunkedDecoderTest, Trailers) {
  expectDone("0\r\nX-Checksum: abc\r\n\r\n", 0);
  expectDone("5\r\nhello\r\n0\r\nA: 1\r\nB:\r\nC: \t x y \x80\t\r\n\r\n", 5);
  expectError("0\r\nX: a\r\n b\r\n\r\n", "obs-fold in trailer");
  expectError("0\r\n\tX: a\r\n\r\n", "obs-fold in trailer");
  expectError("0\r\nX : a\r\n\r\n", "whitespace before colon in trailer");
  expectError("0\r\nX(: a\r\n\r\n", "invalid trailer field");
  expectError("0\r\n:a\r\n\r\n", "invalid trailer field");
  expectError("0\r\nNoColon\r\n\r\n", "invalid trailer field");
  expectError("0\r\nX: a\0\r\n\r\n"s, "invalid trailer field");
  expectError("0\r\nX: a\x7f\r\n\r\n", "invalid trailer field");
  expectError("0\r\nX: a\nY: b\r\n\r\n", "bare lf in chunked body");
  expectError("0\r\nX: a\rY\r\n\r\n", "bare cr in chunked body");
  expectError("0\r\n\n", "bare lf in chunked body");
  expectError("0\r\n\rX", "bare cr in chunked body");
}

TEST(ChunkedDecoderTest, Limits) {
  ChunkedDecoder::Limits limits;
  limits.max_chunk_line = 8;
  // "5;a=bc\r\n" is exactly 8 bytes.
  EXPECT_EQ(feedWhole("5;a=bc\r\nhello\r\n0\r\n\r\n", limits).status, Status::Done);
  expectError("5;a=bcd\r\nhello\r\n0\r\n\r\n", "chunk line too long", limits);
  // The limit is per line, not cumulative.
  EXPECT_EQ(feedWhole("5;a=bc\r\nhello\r\n5;a=bc\r\nhello\r\n0\r\n\r\n", limits).status,
            Status::Done);
  // Endless whitespace or extension bytes are cut off.
  expectError("5" + std::string(100, ' '), "chunk line too long", limits);

  limits = {};
  limits.max_trailer_bytes = 12;
  // "X: 1234567\r\n" + "\r\n" would be 14 bytes.
  EXPECT_EQ(feedWhole("0\r\nX: 12345\r\n\r\n", limits).status, Status::Done);
  expectError("0\r\nX: 1234567\r\n\r\n", "trailer section too large", limits);
  expectError("0\r\nX: " + std::string(1000, 'v'), "trailer section too large", limits);
}

TEST(ChunkedDecoderTest, ErrorIsStickyAndResetClearsIt) {
  ChunkedDecoder decoder;
  size_t consumed = 0;
  ASSERT_EQ(decoder.consume("5\r\nab", consumed), Status::NeedMore);
  ASSERT_EQ(decoder.consume("cdeX", consumed), Status::Error);
  EXPECT_EQ(consumed, 3u);  // "cde" belonged to the body; 'X' did not
  EXPECT_STREQ(decoder.error(), "missing crlf after chunk data");
  EXPECT_EQ(decoder.consume("\r\n0\r\n\r\n", consumed), Status::Error);
  EXPECT_EQ(consumed, 0u);
  decoder.reset();
  EXPECT_STREQ(decoder.error(), "");
  EXPECT_EQ(decoder.payloadBytes(), 0u);
  ASSERT_EQ(decoder.consume("2\r\nok\r\n0\r\n\r\n", consumed), Status::Done);
  EXPECT_EQ(decoder.payloadBytes(), 2u);
  decoder.reset();
  EXPECT_EQ(decoder.consume("0\r\n\r\n", consumed), Status::Done);
}

// Splitting the input anywhere, once or twice, or byte by byte, changes nothing.
void checkAllSplits(const std::string& body) {
  SCOPED_TRACE(body);
  const Outcome whole = feedWhole(body);
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < body.size(); ++i) {
    bytes.push_back(std::string_view(body).substr(i, 1));
  }
  EXPECT_EQ(feed(bytes), whole);
  const std::string_view b = body;
  for (size_t i = 0; i <= body.size(); ++i) {
    ASSERT_EQ(feed({b.substr(0, i), b.substr(i)}), whole) << "split at " << i;
    for (size_t j = i; j <= body.size(); ++j) {
      ASSERT_EQ(feed({b.substr(0, i), b.substr(i, j - i), b.substr(j)}), whole)
          << "split at " << i << " and " << j;
    }
  }
}

TEST(ChunkedDecoderTest, SplitAtEveryPosition) {
  const std::vector<std::string> bodies = {
      "5\r\nhello\r\n1A;ext=\"q\\\"x\" ; e2\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\n\r\nNEXT",
      "0\r\n\r\n", "3;a = b\r\nabc\r\n0;z\r\nX-A: 1\r\nX-B: 2 \t\r\n\r\nGET / HTTP/1.1\r\n",
      "0000000000000003\r\n\r\n\r\r\n0\r\n\r\n",
      // Invalid ones: the same error wherever the input is cut.
      "5\r\nhelloX\r\n0\r\n\r\n", "5 \r\nhello\r\n0\r\n\r\n", "5;a=\"x\r\nhello\r\n0\r\n\r\n",
      "3\r\nabc\r\n0\r\nX : 1\r\n\r\n", "3\r\nabc\r\n0\r\nX: 1\nY: 2\r\n\r\n",
      "12345678901234567\r\n",
      "3\r\nabc\r\n",  // incomplete
  };
  for (const std::string& body : bodies) {
    checkAllSplits(body);
  }
}

}  // namespace
}  // namespace sluice::http1
