#pragma once

#include <string>

namespace sluice {
namespace config {

// A fresh API key: 32 bytes from getrandom(2) as URL-safe base64 without padding (43
// characters of A-Z a-z 0-9 - _). Aborts if the kernel has no randomness to give: a config
// with a guessable key must never be written.
std::string generateApiKey();

}  // namespace config
}  // namespace sluice
