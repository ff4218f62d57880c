#include "source/common/tls/context.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>

#include <arpa/inet.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "openssl/err.h"
#include "openssl/hmac.h"
#include "openssl/mem.h"
#include "openssl/pem.h"
#include "openssl/rand.h"
#include "openssl/sha.h"
#include "openssl/x509v3.h"

namespace sluice {
namespace tls {

namespace {

// TLS 1.2 suites: forward secrecy and AEAD only. TLS 1.3 suites are fixed by BoringSSL (all
// AEAD).
constexpr const char* kCipherList =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

constexpr size_t kTicketNameLen = 16;
constexpr size_t kTicketAesLen = 16;
constexpr size_t kTicketHmacLen = 32;
constexpr uint8_t kSessionIdContext[] = {'s', 'l', 'u', 'i', 'c', 'e'};
constexpr size_t kTicketSecretLen = 32;

int contextIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

const ServerContext* fromCtx(const SSL_CTX* ctx) {
  return static_cast<const ServerContext*>(SSL_CTX_get_ex_data(ctx, contextIndex()));
}

int clientContextIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// The process's ticket secret: random, made once, never leaves memory. Every chain and worker
// derives its ticket keys from it unless a chain names a key file.
const uint8_t* processTicketSecret() {
  static uint8_t secret[kTicketSecretLen];
  static std::once_flag once;
  std::call_once(once, [] { RAND_bytes(secret, sizeof(secret)); });
  return secret;
}

struct TicketKeys {
  uint8_t secret[kTicketSecretLen] = {};  // compared by value: a reload may reuse an address
  int64_t period = -1;
  int64_t rotation = 0;
  uint8_t name[kTicketNameLen];
  uint8_t aes[kTicketAesLen];
  uint8_t hmac[kTicketHmacLen];
};

void derive(const uint8_t* secret, const char* label, int64_t rotation, int64_t period,
            uint8_t* out, size_t len) {
  uint8_t msg[32];
  size_t n = strlen(label);
  memcpy(msg, label, n);
  for (int i = 0; i < 8; ++i) msg[n + i] = static_cast<uint8_t>(uint64_t(period) >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) {
    msg[n + 8 + i] = static_cast<uint8_t>(uint64_t(rotation) >> (56 - 8 * i));
  }
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned mac_len = 0;
  HMAC(EVP_sha256(), secret, kTicketSecretLen, msg, n + 16, mac, &mac_len);
  memcpy(out, mac, len);
}

// Keys of one rotation period, cached per thread (two periods are in use at a time).
const TicketKeys& keysFor(const uint8_t* secret, int64_t rotation, int64_t period) {
  thread_local TicketKeys cache[4];
  for (TicketKeys& k : cache) {
    if (k.period == period && k.rotation == rotation &&
        memcmp(k.secret, secret, kTicketSecretLen) == 0) {
      return k;
    }
  }
  TicketKeys& slot = cache[static_cast<uint64_t>(period) % 4];
  memcpy(slot.secret, secret, kTicketSecretLen);
  slot.period = period;
  slot.rotation = rotation;
  derive(secret, "name", rotation, period, slot.name, kTicketNameLen);
  derive(secret, "aes", rotation, period, slot.aes, kTicketAesLen);
  derive(secret, "hmac", rotation, period, slot.hmac, kTicketHmacLen);
  return slot;
}

int onAlpn(SSL* ssl, const uint8_t** out, uint8_t* out_len, const uint8_t* in, unsigned in_len,
           void* arg) {
  return static_cast<const ServerContext*>(arg)->selectAlpn(out, out_len, in, in_len);
}

int onServerName(SSL* ssl, int* alert, void* arg) {
  return static_cast<const ServerContext*>(arg)->selectCertificate(ssl);
}

int onTicketKey(SSL* ssl, uint8_t* key_name, uint8_t* iv, EVP_CIPHER_CTX* cipher, HMAC_CTX* hmac,
                int encrypt) {
  const ServerContext* context = fromCtx(SSL_get_SSL_CTX(ssl));
  if (context == nullptr) return -1;
  return context->ticketKey(key_name, iv, cipher, hmac, encrypt);
}

std::string sslError() {
  uint32_t err = ERR_get_error();
  ERR_clear_error();
  if (err == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(err, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::vector<std::string>> certificateNames(const std::string& path) {
  bssl::UniquePtr<BIO> bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) return absl::InvalidArgumentError(absl::StrFormat("cannot read %s", path));
  bssl::UniquePtr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: no PEM certificate (%s)", path, sslError()));
  }
  std::vector<std::string> names;
  bssl::UniquePtr<GENERAL_NAMES> sans(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  if (sans) {
    for (size_t i = 0; i < sk_GENERAL_NAME_num(sans.get()); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans.get(), i);
      if (gn->type != GEN_DNS) continue;
      const ASN1_STRING* s = gn->d.dNSName;
      names.push_back(
          absl::AsciiStrToLower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                            static_cast<size_t>(ASN1_STRING_length(s)))));
    }
  }
  return names;
}

}  // namespace

bool certificateNameMatches(std::string_view pattern, std::string_view host) {
  if (pattern.size() == host.size()) {
    for (size_t i = 0; i < host.size(); ++i) {
      if (absl::ascii_tolower(static_cast<unsigned char>(host[i])) != pattern[i]) break;
      if (i + 1 == host.size()) return true;
    }
  }
  // "*.example.com" covers exactly one more label: "a.example.com", not "a.b.example.com".
  if (pattern.size() > 2 && pattern[0] == '*' && pattern[1] == '.') {
    size_t dot = host.find('.');
    if (dot == std::string_view::npos || dot == 0) return false;
    std::string_view rest = host.substr(dot);
    std::string_view suffix = pattern.substr(1);
    if (rest.size() != suffix.size()) return false;
    for (size_t i = 0; i < rest.size(); ++i) {
      if (absl::ascii_tolower(static_cast<unsigned char>(rest[i])) != suffix[i]) return false;
    }
    return true;
  }
  return false;
}

ServerContext::ServerContext(const ServerContextConfig& config) : config_(config) {
  const stats::Scope& scope = config_.stats_scope;
  stats_.handshakes = scope.counter("handshakes", "TLS handshakes completed, full or resumed.");
  stats_.handshakes_resumed = scope.counter(
      "handshakes_resumed", "TLS handshakes completed from a ticket or the session cache.");
  // Breakdowns: one family each, the protocol or the reason a label.
  auto alpn = [&](const char* stat, const char* protocol) {
    return scope.counter(stat, "alpn", stats::Label{"protocol", protocol},
                         "TLS handshakes completed, by the protocol ALPN chose.");
  };
  stats_.alpn_h2 = alpn("alpn_h2", "h2");
  stats_.alpn_http11 = alpn("alpn_http11", "http/1.1");
  stats_.alpn_none = alpn("alpn_none", "none");
  auto fail = [&](const char* reason) {
    return scope.counter(std::string("handshake_fail.") + reason, "handshake_fail",
                         stats::Label{"reason", reason}, "TLS handshakes failed, by reason.");
  };
  stats_.fail_timeout = fail("timeout");
  stats_.fail_too_large = fail("too_large");
  stats_.fail_closed = fail("closed");
  stats_.fail_protocol_version = fail("protocol_version");
  stats_.fail_no_shared_cipher = fail("no_shared_cipher");
  stats_.fail_peer_alert = fail("peer_alert");
  stats_.fail_not_tls = fail("not_tls");
  stats_.fail_other = fail("other");
  stats_.sni_unmatched = scope.counter(
      "sni_unmatched", "TLS clients that named a server no certificate covers (the first served).");
  stats_.handshake_duration =
      scope.histogram("handshake_duration_seconds",
                      "TLS handshakes completed, from the ClientHello to the end of the handshake.",
                      stats::latencyBuckets());
}

ServerContext::~ServerContext() = default;

absl::StatusOr<std::shared_ptr<const ServerContext>> ServerContext::create(
    const ServerContextConfig& config) {
  std::shared_ptr<ServerContext> context(new ServerContext(config));
  absl::Status s = context->init();
  if (!s.ok()) return s;
  return std::shared_ptr<const ServerContext>(std::move(context));
}

absl::Status ServerContext::init() {
  if (config_.certificates.empty()) {
    return absl::InvalidArgumentError("certificates: at least one is needed");
  }
  ticket_secret_ = processTicketSecret();
  if (!config_.ticket_key_file.empty()) {
    // Instances that share the file resume each other's sessions (behind one load balancer,
    // across restarts). Its SHA-256 is the secret: any length of at least 32 random bytes.
    std::string contents;
    FILE* f = fopen(config_.ticket_key_file.c_str(), "rb");
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "session_ticket_key_file: cannot read %s: %s", config_.ticket_key_file, strerror(errno)));
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0 && contents.size() < (1 << 16)) {
      contents.append(buf, n);
    }
    fclose(f);
    if (contents.size() < kTicketSecretLen) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "session_ticket_key_file: %s holds %d bytes; at least %d random bytes are needed "
          "(openssl rand 48 > FILE)",
          config_.ticket_key_file, contents.size(), kTicketSecretLen));
    }
    SHA256(reinterpret_cast<const uint8_t*>(contents.data()), contents.size(), file_secret_);
    OPENSSL_cleanse(contents.data(), contents.size());
    ticket_secret_ = file_secret_;
  }
  for (const std::string& p : config_.alpn) {
    if (p.empty() || p.size() > 255) {
      return absl::InvalidArgumentError(absl::StrFormat("alpn: bad protocol '%s'", p));
    }
    alpn_wire_.push_back(static_cast<char>(p.size()));
    alpn_wire_ += p;
  }
  for (size_t i = 0; i < config_.certificates.size(); ++i) {
    absl::Status s = addCertificate(config_.certificates[i]);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("certificates[%d]: %s", i, s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ServerContext::addCertificate(const CertificateConfig& cc) {
  Certificate cert;
  cert.ctx.reset(SSL_CTX_new(TLS_method()));
  SSL_CTX* ctx = cert.ctx.get();
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  SSL_CTX_set_ex_data(ctx, contextIndex(), this);
  SSL_CTX_set_min_proto_version(ctx, config_.tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  if (!SSL_CTX_set_strict_cipher_list(ctx, kCipherList)) {
    return absl::InternalError(absl::StrFormat("cipher list: %s", sslError()));
  }
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  for (const std::string* path : {&cc.cert_path, &cc.key_path}) {
    if (::access(path->c_str(), R_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cannot read %s: %s", *path, strerror(errno)));
    }
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, cc.cert_path.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a PEM certificate chain (%s)", cc.cert_path, sslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, cc.key_path.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    const bool mismatch =
        ERR_GET_REASON(ERR_peek_error()) == X509_R_KEY_VALUES_MISMATCH || ERR_peek_error() == 0;
    if (mismatch) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrFormat(
          "the key %s does not match the certificate %s", cc.key_path, cc.cert_path));
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a PEM private key (%s)", cc.key_path, sslError()));
  }
  auto names = certificateNames(cc.cert_path);
  if (!names.ok()) return names.status();
  cert.names = std::move(*names);
  if (!alpn_wire_.empty()) SSL_CTX_set_alpn_select_cb(ctx, onAlpn, this);
  SSL_CTX_set_tlsext_servername_callback(ctx, onServerName);
  SSL_CTX_set_tlsext_servername_arg(ctx, this);
  SSL_CTX_set_tlsext_ticket_key_cb(ctx, onTicketKey);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
  SSL_CTX_sess_set_cache_size(ctx, config_.session_cache_size);
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof(kSessionIdContext));
  // A session lives for one key rotation period (and a ticket is honoured one more).
  SSL_CTX_set_timeout(ctx, static_cast<uint32_t>(config_.ticket_key_rotation.count()));
  certificates_.push_back(std::move(cert));
  return absl::OkStatus();
}

bssl::UniquePtr<SSL> ServerContext::newSsl() const {
  bssl::UniquePtr<SSL> ssl(SSL_new(certificates_.front().ctx.get()));
  // What the handshake was configured with (the certificate's references, the cipher and
  // group lists) is freed once it completes: a connection keeps only what the handshake made.
  if (ssl) SSL_set_shed_handshake_config(ssl.get(), 1);
  return ssl;
}

int ServerContext::selectAlpn(const uint8_t** out, uint8_t* out_len, const uint8_t* in,
                              unsigned in_len) const {
  // Our preference order: the first of ours the client offers.
  const auto* ours = reinterpret_cast<const uint8_t*>(alpn_wire_.data());
  for (size_t i = 0; i < alpn_wire_.size(); i += 1 + ours[i]) {
    for (unsigned j = 0; j < in_len; j += 1 + in[j]) {
      if (j + 1 + in[j] > in_len) break;
      if (in[j] == ours[i] && memcmp(in + j + 1, ours + i + 1, ours[i]) == 0) {
        *out = in + j + 1;
        *out_len = in[j];
        return SSL_TLSEXT_ERR_OK;
      }
    }
  }
  // Nothing in common: go on without ALPN (the client falls back to HTTP/1.1).
  return SSL_TLSEXT_ERR_NOACK;
}

int ServerContext::selectCertificate(SSL* ssl) const {
  if (certificates_.size() < 2) return SSL_TLSEXT_ERR_OK;
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return SSL_TLSEXT_ERR_OK;
  std::string_view host(name);
  for (const Certificate& cert : certificates_) {
    for (const std::string& pattern : cert.names) {
      if (certificateNameMatches(pattern, host)) {
        if (&cert != &certificates_.front()) SSL_set_SSL_CTX(ssl, cert.ctx.get());
        return SSL_TLSEXT_ERR_OK;
      }
    }
  }
  stats_.sni_unmatched.inc();
  return SSL_TLSEXT_ERR_OK;
}

int ServerContext::ticketKey(uint8_t* key_name, uint8_t* iv, EVP_CIPHER_CTX* cipher, HMAC_CTX* hmac,
                             int encrypt) const {
  const int64_t rotation = config_.ticket_key_rotation.count();
  const int64_t period = static_cast<int64_t>(::time(nullptr)) / rotation;
  if (encrypt) {
    const TicketKeys& k = keysFor(ticket_secret_, rotation, period);
    if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return -1;
    memcpy(key_name, k.name, kTicketNameLen);
    if (!EVP_EncryptInit_ex(cipher, EVP_aes_128_cbc(), nullptr, k.aes, iv) ||
        !HMAC_Init_ex(hmac, k.hmac, kTicketHmacLen, EVP_sha256(), nullptr)) {
      return -1;
    }
    return 1;
  }
  for (int64_t age = 0; age < 2; ++age) {
    const TicketKeys& k = keysFor(ticket_secret_, rotation, period - age);
    if (memcmp(key_name, k.name, kTicketNameLen) != 0) continue;
    if (!EVP_DecryptInit_ex(cipher, EVP_aes_128_cbc(), nullptr, k.aes, iv) ||
        !HMAC_Init_ex(hmac, k.hmac, kTicketHmacLen, EVP_sha256(), nullptr)) {
      return -1;
    }
    // A ticket of the previous period is honoured once more and replaced by a fresh one.
    return age == 0 ? 1 : 2;
  }
  return 0;  // unknown or expired key: a full handshake
}

// ------------------------------------------------------------------------------------------
// ClientContext

namespace {

constexpr size_t kSessionsPerServer = 4;
constexpr size_t kSessionSlots = 16;

// One worker's sessions for one client context (direct-mapped by the context's id: a context
// sharing the slot of another just starts over).
struct SessionSlot {
  uint64_t context = 0;
  bssl::UniquePtr<SSL_SESSION> sessions[kSessionsPerServer];  // the newest last
  size_t count = 0;
};

SessionSlot& sessionSlot(uint64_t context) {
  thread_local SessionSlot slots[kSessionSlots];
  SessionSlot& slot = slots[context % kSessionSlots];
  if (slot.context != context) {
    for (auto& session : slot.sessions) session.reset();
    slot.count = 0;
    slot.context = context;
  }
  return slot;
}

int onNewClientSession(SSL* ssl, SSL_SESSION* session) {
  const auto* context = static_cast<const ClientContext*>(
      SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), clientContextIndex()));
  if (context == nullptr || !SSL_SESSION_is_resumable(session)) return 0;
  context->storeSession(bssl::UniquePtr<SSL_SESSION>(session));
  return 1;  // the reference is the cache's now
}

// A host name as a certificate would name it: dot-separated labels of letters, digits and
// '-', neither starting nor ending with '-'.
bool validServerName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (label == 0 || label > 63 || name[i - 1] == '-' || name[i - label] == '-') return false;
      label = 0;
      continue;
    }
    const char c = name[i];
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    ++label;
  }
  return true;
}

