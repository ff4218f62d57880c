#pragma once

#include "google/protobuf/message.h"

namespace sluice {
namespace config {

// The text that replaces a secret.
inline constexpr char kRedacted[] = "<redacted>";

// Replaces, in place, every non-empty string field marked [(sluice.config.v1.sensitive) = true]
// with "<redacted>" (other sensitive fields are cleared), recursing into sub-messages, maps and
// Any payloads. An Any whose type this build does not know is emptied: it might hold a secret.
void redact(google::protobuf::Message& msg);

}  // namespace config
}  // namespace sluice
