// One load-generating connection: a state machine that goes TCP connect -> [TLS to the proxy]
// -> [SOCKS5 | CONNECT] -> [TLS to the destination] -> [WebSocket upgrade] -> requests, and
// then, one at a time, sends a request built once at start-up and reads its response (parsed in
// place, never stored). With HTTP/2 to the proxy the same connection is a stream at a time on a
// shared H2Session instead of a socket (conn_h2.cc), or, with --new-conn and plain requests, one
// stream on a session of its own that it closes after each response.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "tools/load/io.h"
#include "tools/load/response_parser.h"
#include "tools/load/results.h"
#include "tools/load/tls.h"

namespace sluice {
namespace load {

class Worker;
class H2Session;

// Bytes between a CONNECT stream and the state machine: appended at the back, taken from the
// front; once drained the storage is kept for the next bytes.
struct Pipe {
  size_t size() const { return data.size() - off; }
  void clear() {
    data.clear();
    off = 0;
  }
  void append(const char* p, size_t n) { data.append(p, n); }
  size_t take(char* buf, size_t len) {
    const size_t n = std::min(size(), len);
    memcpy(buf, data.data() + off, n);
    off += n;
    if (off == data.size()) clear();
    return n;
  }

  std::string data;
  size_t off = 0;
};

class Conn : public Pollable, public TlsOwner {
 public:
  enum class State : uint8_t {
    Closed,
    Connecting,
    ProxyTls,
    SocksGreeting,
    SocksAuth,
    SocksConnect,
    HttpConnect,
    DstTls,
    WsUpgrade,
    Ready,
    Awaiting,
    Holding,
    H2Wait,     // the shared HTTP/2 session is connecting
    H2Connect,  // CONNECT stream opened, waiting for its response
  };

  Conn(Worker& w, int index, H2Session* h2) : w_(w), index_(index), h2_(h2) {}
  ~Conn() override {
    closeSocket();
    if (proxy_session_ != nullptr) SSL_SESSION_free(proxy_session_);
    if (dst_session_ != nullptr) SSL_SESSION_free(dst_session_);
  }

  void drive();
  void onEvent(uint32_t) override { drive(); }
  void onTimer() {
    timer_armed_ = false;
    drive();
  }
  // A request (or setup) is in progress: the thread must wait for it.
  bool busy() const {
    return has_ticket_ ||
           (state_ != State::Closed && state_ != State::Ready && state_ != State::Holding);
  }
  void checkTimeout(uint64_t now);
  void abandon();
  // --hold-window: this waiting slot's turn has come (the window's place is already its own).
  void holdTurn() {
    hold_waiting_ = false;
    hold_opening_ = true;
    markPending();
  }

  uint64_t next_intended = 0;  // open loop: this connection's next send time
  bool timer_armed_ = false;

  // TLS plumbing (called from the BIO methods).
  ssize_t rawRead(char* buf, size_t len) override;
  ssize_t rawWrite(const char* buf, size_t len) override;
  SSL* outerSsl() override { return proxy_ssl_; }
  void setWantWrite() override { want_write_ = true; }
  void storeSession(SSL* ssl, SSL_SESSION* session) override;

  // HTTP/2 stream events (from the session's callbacks; progress happens in drive()). These and
  // the h2 steps below are in conn_h2.cc.
  void h2Status(int status);
  void h2Headers(bool end_stream);
  void h2Data(const uint8_t* data, size_t len);
  void h2End() {
    stream_eof_ = true;
    markPending();
  }
  void h2Closed(uint32_t error) {
    stream_closed_ = true;
    stream_error_ = error;
    markPending();
  }
  ssize_t h2Read(int32_t stream_id, uint8_t* buf, size_t len, uint32_t* flags);
  // The session died: whatever this connection was doing failed with kind.
  void h2Lost(ErrorKind kind, bool during_setup);
  void h2SessionReady() { markPending(); }
  bool pending = false;

 private:
  // What drive() does next: step again, wait for an event, or nothing to do (no request to
  // take). More: inside stepAwaiting only, the response is not complete, read on.
  enum class Step { Continue, Block, Idle, More };
  Step step();
  Step stepClosed();
  Step stepConnecting();
  Step stepTls(SSL* ssl, bool proxy);
  Step stepSocks();
  Step stepHttpConnect();
  Step stepWsUpgrade();
  Step stepReady();
  Step stepAwaiting();
  // A response's bytes (len 0: the peer closed), per workload.
  Step httpBytes(const char* buf, size_t len);
  Step wsBytes(const char* buf, size_t len);
  Step tunnelUpBytes(const char* buf, size_t len);
  Step tunnelDownBytes(size_t len);
  // The request is done with `status`: counted; then the connection closes or takes the next.
  Step finish(int status, bool close);
  Step stepHolding();
  Step tunnelUp();  // the proxy handshake is done: next, TLS to the destination or requests
  // --hold: this slot has finished opening (held, failed or refused): its place in the window
  // goes to the next waiting slot. Once per slot; nothing when it was not opening.
  void holdOpened();
  Step destinationUp();
  // HTTP/2 to the proxy: a CONNECT stream (or, for plain requests, nothing yet), its response,
  // and a plain request's response.
  Step h2Open();
  Step stepH2Connect();
  Step stepAwaitingH2();
  void markPending();

