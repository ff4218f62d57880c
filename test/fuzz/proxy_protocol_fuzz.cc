// libFuzzer entry point for the PROXY protocol header parser (v1 and v2); see tools/fuzz.sh.
// Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/proxy_protocol_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::network::fuzz::checkProxyHeader(data, size);
  return 0;
}
