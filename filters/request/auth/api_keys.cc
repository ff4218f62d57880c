#include "filters/request/auth/api_keys.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <openssl/sha.h>

#include "absl/strings/str_format.h"

#ifndef OPENSSL_IS_BORINGSSL
#error "built against OpenSSL headers: depend on //third_party:boringssl"
#endif

namespace sluice {
namespace filters {
namespace auth {

namespace {

constexpr std::string_view kGroupPrefix = "group=";

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

std::string_view trimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

absl::Status checkKeyText(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > kMaxKeyLength) {
    return absl::InvalidArgumentError(absl::StrFormat("key longer than %d bytes", kMaxKeyLength));
  }
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("key contains control characters");
    }
  }
  return absl::OkStatus();
}

}  // namespace

Digest sha256(std::string_view data) {
  Digest d;
  SHA256(reinterpret_cast<const uint8_t*>(data.data()), data.size(), d.data());
  return d;
}

absl::StatusOr<Digest> configuredKeyDigest(std::string_view key) {
  if (key.substr(0, kSha256Prefix.size()) != kSha256Prefix) return sha256(key);
  std::string_view hex = key.substr(kSha256Prefix.size());
  if (hex.size() != 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sha256: takes the 64 hex digits of a SHA-256 digest (`printf %%s KEY | sha256sum`), "
        "found %d characters",
        hex.size()));
  }
  Digest d;
  for (size_t i = 0; i < d.size(); ++i) {
    const int hi = hexValue(hex[2 * i]);
    const int lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          "sha256: takes hex digits (0-9, a-f) only, as `sha256sum` prints them");
    }
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

absl::StatusOr<std::vector<KeyFileEntry>> parseApiKeysFile(std::string_view text,
                                                           std::string_view source) {
  std::vector<KeyFileEntry> out;
  int line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = trimBlanks(line);
    if (line.empty() || line.front() == '#') continue;

    auto fail = [&](std::string_view problem) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", source, line_number, problem));
    };
    KeyFileEntry entry;
    entry.line = line_number;
    // A trailing " group=NAME" (after a space or a tab) names the key's policy group.
    const size_t blank = line.find_last_of(" \t");
    if (blank != std::string_view::npos &&
        line.substr(blank + 1, kGroupPrefix.size()) == kGroupPrefix) {
      const std::string_view group = line.substr(blank + 1 + kGroupPrefix.size());
      if (group.empty() || group.size() > kMaxKeyNameLength) {
        return fail(
            absl::StrFormat("group=: a group name of 1 to %d characters", kMaxKeyNameLength));
      }
      for (char c : group) {
        if (!isNameChar(c)) {
          return fail("group=: a group name is letters, digits, '_' and '-'");
        }
      }
      entry.group = std::string(group);
      line = trimBlanks(line.substr(0, blank));
    }
    std::string_view key = line;
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && line.substr(0, kSha256Prefix.size()) != kSha256Prefix) {
      const std::string_view name = trimBlanks(line.substr(0, colon));
      key = trimBlanks(line.substr(colon + 1));
      if (name.empty()) return fail("empty name before ':'");
      if (name.size() > kMaxKeyNameLength) {
        return fail(absl::StrFormat("name longer than %d characters", kMaxKeyNameLength));
      }
      for (char c : name) {
        if (!isNameChar(c)) {
          // The part before ':' may be a key that happens to hold one: do not echo it.
          return fail(
              "the text before the first ':' must be a name (letters, digits, '_', '-'); a key "
              "that holds ':' needs a name in front: \"name:key\"");
        }
      }
      entry.name = std::string(name);
    }
    absl::Status status = checkKeyText(key);
    if (!status.ok()) return fail(std::string(status.message()));
    auto digest = configuredKeyDigest(key);
    if (!digest.ok()) return fail(std::string(digest.status().message()));
    entry.key = std::string(key);
    out.push_back(std::move(entry));
  }
  return out;
}

absl::StatusOr<std::vector<KeyFileEntry>> readApiKeysFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(fopen(path.c_str(), "rbe"), fclose);
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot open: %s", path, strerror(errno)));
  }
  std::string text;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), file.get())) > 0) {
    text.append(chunk, n);
    if (text.size() > kMaxKeysFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: larger than %d bytes", path, kMaxKeysFileBytes));
    }
  }
  if (ferror(file.get())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot read: %s", path, strerror(errno)));
  }
  return parseApiKeysFile(text, path);
}

}  // namespace auth
}  // namespace filters
}  // namespace sluice
