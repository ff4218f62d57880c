#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "openssl/ssl.h"

#include "source/common/stats/stats.h"

namespace sluice {
namespace tls {

struct TlsStats {
  stats::Counter handshakes;          // completed, full or resumed
  stats::Counter handshakes_resumed;  // completed from a ticket or the session cache
  stats::Counter alpn_h2;
  stats::Counter alpn_http11;
  stats::Counter alpn_none;
  // Failed handshakes, by reason.
  stats::Counter fail_timeout;           // not finished within handshake_timeout
  stats::Counter fail_too_large;         // more than max_handshake_bytes from the client
  stats::Counter fail_closed;            // the client left mid-handshake
  stats::Counter fail_protocol_version;  // no TLS version in common (SSLv3, TLS 1.0/1.1)
  stats::Counter fail_no_shared_cipher;  // no cipher suite or group in common
  stats::Counter fail_peer_alert;        // the client aborted (e.g. it does not trust the cert)
  stats::Counter fail_not_tls;           // plain HTTP or garbage on the TLS port
  stats::Counter fail_other;
  stats::Counter sni_unmatched;  // a server name no certificate covers (the first one served)
  // Completed handshakes, from the TLS socket taking the connection (the ClientHello is in) to
  // the handshake's end.
  stats::Histogram handshake_duration;
};

// One certificate chain and its key, with the host names it covers (from subjectAltName).
struct CertificateConfig {
  std::string cert_path;
  std::string key_path;
};

struct ServerContextConfig {
  std::vector<CertificateConfig> certificates;  // the first is the default
  std::vector<std::string> alpn;                // server preference order
  bool tls13_only = false;
  std::chrono::seconds ticket_key_rotation{3600};
  // Empty: the process's random secret. Else a file whose SHA-256 is the ticket secret.
  std::string ticket_key_file;
  uint32_t session_cache_size = 20480;
  std::chrono::milliseconds handshake_timeout{10000};
  uint32_t max_handshake_bytes = 65536;
  // sluice's chains: "tls.<chain>.", the chain a label in Prometheus.
  stats::Scope stats_scope = stats::Scope("tls");
};

// The shared, immutable TLS server state of one filter chain: an SSL_CTX per certificate
// (chosen by SNI), ALPN preferences, and session resumption that works on every worker.
//
// Session tickets are sealed with keys derived from one process-wide secret and the current
// rotation period, so every worker (and every chain) computes the same keys without sharing
// mutable state; a ticket from the previous period is still accepted (and renewed).
class ServerContext {
 public:
  static absl::StatusOr<std::shared_ptr<const ServerContext>> create(
      const ServerContextConfig& config);
  ~ServerContext();

  // A new server-side SSL for one accepted connection (null on allocation failure).
  bssl::UniquePtr<SSL> newSsl() const;
  const ServerContextConfig& config() const { return config_; }
  TlsStats& stats() const { return stats_; }

  // Used by the OpenSSL callbacks.
  int selectAlpn(const uint8_t** out, uint8_t* out_len, const uint8_t* in, unsigned in_len) const;
  int selectCertificate(SSL* ssl) const;
  int ticketKey(uint8_t* key_name, uint8_t* iv, EVP_CIPHER_CTX* cipher, HMAC_CTX* hmac,
                int encrypt) const;

 private:
  struct Certificate {
    bssl::UniquePtr<SSL_CTX> ctx;
    std::vector<std::string> names;  // lower case; "*.example.com" covers one label
  };
  explicit ServerContext(const ServerContextConfig& config);
  absl::Status init();
  absl::Status addCertificate(const CertificateConfig& cc);

  ServerContextConfig config_;
  std::vector<Certificate> certificates_;
  std::string alpn_wire_;                   // config_.alpn in ALPN wire format
  const uint8_t* ticket_secret_ = nullptr;  // 32 bytes: the process's, or file_secret_
  uint8_t file_secret_[32] = {};
  mutable TlsStats stats_;
};
using ServerContextSharedPtr = std::shared_ptr<const ServerContext>;

// The CA bundle a client context trusts unless told otherwise (Debian's ca-certificates).
inline constexpr const char* kSystemCaFile = "/etc/ssl/certs/ca-certificates.crt";

struct ClientTlsStats {
  stats::Counter handshakes;          // completed, full or resumed
  stats::Counter handshakes_resumed;  // completed by resuming an earlier connection's session
  stats::Counter fail_certificate;    // the server's certificate did not verify
  stats::Counter fail_other;          // any other handshake that failed
};

struct ClientContextConfig {
  // A PEM file of the CAs the server's certificate must chain to.
  std::string ca_file = kSystemCaFile;
  // What the certificate must be for: a DNS name, also sent as SNI; or an IP literal, which
  // the certificate must list as an IP address (no SNI then: RFC 6066 has no form for it).
  std::string server_name;
  std::vector<std::string> alpn;  // offered, in order; empty: none
  stats::Scope stats_scope = stats::Scope("tls_client");
};

// The shared, immutable TLS client state toward one server (a parent proxy): the CAs it
// trusts, the name the certificate must hold, TLS 1.2 and 1.3 with the server side's suites.
// Sessions are resumed across connections without a lock: each worker keeps the last few its
// own handshakes got, and offers a TLS 1.3 one only once.
class ClientContext {
 public:
  static absl::StatusOr<std::shared_ptr<const ClientContext>> create(
      const ClientContextConfig& config);
  ~ClientContext();

  // A new client-side SSL for one outbound connection, with SNI, the name or address to
  // verify, and a session to offer if this worker has one (null on allocation failure).
  bssl::UniquePtr<SSL> newSsl() const;
  const ClientContextConfig& config() const { return config_; }
  ClientTlsStats& stats() const { return stats_; }
  // A session a handshake on this worker got (BoringSSL's new-session callback), kept for
  // this worker's next connection.
  void storeSession(bssl::UniquePtr<SSL_SESSION> session) const;

 private:
  explicit ClientContext(const ClientContextConfig& config);
  absl::Status init();

  ClientContextConfig config_;
  bssl::UniquePtr<SSL_CTX> ctx_;
  uint64_t id_ = 0;  // tells this context's sessions apart in the workers' caches
  uint8_t ip_[16] = {};
  size_t ip_len_ = 0;  // 4 or 16 when server_name is an IP literal
  mutable ClientTlsStats stats_;
};
using ClientContextSharedPtr = std::shared_ptr<const ClientContext>;

// True when a certificate name ("host" or "*.domain") covers the SNI host name.
bool certificateNameMatches(std::string_view pattern, std::string_view host);

}  // namespace tls
}  // namespace sluice
