#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "api/sluice/config/v1/short.pb.h"

namespace sluice {
namespace config {

// Expands the short form into the full form: one "http" listener whose chain runs
// sluice.http1 with the request filters sluice.auth and sluice.router, every default written
// out so `sluice config expand` shows it. Fails, with the short-form path, on settings that
// are invalid or not supported yet (tls, socks5).
absl::StatusOr<sluice::config::v1::Bootstrap> expandShortConfig(
    const sluice::config::v1::ShortConfig& config);

// Validates one destinations.allowed_ports entry: "N" or "A-B", 1 <= A <= B <= 65535.
absl::Status validatePortRange(std::string_view text);

// The commented short-form config `sluice init` writes: configs/sluice.yaml with `api_key` as
// the only key.
std::string initialConfigText(std::string_view api_key);

// The key configs/sluice.yaml ships with.
inline constexpr std::string_view kPlaceholderApiKey =
    "replace-with-output-of-openssl-rand-base64-32";

}  // namespace config
}  // namespace sluice
