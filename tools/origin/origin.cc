// sluice-origin: a fast HTTP/1.1 upstream for tests and benchmarks.
//
//   GET /bytes/N  -> 200 with N bytes (N <= 1 GiB), streamed from one pre-filled block
//   POST /echo    -> 200 echoing the request body (Content-Length or chunked), streamed
//   GET /ws       -> WebSocket (RFC 6455) echo: every data frame comes back unmasked, pings
//                    get pongs, a close is answered and the connection closed
//   GET /ws/sink  -> WebSocket, one way: data frames are counted and dropped, and each message
//                    is acknowledged with an empty binary message (pings and close as /ws)
//   GET /stats    -> {"requests": R, "bytes_sent": B, "bytes_received": C, ...}: requests and
//                    socket bytes of every port, and the sink/source/WebSocket/UDP payload
//   else 404; malformed requests 400 (or the parser's 431/501/505) and close.
//
// Tunnel benchmarks (--sink, --source): the client sends a decimal count and a newline; the
// sink then reads that many bytes and answers with the count and a newline, the source sends
// that many bytes. Both repeat on the same connection until the client closes. Past its first
// read the sink drops the bytes in the kernel (recv with MSG_TRUNC), as /ws/sink does a frame's
// payload: they never reach user space, so in a tunnel benchmark the sink's own copying does
// not load the core it shares with the load generator.
// --udp-echo sends every datagram back to its sender. --tls-cert/--tls-key serve HTTP over TLS:
// on --tls-listen, or on --listen when there is no --tls-listen (with a plain port next to the TLS
// one, /stats can be read without TLS bytes of its own in the counts).
//
// One event loop per thread (-t N), each with its own SO_REUSEPORT listen socket per port.

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "openssl/sha.h"

#include "source/common/buffer/buffer.h"
#include "source/common/common/logger.h"
#include "source/common/event/dispatcher.h"
#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"
#include "source/common/network/address.h"
#include "source/common/network/connection.h"
#include "source/common/stats/stats.h"
#include "source/common/tls/context.h"
#include "source/common/tls/tls_socket.h"

namespace sluice {
namespace origin {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 30;
// One below a block, so that linearizing max + 1 bytes still fits a pooled block.
constexpr uint32_t kMaxHeadBytes = buffer::kBlockSize - 1;
// Enough to keep loopback busy; small enough that a slow reader pins little memory.
constexpr uint32_t kHighWatermark = 256 * 1024;
constexpr int kAcceptsPerEvent = 64;

// Body byte i of /bytes/N is kPattern[i % 64]; the block size is a multiple of 64, so the one
// block can be written repeatedly and clients can still check every byte.
constexpr std::string_view kPattern =
    "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
static_assert(kPattern.size() == 64 && buffer::kBlockSize % 64 == 0);
char g_block[buffer::kBlockSize];

struct Counters {
  stats::Counter requests;
  stats::Counter rx;
  stats::Counter tx;
  stats::Counter sink_bytes;
  stats::Counter source_bytes;
  stats::Counter ws_messages;
  stats::Counter ws_bytes;
  stats::Counter udp_packets;
  stats::Counter udp_bytes;
};

// What a listening socket serves.
enum class PortKind : uint8_t { Http, HttpTls, Sink, Source };

// Sec-WebSocket-Accept for a client key (RFC 6455 section 4.2.2).
std::string websocketAccept(std::string_view key) {
  std::string in(key);
  in += "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  uint8_t digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const uint8_t*>(in.data()), in.size(), digest);
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < sizeof(digest); i += 3) {
    uint32_t v = digest[i] << 16;
    if (i + 1 < sizeof(digest)) v |= digest[i + 1] << 8;
    if (i + 2 < sizeof(digest)) v |= digest[i + 2];
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < sizeof(digest) ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < sizeof(digest) ? kAlphabet[v & 63] : '=';
  }
  return out;
}

class Worker;

// One client connection: parses requests in order and streams each response.
class Session : public network::ConnectionCallbacks,
                public network::RawIoHandler,
                public event::DeferredDeletable {
 public:
  Session(Worker& worker, network::ConnectionPtr conn, PortKind kind);

  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;
  // The discarding reads of the sink and of /ws/sink's payloads (while the connection's
  // readiness comes here).
  void onRawReadable(network::Connection& connection) override;
  void onRawWritable(network::Connection&) override {}

  std::list<std::unique_ptr<Session>>::iterator position;

 private:
  enum class Phase : uint8_t {
    Head,
    SendBytes,
    EchoLength,
    EchoChunked,
    WebSocket,
    SinkLine,
    SinkData,
    SourceLine,
    Closing,
  };

  // Handles as much of data as the current phase allows; stops when waiting for the peer or
  // for the write buffer to drain.
  void process(buffer::Buffer& data, bool end_stream);
  void onHead(const http1::RequestHead& head);
  // Reads "N\n" for the sink and source ports; false while incomplete (or on error: closed).
  bool readCount(buffer::Buffer& data, bool end_stream, uint64_t& n);
  // The sink's count is all in: answer with it and wait for the next one.
  void sinkDone();
  // The rest of a large payload (the sink's count, a /ws/sink data frame) is dropped in the
  // kernel from the next loop turn on, if the connection can be read raw.
  void discardRest();
  // Drops up to `left` bytes in the kernel, counted in `counter`; false when the connection
  // failed (it is then closed), true when the socket has nothing more for now or left is 0.
  bool discard(network::Connection& connection, uint64_t& left, const stats::Counter& counter);
  // Echoes as many WebSocket frames (or parts) as data holds; false: wait for more.
  bool processWebSocket(buffer::Buffer& data);
  void fillBytes();
  // Copies n masked payload bytes to `to`, unmasked, the mask position carried on.
  void unmask(const char* from, char* to, size_t n);
  void finishResponse();
  void sendSimple(std::string_view status_line, std::string_view content_type,
                  std::string_view body, bool close);
  void writeHead(std::string_view status_line, std::string_view extra);
  void setReadDisabled(bool disabled);
  void abort();

  Worker& worker_;
  network::ConnectionPtr conn_;
  buffer::Buffer out_;
  http1::ChunkedDecoder decoder_;
  Phase phase_ = Phase::Head;
  Phase idle_phase_ = Phase::Head;  // where a finished response returns to
  uint64_t left_ = 0;               // body bytes still to send (SendBytes) or to echo (EchoLength)
  uint64_t count_ = 0;              // the sink's current count
  // WebSocket frame being echoed.
  uint64_t ws_left_ = 0;
  uint8_t ws_mask_[4] = {};
  uint8_t ws_mask_pos_ = 0;
  uint8_t ws_opcode_ = 0;
  bool ws_in_frame_ = false;
  bool ws_close_ = false;
  bool ws_sink_ = false;  // /ws/sink: data frames are dropped, each message acknowledged
  bool ws_fin_ = false;   // the frame being read ends its message
  bool keep_alive_ = true;
  bool read_disabled_ = false;
};

class Worker {
 public:
  struct Listener {
    int fd;
    PortKind kind;
    std::unique_ptr<event::FileEvent> event;
    Worker* worker = nullptr;
    void onSocketEvent(uint32_t) { worker->onAcceptReady(*this); }
  };

