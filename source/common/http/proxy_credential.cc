#include "source/common/http/proxy_credential.h"

#include <cstddef>
#include <cstdint>

namespace sluice {
namespace http {

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
bool decodeBase64(std::string_view in, CredentialScratch& out, size_t& out_len) {
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

bool proxyAuthorizationKey(std::string_view credential, CredentialScratch& scratch,
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

}  // namespace http
}  // namespace sluice
