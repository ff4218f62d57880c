// An HTTP/2 connection to the proxy (nghttp2) that several Conns share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "tools/load/io.h"
#include "tools/load/results.h"
#include "tools/load/tls.h"

namespace sluice {
namespace load {

class Conn;
class Worker;

// One HTTP/2 connection to the proxy (TLS with ALPN h2, or cleartext with prior knowledge) that
// several Conns share, each using one stream at a time: a request, or a CONNECT tunnel. With
// --new-conn and plain requests it is one Conn's alone, and that Conn closes it after each
// response (the next request connects again, resuming the TLS session).
class H2Session : public Pollable, public TlsOwner {
 public:
  explicit H2Session(Worker& w) : w_(w) { out_.reserve(64 * 1024); }
  ~H2Session() override {
    reset();
    if (session_ != nullptr) SSL_SESSION_free(session_);
  }

  // Ready for new streams: connected, and no GOAWAY received (a draining session finishes the
  // streams it has; new ones wait for the next connection).
  bool ready() const { return state_ == State::Ready && !goaway_; }
  bool connected() const { return state_ == State::Ready; }
  void onGoaway() { goaway_ = true; }
  void attach(Conn* c) { conns_.push_back(c); }
  // Starts connecting if idle.
  void ensure();
  void onEvent(uint32_t events) override;
  // Frames what nghttp2 has queued and writes it (the worker calls it for the sessions that
  // asked, once the connections they woke have run).
  void flush();
  // Closes the connection without telling the Conns (the one that owns it is done with it):
  // graceful, a GOAWAY goes out first, as far as the socket takes it at once.
  void close(bool graceful);
  int32_t submit(Conn* c, const std::vector<nghttp2_nv>& nv, bool with_data);
  void resume(int32_t id) {
    if (ngh_ == nullptr) return;
    nghttp2_session_resume_data(ngh_, id);
    wantFlush();
  }
  // The Conn is done with the stream: no more callbacks for it, and the proxy is told.
  void cancel(int32_t id, bool reset_stream);
  // The Conn is done with a tunnel: no more callbacks; END_STREAM goes out.
  void endStream(int32_t id) {
    if (ngh_ == nullptr) return;
    nghttp2_session_set_stream_user_data(ngh_, id, nullptr);
    nghttp2_session_resume_data(ngh_, id);
    wantFlush();
  }
  bool flush_queued = false;  // in the worker's list of sessions to flush

  ssize_t rawRead(char* buf, size_t len) override;
  ssize_t rawWrite(const char* buf, size_t len) override;
  // TLS to the proxy (TlsOwner): its records go straight to the socket.
  SSL* outerSsl() override { return nullptr; }
  void setWantWrite() override { want_write_ = true; }
  void storeSession(SSL* ssl, SSL_SESSION* session) override;

 private:
  enum class State : uint8_t { Idle, Connecting, Tls, Ready };
  void becomeReady();
  void lost(ErrorKind kind);
  void reset();
  void updateEvents();
  bool writeOut();
  // Asks the worker for a flush(): nghttp2 may have frames to send.
  void wantFlush();

  Worker& w_;
  State state_ = State::Idle;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  SSL_SESSION* session_ = nullptr;  // for resuming the next connection to the proxy
  nghttp2_session* ngh_ = nullptr;
  uint32_t events_ = 0;
  bool want_write_ = false;
  bool goaway_ = false;
  uint64_t phase_start_ = 0;
  std::string out_;
  size_t out_off_ = 0;
  std::vector<Conn*> conns_;
};

}  // namespace load
}  // namespace sluice
