#include "tools/load/results.h"

namespace sluice {
namespace load {

const char* errorName(ErrorKind k) {
  static const char* const kNames[] = {
      "connect_refused", "connect_failed", "proxy_tls", "proxy_status", "socks_auth",
      "socks_reply",     "socks_protocol", "tls",       "reset",        "closed",
      "bad_response",    "websocket",      "timeout",   "resolve",
  };
  return kNames[static_cast<int>(k)];
}

}  // namespace load
}  // namespace sluice
