#include "source/common/tls/tls_socket.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "openssl/err.h"
#include "openssl/x509.h"

#include "source/common/network/connection.h"

namespace sluice {
namespace tls {

namespace {

TlsSocket* socketOf(BIO* bio) { return static_cast<TlsSocket*>(BIO_get_data(bio)); }

int bioReadCb(BIO* bio, char* out, int len) {
  BIO_clear_retry_flags(bio);
  int n = socketOf(bio)->bioRead(out, len);
  if (n < 0) BIO_set_retry_read(bio);
  return n;
}

int bioWriteCb(BIO* bio, const char* in, int len) {
  BIO_clear_retry_flags(bio);
  return socketOf(bio)->bioWrite(in, len);
}

long bioCtrlCb(BIO* bio, int cmd, long num, void* ptr) {
  // BoringSSL flushes after each flight; the bytes wait in raw_out_ for the connection's flush.
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

const BIO_METHOD* bioMethod() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice buffer");
    BIO_meth_set_read(m, bioReadCb);
    BIO_meth_set_write(m, bioWriteCb);
    BIO_meth_set_ctrl(m, bioCtrlCb);
    return m;
  }();
  return method;
}

// Ciphertext read from the socket per readiness event, at most.
constexpr size_t kMaxRawPerRead = 64 * 1024;

}  // namespace

TlsSocket::TlsSocket(ServerContextSharedPtr context) : context_(std::move(context)) {}

TlsSocket::TlsSocket(ClientContextSharedPtr context)
    : client_(std::move(context)), ssl_(client_->newSsl()) {
  attachBio();
  if (ssl_) SSL_set_connect_state(ssl_.get());
}

TlsSocket::~TlsSocket() = default;

void TlsSocket::setHandshakeGate(network::HandshakeGate& gate) {
  if (context_ != nullptr) gate_ = &gate;
}

void TlsSocket::onHandshakeTurn() {
  turn_granted_ = true;
  connection_->readSocketAgain();
}

bool TlsSocket::startServerHandshake() {
  if (!turn_granted_ && gate_ != nullptr && !gate_->admit(*this)) return false;
  ssl_ = context_->newSsl();
  if (!ssl_) {
    failed_ = true;
    return false;
  }
  attachBio();
  SSL_set_accept_state(ssl_.get());
  return true;
}

void TlsSocket::attachBio() {
  if (!ssl_) return;
  BIO* bio = BIO_new(bioMethod());
  BIO_set_data(bio, this);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_.get(), bio, bio);  // one reference, owned by the SSL
}

void TlsSocket::setConnection(network::Connection& connection) {
  connection_ = &connection;
  if (client_ != nullptr) return;  // the owner's connect deadline bounds the handshake
  handshake_timer_ =
      std::make_unique<event::Timer>(connection.dispatcher(), [this] { onHandshakeTimeout(); });
  handshake_timer_->enable(context_->config().handshake_timeout);
  handshake_started_ = connection.dispatcher().now();
}

void TlsSocket::onHandshakeTimeout() {
  if (handshake_done_) return;
  context_->stats().fail_timeout.inc();
  connection_->close(network::CloseType::NoFlush);
}

int TlsSocket::bioRead(char* out, int len) {
  if (raw_in_.empty()) return raw_eof_ ? 0 : -1;
  size_t want = std::min(raw_in_.length(), static_cast<size_t>(len));
  size_t copied = 0;
  while (copied < want) {
    std::string_view front = raw_in_.front();
    size_t take = std::min(front.size(), want - copied);
    memcpy(out + copied, front.data(), take);
    raw_in_.drain(take);
    copied += take;
  }
  return static_cast<int>(copied);
}

int TlsSocket::bioWrite(const char* in, int len) {
  raw_out_.add(in, static_cast<size_t>(len));
  return len;
}