  Worker(int index, const Counters& counters, tls::ServerContextSharedPtr tls, int udp_fd)
      : index_(index), counters_(counters), tls_(tls), udp_fd_(udp_fd) {}
  ~Worker() {
    sessions_.clear();
    for (Listener& l : listeners_) {
      l.event.reset();
      ::close(l.fd);
    }
    udp_event_.reset();
    if (udp_fd_ >= 0) ::close(udp_fd_);
  }

  void addListener(int fd, PortKind kind) { listeners_.push_back(Listener{fd, kind, nullptr}); }

  void run() {
    logger::setThreadName(absl::StrFormat("worker%d", index_));
    stats::Store::bindThreadShard(stats::Store::get().createShard());
    for (Listener& l : listeners_) {
      l.worker = this;
      l.event = std::make_unique<event::FileEvent>(
          dispatcher_, l.fd, &l, event::FileEvent::To<&Listener::onSocketEvent>());
      l.event->activate(event::FileEvent::kRead);
    }
    if (udp_fd_ >= 0) {
      udp_event_ = std::make_unique<event::FileEvent>(dispatcher_, udp_fd_, this,
                                                      event::FileEvent::To<&Worker::onUdpEvent>());
      udp_event_->activate(event::FileEvent::kRead);
    }
    dispatcher_.run();
  }

  event::Dispatcher& dispatcher() { return dispatcher_; }
  const Counters& counters() const { return counters_; }
  http1::RequestHead& scratchHead() { return head_; }

  void remove(Session& session) {
    std::unique_ptr<Session> owned = std::move(*session.position);
    sessions_.erase(session.position);
    dispatcher_.deferredDelete(std::move(owned));
  }

 private:
  void onUdpEvent(uint32_t) { onUdpReady(); }
  void onUdpReady() {
    // Edge-triggered: drain every datagram now. One buffer, reused: no allocation.
    for (int i = 0; i < kAcceptsPerEvent; ++i) {
      sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      const ssize_t n = ::recvfrom(udp_fd_, udp_buf_, sizeof(udp_buf_), 0,
                                   reinterpret_cast<sockaddr*>(&ss), &len);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      counters_.udp_packets.inc();
      counters_.udp_bytes.add(static_cast<uint64_t>(n));
      ::sendto(udp_fd_, udp_buf_, static_cast<size_t>(n), MSG_DONTWAIT,
               reinterpret_cast<sockaddr*>(&ss), len);
    }
    udp_event_->activate(event::FileEvent::kRead);
  }

