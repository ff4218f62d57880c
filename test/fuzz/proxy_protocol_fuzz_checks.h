#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::network::fuzz {

// Runs the PROXY protocol header parser over `data` and checks its invariants: a header's
// length within the input and the protocol's bounds, every shorter prefix of a header
// Incomplete, NotProxy only for input that cannot begin a header, a non-local header with both
// addresses of one family. Aborts on a violation.
void checkProxyHeader(const uint8_t* data, size_t size);

}  // namespace sluice::network::fuzz