bool TlsSocket::flushRaw(network::IoResult& result) {
  const int fd = connection_->fd();
  while (!raw_out_.empty()) {
    int err = 0;
    size_t asked = 0;
    ssize_t rc = raw_out_.writeTo(fd, err, asked);
    if (rc >= 0) {
      result.wire_written += static_cast<uint64_t>(rc);
      if (static_cast<size_t>(rc) < asked) {
        result.again = true;
        return true;
      }
      continue;
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      result.again = true;
      return true;
    }
    return false;
  }
  return true;
}

void TlsSocket::countClientFailure(int ssl_error) {
  ClientTlsStats& s = client_->stats();
  const uint32_t err = ERR_peek_error();
  if (ssl_error == SSL_ERROR_SSL && ERR_GET_LIB(err) == ERR_LIB_SSL &&
      ERR_GET_REASON(err) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    s.fail_certificate.inc();
    failure_kind_ = network::TransportFailure::Kind::Certificate;
    failure_reason_ = std::string("certificate verify failed: ") +
                      X509_verify_cert_error_string(SSL_get_verify_result(ssl_.get()));
  } else {
    s.fail_other.inc();
    failure_kind_ = network::TransportFailure::Kind::Handshake;
    if (ssl_error != SSL_ERROR_SSL) {
      failure_reason_ = "the connection closed during the TLS handshake";
    } else {
      const char* reason = ERR_reason_error_string(err);
      failure_reason_ = std::string("TLS handshake failed (") +
                        (reason != nullptr ? reason : "unknown error") + ")";
    }
  }
  ERR_clear_error();
}

void TlsSocket::countClosedInHandshake() {
  if (client_ != nullptr) {
    countClientFailure(SSL_ERROR_SYSCALL);
    return;
  }
  context_->stats().fail_closed.inc();
}

void TlsSocket::countFailure(int ssl_error) {
  if (client_ != nullptr) {
    countClientFailure(ssl_error);
    return;
  }
  TlsStats& s = context_->stats();
  if (ssl_error != SSL_ERROR_SSL) {
    // The socket ended (or failed) before the handshake did.
    s.fail_closed.inc();
    ERR_clear_error();
    return;
  }
  uint32_t err = ERR_peek_error();
  int reason = ERR_GET_REASON(err);
  if (reason == SSL_R_UNSUPPORTED_PROTOCOL) {
    s.fail_protocol_version.inc();
  } else if (reason == SSL_R_NO_SHARED_CIPHER || reason == SSL_R_NO_SHARED_GROUP) {
    s.fail_no_shared_cipher.inc();
  } else if (reason >= SSL_AD_REASON_OFFSET) {
    s.fail_peer_alert.inc();
  } else if (reason == SSL_R_HTTP_REQUEST || reason == SSL_R_HTTPS_PROXY_REQUEST ||
             reason == SSL_R_WRONG_VERSION_NUMBER) {
    s.fail_not_tls.inc();
  } else {
    s.fail_other.inc();
  }
  ERR_clear_error();
}

