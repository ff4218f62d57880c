#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace sluice {

// `s` as a JSON string, quotes included: `"` and `\` escaped, control bytes as \u00XX. For the
// admin endpoint's and the CLI's small documents (the access log has its own writer).
inline std::string jsonQuoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace sluice
