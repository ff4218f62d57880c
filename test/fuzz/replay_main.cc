// main() for the fuzz targets built without libFuzzer (-DSLUICE_LIBFUZZER absent, any
// compiler): replays the files named on the command line through LLVMFuzzerTestOneInput, to
// reproduce a crash found elsewhere. With libFuzzer, libFuzzer's own main() is used instead.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

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
