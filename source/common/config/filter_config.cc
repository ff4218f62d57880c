#include "source/common/config/filter_config.h"

#include "absl/strings/str_format.h"

namespace sluice {
namespace config {

absl::Status checkLimits(const std::string& path, std::initializer_list<LimitRange> limits) {
  for (const LimitRange& l : limits) {
    if (l.value != 0 && (l.value < l.min || l.value > l.max)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.%s: %d is out of range [%d, %d]", path, l.field, l.value, l.min, l.max));
    }
  }
  return absl::OkStatus();
}

}  // namespace config
}  // namespace sluice