  bool acquire();
  void startSend(const char* data, size_t len);
  // Writes what is pending; false on would-block (or error: then state is Closed).
  bool flush();
  // After flush() returned false: wait for writability, or (it failed) go on from Closed.
  Step blocked() const { return state_ == State::Closed ? Step::Continue : Step::Block; }
  // A handshake message, sent once per stage (socks_stage_ 0 -> 1); false until all written.
  bool sendStage(const std::string& message);
  // Reads an HTTP/1 reply head (CONNECT's, the WebSocket upgrade's) into parser_, `chunk`
  // bytes at a time; true once complete (extra: bytes followed it), else false with the step.
  bool readReplyHead(char* buf, size_t chunk, bool& extra, Step& st);
  ssize_t ioRead(char* buf, size_t len);
  // A plain TCP socket's next len bytes (at most), dropped in the kernel and counted as read.
  ssize_t ioDiscard(size_t len);
  ssize_t ioWrite(const char* buf, size_t len);
  // Reads the handshake reply into hs_ until it holds `need` bytes.
  Step readHandshake(size_t need);
  Step fail(ErrorKind kind);
  void complete(int status);
  // graceful: an HTTP/2 tunnel ends with END_STREAM rather than RST_STREAM (proxies count
  // client resets: rapid-reset protection).
  void closeSocket(bool graceful = true);
  void updateEvents();
  SSL* newSsl(SSL_CTX* ctx, bool proxy);

  Worker& w_;
  int index_;
  int fd_ = -1;
  State state_ = State::Closed;
  uint32_t events_ = 0;
  bool want_write_ = false;
  bool has_ticket_ = false;
  bool counting_app_ = false;
  bool first_byte_ = false;
  uint8_t socks_stage_ = 0;
  uint64_t intended_ = 0;      // latency starts here
  uint64_t phase_start_ = 0;   // the current setup phase started here
  uint64_t sent_at_ = 0;       // request fully written (TTFB starts)
  uint64_t deadline_ = 0;      // 0 = none
  uint64_t messages_ = 0;      // on this connection (WebSocket, --ws-count)
  bool hold_started_ = false;  // --hold: this slot has made its one attempt
  bool hold_waiting_ = false;  // --hold-window: queued for a place in the window
  bool hold_opening_ = false;  // --hold: has a place in the window (connecting, not yet held)
  uint64_t tunnel_left_ = 0;
  const char* wptr_ = nullptr;
  size_t wlen_ = 0;
  std::string hs_;  // handshake replies, accumulated
  SSL* proxy_ssl_ = nullptr;
  SSL* dst_ssl_ = nullptr;
  bool dst_tls_done_ = false;
  SSL_SESSION* proxy_session_ = nullptr;
  SSL_SESSION* dst_session_ = nullptr;
  ResponseParser parser_;
  // WebSocket frame reader
  uint8_t ws_hdr_[14];
  uint8_t ws_hdr_len_ = 0;
  uint8_t ws_hdr_need_ = 2;
  uint64_t ws_payload_left_ = 0;
  uint64_t ws_msg_bytes_ = 0;
  uint64_t ws_send_left_ = 0;  // payload of the message being sent past ws_frame's
  bool ws_in_payload_ = false;
  // Tunnel download: count so far; tunnel upload: the ack line.
  uint64_t tunnel_done_ = 0;
  // HTTP/2 to the proxy: this connection is one stream at a time on a shared session.
  H2Session* h2_;
  int32_t stream_ = -1;
  int h2_status_ = 0;
  bool h2_headers_ = false;
  bool stream_eof_ = false;
  bool stream_closed_ = false;
  bool pipe_blocked_ = false;
  uint32_t stream_error_ = 0;
  uint64_t h2_body_ = 0;  // response body bytes of the current plain request
  size_t body_off_ = 0;   // request body bytes handed to the session
  Pipe in_pipe_;          // CONNECT stream: bytes received, not yet read
  Pipe out_pipe_;         // CONNECT stream: bytes written, not yet framed
  static constexpr size_t kPipeLimit = 256 * 1024;
};

}  // namespace load
}  // namespace sluice