// How many PEM certificates the file holds.
size_t countCertificates(const std::string& path) {
  bssl::UniquePtr<BIO> bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) return 0;
  size_t n = 0;
  while (bssl::UniquePtr<X509>(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))) ++n;
  ERR_clear_error();  // the read that found no more
  return n;
}

}  // namespace

ClientContext::ClientContext(const ClientContextConfig& config) : config_(config) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  const stats::Scope& scope = config_.stats_scope;
  stats_.handshakes = scope.counter("handshakes", "TLS handshakes completed, full or resumed.");
  stats_.handshakes_resumed =
      scope.counter("handshakes_resumed",
                    "TLS handshakes completed by resuming an earlier connection's session.");
  auto fail = [&](const char* reason) {
    return scope.counter(std::string("handshake_fail.") + reason, "handshake_fail",
                         stats::Label{"reason", reason}, "TLS handshakes failed, by reason.");
  };
  stats_.fail_certificate = fail("certificate");
  stats_.fail_other = fail("other");
}

ClientContext::~ClientContext() = default;

absl::StatusOr<std::shared_ptr<const ClientContext>> ClientContext::create(
    const ClientContextConfig& config) {
  std::shared_ptr<ClientContext> context(new ClientContext(config));
  absl::Status s = context->init();
  if (!s.ok()) return s;
  return std::shared_ptr<const ClientContext>(std::move(context));
}

