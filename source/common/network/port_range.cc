#include "source/common/network/port_range.h"

#include "absl/strings/str_format.h"

namespace sluice {
namespace network {
namespace {

bool parsePort(std::string_view text, uint32_t& port) {
  if (text.empty() || text.size() > 5) return false;
  port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  return port >= 1 && port <= 65535;
}

absl::Status malformed(std::string_view text) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "expected a port (1-65535) or a range \"A-B\", found \"%s\"", text.substr(0, 32)));
}

}  // namespace

absl::StatusOr<PortRange> parsePortRange(std::string_view text) {
  const size_t dash = text.find('-');
  uint32_t low = 0;
  uint32_t high = 0;
  if (dash == std::string_view::npos) {
    if (!parsePort(text, low)) return malformed(text);
    high = low;
  } else if (!parsePort(text.substr(0, dash), low) || !parsePort(text.substr(dash + 1), high)) {
    return malformed(text);
  } else if (low > high) {
    return absl::InvalidArgumentError(
        absl::StrFormat("range \"%s\" is reversed (the low port comes first)", text.substr(0, 32)));
  }
  return PortRange{static_cast<uint16_t>(low), static_cast<uint16_t>(high)};
}

}  // namespace network
}  // namespace sluice
