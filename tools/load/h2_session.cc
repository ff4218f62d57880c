#include "tools/load/h2_session.h"

#include <cstring>

#include <unistd.h>

#include "tools/load/conn.h"
#include "tools/load/shared.h"
#include "tools/load/tls.h"
#include "tools/load/worker.h"

namespace sluice {
namespace load {
namespace {

// nghttp2's callbacks: each finds the stream's Conn (the stream's user data; none once the Conn
// is done with it) and tells it what arrived.

int onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
             size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS || namelen != 7 || memcmp(name, ":status", 7) != 0)
    return 0;
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (c == nullptr) return 0;
  int status = 0;
  for (size_t i = 0; i < valuelen && i < 3; ++i) status = status * 10 + (value[i] - '0');
  c->h2Status(status);
  return 0;
}

int onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<H2Session*>(user_data)->onGoaway();
  if (frame->hd.stream_id == 0) return 0;
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (c == nullptr) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    c->h2Headers(end);
  } else if (frame->hd.type == NGHTTP2_DATA && end) {
    c->h2End();
  }
  return 0;
}

int onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                size_t len, void*) {
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (c != nullptr) c->h2Data(data, len);
  return 0;
}

int onStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error, void*) {
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (c != nullptr) c->h2Closed(error);
  return 0;
}

ssize_t readData(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags,
                 nghttp2_data_source* source, void*) {
  return static_cast<Conn*>(source->ptr)->h2Read(stream_id, buf, length, flags);
}

nghttp2_session_callbacks* callbacks() {
  static nghttp2_session_callbacks* cbs = [] {
    nghttp2_session_callbacks* c;
    nghttp2_session_callbacks_new(&c);
    nghttp2_session_callbacks_set_on_header_callback(c, onHeader);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, onFrameRecv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, onDataChunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, onStreamClose);
    return c;
  }();
  return cbs;
}

}  // namespace

ssize_t H2Session::rawRead(char* buf, size_t len) {
  return socketRead(fd_, buf, len, w_.results().wire_rx);
}

ssize_t H2Session::rawWrite(const char* buf, size_t len) {
  return socketWrite(fd_, buf, len, w_.results().wire_tx, want_write_);
}

void H2Session::storeSession(SSL*, SSL_SESSION* session) {
  if (session_ != nullptr) SSL_SESSION_free(session_);
  session_ = session;
}

void H2Session::wantFlush() {
  if (flush_queued) return;
  flush_queued = true;
  w_.addFlush(this);
}

void H2Session::ensure() {
  if (state_ != State::Idle) return;
  const Shared& s = w_.shared();
  ErrorKind kind;
  if (!startConnect(s.connect_addr, s.connect_len, w_.results(), fd_, phase_start_, kind))
    return lost(kind);
  state_ = State::Connecting;
  updateEvents();
}

void H2Session::updateEvents() {
  updateInterest(w_.epollFd(), fd_, this, want_write_ || state_ == State::Connecting, events_);
}

void H2Session::onEvent(uint32_t) {
  want_write_ = false;
  Results& r = w_.results();
  if (state_ == State::Connecting) {
    const ConnectState cs = connectState(fd_);
    if (cs == ConnectState::InProgress) return updateEvents();
    if (cs != ConnectState::Done) return lost(connectError(cs));
    const uint64_t now = nowNs();
    r.connect.record(now - phase_start_);
    phase_start_ = now;
    if (!w_.shared().h2_tls) return becomeReady();
    const Options& o = w_.opts();
    ssl_ = newClientSsl(w_.shared().proxy_ctx, o.proxy.url.host, !o.proxy_ca.empty(),
                        o.no_resume ? nullptr : session_, newRawBio(this), this);
    state_ = State::Tls;
  }
  if (state_ == State::Tls) {
    switch (tlsHandshake(ssl_, want_write_)) {
      case Handshake::Again:
        return updateEvents();
      case Handshake::Failed:
        return lost(ErrorKind::ProxyTls);
      case Handshake::Done:
        break;
    }
    const uint8_t* alpn = nullptr;
    unsigned alpn_len = 0;
    SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
    if (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) return lost(ErrorKind::ProxyTls);
    countHandshake(ssl_, r);
    return becomeReady();
  }
  if (state_ != State::Ready) return;
  if (!writeOut()) return;
  char* buf = w_.scratch();
  for (;;) {
    const ssize_t n = ssl_ != nullptr ? tlsRead(ssl_, buf, w_.scratchSize(), want_write_)
                                      : rawRead(buf, w_.scratchSize());
    if (n == kAgain) break;
    if (n <= 0) return lost(n == 0 ? ErrorKind::Closed : ErrorKind::Reset);
    if (nghttp2_session_mem_recv(ngh_, reinterpret_cast<const uint8_t*>(buf),
                                 static_cast<size_t>(n)) < 0) {
      return lost(ErrorKind::BadResponse);
    }
    if (ssl_ == nullptr && static_cast<size_t>(n) < w_.scratchSize()) break;
  }
  wantFlush();  // SETTINGS and PING acknowledgements, window updates, what the socket held back
  updateEvents();
}

