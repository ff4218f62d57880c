#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice {
namespace network {

// An inclusive range of TCP ports; a single port is a range of one.
struct PortRange {
  uint16_t low = 0;
  uint16_t high = 0;
  bool contains(uint16_t port) const { return port >= low && port <= high; }
};

// Parses "N" or "A-B" with 1 <= A <= B <= 65535. Errors quote at most 32 characters of `text`.
absl::StatusOr<PortRange> parsePortRange(std::string_view text);

}  // namespace network
}  // namespace sluice