  void onAcceptReady(Listener& l) {
    for (int i = 0; i < kAcceptsPerEvent; ++i) {
      sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      int fd =
          ::accept4(l.fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        SLUICE_LOG(Warn, "accept: %s", strerror(errno));
        return;
      }
      network::setNoDelay(fd);
      auto conn = std::make_unique<network::Connection>(
          dispatcher_, fd, network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len),
          network::Connection::Blocking::NonBlocking);
      conn->setByteCounters({counters_.rx, counters_.tx});
      conn->setHighWatermark(kHighWatermark);
      if (l.kind == PortKind::HttpTls) {
        conn->setTransportSocket(std::make_unique<tls::TlsSocket>(tls_));
      }
      sessions_.push_front(std::make_unique<Session>(*this, std::move(conn), l.kind));
      sessions_.front()->position = sessions_.begin();
    }
    // More may be waiting: edge-triggered readiness will not say so again.
    l.event->activate(event::FileEvent::kRead);
  }

  int index_;
  Counters counters_;
  tls::ServerContextSharedPtr tls_;  // null: plain HTTP
  int udp_fd_;
  char udp_buf_[65536];
  event::Dispatcher dispatcher_;
  std::vector<Listener> listeners_;
  std::unique_ptr<event::FileEvent> udp_event_;
  std::list<std::unique_ptr<Session>> sessions_;
  // Parsed heads are used and dropped within one callback, so one per thread serves all.
  http1::RequestHead head_;
};

Session::Session(Worker& worker, network::ConnectionPtr conn, PortKind kind)
    : worker_(worker), conn_(std::move(conn)) {
  conn_->setCallbacks(this);
  if (kind == PortKind::Sink) idle_phase_ = Phase::SinkLine;
  if (kind == PortKind::Source) idle_phase_ = Phase::SourceLine;
  phase_ = idle_phase_;
}

void Session::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::RemoteClose ||
      event == network::ConnectionEvent::LocalClose) {
    phase_ = Phase::Closing;
    worker_.remove(*this);
  }
}

void Session::onAboveWriteHighWatermark() {
  // Echo: stop reading the request body until the client reads the response.
  if (phase_ == Phase::EchoLength || phase_ == Phase::EchoChunked || phase_ == Phase::WebSocket)
    setReadDisabled(true);
}

void Session::onBelowWriteLowWatermark() {
  if (phase_ == Phase::SendBytes) {
    fillBytes();
  } else if (phase_ == Phase::EchoLength || phase_ == Phase::EchoChunked ||
             phase_ == Phase::WebSocket) {
    setReadDisabled(false);
  }
}

void Session::setReadDisabled(bool disabled) {
  if (disabled == read_disabled_ || !conn_->open()) return;
  read_disabled_ = disabled;
  // Re-enabling delivers whatever is buffered (pipelined requests) on the next iteration.
  conn_->readDisable(disabled);
}

void Session::abort() {
  phase_ = Phase::Closing;
  conn_->close(network::CloseType::NoFlush);
}

void Session::onData(buffer::Buffer& data, bool end_stream) { process(data, end_stream); }