bool TlsSocket::doHandshake(network::IoResult& result) {
  int rc = SSL_do_handshake(ssl_.get());
  if (rc == 1 && client_ != nullptr) {
    handshake_done_ = true;
    client_->stats().handshakes.inc();
    if (SSL_session_reused(ssl_.get())) client_->stats().handshakes_resumed.inc();
    return true;
  }
  if (rc == 1) {
    handshake_done_ = true;
    handshake_timer_.reset();
    TlsStats& s = context_->stats();
    s.handshakes.inc();
    s.handshake_duration.record(connection_->dispatcher().now() - handshake_started_);
    if (SSL_session_reused(ssl_.get())) s.handshakes_resumed.inc();
    std::string_view alpn = applicationProtocol();
    if (alpn == "h2") {
      s.alpn_h2.inc();
    } else if (alpn == "http/1.1") {
      s.alpn_http11.inc();
    } else {
      s.alpn_none.inc();
    }
    return true;
  }
  int err = SSL_get_error(ssl_.get(), rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return true;
  countFailure(err);
  return false;
}

network::IoResult TlsSocket::doRead(buffer::Buffer& buffer, size_t max) {
  network::IoResult r;
  if (!ssl_ && (client_ != nullptr || !startServerHandshake())) {
    // Waiting for its turn, the client's bytes stay in the socket; the gate wakes the read.
    if (client_ != nullptr || failed_) r.action = network::IoResult::Action::Close;
    return r;
  }
  // Ciphertext in: everything the socket has, up to the budget.
  const int fd = connection_->fd();
  while (!raw_eof_) {
    if (r.wire_read >= kMaxRawPerRead) {
      r.again = true;
      break;
    }
    int err = 0;
    size_t asked = 0;
    // Small records last time (a keep-alive request): one recv(2) into one block first.
    ssize_t rc = raw_in_.readFrom(fd, kMaxRawPerRead - r.wire_read, err, asked, false,
                                  small_raw_reads_ && r.wire_read == 0);
    if (rc > 0) {
      r.wire_read += static_cast<uint64_t>(rc);
      // A short read emptied the socket: edge-triggered readiness reports the next bytes, so
      // the read that would only return EAGAIN is skipped (as on the plain path).
      if (static_cast<size_t>(rc) < asked && !connection_->peerClosed()) break;
      continue;
    }
    if (rc == 0) {
      raw_eof_ = true;
      break;
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) break;
    r.action = network::IoResult::Action::Close;
    return r;
  }

  if (r.wire_read > 0) small_raw_reads_ = r.wire_read < buffer::kBlockSize;
  if (!handshake_done_) {
    handshake_bytes_ += r.wire_read;
    // A client's server is the operator's choice (a parent): BoringSSL's own bounds hold.
    if (context_ != nullptr && handshake_bytes_ > context_->config().max_handshake_bytes) {
      context_->stats().fail_too_large.inc();
      r.action = network::IoResult::Action::Close;
      return r;
    }
    if (!doHandshake(r)) {
      flushRaw(r);  // the alert, best effort
      r.action = network::IoResult::Action::Close;
      return r;
    }
    if (!handshake_done_) {
      if (raw_eof_) {
        countClosedInHandshake();
        r.action = network::IoResult::Action::Close;
        return r;
      }
      if (!flushRaw(r)) r.action = network::IoResult::Action::Close;
      return r;
    }
  }

  // Plaintext out, straight into the connection's buffer.
  while (r.plaintext < max) {
    buffer::Buffer::Reservation room = buffer.reserve();
    int n = SSL_read(ssl_.get(), room.data, static_cast<int>(std::min<size_t>(room.size, INT_MAX)));
    if (n > 0) {
      buffer.commit(room, static_cast<size_t>(n));
      r.plaintext += static_cast<uint64_t>(n);
      continue;
    }
    buffer.commit(room, 0);
    int err = SSL_get_error(ssl_.get(), n);
    if (err == SSL_ERROR_WANT_READ) {
      if (raw_eof_) r.end_stream = true;
      break;
    }
    if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && raw_eof_)) {
      // close_notify, or a TCP FIN without one: either way the client is done sending.
      r.end_stream = true;
      ERR_clear_error();
      break;
    }
    ERR_clear_error();
    r.action = network::IoResult::Action::Close;
    return r;
  }
  if (r.plaintext >= max && (!raw_in_.empty() || SSL_pending(ssl_.get()) > 0)) r.again = true;
  // Anything BoringSSL wrote while reading (session tickets, a key update) goes out now.
  if (!flushRaw(r)) r.action = network::IoResult::Action::Close;
  return r;
}

