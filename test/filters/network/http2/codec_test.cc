#include "filters/network/http2/codec.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "gtest/gtest.h"

namespace sluice {
namespace filters {
namespace http2 {
namespace {

// Records what the server codec reports; answers with canned behaviour.
class Recorder : public ServerCodecCallbacks {
 public:
  struct Stream {
    int32_t id = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    bool headers_done = false;
    bool end = false;
    std::string data;
    std::string body;  // response body to send
    bool body_eof = false;
    bool reset = false;
    bool closed = false;
  };

  bool onFrameHeader(const FrameInfo& f) override {
    frames.push_back(f.type);
    return !(fail_on_ping && f.type == FrameType::Ping);
  }
  bool onFrame(const FrameInfo&) override { return true; }
  void* onStreamBegin(int32_t id) override {
    if (refuse) return nullptr;
    streams[id].id = id;
    return &streams[id];
  }
  bool onHeader(void* s, std::string_view n, std::string_view v) override {
    static_cast<Stream*>(s)->headers.emplace_back(n, v);
    return true;
  }
  void onRequestHeaders(void* s, bool end_stream) override {
    static_cast<Stream*>(s)->headers_done = true;
    static_cast<Stream*>(s)->end = end_stream;
  }
  void onRequestData(void* s, const uint8_t* d, size_t n) override {
    static_cast<Stream*>(s)->data.append(reinterpret_cast<const char*>(d), n);
  }
  void onRequestEnd(void* s) override { static_cast<Stream*>(s)->end = true; }
  bool onStreamReset(void* s, ErrorCode) override {
    static_cast<Stream*>(s)->reset = true;
    return true;
  }
  void onResponseSent(void*) override {}
  void onStreamClose(void* s, ErrorCode) override { static_cast<Stream*>(s)->closed = true; }
  bool onProtocolError(const FrameInfo&) override {
    ++protocol_errors;
    return true;
  }
  size_t readResponseBody(void* sp, uint8_t* buf, size_t max, bool& eof) override {
    Stream* s = static_cast<Stream*>(sp);
    size_t n = std::min(max, s->body.size());
    memcpy(buf, s->body.data(), n);
    s->body.erase(0, n);
    eof = s->body_eof && s->body.empty();
    return n;
  }

  std::map<int32_t, Stream> streams;
  std::vector<FrameType> frames;
  bool refuse = false;
  bool fail_on_ping = false;
  int protocol_errors = 0;
};

// An nghttp2 client session standing in for a browser.
class Client {
 public:
  Client() {
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl,
               const uint8_t* v, size_t vl, uint8_t, void* self) {
          static_cast<Client*>(self)->headers[f->hd.stream_id].emplace_back(
              std::string(reinterpret_cast<const char*>(n), nl),
              std::string(reinterpret_cast<const char*>(v), vl));
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cb, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* d, size_t n, void* self) {
          static_cast<Client*>(self)->data[id].append(reinterpret_cast<const char*>(d), n);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cb, [](nghttp2_session*, int32_t id, uint32_t code, void* self) {
          static_cast<Client*>(self)->closed[id] = code;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, void* self) {
          if (f->hd.type == NGHTTP2_GOAWAY) {
            static_cast<Client*>(self)->goaway_code = static_cast<int>(f->goaway.error_code);
          }
          return 0;
        });
    nghttp2_session_client_new(&session, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~Client() { nghttp2_session_del(session); }

  int32_t get(const char* path, nghttp2_data_provider* body = nullptr) {
    const char* method = body ? "POST" : "GET";
    nghttp2_nv nva[] = {nv(":method", method), nv(":scheme", "http"), nv(":path", path),
                        nv(":authority", "example.com")};
    return nghttp2_submit_request(session, nullptr, nva, 4, body, nullptr);
  }
  static nghttp2_nv nv(const char* n, const char* v) {
    return {reinterpret_cast<uint8_t*>(const_cast<char*>(n)),
            reinterpret_cast<uint8_t*>(const_cast<char*>(v)), strlen(n), strlen(v),
            NGHTTP2_NV_FLAG_NONE};
  }
  void out(buffer::Buffer& b) {
    const uint8_t* p;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(session, &p)) > 0) b.add(p, static_cast<size_t>(n));
  }
  void in(buffer::Buffer& b) {
    while (!b.empty()) {
      std::string_view f = b.front();
      nghttp2_session_mem_recv(session, reinterpret_cast<const uint8_t*>(f.data()), f.size());
      b.drain(f.size());
    }
  }

  nghttp2_session* session = nullptr;
  std::map<int32_t, std::vector<std::pair<std::string, std::string>>> headers;
  std::map<int32_t, std::string> data;
  std::map<int32_t, uint32_t> closed;
  int goaway_code = -1;
};

class CodecTest : public testing::Test {
 protected:
  CodecTest() : codec(createNghttp2ServerCodec(rec, settings)) { codec->start(); }
  // Client -> server -> client until both are quiet.
  bool pump() {
    bool ok = true;
    for (int i = 0; i < 20; ++i) {
      buffer::Buffer c2s, s2c;
      client.out(c2s);
      if (!c2s.empty()) ok = codec->receive(c2s) && ok;
      codec->serialize(s2c, 1 << 20);
      if (!s2c.empty()) client.in(s2c);
      if (!nghttp2_session_want_write(client.session) && !codec->wantsWrite()) break;
    }
    return ok;
  }