absl::Status ClientContext::init() {
  const std::string& name = config_.server_name;
  if (inet_pton(AF_INET, name.c_str(), ip_) == 1) {
    ip_len_ = 4;
  } else if (inet_pton(AF_INET6, name.c_str(), ip_) == 1) {
    ip_len_ = 16;
  } else if (!validServerName(name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "server_name: \"%s\" is not a host name or an IP address", absl::CHexEscape(name)));
  }
  ctx_.reset(SSL_CTX_new(TLS_method()));
  SSL_CTX* ctx = ctx_.get();
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  SSL_CTX_set_ex_data(ctx, clientContextIndex(), this);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  if (!SSL_CTX_set_strict_cipher_list(ctx, kCipherList)) {
    return absl::InternalError(absl::StrFormat("cipher list: %s", sslError()));
  }
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  const std::string& ca = config_.ca_file;
  if (::access(ca.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ca_file: cannot read %s: %s", ca, strerror(errno)));
  }
  if (countCertificates(ca) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("ca_file: %s holds no PEM certificate", ca));
  }
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat("ca_file: %s: %s", ca, sslError()));
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  std::string alpn_wire;
  for (const std::string& p : config_.alpn) {
    if (p.empty() || p.size() > 255) {
      return absl::InvalidArgumentError(absl::StrFormat("alpn: bad protocol '%s'", p));
    }
    alpn_wire.push_back(static_cast<char>(p.size()));
    alpn_wire += p;
  }
  // BoringSSL's one inverted return: zero is success.
  if (!alpn_wire.empty() &&
      SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const uint8_t*>(alpn_wire.data()),
                              alpn_wire.size()) != 0) {
    return absl::InternalError("alpn: cannot be set");
  }
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
  SSL_CTX_sess_set_new_cb(ctx, onNewClientSession);
  return absl::OkStatus();
}

