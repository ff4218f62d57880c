#include "source/common/http/dechunker.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace http1 {
namespace {

std::string str(buffer::Buffer& b) { return std::string(b.linearize(b.length())); }

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

TEST(Dechunker, PassKeepsTheFraming) {
  const std::string body = "5;ext=1\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\n";
  for (size_t piece : {size_t{1}, size_t{4}, body.size()}) {
    Dechunker d;
    std::string out;
    Dechunker::Status st = Dechunker::Status::NeedMore;
    for (size_t at = 0; at < body.size(); at += piece) {
      buffer::Buffer in, o;
      in.add(std::string_view(body).substr(at, piece));
      st = d.pass(in, o);
      out += str(o);
    }
    EXPECT_EQ(st, Dechunker::Status::Done) << piece;
    EXPECT_EQ(out, body) << piece;
  }
}

TEST(Dechunker, PassStopsAtTheEndAndOnErrors) {
  Dechunker d;
  buffer::Buffer in, out;
  in.add(std::string_view("3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(d.pass(in, out), Dechunker::Status::Done);
  EXPECT_EQ(str(out), "3\r\nabc\r\n0\r\n\r\n");
  EXPECT_EQ(str(in), "HTTP/1.1 200 OK\r\n");
  Dechunker bad;
  buffer::Buffer in2, out2;
  in2.add(std::string_view("3\r\nabcX\r\n"));
  EXPECT_EQ(bad.pass(in2, out2), Dechunker::Status::Error);
}

}  // namespace
}  // namespace http1
}  // namespace sluice
