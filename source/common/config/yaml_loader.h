#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace sluice {
namespace config {

struct LoadOptions {
  // Message types (full names) that may also be written as a plain scalar, which then fills
  // the named field: {"sluice.config.v1.ShortConfig.ApiKey", "key"} lets `api_keys: ["k1"]`
  // stand for `api_keys: [{key: "k1"}]`.
  std::vector<std::pair<std::string, std::string>> scalar_shorthands;
};

// Parses YAML text into msg strictly, walking msg's descriptor: unknown keys, duplicate keys,
// wrong shapes and values that do not fit the field's type fail with the key's path, e.g.
// "config.yaml: listeners[0].name: expected a string, found a list (line 3, column 11)".
// `source` names the file in errors (omitted when empty). google.protobuf.Any is a map with an
// "@type" key; google.protobuf.Duration is text such as "10s" (see duration.h). msg is cleared
// first; after an error it holds whatever was read before it.
absl::Status loadYaml(std::string_view yaml_text, std::string_view source,
                      google::protobuf::Message& msg);
absl::Status loadYaml(std::string_view yaml_text, std::string_view source,
                      google::protobuf::Message& msg, const LoadOptions& options);

// The keys of the top-level map, in file order (empty for an empty document). Fails on YAML
// syntax errors and when the top level is not a map.
absl::StatusOr<std::vector<std::string>> yamlTopLevelKeys(std::string_view yaml_text,
                                                          std::string_view source);

// Prints msg as YAML that loadYaml() reads back into an equal message: fields in declaration
// order, only those set (proto3: non-default), strings double-quoted, durations as "Ns",
// Any fields as {"@type": ..., <payload fields>}.
std::string toYaml(const google::protobuf::Message& msg);

}  // namespace config
}  // namespace sluice