network::IoResult TlsSocket::doWrite(buffer::Buffer& buffer, bool end_stream) {
  network::IoResult r;
  // A server side not started yet has nothing to send (its plaintext waits for the handshake).
  if (!ssl_ && client_ == nullptr && !failed_) return r;
  if (!ssl_ || !flushRaw(r)) {
    r.action = network::IoResult::Action::Close;
    return r;
  }
  if (r.again) return r;
  if (!handshake_done_) {
    // A client speaks first: its hello leaves with the connection's first flush after the
    // connect. Plaintext waits in `buffer` until the handshake is done.
    if (client_ != nullptr && (!doHandshake(r) || !flushRaw(r))) {
      r.action = network::IoResult::Action::Close;
    }
    return r;
  }
  while (!buffer.empty()) {
    if (raw_out_.length() >= kMaxRawOut) {
      if (!flushRaw(r)) {
        r.action = network::IoResult::Action::Close;
        return r;
      }
      if (r.again) return r;
    }
    std::string_view front = buffer.front();
    // One record per call (16 KiB of plaintext at most, a block's size).
    int n = SSL_write(ssl_.get(), front.data(),
                      static_cast<int>(std::min<size_t>(front.size(), buffer::kBlockSize)));
    if (n <= 0) {
      ERR_clear_error();
      r.action = network::IoResult::Action::Close;
      return r;
    }
    buffer.drain(static_cast<size_t>(n));
    r.plaintext += static_cast<uint64_t>(n);
  }
  if (end_stream && !shutdown_sent_) {
    SSL_shutdown(ssl_.get());
    shutdown_sent_ = true;
  }
  if (!flushRaw(r)) r.action = network::IoResult::Action::Close;
  return r;
}

void TlsSocket::onClose() {
  leaveHandshakeQueue();
  if (!ssl_ || !handshake_done_) return;
  if (!shutdown_sent_) {
    SSL_shutdown(ssl_.get());
    shutdown_sent_ = true;
  }
  network::IoResult ignored;
  flushRaw(ignored);  // one attempt: the socket is about to close
}

std::string_view TlsSocket::applicationProtocol() const {
  if (!ssl_) return {};
  const uint8_t* data = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(ssl_.get(), &data, &len);
  return {reinterpret_cast<const char*>(data), len};
}

TlsSocketFactory::TlsSocketFactory(ServerContextSharedPtr context, stats::Counter reloads,
                                   stats::Counter reload_failures)
    : context_(std::move(context)), reloads_(reloads), reload_failures_(reload_failures) {}

ServerContextSharedPtr TlsSocketFactory::context() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return context_;
}

network::TransportSocketPtr TlsSocketFactory::createTransportSocket() const {
  // Each worker keeps the context it last saw; the mutex is taken only when a reload bumped
  // the generation (or the first time a worker serves this chain).
  struct Cached {
    const TlsSocketFactory* factory = nullptr;
    uint64_t generation = 0;
    ServerContextSharedPtr context;
  };
  thread_local Cached cache[8];
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  Cached* slot = nullptr;
  for (Cached& c : cache) {
    if (c.factory == this) {
      slot = &c;
      break;
    }
  }
  if (slot == nullptr) {
    slot = &cache[(reinterpret_cast<uintptr_t>(this) >> 4) % 8];
    slot->factory = this;
    slot->generation = 0;
  }
  if (slot->generation != generation) {
    slot->context = context();
    slot->generation = generation;
  }
  return std::make_unique<TlsSocket>(slot->context);
}

network::TransportSocketPtr ClientTlsSocketFactory::createTransportSocket() const {
  return std::make_unique<TlsSocket>(context_);
}

absl::Status TlsSocketFactory::reloadCertificates() const {
  ServerContextSharedPtr current = context();
  auto fresh = ServerContext::create(current->config());
  if (!fresh.ok()) {
    reload_failures_.inc();
    return fresh.status();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    context_ = std::move(*fresh);
  }
  generation_.fetch_add(1, std::memory_order_release);
  reloads_.inc();
  return absl::OkStatus();
}

}  // namespace tls
}  // namespace sluice
