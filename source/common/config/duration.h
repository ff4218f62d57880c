#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/duration.pb.h"

namespace sluice {
namespace config {

// Parses the config's duration syntax: one or more <number><unit> parts, unit one of ns, us,
// ms, s, m, h ("10s", "1.5s", "500ms", "2m", "1h30m"), or a bare "0". Negative durations and
// anything past google.protobuf.Duration's range are rejected.
absl::Status parseDuration(std::string_view text, google::protobuf::Duration& out);

// The canonical text of a duration, in seconds as protobuf's JSON writes it: "10s", "1.5s",
// "0.000000001s". parseDuration() reads it back exactly.
std::string formatDuration(int64_t seconds, int32_t nanos);

}  // namespace config
}  // namespace sluice
