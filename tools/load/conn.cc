#include "tools/load/conn.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/socket.h>
#include <unistd.h>

#include "tools/load/h2_session.h"
#include "tools/load/shared.h"
#include "tools/load/worker.h"

namespace sluice {
namespace load {

ssize_t Conn::rawRead(char* buf, size_t len) {
  if (h2_ != nullptr) {
    // A CONNECT stream: what DATA frames brought.
    if (in_pipe_.size() == 0) {
      if (stream_eof_ || stream_closed_) return stream_error_ == 0 ? 0 : kError;
      return kAgain;
    }
    return static_cast<ssize_t>(in_pipe_.take(buf, len));
  }
  return socketRead(fd_, buf, len, w_.results().wire_rx);
}

ssize_t Conn::rawWrite(const char* buf, size_t len) {
  if (h2_ != nullptr) {
    if (stream_ < 0 || stream_closed_ || !h2_->ready()) return kError;
    if (out_pipe_.size() >= kPipeLimit) {
      pipe_blocked_ = true;  // h2Read() wakes us when the session has taken some
      return kAgain;
    }
    const size_t n = std::min(len, kPipeLimit);
    out_pipe_.append(buf, n);
    h2_->resume(stream_);
    return static_cast<ssize_t>(n);
  }
  return socketWrite(fd_, buf, len, w_.results().wire_tx, want_write_);
}

ssize_t Conn::ioRead(char* buf, size_t len) {
  SSL* ssl = dst_tls_done_ ? dst_ssl_ : proxy_ssl_;
  const ssize_t n = ssl == nullptr ? rawRead(buf, len) : tlsRead(ssl, buf, len, want_write_);
  if (n > 0 && counting_app_) w_.results().app_rx += static_cast<uint64_t>(n);
  return n;
}

ssize_t Conn::ioDiscard(size_t len) {
  const ssize_t n = socketDiscard(fd_, len, w_.results().wire_rx);
  if (n > 0 && counting_app_) w_.results().app_rx += static_cast<uint64_t>(n);
  return n;
}

ssize_t Conn::ioWrite(const char* buf, size_t len) {
  SSL* ssl = dst_tls_done_ ? dst_ssl_ : proxy_ssl_;
  const ssize_t n = ssl == nullptr ? rawWrite(buf, len) : tlsWrite(ssl, buf, len, want_write_);
  if (n > 0 && counting_app_) w_.results().app_tx += static_cast<uint64_t>(n);
  return n;
}

void Conn::storeSession(SSL* ssl, SSL_SESSION* session) {
  SSL_SESSION*& slot = ssl == proxy_ssl_ ? proxy_session_ : dst_session_;
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = session;
}

SSL* Conn::newSsl(SSL_CTX* ctx, bool proxy) {
  const Options& o = w_.opts();
  const Url& peer = proxy ? o.proxy.url : o.dst;
  const bool verify = proxy ? !o.proxy_ca.empty() : !o.ca.empty();
  // TLS to the destination through an https:// proxy runs inside the proxy's session.
  BIO* bio = !proxy && proxy_ssl_ != nullptr ? newTlsInTlsBio(this) : newRawBio(this);
  SSL_SESSION* session = o.no_resume ? nullptr : proxy ? proxy_session_ : dst_session_;
  return newClientSsl(ctx, peer.host, verify, session, bio, this);
}

void Conn::closeSocket(bool graceful) {
  if (h2_ != nullptr && stream_ >= 0) {
    const int32_t id = stream_;
    stream_ = -1;
    if (graceful && !stream_closed_ && w_.shared().tunnel) {
      h2_->endStream(id);
    } else {
      h2_->cancel(id, !stream_closed_);
    }
  }
  // A session of its own (--new-conn): the connection ends with the request. (Closed: nothing
  // open, and the session may be gone, as when the worker has ended.)
  if (h2_ != nullptr && w_.shared().h2_new_conn && state_ != State::Closed) h2_->close(graceful);
  if (dst_ssl_ != nullptr) SSL_free(dst_ssl_);
  if (proxy_ssl_ != nullptr) SSL_free(proxy_ssl_);
  dst_ssl_ = proxy_ssl_ = nullptr;
  dst_tls_done_ = false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  events_ = 0;
  state_ = State::Closed;
  counting_app_ = false;
  wlen_ = 0;
  messages_ = 0;
}

void Conn::updateEvents() {
  updateInterest(w_.epollFd(), fd_, this, want_write_ || state_ == State::Connecting, events_);
}

void Conn::drive() {
  want_write_ = false;
  while (step() == Step::Continue) {
  }
  updateEvents();
}

Conn::Step Conn::step() {
  switch (state_) {
    case State::Closed:
      return stepClosed();
    case State::Connecting:
      return stepConnecting();
    case State::ProxyTls:
      return stepTls(proxy_ssl_, true);
    case State::SocksGreeting:
    case State::SocksAuth:
    case State::SocksConnect:
      return stepSocks();
    case State::HttpConnect:
      return stepHttpConnect();
    case State::DstTls:
      return stepTls(dst_ssl_, false);
    case State::WsUpgrade:
      return stepWsUpgrade();
    case State::Ready:
      return stepReady();
    case State::Awaiting:
      return stepAwaiting();
    case State::Holding:
      return stepHolding();
    case State::H2Wait:
      if (!h2_->ready()) return Step::Block;
      return h2Open();
    case State::H2Connect:
      return stepH2Connect();
  }
  return Step::Idle;
}

bool Conn::acquire() {
  if (has_ticket_) return true;
  if (w_.stopping()) return false;
  const Options& o = w_.opts();
  const uint64_t now = nowNs();
  if (o.rate > 0 && now < next_intended) {
    w_.schedule(this, next_intended);
    return false;
  }
  if (!w_.takeTicket()) return false;
  has_ticket_ = true;
  if (o.rate > 0) {
    // Open loop: latency counts from when the request should have gone out, so time spent
    // waiting behind a slow response is not hidden (coordinated omission).
    intended_ = next_intended;
    next_intended += w_.intervalNs();
  } else {
    intended_ = now;
  }
  deadline_ = now + static_cast<uint64_t>(o.timeout_s * 1e9);
  return true;
}

Conn::Step Conn::fail(ErrorKind kind) {
  Results& r = w_.results();
  if (state_ == State::Holding || (w_.opts().workload == Workload::Hold)) {
    ++r.errors[static_cast<int>(kind)];
  } else if (has_ticket_) {
    ++r.errors[static_cast<int>(kind)];
    ++r.failed;
    has_ticket_ = false;
    w_.onDone();
  } else {
    // Nothing was in flight (an idle keep-alive connection the peer closed): not a failure.
  }
  closeSocket(false);
  deadline_ = 0;
  if (w_.opts().workload == Workload::Hold) {
    holdOpened();
    return Step::Idle;
  }
  return Step::Continue;
}

void Conn::complete(int status) {
  Results& r = w_.results();
  const uint64_t now = nowNs();
  r.latency.record(now - intended_);
  if (status >= 0 && status < 600) ++r.status[status];
  const bool good = w_.opts().workload != Workload::Http || (status >= 200 && status < 300);
  if (good) {
    ++r.ok;
  } else {
    ++r.failed;
  }
  has_ticket_ = false;
  deadline_ = 0;
  w_.onDone();
}

void Conn::abandon() {
  if (has_ticket_) {
    ++w_.results().incomplete;
    has_ticket_ = false;
  }
  closeSocket();
}

void Conn::checkTimeout(uint64_t now) {
  if (deadline_ != 0 && now > deadline_ && busy()) {
    if (getenv("SLUICE_LOAD_DEBUG") != nullptr) {
      fprintf(stderr, "timeout: conn %d state %d stream %d closed %d eof %d headers %d status %d\n",
              index_, static_cast<int>(state_), stream_, stream_closed_, stream_eof_, h2_headers_,
              h2_status_);
    }
    want_write_ = false;
    fail(ErrorKind::Timeout);
    // Reconnect (or take the next request) on the next event-loop pass.
    drive();
  }
}

Conn::Step Conn::stepClosed() {
  const Options& o = w_.opts();
  if (o.workload == Workload::Hold) {
    if (hold_started_) {
      // Each hold slot connects once; one back here without failing (a refused stream) is done.
      holdOpened();
      return Step::Idle;
    }
    if (hold_waiting_ || w_.stopping()) return Step::Idle;
    if (!hold_opening_) {
      if (!w_.holdMayOpen()) {
        // --hold-window: as many are opening as may; holdTurn() wakes this one.
        hold_waiting_ = true;
        w_.holdWait(this);
        return Step::Idle;
      }
      hold_opening_ = true;
    }
    hold_started_ = true;
    deadline_ = nowNs() + static_cast<uint64_t>(o.timeout_s * 1e9);
    intended_ = nowNs();
  } else if (!acquire()) {
    return Step::Idle;
  }
  const Shared& s = w_.shared();
  if (h2_ != nullptr) {
    if (!h2_->ready()) {
      state_ = State::H2Wait;
      h2_->ensure();
      return Step::Block;
    }
    return h2Open();
  }
  ErrorKind kind;
  if (!startConnect(s.connect_addr, s.connect_len, w_.results(), fd_, phase_start_, kind))
    return fail(kind);
  state_ = State::Connecting;
  want_write_ = true;
  return Step::Block;
}

void Conn::holdOpened() {
  if (!hold_opening_) return;
  hold_opening_ = false;
  w_.holdOpened();
}

Conn::Step Conn::stepConnecting() {
  const ConnectState cs = connectState(fd_);
  if (cs == ConnectState::InProgress) {
    want_write_ = true;
    return Step::Block;
  }
  if (cs != ConnectState::Done) return fail(connectError(cs));
  const uint64_t now = nowNs();
  w_.results().connect.record(now - phase_start_);
  phase_start_ = now;
  const Shared& s = w_.shared();
  if (s.proxy_tls) {
    proxy_ssl_ = newSsl(s.proxy_ctx, true);
    state_ = State::ProxyTls;
    return Step::Continue;
  }
  return tunnelUp();
}

// After TCP (and TLS to the proxy): the proxy's own handshake, if any.
Conn::Step Conn::tunnelUp() {
  const Shared& s = w_.shared();
  hs_.clear();
  if (s.socks) {
    state_ = State::SocksGreeting;
    socks_stage_ = 0;
    return Step::Continue;
  }
  if (s.tunnel) {
    state_ = State::HttpConnect;
    socks_stage_ = 0;
    return Step::Continue;
  }
  if (w_.opts().proxy.kind != ProxyKind::Direct) {
    // Absolute-form: the proxy handshake is TLS to the proxy, if any.
    if (s.proxy_tls) w_.results().proxy_handshake.record(nowNs() - phase_start_);
  }
  return destinationUp();
}

// The path to the destination is open: TLS to it, then the WebSocket upgrade, then requests.
Conn::Step Conn::destinationUp() {
  const Shared& s = w_.shared();
  phase_start_ = nowNs();
  if (s.dst_tls && dst_ssl_ == nullptr) {
    dst_ssl_ = newSsl(s.dst_ctx, false);
    state_ = State::DstTls;
    return Step::Continue;
  }
  counting_app_ = true;
  const Options& o = w_.opts();
  if (o.workload == Workload::Hold) {
    ++w_.results().held;
    holdOpened();
    deadline_ = 0;
    state_ = State::Holding;
    return Step::Continue;
  }
  if (o.workload == Workload::WebSocket) {
    state_ = State::WsUpgrade;
    socks_stage_ = 0;
    parser_.reset(false);
    return Step::Continue;
  }
  state_ = State::Ready;
  return Step::Continue;
}

Conn::Step Conn::stepTls(SSL* ssl, bool proxy) {
  switch (tlsHandshake(ssl, want_write_)) {
    case Handshake::Again:
      return Step::Block;
    case Handshake::Failed:
      return fail(proxy ? ErrorKind::ProxyTls : ErrorKind::Tls);
    case Handshake::Done:
      break;
  }
  countHandshake(ssl, w_.results());
  if (proxy) return tunnelUp();
  w_.results().dst_tls.record(nowNs() - phase_start_);
  dst_tls_done_ = true;
  return destinationUp();
}

void Conn::startSend(const char* data, size_t len) {
  wptr_ = data;
  wlen_ = len;
}

bool Conn::flush() {
  while (wlen_ > 0) {
    const ssize_t n = ioWrite(wptr_, wlen_);
    if (n == kAgain) return false;
    if (n <= 0) {
      fail(ErrorKind::Reset);
      return false;
    }
    wptr_ += n;
    wlen_ -= static_cast<size_t>(n);
  }
  return true;
}

bool Conn::sendStage(const std::string& message) {
  if (socks_stage_ == 0) {
    startSend(message.data(), message.size());
    socks_stage_ = 1;
  }
  return flush();
}

Conn::Step Conn::readHandshake(size_t need) {
  char buf[512];
  while (hs_.size() < need) {
    // Never read past the reply: the bytes after it belong to the destination.
    const size_t want = std::min(sizeof(buf), need - hs_.size());
    const ssize_t n = ioRead(buf, want);
    if (n == kAgain) return Step::Block;
    if (n == 0) return fail(ErrorKind::Closed);
    if (n < 0) return fail(ErrorKind::Reset);
    hs_.append(buf, static_cast<size_t>(n));
  }
  return Step::Continue;
}

bool Conn::readReplyHead(char* buf, size_t chunk, bool& extra, Step& st) {
  for (;;) {
    const ssize_t n = ioRead(buf, chunk);
    if (n == kAgain) return st = Step::Block, false;
    if (n == 0) return st = fail(ErrorKind::Closed), false;
    if (n < 0) return st = fail(ErrorKind::Reset), false;
    size_t used = 0;
    const ResponseParser::Result res = parser_.feed(buf, static_cast<size_t>(n), used);
    if (res == ResponseParser::Result::Error) return st = fail(ErrorKind::BadResponse), false;
    if (res == ResponseParser::Result::More) continue;
    extra = used != static_cast<size_t>(n);
    return true;
  }
}

Conn::Step Conn::stepSocks() {
  const Shared& s = w_.shared();
  Results& r = w_.results();
  // socks_stage_: 0 = write the message, 1 = read its reply.
  switch (state_) {
    case State::SocksGreeting:
      if (!sendStage(s.socks_greeting)) return blocked();
      if (Step st = readHandshake(2); st != Step::Continue) return st;
      if (static_cast<uint8_t>(hs_[0]) != 5) return fail(ErrorKind::SocksProtocol);
      if (static_cast<uint8_t>(hs_[1]) == 0x02 && !s.socks_auth.empty()) {
        state_ = State::SocksAuth;
      } else if (static_cast<uint8_t>(hs_[1]) == 0x00) {
        state_ = State::SocksConnect;
      } else {
        return fail(ErrorKind::SocksAuth);  // 0xFF: no acceptable method
      }
      socks_stage_ = 0;
      hs_.clear();
      return Step::Continue;
    case State::SocksAuth:
      if (!sendStage(s.socks_auth)) return blocked();
      if (Step st = readHandshake(2); st != Step::Continue) return st;
      if (hs_[1] != 0) return fail(ErrorKind::SocksAuth);
      state_ = State::SocksConnect;
      socks_stage_ = 0;
      hs_.clear();
      return Step::Continue;
    default: {
      if (!sendStage(s.socks_connect)) return blocked();
      if (Step st = readHandshake(5); st != Step::Continue) return st;
      if (static_cast<uint8_t>(hs_[0]) != 5) return fail(ErrorKind::SocksProtocol);
      if (hs_[1] != 0) {
        const uint8_t rep = static_cast<uint8_t>(hs_[1]);
        ++r.proxy_status[rep];
        return fail(ErrorKind::SocksReply);
      }
      // VER REP RSV ATYP BND.ADDR BND.PORT: ATYP 1 = 4 bytes, 4 = 16, 3 = length byte + name.
      size_t need;
      switch (static_cast<uint8_t>(hs_[3])) {
        case 1:
          need = 4 + 4 + 2;
          break;
        case 4:
          need = 4 + 16 + 2;
          break;
        case 3:
          need = 4 + 1 + static_cast<uint8_t>(hs_[4]) + 2;
          break;
        default:
          return fail(ErrorKind::SocksProtocol);
      }
      if (Step st = readHandshake(need); st != Step::Continue) return st;
      r.proxy_handshake.record(nowNs() - phase_start_);
      return destinationUp();
    }
  }
}

Conn::Step Conn::stepHttpConnect() {
  if (socks_stage_ == 0) parser_.reset(true);
  if (!sendStage(w_.shared().connect_request)) return blocked();
  // Read the reply a little at a time: bytes after it belong to the tunnel (a server-first
  // protocol or an early TLS record), so never read past its end.
  char buf[256];
  bool extra = false;
  if (Step out; !readReplyHead(buf, sizeof(buf), extra, out)) return out;
  const int st = parser_.status();
  if (st < 200 || st >= 300) {
    ++w_.results().proxy_status[st < 600 ? st : 599];
    return fail(ErrorKind::ProxyStatus);
  }
  if (extra) return fail(ErrorKind::BadResponse);
  w_.results().proxy_handshake.record(nowNs() - phase_start_);
  return destinationUp();
}

Conn::Step Conn::stepWsUpgrade() {
  if (!sendStage(w_.shared().ws_upgrade)) return blocked();
  bool extra = false;
  if (Step out; !readReplyHead(w_.scratch(), 4096, extra, out)) return out;
  if (parser_.status() != 101 || !parser_.websocketAccepted() || extra) {
    const int st = parser_.status();
    ++w_.results().proxy_status[st > 0 && st < 600 ? st : 599];
    return fail(ErrorKind::WebSocket);
  }
  w_.results().proxy_handshake.record(nowNs() - phase_start_);
  ws_hdr_len_ = 0;
  ws_hdr_need_ = 2;
  ws_in_payload_ = false;
  state_ = State::Ready;
  return Step::Continue;
}

Conn::Step Conn::stepReady() {
  const Shared& s = w_.shared();
  const Options& o = w_.opts();
  if (!acquire()) {
    if (h2_ != nullptr && !s.tunnel) return Step::Idle;  // no stream open between requests
    // Idle keep-alive connection: anything readable now is the peer closing it.
    char buf[64];
    const ssize_t n = ioRead(buf, sizeof(buf));
    if (n == kAgain) return Step::Idle;
    closeSocket();
    return Step::Continue;
  }
  first_byte_ = false;
  if (h2_ != nullptr && !s.tunnel) {
    // A plain request on its own stream.
    if (!h2_->ready()) {
      state_ = State::Closed;  // keeps the request: it goes out on the next connection
      return Step::Continue;
    }
    stream_eof_ = stream_closed_ = h2_headers_ = false;
    h2_status_ = 0;
    stream_error_ = 0;
    h2_body_ = 0;
    body_off_ = 0;
    stream_ = h2_->submit(this, s.h2_request_nv, !s.body.empty());
    if (stream_ < 0) return fail(ErrorKind::BadResponse);
    sent_at_ = nowNs();
    state_ = State::Awaiting;
    return Step::Block;
  }
  switch (o.workload) {
    case Workload::Http:
      parser_.reset(s.head_request);
      startSend(s.request.data(), s.request.size());
      break;
    case Workload::WebSocket:
      ws_msg_bytes_ = 0;
      ws_send_left_ = o.ws_size - s.wsPayload().size();
      startSend(s.ws_frame.data(), s.ws_frame.size());
      break;
    case Workload::TunnelUp:
      tunnel_left_ = o.tunnel_bytes;
      tunnel_done_ = 0;
      hs_.clear();
      startSend(s.tunnel_header.data(), s.tunnel_header.size());
      break;
    case Workload::TunnelDown:
      tunnel_left_ = 0;
      tunnel_done_ = 0;
      startSend(s.tunnel_header.data(), s.tunnel_header.size());
      break;
    case Workload::Hold:
      return Step::Idle;
  }
  state_ = State::Awaiting;
  sent_at_ = 0;
  if (!flush()) return blocked();
  if (o.workload == Workload::TunnelUp || ws_send_left_ > 0) {
    return Step::Continue;  // the payload follows
  }
  sent_at_ = nowNs();
  // The response cannot be here yet: wait for readiness instead of a read that would block.
  return Step::Block;
}

Conn::Step Conn::stepAwaiting() {
  const Options& o = w_.opts();
  const Shared& s = w_.shared();
  if (h2_ != nullptr && !s.tunnel) return stepAwaitingH2();
  if (!flush()) return blocked();
  if (o.workload == Workload::TunnelUp && tunnel_left_ > 0) {
    // Stream the payload from the shared pattern, one socket write per chunk.
    while (tunnel_left_ > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(tunnel_left_, s.pattern.size()));
      startSend(s.pattern.data(), n);
      tunnel_left_ -= n;
      if (!flush()) return blocked();
    }
  }
  // The rest of a WebSocket message longer than its first chunk, the chunk again and again.
  while (ws_send_left_ > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(ws_send_left_, s.wsPayload().size()));
    startSend(s.wsPayload().data(), n);
    ws_send_left_ -= n;
    if (!flush()) return blocked();
  }
  if (sent_at_ == 0) sent_at_ = nowNs();
  char* buf = w_.scratch();
  // A download through a plain TCP tunnel is dropped in the kernel, never copied out: the
  // load's own copying then adds nothing to what the proxy is measured against. One byte more
  // than is due is asked for, so that a source sending too much is still seen.
  const bool discard = o.workload == Workload::TunnelDown && h2_ == nullptr &&
                       dst_ssl_ == nullptr && proxy_ssl_ == nullptr;
  for (;;) {
    const size_t cap = discard ? static_cast<size_t>(std::min<uint64_t>(
                                     o.tunnel_bytes - tunnel_done_ + 1, uint64_t{1} << 30))
                               : w_.scratchSize();
    const ssize_t n = discard ? ioDiscard(cap) : ioRead(buf, cap);
    if (n == kAgain) return Step::Block;
    if (n < 0) return fail(ErrorKind::Reset);
    if (n > 0 && !first_byte_) {
      first_byte_ = true;
      w_.results().ttfb.record(nowNs() - sent_at_);
    }
    const size_t len = static_cast<size_t>(n);
    Step st = Step::Idle;
    switch (o.workload) {
      case Workload::Http:
        st = httpBytes(buf, len);
        break;
      case Workload::WebSocket:
        st = wsBytes(buf, len);
        break;
      case Workload::TunnelUp:
        st = tunnelUpBytes(buf, len);
        break;
      case Workload::TunnelDown:
        st = tunnelDownBytes(len);
        break;
      case Workload::Hold:
        break;
    }
    if (st != Step::More) return st;
    if (len < cap) {
      // A short read drained the socket (for plain TCP): wait rather than read EAGAIN.
      if (dst_ssl_ == nullptr && proxy_ssl_ == nullptr) return Step::Block;
    }
  }
}

