#include "tools/load/tls.h"

#include <cstdio>
#include <cstdlib>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/x509.h>

namespace sluice {
namespace load {
namespace {

// A transport's result as a BIO's: kAgain asks the SSL above to retry.
int bioResult(BIO* b, ssize_t n, bool read) {
  if (n == kAgain) {
    if (read) {
      BIO_set_retry_read(b);
    } else {
      BIO_set_retry_write(b);
    }
    return -1;
  }
  return n == kError ? -1 : static_cast<int>(n);
}

// -- TLS records through RawIo::rawRead/rawWrite (counted there).

int rawBioRead(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  RawIo* io = static_cast<RawIo*>(BIO_get_data(b));
  return bioResult(b, io->rawRead(out, static_cast<size_t>(len)), true);
}

int rawBioWrite(BIO* b, const char* in, int len) {
  BIO_clear_retry_flags(b);
  RawIo* io = static_cast<RawIo*>(BIO_get_data(b));
  return bioResult(b, io->rawWrite(in, static_cast<size_t>(len)), false);
}

// -- TLS to the destination through an https:// proxy: records through the proxy's session.

// The outer session's SSL_read/SSL_write result as a BIO's. Its errors stay queued for the
// inner session to see.
int outerResult(BIO* b, TlsOwner* owner, int n, bool read) {
  if (n > 0) return n;
  const int err = SSL_get_error(owner->outerSsl(), n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    if (err == SSL_ERROR_WANT_WRITE) owner->setWantWrite();
    return bioResult(b, kAgain, read);
  }
  return read && err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

int tlsBioRead(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  TlsOwner* owner = static_cast<TlsOwner*>(BIO_get_data(b));
  return outerResult(b, owner, SSL_read(owner->outerSsl(), out, len), true);
}

int tlsBioWrite(BIO* b, const char* in, int len) {
  BIO_clear_retry_flags(b);
  TlsOwner* owner = static_cast<TlsOwner*>(BIO_get_data(b));
  return outerResult(b, owner, SSL_write(owner->outerSsl(), in, len), false);
}

long bioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int bioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* newMethod(const char* name, int (*read)(BIO*, char*, int),
                      int (*write)(BIO*, const char*, int)) {
  BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, name);
  BIO_meth_set_read(m, read);
  BIO_meth_set_write(m, write);
  BIO_meth_set_ctrl(m, bioCtrl);
  BIO_meth_set_create(m, bioCreate);
  return m;
}

int newSessionCallback(SSL* ssl, SSL_SESSION* session) {
  TlsOwner* owner = static_cast<TlsOwner*>(SSL_get_app_data(ssl));
  if (owner == nullptr) return 0;  // an HTTP/2 session's own TLS: nothing to resume per stream
  owner->storeSession(ssl, session);
  return 1;  // the owner keeps the reference
}

}  // namespace

BIO* newRawBio(RawIo* io) {
  static BIO_METHOD* const method = newMethod("sluice-load-fd", rawBioRead, rawBioWrite);
  BIO* bio = BIO_new(method);
  BIO_set_data(bio, io);
  return bio;
}

BIO* newTlsInTlsBio(TlsOwner* owner) {
  static BIO_METHOD* const method = newMethod("sluice-load-tls-in-tls", tlsBioRead, tlsBioWrite);
  BIO* bio = BIO_new(method);
  BIO_set_data(bio, owner);
  return bio;
}

SSL* newClientSsl(SSL_CTX* ctx, const std::string& host, bool verify, SSL_SESSION* session,
                  BIO* bio, TlsOwner* owner) {
  SSL* ssl = SSL_new(ctx);
  in6_addr ignored;
  const bool ip_literal = inet_pton(AF_INET, host.c_str(), &ignored) == 1 ||
                          inet_pton(AF_INET6, host.c_str(), &ignored) == 1;
  if (!ip_literal) SSL_set_tlsext_host_name(ssl, host.c_str());
  if (verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (ip_literal) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
  }
  if (owner != nullptr) SSL_set_app_data(ssl, owner);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_connect_state(ssl);
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (session != nullptr) SSL_set_session(ssl, session);
  return ssl;
}

Handshake tlsHandshake(SSL* ssl, bool& want_write) {
  const int rc = SSL_do_handshake(ssl);
  if (rc == 1) return Handshake::Done;
  const int err = SSL_get_error(ssl, rc);
  if (err == SSL_ERROR_WANT_READ) return Handshake::Again;
  if (err == SSL_ERROR_WANT_WRITE) {
    want_write = true;
    return Handshake::Again;
  }
  if (getenv("SLUICE_LOAD_DEBUG") != nullptr) ERR_print_errors_fp(stderr);
  ERR_clear_error();
  return Handshake::Failed;
}

SSL_CTX* makeCtx(const std::string& ca, const std::string& crt, const std::string& key,
                 bool session_cache, std::string& error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (!ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
      error = "cannot load CA file " + ca;
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!crt.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, crt.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      error = "cannot load client certificate " + crt + " / key " + key;
      return nullptr;
    }
  }
  if (session_cache) {
    // Each connection keeps its own last session (new_session_cb) to resume with.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    SSL_CTX_sess_set_new_cb(ctx, newSessionCallback);
  }
  static const char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const uint8_t*>(kAlpn), sizeof(kAlpn) - 1);
  return ctx;
}

}  // namespace load
}  // namespace sluice
