#pragma once

#include <chrono>

#include "google/protobuf/duration.pb.h"

namespace sluice {

// A config duration in milliseconds, or the default when the field was not set (or is zero).
inline std::chrono::milliseconds durationOr(bool present, const google::protobuf::Duration& d,
                                            std::chrono::milliseconds fallback) {
  if (!present) return fallback;
  auto ms = std::chrono::milliseconds(d.seconds() * 1000 + d.nanos() / 1000000);
  return ms.count() > 0 ? ms : fallback;
}

// The same for a duration whose zero means "off": the default only when the field was not set.
inline std::chrono::milliseconds durationOrOff(bool present, const google::protobuf::Duration& d,
                                               std::chrono::milliseconds fallback) {
  if (!present) return fallback;
  return std::chrono::milliseconds(d.seconds() * 1000 + d.nanos() / 1000000);
}

}  // namespace sluice
