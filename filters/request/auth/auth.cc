#include "filters/request/auth/auth.h"

#include <openssl/crypto.h>

#ifndef OPENSSL_IS_BORINGSSL
#error "built against OpenSSL headers: depend on //third_party:boringssl"
#endif

namespace sluice {
namespace filters {
namespace auth {

namespace {

bool startsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char a = s[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (a != prefix[i]) return false;
  }
  return true;
}

std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int8_t base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return static_cast<int8_t>(c - 'A');
  if (c >= 'a' && c <= 'z') return static_cast<int8_t>(c - 'a' + 26);
  if (c >= '0' && c <= '9') return static_cast<int8_t>(c - '0' + 52);
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with optional padding; false on any other byte or on overflow.
bool decodeBase64(std::string_view in, std::array<char, 512>& out, size_t& out_len) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  uint32_t acc = 0;
  int bits = 0;
  out_len = 0;
  for (char c : in) {
    int8_t v = base64Value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (out_len == out.size()) return false;
      out[out_len++] = static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return true;
}

}  // namespace

bool extractKey(std::string_view credential, std::array<char, 512>& scratch,
                std::string_view& key) {
  credential = trimSpaces(credential);
  if (startsWithIgnoreCase(credential, "basic ")) {
    size_t len = 0;
    if (!decodeBase64(trimSpaces(credential.substr(6)), scratch, len)) return false;
    std::string_view decoded(scratch.data(), len);
    size_t colon = decoded.find(':');
    if (colon == std::string_view::npos) return false;
    key = decoded.substr(colon + 1);
    return !key.empty();
  }
  if (startsWithIgnoreCase(credential, "bearer ")) {
    key = trimSpaces(credential.substr(7));
    return !key.empty();
  }
  return false;
}

int32_t matchKey(const std::vector<ApiKey>& keys, const Digest& digest) {
  int32_t found = -1;
  for (size_t i = 0; i < keys.size(); ++i) {
    // CRYPTO_memcmp takes the same time whatever the bytes; the branch-free select keeps the
    // loop's shape identical for matching and non-matching keys.
    int32_t equal = CRYPTO_memcmp(keys[i].digest.data(), digest.data(), digest.size()) == 0;
    int32_t mask = -equal;
    found = (found & ~mask) | (static_cast<int32_t>(i) & mask);
  }
  return found;
}

proxy::RequestFilterStatus AuthFilter::onRequest(proxy::ProxyRequest& request) {
  request.auth_realm = config_->realm;
  // One relaxed atomic load while nobody is banned. A keep-alive connection opened before its
  // client was banned gets no further request through, whatever key it shows.
  ban::BanTable* bans = config_->bans.get();
  if (bans != nullptr && bans->anyBanned() && bans->isBanned(request.client)) {
    config_->denied_banned.inc();
    request.close_connection = true;
    callbacks_->deny(proxy::Denial::Forbidden, "client address is banned");
    return proxy::RequestFilterStatus::StopIteration;
  }
  if (config_->keys.empty()) {
    config_->open_relay.inc();
    return proxy::RequestFilterStatus::Continue;
  }
  if (!request.has_credential) {
    config_->denied_missing.inc();
    callbacks_->deny(proxy::Denial::Unauthorized, "proxy credentials required");
    return proxy::RequestFilterStatus::StopIteration;
  }
  std::array<char, 512> scratch;
  std::string_view key;
  int32_t index = -1;
  if (request.protocol == proxy::Protocol::Socks5) {
    // SOCKS5 (RFC 1929) carries the key itself, as the password: no HTTP scheme around it.
    if (!request.credential.empty()) index = matchKey(config_->keys, sha256(request.credential));
  } else if (extractKey(request.credential, scratch, key)) {
    index = matchKey(config_->keys, sha256(key));
  }
  if (index < 0) {
    config_->denied_invalid.inc();
    // A missing credential is the first step of every 407 challenge; only a wrong one counts.
    if (bans != nullptr) bans->recordFailure(request.client, "invalid proxy credentials");
    callbacks_->deny(proxy::Denial::Unauthorized, "invalid proxy credentials");
    return proxy::RequestFilterStatus::StopIteration;
  }
  const ApiKey& matched = config_->keys[static_cast<size_t>(index)];
  request.principal = matched.name;
  request.principal_tunnel_stats = &matched.tunnel_stats;
  config_->allowed.inc();
  matched.allowed.inc();
  return proxy::RequestFilterStatus::Continue;
}

}  // namespace auth
}  // namespace filters
}  // namespace sluice
