#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {
namespace filters {
namespace auth {

using Digest = std::array<uint8_t, 32>;

inline constexpr std::string_view kSha256Prefix = "sha256:";
// Key names appear in stat names: at most this long, of [A-Za-z0-9_-].
inline constexpr size_t kMaxKeyNameLength = 64;
inline constexpr size_t kMaxKeyLength = 1024;
// A keys file larger than this is not a keys file.
inline constexpr size_t kMaxKeysFileBytes = 1024 * 1024;

Digest sha256(std::string_view data);

// The digest a configured key stands for: "sha256:<64 hex digits>" is taken as the digest
// itself (either case), anything else is hashed. Errors never quote the key.
absl::StatusOr<Digest> configuredKeyDigest(std::string_view key);

// One key of a keys file; `line` is 1-based.
struct KeyFileEntry {
  std::string name;  // empty when the line gave none
  std::string key;
  std::string group;  // the policy group a trailing " group=NAME" names; empty when none
  int line = 0;
};

// Parses a keys file: one key per line, "key" or "name:key" (a line starting with "sha256:" is
// a bare digest key; a key holding ':' needs a name in front), optionally followed by blanks and
// "group=NAME", the key's policy group. Leading and trailing blanks are ignored; blank lines and
// lines whose first non-blank character is '#' are skipped. Errors read
// "<source>:<line>: <problem>" and never quote a key.
absl::StatusOr<std::vector<KeyFileEntry>> parseApiKeysFile(std::string_view text,
                                                           std::string_view source);
// Reads and parses `path` (at most kMaxKeysFileBytes).
absl::StatusOr<std::vector<KeyFileEntry>> readApiKeysFile(const std::string& path);

}  // namespace auth
}  // namespace filters
}  // namespace sluice
