// The HTTP/2 side of a Conn: with HTTP/2 to the proxy, a connection is one stream at a time on
// a shared H2Session, either a plain request (its own stream, response counted in place) or a
// CONNECT stream whose bytes feed the same state machine through in-memory pipes. With
// --new-conn, plain requests each have a session of their own, closed after the response. The
// session's callbacks only record what happened and mark the connection pending; progress is in
// drive().

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tools/load/conn.h"
#include "tools/load/h2_session.h"
#include "tools/load/shared.h"
#include "tools/load/worker.h"

namespace sluice {
namespace load {

Conn::Step Conn::h2Open() {
  const Shared& s = w_.shared();
  phase_start_ = nowNs();
  in_pipe_.clear();
  out_pipe_.clear();
  stream_eof_ = stream_closed_ = h2_headers_ = pipe_blocked_ = false;
  h2_status_ = 0;
  stream_error_ = 0;
  if (!s.tunnel) {
    // Plain requests: each opens its own stream when it is sent.
    counting_app_ = true;
    state_ = State::Ready;
    return Step::Continue;
  }
  stream_ = h2_->submit(this, s.h2_connect_nv, true);
  if (stream_ < 0) return fail(ErrorKind::BadResponse);
  state_ = State::H2Connect;
  return Step::Block;
}

Conn::Step Conn::stepH2Connect() {
  if (stream_closed_ && stream_error_ == NGHTTP2_REFUSED_STREAM && !h2_headers_) {
    stream_ = -1;
    state_ = State::Closed;  // not processed: try again on the next connection
    return Step::Continue;
  }
  if (!h2_headers_) {
    if (stream_closed_ || stream_eof_) return fail(ErrorKind::Closed);
    return Step::Block;
  }
  if (h2_status_ < 200 || h2_status_ >= 300) {
    ++w_.results().proxy_status[h2_status_ > 0 && h2_status_ < 600 ? h2_status_ : 599];
    return fail(ErrorKind::ProxyStatus);
  }
  w_.results().proxy_handshake.record(nowNs() - phase_start_);
  return destinationUp();
}

Conn::Step Conn::stepAwaitingH2() {
  if (!stream_closed_) return Step::Block;
  const int32_t done = stream_;
  stream_ = -1;
  h2_->cancel(done, false);
  if (stream_error_ == NGHTTP2_REFUSED_STREAM) {
    // Not processed (the proxy is going away, or at its stream limit): send it again (with
    // --new-conn, on a new connection).
    if (w_.shared().h2_new_conn) h2_->close(true);
    state_ = State::Closed;
    return Step::Continue;
  }
  if (!h2_headers_ || !stream_eof_ || stream_error_ != 0) return fail(ErrorKind::Reset);
  Results& r = w_.results();
  r.body_rx += h2_body_;
  r.body_tx += w_.opts().body_bytes;
  return finish(h2_status_, w_.shared().h2_new_conn);
}

void Conn::markPending() {
  if (pending) return;
  pending = true;
  w_.addPending(this);
}

void Conn::h2Status(int status) {
  // Interim responses (100 Continue) are followed by the real one.
  if (status >= 200 || status == 101) h2_status_ = status;
  markPending();
}

void Conn::h2Headers(bool end_stream) {
  if (h2_status_ != 0) h2_headers_ = true;
  if (end_stream) stream_eof_ = true;
  markPending();
}

void Conn::h2Data(const uint8_t* data, size_t len) {
  if (!w_.shared().tunnel) {
    // A plain request's response body: counted, never kept.
    if (!first_byte_) {
      first_byte_ = true;
      w_.results().ttfb.record(nowNs() - sent_at_);
    }
    h2_body_ += len;
    w_.results().app_rx += len;
    return;
  }
  in_pipe_.append(reinterpret_cast<const char*>(data), len);
  markPending();
}

ssize_t Conn::h2Read(int32_t stream_id, uint8_t* buf, size_t len, uint32_t* flags) {
  const Shared& s = w_.shared();
  if (stream_id != stream_) {
    // A tunnel this connection has finished with: END_STREAM, the graceful close.
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  if (!s.tunnel) {
    const size_t n = std::min(len, s.body.size() - body_off_);
    memcpy(buf, s.body.data() + body_off_, n);
    body_off_ += n;
    w_.results().app_tx += n;
    if (body_off_ == s.body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  if (out_pipe_.size() == 0) return NGHTTP2_ERR_DEFERRED;
  const size_t n = out_pipe_.take(reinterpret_cast<char*>(buf), len);
  if (pipe_blocked_ && out_pipe_.size() < kPipeLimit / 2) {
    pipe_blocked_ = false;
    markPending();
  }
  return static_cast<ssize_t>(n);
}

void Conn::h2Lost(ErrorKind kind, bool during_setup) {
  const bool had_stream = stream_ >= 0;
  stream_ = -1;  // the session is gone: nothing to cancel
  const bool plain_idle = state_ == State::Ready && !w_.shared().tunnel;
  if (had_stream && stream_closed_) {
    // The stream ended before the connection did (a complete response, or a refusal): its own
    // outcome decides, in drive().
  } else if ((state_ == State::H2Wait && !during_setup) || plain_idle) {
    // Nothing of this request reached the old connection: it waits for the next one.
    state_ = State::Closed;
  } else if (state_ != State::Closed || (has_ticket_ && during_setup)) {
    fail(kind);
  }
  markPending();
}

}  // namespace load
}  // namespace sluice
