// libFuzzer entry point for the HTTP/1 response parser and the chunked decoder over the body that
// follows it; see tools/fuzz.sh. Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/h1_response_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::http1::fuzz::checkResponseStream(data, size);
  return 0;
}
