// libFuzzer entry point for the HTTP/2 codec's frame path (nghttp2 session, the sluice.http2
// filter's stream handling and protections); see tools/fuzz.sh. Without libFuzzer,
// replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/h2_frames_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::http2::fuzz::runFrames(data, size);
  return 0;
}
