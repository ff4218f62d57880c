// libFuzzer entry point for the SOCKS5 parsers (greeting, RFC 1929 authentication, request, UDP
// header); see tools/fuzz.sh. Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/socks5_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::socks5::fuzz::checkSocks5(data, size);
  return 0;
}
