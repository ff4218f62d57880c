#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::socks5::fuzz {

// Runs every SOCKS5 parser over `data` as a byte stream (greeting, then authentication, then
// request, each from where the previous one ended) and as one UDP datagram, and checks their
// invariants: sizes within the input and the protocol's maxima, views inside the input, every
// shorter prefix of a whole message Incomplete, and written addresses parsing back. Aborts on a
// violation.
void checkSocks5(const uint8_t* data, size_t size);

}  // namespace sluice::socks5::fuzz
