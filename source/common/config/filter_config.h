#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"

namespace sluice {
namespace config {

// One numeric limit of a filter config and the range it must lie in. 0 always passes: it means
// "use the default".
struct LimitRange {
  const char* field;
  uint64_t value;
  uint64_t min;
  uint64_t max;
};

// The first limit out of its range, as "<path>.typed_config.<field>: <value> is out of range
// [<min>, <max>]"; OK when all are in range (or 0).
absl::Status checkLimits(const std::string& path, std::initializer_list<LimitRange> limits);

// Takes a config value over the default unless it is 0 (unset).
template <class Field, class Value>
inline void setIfNonZero(Value value, Field& field) {
  if (value != 0) field = static_cast<Field>(value);
}

}  // namespace config
}  // namespace sluice
