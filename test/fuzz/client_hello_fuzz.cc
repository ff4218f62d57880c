// libFuzzer entry point for the TLS ClientHello parser and the protocol sniffer; see
// tools/fuzz.sh. Without libFuzzer, replay_main.cc replays files through it.

#include <cstdint>

#include "test/fuzz/client_hello_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::filters::protocol_sniffer::fuzz::checkClientHello(data, size);
  return 0;
}
