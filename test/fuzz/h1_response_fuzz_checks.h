#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::http1::fuzz {

// One origin response stream as the codec reads it. Byte 0 picks the request method (bits 0-1:
// GET, HEAD, CONNECT, POST), tight head limits (bit 2), tight chunk limits (bit 3) and the piece
// size the body is fed in (bits 4-7, plus one); the rest is what the origin sent. Interim 1xx
// heads are skipped as the codec does, then the final head is checked (spans inside the input,
// framing per RFC 9112 6.3, the head sluice would forward parses back to the same status,
// framing and length), then the body: a chunked body must decode identically whole, in pieces
// and on a reset() decoder. Aborts with a message when an invariant breaks.
void checkResponseStream(const uint8_t* data, size_t size);

}  // namespace sluice::http1::fuzz
