// libFuzzer entry point for the HTTP/1 head parser and chunked decoder; see tools/fuzz.sh.
// Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/h1_parser_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::http1::fuzz::checkOneInput(data, size);
  return 0;
}
