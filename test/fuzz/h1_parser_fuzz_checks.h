#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::http1::fuzz {

// Runs the request parser, the response parser and the chunked decoder over one input, with the
// default and with tight limits, and aborts with a message when an invariant breaks: spans stay
// inside the input, a prefix parses as Incomplete or as the same error, splitting the chunked
// input changes nothing, and the derived facts agree with the rules. Shared by the libFuzzer
// target and the gcc corpus test.
void checkOneInput(const uint8_t* data, size_t size);

}  // namespace sluice::http1::fuzz
