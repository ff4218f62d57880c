#pragma once

#include <array>
#include <string_view>

namespace sluice {
namespace http {

// Where a decoded Basic credential lives while its request is served.
using CredentialScratch = std::array<char, 512>;

// The API key in a Proxy-Authorization value: the password of "Basic base64(user:key)" or the
// token of "Bearer key" (schemes case-insensitive). False if it is neither, or empty. The HTTP
// codecs hand the request filters this key, so sluice.auth sees the same thing from every
// protocol (SOCKS5 hands the RFC 1929 password). `key` may point into `scratch`.
bool proxyAuthorizationKey(std::string_view credential, CredentialScratch& scratch,
                           std::string_view& key);

}  // namespace http
}  // namespace sluice
