// libFuzzer entry point for the config loader (arbitrary bytes as a config file); see
// tools/fuzz.sh. Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/config_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::config::fuzz::checkConfigInput(data, size);
  return 0;
}