void Session::process(buffer::Buffer& data, bool end_stream) {
  while (conn_->open()) {
    switch (phase_) {
      case Phase::Closing:
        data.drain(data.length());
        return;
      case Phase::SendBytes:
        // Pipelined requests wait (reads are disabled) until this response is out.
        return;
      case Phase::WebSocket:
        if (!processWebSocket(data)) {
          if (end_stream && conn_->open()) conn_->close(network::CloseType::FlushWrite);
          return;
        }
        break;
      case Phase::SinkLine: {
        if (!readCount(data, end_stream, count_)) return;
        left_ = count_;
        phase_ = Phase::SinkData;
        break;
      }
      case Phase::SinkData: {
        const size_t n = std::min<uint64_t>(data.length(), left_);
        data.drain(n);
        left_ -= n;
        worker_.counters().sink_bytes.add(n);
        if (left_ > 0) {
          if (end_stream) {
            abort();
          } else {
            discardRest();
          }
          return;
        }
        sinkDone();
        break;
      }
      case Phase::SourceLine: {
        uint64_t n = 0;
        if (!readCount(data, end_stream, n)) return;
        worker_.counters().source_bytes.add(n);
        left_ = n;
        if (left_ == 0) break;
        phase_ = Phase::SendBytes;
        setReadDisabled(true);
        fillBytes();
        break;
      }
      case Phase::Head: {
        if (data.empty()) {
          if (end_stream) conn_->close(network::CloseType::FlushWrite);
          return;
        }
        http1::ParseLimits limits;
        limits.max_head_bytes = kMaxHeadBytes;
        http1::ParseError err;
        http1::RequestHead& head = worker_.scratchHead();
        // The head is nearly always inside the first block; copy only when it spans blocks.
        std::string_view bytes = data.front();
        http1::ParseStatus status = http1::parseRequestHead(bytes, limits, head, err);
        if (status == http1::ParseStatus::Incomplete && data.length() > bytes.size()) {
          bytes = data.linearize(std::min<size_t>(data.length(), kMaxHeadBytes + 1));
          status = http1::parseRequestHead(bytes, limits, head, err);
        }
        if (status == http1::ParseStatus::Incomplete) {
          if (end_stream) conn_->close(network::CloseType::NoFlush);
          return;
        }
        if (status == http1::ParseStatus::Error) {
          char line[64];
          snprintf(line, sizeof(line), "HTTP/1.1 %u Bad Request", err.status);
          data.drain(data.length());
          sendSimple(line, "text/plain", "", true);
          return;
        }
        worker_.counters().requests.inc();
        onHead(head);  // head points into data: use it before draining
        data.drain(head.head_size);
        if (phase_ == Phase::SendBytes) fillBytes();
        break;
      }
      case Phase::EchoLength: {
        const size_t n = std::min<uint64_t>(data.length(), left_);
        if (n > 0) {
          out_.move(data, n);
          left_ -= n;
          conn_->write(out_);
          if (!conn_->open()) return;
        }
        if (left_ == 0) {
          finishResponse();
          break;
        }
        if (end_stream) abort();  // the body was cut short
        return;
      }
      case Phase::EchoChunked: {
        // The request's chunked framing is forwarded as is: the response decodes to the same
        // payload, and no copy or re-framing is needed.
        http1::ChunkedDecoder::Status st = http1::ChunkedDecoder::Status::NeedMore;
        while (!data.empty() && st == http1::ChunkedDecoder::Status::NeedMore) {
          size_t consumed = 0;
          st = decoder_.consume(data.front(), consumed);
          out_.move(data, consumed);
        }
        if (st == http1::ChunkedDecoder::Status::Error) {
          // The 200 is already on its way; cutting the connection tells the client.
          abort();
          return;
        }
        if (!out_.empty()) {
          conn_->write(out_);
          if (!conn_->open()) return;
        }
        if (st == http1::ChunkedDecoder::Status::Done) {
          finishResponse();
          break;
        }
        if (end_stream) abort();
        return;
      }
    }
  }
}

void Session::sinkDone() {
  char line[32];
  const int len = snprintf(line, sizeof(line), "%llu\n", static_cast<unsigned long long>(count_));
  out_.add(line, static_cast<size_t>(len));
  conn_->write(out_);
  phase_ = Phase::SinkLine;
}

void Session::discardRest() {
  if (!conn_->rawCapable()) return;  // bytes still to send: the buffered path goes on
  conn_->setRawIoHandler(this);
  conn_->scheduleRead();
}

bool Session::discard(network::Connection& connection, uint64_t& left,
                      const stats::Counter& counter) {
  while (left > 0) {
    // MSG_TRUNC on a TCP socket drops the bytes instead of copying them out.
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, kMaxBytes));
    const ssize_t n = ::recv(connection.fd(), nullptr, want, MSG_TRUNC | MSG_DONTWAIT);
    if (n > 0) {
      const size_t k = static_cast<size_t>(n);
      left -= k;
      counter.add(k);
      connection.countRawBytes(k, 0);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // The client closed or reset in the middle of the payload.
    abort();
    return false;
  }
  return true;
}

void Session::onRawReadable(network::Connection& connection) {
  const bool sink = phase_ == Phase::SinkData;
  uint64_t& left = sink ? left_ : ws_left_;
  if (!discard(connection, left,
               sink ? worker_.counters().sink_bytes : worker_.counters().ws_bytes) ||
      left > 0) {
    return;
  }
  // Back to the buffered path: what follows (the next count, the next frame) is read from the
  // loop.
  connection.setRawIoHandler(nullptr);
  if (sink) {
    sinkDone();
    return;
  }
  ws_in_frame_ = false;
  if (ws_fin_) {
    out_.add("\x82\x00", 2);  // the acknowledgement: an empty binary message
    conn_->write(out_);
  }
}

bool Session::readCount(buffer::Buffer& data, bool end_stream, uint64_t& n) {
  if (data.empty()) {
    if (end_stream) conn_->close(network::CloseType::FlushWrite);
    return false;
  }
  constexpr size_t kMaxLine = 21;  // 20 digits and the newline
  const std::string_view bytes = data.linearize(std::min(data.length(), kMaxLine));
  const size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos) {
    if (bytes.size() >= kMaxLine || end_stream) abort();
    return false;
  }
  n = 0;
  bool ok = nl > 0 && nl <= 19;
  for (size_t i = 0; ok && i < nl; ++i) {
    const char c = bytes[i];
    ok = c >= '0' && c <= '9';
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok) {
    abort();
    return false;
  }
  data.drain(nl + 1);
  return true;
}

