#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"

namespace sluice {
namespace config {

// Reads a config: the short form (no top-level `listeners` key) is expanded, the full form is
// taken as it is; then validateBootstrap(). Errors start with `source` (or the path).
absl::StatusOr<sluice::config::v1::Bootstrap> loadBootstrapString(std::string_view yaml,
                                                                  std::string_view source);
absl::StatusOr<sluice::config::v1::Bootstrap> loadBootstrapFile(const std::string& path);

// Structural checks on a full-form config, errors carrying the path of the bad field: at least
// one listener; listener names unique and [a-zA-Z0-9_-]+; listener and admin addresses literal
// ip:port and distinct; every listener with a chain, every chain with a filter; every Filter
// (also those inside typed_config payloads) with a name and a typed_config; log_level and
// dns.resolvers well-formed. Whether a filter name is registered and its config valid is the
// extension registry's check.
absl::Status validateBootstrap(const sluice::config::v1::Bootstrap& bootstrap);

// $XDG_CONFIG_HOME/sluice/config.yaml when XDG_CONFIG_HOME is set to an absolute path, else
// $HOME/.config/sluice/config.yaml (HOME from the password database when unset).
std::string defaultConfigPath();

}  // namespace config
}  // namespace sluice
