// TLS for connections and HTTP/2 sessions (BoringSSL): contexts, client sessions whose records
// go through our own BIOs (so the bytes are counted, and TLS can run inside TLS or inside an
// HTTP/2 CONNECT stream), and reads, writes and handshakes in the kAgain/kError convention.
#pragma once

#include <climits>
#include <cstddef>
#include <string>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tools/load/io.h"
#include "tools/load/results.h"

namespace sluice {
namespace load {

// A connection whose TLS sessions are made by newClientSsl: the transport below them (RawIo),
// the outer session when TLS to the destination runs inside TLS to an https:// proxy, and
// where resumable sessions go.
class TlsOwner : public RawIo {
 public:
  virtual SSL* outerSsl() = 0;
  // The outer session must write before it can go on: wait for EPOLLOUT.
  virtual void setWantWrite() = 0;
  // A new session to resume the next connection with; the owner takes the reference.
  virtual void storeSession(SSL* ssl, SSL_SESSION* session) = 0;
};

// A client context: verification against `ca` (none when empty), a client certificate, ALPN
// http/1.1. With `session_cache`, every new session goes to its TlsOwner (SSL app data).
SSL_CTX* makeCtx(const std::string& ca, const std::string& crt, const std::string& key,
                 bool session_cache, std::string& error);

// A BIO over a transport (a socket or a CONNECT stream), or over an outer TLS session.
BIO* newRawBio(RawIo* io);
BIO* newTlsInTlsBio(TlsOwner* owner);

// A client session to `host` over `bio`: SNI unless host is an IP literal, the name (or address)
// checked when `verify`, resuming `session` when not null. `owner` (may be null) gets the new
// sessions to resume with.
SSL* newClientSsl(SSL_CTX* ctx, const std::string& host, bool verify, SSL_SESSION* session,
                  BIO* bio, TlsOwner* owner);

enum class Handshake { Done, Again, Failed };
// One step of the handshake. With SLUICE_LOAD_DEBUG set, a failure prints BoringSSL's error
// queue.
Handshake tlsHandshake(SSL* ssl, bool& want_write);
// A completed handshake, counted as full or resumed.
inline void countHandshake(SSL* ssl, Results& r) {
  ++(SSL_session_reused(ssl) ? r.tls_resumed : r.tls_full);
}

// SSL_read as a transport read: bytes, 0 at the end (a close without close_notify is still an
// end of stream to a load generator), kAgain or kError.
inline ssize_t tlsRead(SSL* ssl, char* buf, size_t len, bool& want_write) {
  const int r = SSL_read(ssl, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
  if (r > 0) return r;
  const int err = SSL_get_error(ssl, r);
  if (err == SSL_ERROR_WANT_READ) return kAgain;
  if (err == SSL_ERROR_WANT_WRITE) {
    want_write = true;
    return kAgain;
  }
  if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
    ERR_clear_error();
    return 0;
  }
  ERR_clear_error();
  return kError;
}

// SSL_write as a transport write: bytes written, kAgain or kError.
inline ssize_t tlsWrite(SSL* ssl, const char* buf, size_t len, bool& want_write) {
  const int r = SSL_write(ssl, buf, static_cast<int>(std::min<size_t>(len, 1 << 30)));
  if (r > 0) return r;
  const int err = SSL_get_error(ssl, r);
  if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
    if (err == SSL_ERROR_WANT_WRITE) want_write = true;
    return kAgain;
  }
  ERR_clear_error();
  return kError;
}

}  // namespace load
}  // namespace sluice
