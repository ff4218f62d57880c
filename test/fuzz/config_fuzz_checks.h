#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::config::fuzz {

// Inputs larger than this are skipped: a config is a few kilobytes, and the loader refuses files
// over 4 MiB before parsing (bootstrap_loader.cc), so bigger inputs only slow the fuzzer down.
inline constexpr size_t kMaxConfigInput = 64 * 1024;

// Loads one input as a config file the way `sluice run -c` does (short or full form, then
// validation) and aborts when an invariant breaks: an error carries a message naming the source,
// and an accepted config prints (toYaml) to text that loads back into an equal, valid message.
void checkConfigInput(const uint8_t* data, size_t size);

}  // namespace sluice::config::fuzz
