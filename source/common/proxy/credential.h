#pragma once

#include <string_view>

#include "source/common/http/proxy_credential.h"
#include "source/common/proxy/request.h"

namespace sluice {
namespace proxy {

// The API key in the credential a request presents, whatever carried it: the password of a
// Proxy-Authorization "Basic base64(user:key)" or the token of "Bearer key" (schemes
// case-insensitive), or SOCKS5's password as it is. False when it holds none (no credential, an
// unknown scheme, bad base64, an empty key). `key` may point into `scratch` or into the
// request's credential. An authenticating filter calls this rather than branching on the
// protocol.
bool presentedKey(const ProxyRequest& request, http::CredentialScratch& scratch,
                  std::string_view& key);

}  // namespace proxy
}  // namespace sluice
