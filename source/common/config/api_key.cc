#include "source/common/config/api_key.h"

#include <cerrno>
#include <cstdint>

#include <sys/random.h>

#include "absl/strings/escaping.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace config {

std::string generateApiKey() {
  uint8_t bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0) {
      SLUICE_ASSERT(errno == EINTR, "getrandom failed");
      continue;
    }
    filled += static_cast<size_t>(n);
  }
  return absl::WebSafeBase64Escape(
      std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace config
}  // namespace sluice