Conn::Step Conn::finish(int status, bool close) {
  complete(status);
  if (close) {
    closeSocket();
  } else {
    state_ = State::Ready;
  }
  return Step::Continue;
}

Conn::Step Conn::httpBytes(const char* buf, size_t len) {
  const Options& o = w_.opts();
  Results& r = w_.results();
  if (len == 0) {
    if (!parser_.finishOnClose()) return fail(ErrorKind::Closed);
  } else {
    size_t used = 0;
    const ResponseParser::Result res = parser_.feed(buf, len, used);
    if (res == ResponseParser::Result::Error) return fail(ErrorKind::BadResponse);
    if (res == ResponseParser::Result::More) return Step::More;
    if (used != len) return fail(ErrorKind::BadResponse);
  }
  r.body_rx += parser_.bodyBytes();
  r.body_tx += o.body_bytes;
  return finish(parser_.status(), len == 0 || o.new_conn || parser_.close());
}

Conn::Step Conn::wsBytes(const char* buf, size_t len) {
  const Options& o = w_.opts();
  if (len == 0) return fail(ErrorKind::Closed);
  // Server frames are unmasked: FIN/opcode, length (7, 16 or 64 bit), payload.
  size_t i = 0;
  bool done = false;
  while (i < len) {
    if (!ws_in_payload_) {
      while (i < len && ws_hdr_len_ < ws_hdr_need_) {
        ws_hdr_[ws_hdr_len_++] = static_cast<uint8_t>(buf[i++]);
        if (ws_hdr_len_ == 2) {
          const uint8_t l7 = ws_hdr_[1] & 0x7f;
          if (ws_hdr_[1] & 0x80) return fail(ErrorKind::WebSocket);  // masked from server
          ws_hdr_need_ = l7 == 126 ? 4 : l7 == 127 ? 10 : 2;
        }
      }
      if (ws_hdr_len_ < ws_hdr_need_) break;
      const uint8_t opcode = ws_hdr_[0] & 0x0f;
      if (opcode >= 8) return fail(ErrorKind::WebSocket);  // close/ping: not in this exchange
      uint64_t plen = ws_hdr_[1] & 0x7f;
      if (plen == 126) plen = (uint64_t{ws_hdr_[2]} << 8) | ws_hdr_[3];
      if (plen == 127) {
        plen = 0;
        for (int k = 2; k < 10; ++k) plen = (plen << 8) | ws_hdr_[k];
      }
      ws_payload_left_ = plen;
      ws_in_payload_ = true;
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(ws_payload_left_, len - i));
    i += take;
    ws_payload_left_ -= take;
    ws_msg_bytes_ += take;
    if (ws_payload_left_ == 0) {
      ws_in_payload_ = false;
      const bool fin = ws_hdr_[0] & 0x80;
      ws_hdr_len_ = 0;
      ws_hdr_need_ = 2;
      if (fin) {
        done = true;
        break;
      }
    }
  }
  if (!done) return Step::More;
  // An echo comes back whole; one way, the origin answers each message with an empty one.
  if (i != len || ws_msg_bytes_ != (o.ws_one_way ? 0 : o.ws_size)) {
    return fail(ErrorKind::WebSocket);
  }
  Results& r = w_.results();
  r.body_rx += ws_msg_bytes_;
  r.body_tx += o.ws_size;
  ++messages_;
  return finish(101, o.new_conn || (o.ws_count > 0 && messages_ >= o.ws_count));
}

