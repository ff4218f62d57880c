#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::filters::protocol_sniffer::fuzz {

// Runs the ClientHello parser and the protocol sniffer's classifier over `data` and every
// prefix the sniffer could have peeked, and checks their invariants: the SNI view lies inside
// the input, a Parsed prefix stays Parsed as bytes are added, classify() agrees with the
// parser, and NeedMore is never the answer for the whole record. Aborts on a violation.
void checkClientHello(const uint8_t* data, size_t size);

}  // namespace sluice::filters::protocol_sniffer::fuzz
