#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::http2::fuzz {

// Feeds bytes to a real sluice.http2 filter on a socketpair-backed connection, after the client
// connection preface: data[0] picks how the rest is split into reads, data[1..] are frames.
// Request filters refuse (407/403/502) or hold requests forever, so no byte leaves the process.
// Runs the event loop briefly so deferred flushes happen, then tears everything down; ASan and
// UBSan (tools/fuzz.sh) catch what goes wrong.
void runFrames(const uint8_t* data, size_t size);

}  // namespace sluice::http2::fuzz
