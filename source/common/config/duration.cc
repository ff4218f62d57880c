#include "source/common/config/duration.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace sluice {
namespace config {
namespace {

// google.protobuf.Duration's documented range: about 10,000 years.
constexpr int64_t kMaxSeconds = 315576000000;
constexpr int64_t kNanosPerSecond = 1000000000;
// Longer texts are junk, and the cap keeps every intermediate below 2^127.
constexpr size_t kMaxTextLength = 64;
constexpr size_t kMaxWholeDigits = 20;
constexpr size_t kMaxFracDigits = 18;

bool isDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status junk(std::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrFormat("expected a duration such as 10s, 1.5s, 500ms, 2m or 1h, got \"%s\"", text));
}

}  // namespace

absl::Status parseDuration(std::string_view text, google::protobuf::Duration& out) {
  if (text.size() > kMaxTextLength) {
    return absl::InvalidArgumentError("duration text too long");
  }
  if (text == "0") {
    out.set_seconds(0);
    out.set_nanos(0);
    return absl::OkStatus();
  }
  if (!text.empty() && text[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrFormat("negative durations are not allowed, got \"%s\"", text));
  }
  if (text.empty()) {
    return junk(text);
  }
  unsigned __int128 total_nanos = 0;
  size_t i = 0;
  while (i < text.size()) {
    unsigned __int128 whole = 0;
    size_t digits = 0;
    while (i < text.size() && isDigit(text[i])) {
      if (digits == kMaxWholeDigits) {
        return absl::InvalidArgumentError(
            absl::StrFormat("duration \"%s\" is too large (max %ds)", text, kMaxSeconds));
      }
      whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
      ++i;
      ++digits;
    }
    unsigned __int128 frac = 0;
    unsigned __int128 frac_scale = 1;
    if (i < text.size() && text[i] == '.') {
      ++i;
      size_t frac_digits = 0;
      while (i < text.size() && isDigit(text[i])) {
        // Digits past kMaxFracDigits are far below a nanosecond whatever the unit.
        if (frac_digits < kMaxFracDigits) {
          frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
          frac_scale *= 10;
        }
        ++i;
        ++frac_digits;
      }
      if (frac_digits == 0) {
        return junk(text);
      }
    }
    if (digits == 0) {
      return junk(text);
    }
    size_t unit_start = i;
    while (i < text.size() && !isDigit(text[i]) && text[i] != '.') {
      ++i;
    }
    std::string_view unit = text.substr(unit_start, i - unit_start);
    int64_t unit_nanos = 0;
    if (unit == "ns") {
      unit_nanos = 1;
    } else if (unit == "us") {
      unit_nanos = 1000;
    } else if (unit == "ms") {
      unit_nanos = 1000000;
    } else if (unit == "s") {
      unit_nanos = kNanosPerSecond;
    } else if (unit == "m") {
      unit_nanos = 60 * kNanosPerSecond;
    } else if (unit == "h") {
      unit_nanos = 3600 * kNanosPerSecond;
    } else if (unit.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "duration \"%s\" lacks a unit (ns, us, ms, s, m or h), e.g. \"%ss\"", text, text));
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown duration unit \"%s\" in \"%s\" (use ns, us, ms, s, m or h)", unit, text));
    }
    // Sub-nanosecond fractions are dropped, as protobuf's own parser does.
    total_nanos += whole * unit_nanos + frac * unit_nanos / frac_scale;
    if (total_nanos > static_cast<unsigned __int128>(kMaxSeconds) * kNanosPerSecond) {
      return absl::InvalidArgumentError(
          absl::StrFormat("duration \"%s\" is too large (max %ds)", text, kMaxSeconds));
    }
  }
  out.set_seconds(static_cast<int64_t>(total_nanos / kNanosPerSecond));
  out.set_nanos(static_cast<int32_t>(total_nanos % kNanosPerSecond));
  return absl::OkStatus();
}

std::string formatDuration(int64_t seconds, int32_t nanos) {
  std::string sign;
  if (seconds < 0 || nanos < 0) {
    sign = "-";
    seconds = -seconds;
    nanos = -nanos;
  }
  if (nanos == 0) {
    return absl::StrFormat("%s%ds", sign, seconds);
  }
  std::string frac = absl::StrFormat("%09d", nanos);
  while (!frac.empty() && frac.back() == '0') {
    frac.pop_back();
  }
  return absl::StrFormat("%s%d.%ss", sign, seconds, frac);
}

}  // namespace config
}  // namespace sluice