Conn::Step Conn::tunnelUpBytes(const char* buf, size_t len) {
  const Options& o = w_.opts();
  // The sink acknowledges with the byte count it received and a newline.
  if (len == 0) return fail(ErrorKind::Closed);
  hs_.append(buf, len);
  const size_t nl = hs_.find('\n');
  if (nl == std::string::npos) {
    if (hs_.size() > 32) return fail(ErrorKind::BadResponse);
    return Step::More;
  }
  if (nl + 1 != hs_.size() || strtoull(hs_.c_str(), nullptr, 10) != o.tunnel_bytes)
    return fail(ErrorKind::BadResponse);
  w_.results().body_tx += o.tunnel_bytes;
  return finish(200, o.new_conn);
}

Conn::Step Conn::tunnelDownBytes(size_t len) {
  const Options& o = w_.opts();
  if (len == 0) return fail(ErrorKind::Closed);
  tunnel_done_ += len;
  w_.results().body_rx += len;
  if (tunnel_done_ < o.tunnel_bytes) return Step::More;
  if (tunnel_done_ > o.tunnel_bytes) return fail(ErrorKind::BadResponse);
  return finish(200, o.new_conn);
}

Conn::Step Conn::stepHolding() {
  char* buf = w_.scratch();
  const ssize_t n = ioRead(buf, w_.scratchSize());
  if (n == kAgain || n > 0) return Step::Idle;
  --w_.results().held;
  return fail(n == 0 ? ErrorKind::Closed : ErrorKind::Reset);
}

}  // namespace load
}  // namespace sluice
