// libFuzzer entry point for the HTTP/1 response parser and the chunked decoder over the body that
// follows it; see tools/fuzz.sh. Without -DSLUICE_LIBFUZZER (any compiler) it builds a plain
// binary that replays the files named on its command line, to reproduce a crash found elsewhere.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "test/fuzz/h1_response_fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::http1::fuzz::checkResponseStream(data, size);
  return 0;
}

#ifndef SLUICE_LIBFUZZER
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream file(argv[i], std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    const std::string input((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    std::printf("ok %s\n", argv[i]);
  }
  return 0;
}
#endif
