#pragma once

#include <string>

#include "source/server/listener_config.h"

namespace sluice {
namespace server {

// `sluice policy explain KEY_NAME HOST:PORT [--kind KIND] [--listener NAME]`.
struct PolicyExplainRequest {
  std::string key_name;
  std::string target;    // HOST:PORT, [IPv6]:PORT
  std::string kind;      // a rule kind; empty: connect
  std::string listener;  // empty: the first listener that accepts the key
};

// Exit codes of `sluice policy explain`.
inline constexpr int kExplainAllowed = 0;
inline constexpr int kExplainRefused = 1;
inline constexpr int kExplainUsage = 2;

// What sluice would do with a request of that key to that destination: the key's group, the
// rule that decides on the name, the addresses the name resolves to (with the config's name
// servers and hosts file, as the workers resolve) and, for each, the rule's verdict and the
// built-in destination guard's; then the decision. Appends the report to `out` and returns
// kExplainAllowed, kExplainRefused or kExplainUsage (the error is in `out`).
int explainPolicy(const ServerConfig& config, const PolicyExplainRequest& request,
                  std::string& out);

}  // namespace server
}  // namespace sluice
