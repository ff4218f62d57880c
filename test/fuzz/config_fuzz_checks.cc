#include "test/fuzz/config_fuzz_checks.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "google/protobuf/util/message_differencer.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/yaml_loader.h"

#define FUZZ_CHECK(COND)                                                                  \
  do {                                                                                    \
    if (!(COND)) {                                                                        \
      std::fprintf(stderr, "invariant failed: %s at %s:%d\n", #COND, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)

namespace sluice::config::fuzz {

void checkConfigInput(const uint8_t* data, size_t size) {
  if (size > kMaxConfigInput) return;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSource = "fuzz.yaml";

  // Used on its own by `sluice config` to tell the forms apart.
  const auto keys = yamlTopLevelKeys(text, kSource);
  if (!keys.ok()) FUZZ_CHECK(!keys.status().message().empty());

  const absl::StatusOr<sluice::config::v1::Bootstrap> loaded = loadBootstrapString(text, kSource);
  if (!loaded.ok()) {
    const std::string message(loaded.status().message());
    if (message.compare(0, kSource.size(), kSource) != 0) {
      std::fprintf(stderr, "error without its source: %s\n", message.c_str());
    }
    FUZZ_CHECK(message.compare(0, kSource.size(), kSource) == 0);
    return;
  }
  // A parsed config means the YAML was a map, so the key scan cannot have failed.
  FUZZ_CHECK(keys.ok());

  // `sluice config expand` prints the full form with toYaml; it must read back the same.
  const std::string printed = toYaml(*loaded);
  sluice::config::v1::Bootstrap again;
  const absl::Status status = loadYaml(printed, "printed", again);
  if (!status.ok()) {
    std::fprintf(stderr, "printed config does not load: %s\n%s\n",
                 std::string(status.message()).c_str(), printed.c_str());
  }
  FUZZ_CHECK(status.ok());
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*loaded, again));
  FUZZ_CHECK(validateBootstrap(again).ok());
}

}  // namespace sluice::config::fuzz