bool Session::processWebSocket(buffer::Buffer& data) {
  while (conn_->open()) {
    if (!ws_in_frame_) {
      if (ws_close_) {
        data.drain(data.length());
        return false;
      }
      if (data.length() < 2) return false;
      const std::string_view h = data.linearize(std::min<size_t>(data.length(), 14));
      const uint8_t b0 = static_cast<uint8_t>(h[0]);
      const uint8_t b1 = static_cast<uint8_t>(h[1]);
      // Clients must mask (RFC 6455 5.1); no extensions were negotiated, so RSV bits are errors.
      if ((b1 & 0x80) == 0 || (b0 & 0x70) != 0) {
        abort();
        return false;
      }
      uint64_t len = b1 & 0x7f;
      size_t hdr = 2;
      if (len == 126) {
        hdr = 4;
      } else if (len == 127) {
        hdr = 10;
      }
      if (h.size() < hdr + 4) return false;
      if (len == 126) {
        len = (uint64_t{static_cast<uint8_t>(h[2])} << 8) | static_cast<uint8_t>(h[3]);
      } else if (len == 127) {
        len = 0;
        for (size_t i = 2; i < 10; ++i) len = (len << 8) | static_cast<uint8_t>(h[i]);
        if (len > kMaxBytes) {
          abort();
          return false;
        }
      }
      memcpy(ws_mask_, h.data() + hdr, 4);
      ws_opcode_ = b0 & 0x0f;
      const bool control = ws_opcode_ >= 8;
      if (control && (len > 125 || (b0 & 0x80) == 0)) {
        abort();
        return false;
      }
      data.drain(hdr + 4);
      ws_left_ = len;
      ws_mask_pos_ = 0;
      ws_in_frame_ = true;
      ws_fin_ = (b0 & 0x80) != 0;
      // Echo the frame header unmasked: same FIN and opcode (ping -> pong), same length.
      if (ws_opcode_ != 0xA && (control || !ws_sink_)) {
        char out[10];
        size_t n = 0;
        out[n++] = static_cast<char>((b0 & 0x80) | (ws_opcode_ == 0x9 ? 0xA : ws_opcode_));
        if (len < 126) {
          out[n++] = static_cast<char>(len);
        } else if (len < 65536) {
          out[n++] = 126;
          out[n++] = static_cast<char>(len >> 8);
          out[n++] = static_cast<char>(len & 0xff);
        } else {
          out[n++] = 127;
          for (int k = 7; k >= 0; --k) out[n++] = static_cast<char>((len >> (8 * k)) & 0xff);
        }
        out_.add(out, n);
      }
      if ((b0 & 0x80) && ws_opcode_ < 8) worker_.counters().ws_messages.inc();
    }
    // Unmask what is here into the output (a copy is needed anyway: the mask changes bytes).
    char tmp[16384];
    if (ws_sink_ && ws_opcode_ < 8) {
      // Dropped unread: nothing of it comes back.
      const size_t n = static_cast<size_t>(std::min<uint64_t>(ws_left_, data.length()));
      worker_.counters().ws_bytes.add(n);
      data.drain(n);
      ws_left_ -= n;
      if (ws_left_ == 0 && ws_fin_) {
        out_.add("\x82\x00", 2);  // the acknowledgement: an empty binary message
      }
      if (ws_left_ > 0 && out_.empty()) {
        discardRest();
        return false;
      }
    }
    while (ws_left_ > 0 && !data.empty()) {
      const std::string_view chunk = data.front();
      const size_t n = std::min<uint64_t>({ws_left_, chunk.size(), sizeof(tmp)});
      unmask(chunk.data(), tmp, n);
      if (ws_opcode_ != 0xA) out_.add(tmp, n);
      if (ws_opcode_ < 8) worker_.counters().ws_bytes.add(n);
      data.drain(n);
      ws_left_ -= n;
    }
    // The echo goes out in writes of 64 KiB (as sluice-load sends), or less at a frame's end:
    // writing each read's bytes at once would send the proxy segments only as large as the
    // reads, smaller than the client's.
    constexpr size_t kEchoWriteBytes = 4 * buffer::kBlockSize;
    if (!out_.empty() && (ws_left_ == 0 || out_.length() >= kEchoWriteBytes)) conn_->write(out_);
    if (ws_left_ > 0) return false;
    ws_in_frame_ = false;
    if (ws_opcode_ == 0x8) {
      ws_close_ = true;
      conn_->close(network::CloseType::FlushWrite);
      return false;
    }
  }
  return false;
}