  CodecSettings settings;
  Recorder rec;
  ServerCodecPtr codec;
  Client client;
};

TEST_F(CodecTest, RequestAndResponse) {
  int32_t id = client.get("/x");
  ASSERT_TRUE(pump());
  ASSERT_EQ(rec.streams.count(id), 1u);
  Recorder::Stream& s = rec.streams[id];
  EXPECT_TRUE(s.headers_done);
  EXPECT_TRUE(s.end);
  ASSERT_GE(s.headers.size(), 4u);
  EXPECT_EQ(s.headers[0].first, ":method");
  s.body = "hello";
  s.body_eof = true;
  ResponseHeader h[] = {{"content-type", "text/plain"}};
  codec->submitResponse(id, 200, h, 1, false);
  ASSERT_TRUE(pump());
  EXPECT_EQ(client.data[id], "hello");
  EXPECT_EQ(client.headers[id][0], (std::pair<std::string, std::string>(":status", "200")));
  EXPECT_TRUE(s.closed);
  EXPECT_EQ(codec->activeStreams(), 0u);
}

TEST_F(CodecTest, DeferredBodyResumes) {
  int32_t id = client.get("/x");
  ASSERT_TRUE(pump());
  codec->submitResponse(id, 200, nullptr, 0, false);
  ASSERT_TRUE(pump());  // nothing to send yet: the DATA is deferred
  EXPECT_EQ(client.data[id], "");
  rec.streams[id].body = "later";
  rec.streams[id].body_eof = true;
  codec->resumeBody(id);
  ASSERT_TRUE(pump());
  EXPECT_EQ(client.data[id], "later");
}

// The stream window is given back only through consume(): without it the client stops at the
// initial window, however much it has to send.
TEST_F(CodecTest, FlowControlFollowsConsume) {
  static std::string upload(200000, 'u');
  static size_t offset = 0;
  offset = 0;
  nghttp2_data_provider body;
  body.source.ptr = nullptr;
  body.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                          nghttp2_data_source*, void*) -> ssize_t {
    size_t n = std::min(len, upload.size() - offset);
    memcpy(buf, upload.data() + offset, n);
    offset += n;
    if (offset == upload.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  };
  int32_t id = client.get("/up", &body);
  ASSERT_TRUE(pump());
  EXPECT_EQ(rec.streams[id].data.size(), 65535u);
  codec->consume(id, rec.streams[id].data.size());
  ASSERT_TRUE(pump());
  EXPECT_GT(rec.streams[id].data.size(), 65535u);
  for (int i = 0; i < 10 && !rec.streams[id].end; ++i) {
    codec->consume(id, 65535);
    ASSERT_TRUE(pump());
  }
  EXPECT_EQ(rec.streams[id].data, upload);
  EXPECT_TRUE(rec.streams[id].end);
}

TEST_F(CodecTest, RefusedStream) {
  rec.refuse = true;
  int32_t id = client.get("/x");
  ASSERT_TRUE(pump());
  ASSERT_EQ(client.closed.count(id), 1u);
  EXPECT_EQ(client.closed[id], static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
}

TEST_F(CodecTest, CallbackRefusalEndsTheConnectionWithGoaway) {
  rec.fail_on_ping = true;
  ASSERT_TRUE(pump());
  nghttp2_submit_ping(client.session, NGHTTP2_FLAG_NONE, nullptr);
  buffer::Buffer c2s, s2c;
  client.out(c2s);
  EXPECT_FALSE(codec->receive(c2s));
  codec->terminate(ErrorCode::EnhanceYourCalm);
  codec->serialize(s2c, 1 << 20);
  client.in(s2c);
  EXPECT_EQ(client.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_TRUE(codec->finished());
}

TEST_F(CodecTest, ResetStream) {
  int32_t id = client.get("/x");
  ASSERT_TRUE(pump());
  codec->resetStream(id, ErrorCode::Cancel);
  ASSERT_TRUE(pump());
  EXPECT_EQ(client.closed[id], static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_TRUE(rec.streams[id].closed);
}

// Feeds the client's bytes to the codec one at a time: frame headers split across reads.
bool receiveByteByByte(ServerCodec& codec, buffer::Buffer& bytes) {
  bool ok = true;
  while (!bytes.empty()) {
    buffer::Buffer one;
    one.move(bytes, 1);
    ok = codec.receive(one) && ok;
  }
  return ok;
}

TEST_F(CodecTest, AZeroWindowUpdateOnAStreamIsAStreamErrorEvenWhenSplit) {
  nghttp2_data_provider body{};
  body.read_callback = [](nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                          nghttp2_data_source*, void*) -> ssize_t { return NGHTTP2_ERR_DEFERRED; };
  int32_t id = client.get("/upload", &body);
  buffer::Buffer c2s;
  client.out(c2s);
  // WINDOW_UPDATE, stream `id`, increment 0: nghttp2 itself would end the connection.
  const uint8_t zero_update[13] = {
      0, 0, 4, NGHTTP2_WINDOW_UPDATE, 0, 0, 0, 0, static_cast<uint8_t>(id), 0, 0, 0, 0};
  c2s.add(zero_update, sizeof(zero_update));
  ASSERT_TRUE(receiveByteByByte(*codec, c2s));
  buffer::Buffer s2c;
  codec->serialize(s2c, 1 << 20);
  client.in(s2c);
  EXPECT_EQ(client.closed[id], static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
  EXPECT_EQ(client.goaway_code, -1);
  EXPECT_EQ(rec.protocol_errors, 1);
  // The connection goes on: the next request is served.
  int32_t next = client.get("/next");
  ASSERT_TRUE(pump());
  EXPECT_TRUE(rec.streams[next].headers_done);
}

TEST_F(CodecTest, GarbagePrefaceFails) {
  buffer::Buffer junk;
  junk.add(std::string_view("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(codec->receive(junk));
}

}  // namespace
}  // namespace http2
}  // namespace filters
}  // namespace sluice
