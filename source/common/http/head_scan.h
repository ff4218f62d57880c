#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "source/common/buffer/buffer.h"

namespace sluice {
namespace http {

// The head at the front of `data` to hand to the HTTP/1.1 head parser: up to max_head_bytes + 1
// bytes, linearized (one over the limit, so the parser can tell "too large" from "incomplete").
// The parser starts over on each call, so it is only worth calling when a line ended in the
// bytes that arrived since the last look (or the limit is passed); otherwise, and for an empty
// buffer, this returns an empty view: a peer sending one byte at a time cannot make parsing
// quadratic. `scanned` is how much the last look saw; reset it to 0 once a head is parsed.
inline std::string_view headToParse(buffer::Buffer& data, uint32_t max_head_bytes,
                                    uint32_t& scanned) {
  // Nothing new: `scanned` stays (a retry decision may depend on a partial head having come).
  if (data.empty()) return {};
  const size_t limit = size_t{max_head_bytes} + 1;
  const std::string_view view = data.linearize(std::min<size_t>(data.length(), limit), limit);
  const size_t seen = std::min<size_t>(scanned, view.size());
  scanned = static_cast<uint32_t>(std::min<size_t>(view.size(), UINT32_MAX));
  if (seen > 0 && view.size() <= max_head_bytes &&
      memchr(view.data() + seen, '\n', view.size() - seen) == nullptr) {
    return {};
  }
  return view;
}

}  // namespace http
}  // namespace sluice
