#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "source/common/network/address.h"

namespace sluice {
namespace server {

// One answer of a running sluice's admin endpoint.
struct AdminAnswer {
  int code = 0;
  std::string body;
};

// The largest answer read; a bigger one is an error, not a truncated body.
constexpr size_t kMaxAdminAnswerBytes = 8 * 1024 * 1024;

// Where to connect to reach an admin endpoint configured at `admin`: the address itself, or
// loopback of the same family when it listens on a wildcard address.
network::Address adminDialAddress(const network::Address& admin);

// GET `path` from the admin endpoint at `admin` (as configured) over one blocking HTTP/1.1
// connection, with a Host the endpoint accepts. The whole exchange (connect, send, read) ends
// within `timeout`. Unavailable when nothing answers there; the message names the address.
absl::StatusOr<AdminAnswer> adminGet(const network::Address& admin, std::string_view path,
                                     std::chrono::milliseconds timeout);
// The same with POST (an empty body).
absl::StatusOr<AdminAnswer> adminPost(const network::Address& admin, std::string_view path,
                                      std::chrono::milliseconds timeout);
absl::StatusOr<AdminAnswer> adminRequest(const network::Address& admin, std::string_view method,
                                         std::string_view path, std::chrono::milliseconds timeout);

}  // namespace server
}  // namespace sluice