void H2Session::becomeReady() {
  nghttp2_session_client_new(&ngh_, callbacks(), this);
  // Big windows: a load generator must not be the flow-control bottleneck of a tunnel.
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16 * 1024 * 1024},
  };
  nghttp2_submit_settings(ngh_, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(ngh_, NGHTTP2_FLAG_NONE, 0, 64 * 1024 * 1024);
  state_ = State::Ready;
  if (!w_.shared().tunnel && ssl_ != nullptr) {
    w_.results().proxy_handshake.record(nowNs() - phase_start_);
  }
  for (Conn* c : conns_) c->h2SessionReady();
  wantFlush();
  updateEvents();
}

int32_t H2Session::submit(Conn* c, const std::vector<nghttp2_nv>& nv, bool with_data) {
  if (ngh_ == nullptr) return -1;
  nghttp2_data_provider provider;
  provider.source.ptr = c;
  provider.read_callback = readData;
  wantFlush();
  return nghttp2_submit_request(ngh_, nullptr, nv.data(), nv.size(),
                                with_data ? &provider : nullptr, c);
}

void H2Session::cancel(int32_t id, bool reset_stream) {
  if (ngh_ == nullptr) return;
  nghttp2_session_set_stream_user_data(ngh_, id, nullptr);
  if (!reset_stream) return;
  nghttp2_submit_rst_stream(ngh_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  wantFlush();
}

bool H2Session::writeOut() {
  while (out_off_ < out_.size()) {
    const char* data = out_.data() + out_off_;
    const size_t len = out_.size() - out_off_;
    const ssize_t n =
        ssl_ != nullptr ? tlsWrite(ssl_, data, len, want_write_) : rawWrite(data, len);
    if (n == kAgain) {
      want_write_ = true;  // for TLS too when it wants to read first: the write is pending
      updateEvents();
      return true;
    }
    if (n < 0) {
      lost(ErrorKind::Reset);
      return false;
    }
    out_off_ += static_cast<size_t>(n);
  }
  out_.clear();
  out_off_ = 0;
  return true;
}

void H2Session::flush() {
  if (state_ != State::Ready) return;
  bool more = true;  // still frames to send after the last round
  for (int round = 0; round < 64 && more; ++round) {
    // Frame up to 256 KiB, write it, repeat while the socket takes everything.
    while (out_.size() - out_off_ < 256 * 1024) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(ngh_, &data);
      if (n < 0) return lost(ErrorKind::BadResponse);
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out_.size() == out_off_) {
      more = false;
      break;
    }
    if (!writeOut()) return;
    if (out_off_ != 0 || !out_.empty()) {
      more = false;  // the socket is full: writable again, onEvent() asks for the rest
      break;
    }
  }
  if (more) wantFlush();  // 16 MiB this time; the rest on the next pass of the event loop
  if (nghttp2_session_want_read(ngh_) == 0 && nghttp2_session_want_write(ngh_) == 0 &&
      out_.empty()) {
    return lost(ErrorKind::Closed);  // GOAWAY and nothing left
  }
  updateEvents();
}

void H2Session::close(bool graceful) {
  if (graceful && state_ == State::Ready) {
    nghttp2_session_terminate_session(ngh_, NGHTTP2_NO_ERROR);
    const uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(ngh_, &data)) > 0;)
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    bool ignored = false;
    while (out_off_ < out_.size()) {
      const char* p = out_.data() + out_off_;
      const size_t len = out_.size() - out_off_;
      const ssize_t n = ssl_ != nullptr ? tlsWrite(ssl_, p, len, ignored) : rawWrite(p, len);
      if (n <= 0) break;
      out_off_ += static_cast<size_t>(n);
    }
  }
  reset();
}

void H2Session::reset() {
  if (ngh_ != nullptr) nghttp2_session_del(ngh_);
  ngh_ = nullptr;
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  events_ = 0;
  out_.clear();
  out_off_ = 0;
  goaway_ = false;
  state_ = State::Idle;
}

void H2Session::lost(ErrorKind kind) {
  const bool during_setup = state_ != State::Ready;
  reset();
  for (Conn* c : conns_) c->h2Lost(kind, during_setup);
}

}  // namespace load
}  // namespace sluice