bssl::UniquePtr<SSL> ClientContext::newSsl() const {
  bssl::UniquePtr<SSL> ssl(SSL_new(ctx_.get()));
  if (!ssl) return ssl;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  const std::string& name = config_.server_name;
  const bool ok = ip_len_ > 0
                      ? X509_VERIFY_PARAM_set1_ip(param, ip_, ip_len_) == 1
                      : SSL_set_tlsext_host_name(ssl.get(), name.c_str()) == 1 &&
                            X509_VERIFY_PARAM_set1_host(param, name.data(), name.size()) == 1;
  if (!ok) return nullptr;
  SessionSlot& slot = sessionSlot(id_);
  if (slot.count > 0) {
    SSL_SESSION* session = slot.sessions[slot.count - 1].get();
    SSL_set_session(ssl.get(), session);  // takes its own reference
    // TLS 1.3 tickets are offered once (RFC 8446 appendix C.4); the server sends new ones.
    if (SSL_SESSION_should_be_single_use(session)) slot.sessions[--slot.count].reset();
  }
  // As on the server side; renegotiation stays off, so the configuration does go.
  SSL_set_shed_handshake_config(ssl.get(), 1);
  return ssl;
}

void ClientContext::storeSession(bssl::UniquePtr<SSL_SESSION> session) const {
  SessionSlot& slot = sessionSlot(id_);
  if (slot.count == kSessionsPerServer) {
    // The oldest goes.
    for (size_t i = 1; i < kSessionsPerServer; ++i) {
      slot.sessions[i - 1] = std::move(slot.sessions[i]);
    }
    --slot.count;
  }
  slot.sessions[slot.count++] = std::move(session);
}

}  // namespace tls
}  // namespace sluice