void Session::onHead(const http1::RequestHead& head) {
  keep_alive_ = head.keep_alive;
  const std::string_view path = head.path;
  const bool has_body = head.framing != http1::BodyFraming::None;
  constexpr std::string_view kBytes = "/bytes/";

  if (path.size() > kBytes.size() && path.substr(0, kBytes.size()) == kBytes &&
      (head.method == http1::Method::Get || head.method == http1::Method::Head) && !has_body) {
    uint64_t n = 0;
    bool ok = path.size() - kBytes.size() <= 10;
    for (size_t i = kBytes.size(); ok && i < path.size(); ++i) {
      const char c = path[i];
      ok = c >= '0' && c <= '9';
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || n > kMaxBytes) {
      sendSimple("HTTP/1.1 400 Bad Request", "text/plain", "bad size\n", !keep_alive_);
      return;
    }
    char extra[96];
    snprintf(extra, sizeof(extra), "Content-Type: application/octet-stream\r\nContent-Length: %llu",
             static_cast<unsigned long long>(n));
    writeHead("HTTP/1.1 200 OK", extra);
    left_ = head.method == http1::Method::Head ? 0 : n;
    if (left_ == 0) {
      finishResponse();
      return;
    }
    phase_ = Phase::SendBytes;
    setReadDisabled(true);
    return;
  }

  if (path == "/echo" && head.method == http1::Method::Post) {
    if (head.expect_continue) {
      out_.add("HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (head.framing == http1::BodyFraming::Chunked) {
      writeHead("HTTP/1.1 200 OK",
                "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked");
      decoder_.reset();
      phase_ = Phase::EchoChunked;
      return;
    }
    char extra[96];
    snprintf(extra, sizeof(extra), "Content-Type: application/octet-stream\r\nContent-Length: %llu",
             static_cast<unsigned long long>(head.content_length));
    writeHead("HTTP/1.1 200 OK", extra);
    left_ = head.framing == http1::BodyFraming::ContentLength ? head.content_length : 0;
    if (left_ == 0) {
      finishResponse();
    } else {
      phase_ = Phase::EchoLength;
    }
    return;
  }

  if ((path == "/ws" || path == "/ws/sink") && head.method == http1::Method::Get && !has_body) {
    std::string_view key, version;
    for (uint32_t i = 0; i < head.headers.size(); ++i) {
      const http1::HeaderField& h = head.headers[i];
      if (absl::EqualsIgnoreCase(absl::string_view(h.name.data(), h.name.size()),
                                 "sec-websocket-key")) {
        key = h.value;
      } else if (absl::EqualsIgnoreCase(absl::string_view(h.name.data(), h.name.size()),
                                        "sec-websocket-version")) {
        version = h.value;
      }
    }
    if (!head.upgrade || key.empty() || version != "13") {
      sendSimple("HTTP/1.1 400 Bad Request", "text/plain", "websocket upgrade expected\n", true);
      return;
    }
    const std::string accept = websocketAccept(key);
    out_.add(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Accept: ");
    out_.add(accept);
    out_.add("\r\n\r\n");
    conn_->write(out_);
    phase_ = Phase::WebSocket;
    ws_in_frame_ = false;
    ws_sink_ = path == "/ws/sink";
    return;
  }

  if (path == "/stats" && head.method == http1::Method::Get && !has_body) {
    // Rare (a benchmark's cross-check), so the store's lock and lookups are fine here.
    const stats::Store& store = stats::Store::get();
    char body[512];
    const auto v = [&store](const char* name) {
      return static_cast<unsigned long long>(store.counterValue(name));
    };
    const int len =
        snprintf(body, sizeof(body),
                 "{\"requests\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu, "
                 "\"sink_bytes\": %llu, \"source_bytes\": %llu, \"ws_messages\": %llu, "
                 "\"ws_bytes\": %llu, \"udp_packets\": %llu, \"udp_bytes\": %llu}\n",
                 v("origin.requests"), v("origin.bytes_sent"), v("origin.bytes_received"),
                 v("origin.sink_bytes"), v("origin.source_bytes"), v("origin.ws_messages"),
                 v("origin.ws_bytes"), v("origin.udp_packets"), v("origin.udp_bytes"));
    sendSimple("HTTP/1.1 200 OK", "application/json",
               std::string_view(body, static_cast<size_t>(len)), !keep_alive_);
    return;
  }

  // A body we do not read would be taken for the next request: close after answering instead.
  sendSimple("HTTP/1.1 404 Not Found", "text/plain", "not found\n", !keep_alive_ || has_body);
}

void Session::writeHead(std::string_view status_line, std::string_view extra) {
  out_.add(status_line);
  out_.add("\r\n");
  out_.add(extra);
  out_.add(keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  conn_->write(out_);
}

void Session::sendSimple(std::string_view status_line, std::string_view content_type,
                         std::string_view body, bool close) {
  if (close) keep_alive_ = false;
  char extra[128];
  snprintf(extra, sizeof(extra), "Content-Type: %.*s\r\nContent-Length: %zu",
           static_cast<int>(content_type.size()), content_type.data(), body.size());
  out_.add(status_line);
  out_.add("\r\n");
  out_.add(extra);
  out_.add(keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  out_.add(body);
  conn_->write(out_);
  if (conn_->open()) finishResponse();
}

void Session::unmask(const char* from, char* to, size_t n) {
  size_t i = 0;
  while (i < n && ws_mask_pos_ != 0) {
    to[i] = static_cast<char>(from[i] ^ ws_mask_[ws_mask_pos_]);
    ws_mask_pos_ = (ws_mask_pos_ + 1) & 3;
    ++i;
  }
  // At mask position 0: eight bytes at a time with the mask repeated twice.
  uint8_t key8[8];
  for (size_t k = 0; k < 8; ++k) key8[k] = ws_mask_[k & 3];
  uint64_t key;
  memcpy(&key, key8, sizeof(key));
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    memcpy(&word, from + i, sizeof(word));
    word ^= key;
    memcpy(to + i, &word, sizeof(word));
  }
  for (; i < n; ++i) {
    to[i] = static_cast<char>(from[i] ^ ws_mask_[ws_mask_pos_]);
    ws_mask_pos_ = (ws_mask_pos_ + 1) & 3;
  }
}

void Session::fillBytes() {
  // Stops at the high watermark; onBelowWriteLowWatermark() calls back in for the rest. Each
  // write carries 64 KiB, as sluice-load's uploads do, so that both directions of a tunnel
  // benchmark see segments of the same size (one block per write made 16 KiB segments).
  constexpr size_t kWriteBytes = 4 * buffer::kBlockSize;
  while (left_ > 0 && conn_->open() && !conn_->aboveHighWatermark()) {
    size_t burst = std::min<uint64_t>(left_, kWriteBytes);
    left_ -= burst;
    while (burst > 0) {
      const size_t n = std::min<size_t>(burst, buffer::kBlockSize);
      out_.add(g_block, n);
      burst -= n;
    }
    conn_->write(out_);
  }
  if (left_ == 0 && conn_->open() && phase_ == Phase::SendBytes) finishResponse();
}

void Session::finishResponse() {
  if (!keep_alive_) {
    phase_ = Phase::Closing;
    conn_->close(network::CloseType::FlushWrite);
    return;
  }
  phase_ = idle_phase_;
  setReadDisabled(false);
}

void usage() {
  fprintf(stderr,
          "usage: sluice-origin --listen HOST:PORT [-t THREADS] [--sink HOST:PORT]\n"
          "                     [--tls-listen HOST:PORT]\n"
          "                     [--source HOST:PORT] [--udp-echo HOST:PORT]\n"
          "                     [--tls-cert FILE --tls-key FILE] [--log-level LEVEL]\n");
}

absl::StatusOr<network::Address> parseListen(std::string_view listen) {
  absl::StatusOr<network::Address> address = network::Address::parseHostPort(listen);
  // parseHostPort() refuses port 0, which tests need to get a free port from the kernel.
  if (!address.ok() && listen.size() > 2 && listen.substr(listen.size() - 2) == ":0") {
    std::string any(listen.substr(0, listen.size() - 1));
    any += '1';
    address = network::Address::parseHostPort(any);
    if (address.ok()) address->setPort(0);
  }
  return address;
}

absl::StatusOr<int> createListenSocket(const network::Address& address) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (::bind(fd, address.sockaddr_ptr(), address.length()) != 0 || ::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s", address.asString(), strerror(err)));
  }
  return fd;
}

network::Address localAddress(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

int run(int argc, char** argv) {
  std::string_view listen, tls_listen, sink, source, udp, tls_cert, tls_key;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if ((arg == "--listen" || arg == "-l") && has_value) {
      listen = argv[++i];
    } else if (arg == "--tls-listen" && has_value) {
      tls_listen = argv[++i];
    } else if (arg == "--sink" && has_value) {
      sink = argv[++i];
    } else if (arg == "--source" && has_value) {
      source = argv[++i];
    } else if (arg == "--udp-echo" && has_value) {
      udp = argv[++i];
    } else if (arg == "--tls-cert" && has_value) {
      tls_cert = argv[++i];
    } else if (arg == "--tls-key" && has_value) {
      tls_key = argv[++i];
    } else if ((arg == "-t" || arg == "--threads") && has_value) {
      char* end = nullptr;
      const long t = strtol(argv[++i], &end, 10);
      if (*end != '\0' || t < 1 || t > 256) {
        fprintf(stderr, "sluice-origin: -t must be 1-256\n");
        return 2;
      }
      threads = static_cast<int>(t);
    } else if (arg == "--log-level" && has_value) {
      LogLevel level;
      if (!logger::parseLevel(argv[++i], level)) {
        fprintf(stderr, "sluice-origin: unknown log level\n");
        return 2;
      }
      logger::setLevel(level);
    } else {
      usage();
      return 2;
    }
  }
  if (listen.empty() || tls_cert.empty() != tls_key.empty() ||
      (!tls_listen.empty() && tls_cert.empty())) {
    usage();
    return 2;
  }
  struct Port {
    const char* flag;
    std::string_view text;
    PortKind kind;
    network::Address bound;
    bool on = false;
  };
  const bool listen_is_tls = !tls_cert.empty() && tls_listen.empty();
  Port ports[] = {{"--listen", listen, listen_is_tls ? PortKind::HttpTls : PortKind::Http, {}},
                  {"--sink", sink, PortKind::Sink, {}},
                  {"--source", source, PortKind::Source, {}},
                  {"--tls-listen", tls_listen, PortKind::HttpTls, {}}};
  for (Port& p : ports) {
    if (p.text.empty()) continue;
    absl::StatusOr<network::Address> address = parseListen(p.text);
    if (!address.ok()) {
      fprintf(stderr, "sluice-origin: %s: %s\n", p.flag,
              std::string(address.status().message()).c_str());
      return 2;
    }
    p.bound = *address;
    p.on = true;
  }

  // Writes to a connection the peer reset must fail with EPIPE, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  logger::setThreadName("main");
  memset(g_block, 0, sizeof(g_block));
  for (size_t i = 0; i < sizeof(g_block); ++i) g_block[i] = kPattern[i % kPattern.size()];

  stats::Store& store = stats::Store::get();
  const Counters counters{
      store.counter("origin.requests"),     store.counter("origin.bytes_received"),
      store.counter("origin.bytes_sent"),   store.counter("origin.sink_bytes"),
      store.counter("origin.source_bytes"), store.counter("origin.ws_messages"),
      store.counter("origin.ws_bytes"),     store.counter("origin.udp_packets"),
      store.counter("origin.udp_bytes")};

  tls::ServerContextSharedPtr tls;
  if (!tls_cert.empty()) {
    tls::ServerContextConfig config;
    config.certificates.push_back({std::string(tls_cert), std::string(tls_key)});
    config.alpn = {"http/1.1"};
    config.stats_scope = stats::Scope("origin.tls");
    auto context = tls::ServerContext::create(config);
    if (!context.ok()) {
      fprintf(stderr, "sluice-origin: TLS: %s\n", std::string(context.status().message()).c_str());
      return 2;
    }
    tls = *context;
  }

  // One UDP socket, served by the first worker: echo is for reachability and counts, not speed.
  int udp_fd = -1;
  network::Address udp_bound;
  if (!udp.empty()) {
    absl::StatusOr<network::Address> address = parseListen(udp);
    if (!address.ok()) {
      fprintf(stderr, "sluice-origin: --udp-echo: %s\n",
              std::string(address.status().message()).c_str());
      return 2;
    }
    udp_fd = ::socket(address->family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (udp_fd < 0 || ::bind(udp_fd, address->sockaddr_ptr(), address->length()) != 0) {
      fprintf(stderr, "sluice-origin: cannot bind UDP %s: %s\n", address->asString().c_str(),
              strerror(errno));
      return 1;
    }
    udp_bound = localAddress(udp_fd);
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < threads; ++w) {
    workers.push_back(std::make_unique<Worker>(w, counters, tls, w == 0 ? udp_fd : -1));
    for (Port& p : ports) {
      if (!p.on) continue;
      absl::StatusOr<int> fd = createListenSocket(p.bound);
      if (!fd.ok()) {
        fprintf(stderr, "sluice-origin: %s\n", std::string(fd.status().message()).c_str());
        return 1;
      }
      // With port 0 the first socket picks the port; the others join it.
      if (w == 0) p.bound = localAddress(*fd);
      workers.back()->addListener(*fd, p.kind);
    }
  }

  std::vector<std::thread> running;
  for (auto& worker : workers) {
    running.emplace_back([&worker] { worker->run(); });
  }
  // The first line stays "listening on" (tests read it); the other ports follow, one a line.
  printf("listening on %s\n", ports[0].bound.asString().c_str());
  if (ports[1].on) printf("sink listening on %s\n", ports[1].bound.asString().c_str());
  if (ports[2].on) printf("source listening on %s\n", ports[2].bound.asString().c_str());
  if (udp_fd >= 0) printf("udp echo on %s\n", udp_bound.asString().c_str());
  if (ports[3].on) {
    printf("tls listening on %s\n", ports[3].bound.asString().c_str());
  } else if (tls) {
    printf("tls on\n");
  }
  fflush(stdout);
  for (auto& t : running) t.join();
  return 0;
}

}  // namespace
}  // namespace origin
}  // namespace sluice

int main(int argc, char** argv) { return sluice::origin::run(argc, argv); }
