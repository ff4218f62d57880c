#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "filters/request/auth/api_keys.h"
#include "source/common/ban/ban_table.h"
#include "source/common/proxy/grants.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/tunnel_stats.h"

namespace sluice {
namespace filters {
namespace auth {

struct ApiKey {
  std::string name;
  Digest digest;  // SHA-256 of the key: presented keys are hashed once, then compared
  // What requests that authenticate with the key hold; a reload that removes the key revokes it.
  proxy::KeyGrantSharedPtr grant;
  stats::Counter allowed;
  upstream::TunnelStats tunnel_stats;  // tunnel.key.<name>.*
};

struct AuthConfig {
  std::vector<ApiKey> keys;
  std::string realm;
  stats::Counter allowed;
  stats::Counter denied_missing;  // no Proxy-Authorization
  stats::Counter denied_invalid;  // a credential that matches no key
  stats::Counter open_relay;      // requests let through because no key is configured
  stats::Counter denied_banned;   // refused because the client's address is banned
  stats::Counter denied_revoked;  // a key a reload took away (407)
  // The process's ban table (null when bans are disabled): wrong keys are recorded in it, and
  // requests from a banned address are refused even with a right key.
  std::shared_ptr<ban::BanTable> bans;
};
using AuthConfigSharedPtr = std::shared_ptr<const AuthConfig>;

// Index of the key whose digest equals `digest`, or -1. Compares against every key, always,
// without an early exit, so the time taken says nothing about which key (or whether any) matched.
int32_t matchKey(const std::vector<ApiKey>& keys, const Digest& digest);

// The "sluice.auth" request filter.
class AuthFilter : public proxy::RequestFilter {
 public:
  explicit AuthFilter(AuthConfigSharedPtr config) : config_(std::move(config)) {}
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;

 private:
  AuthConfigSharedPtr config_;
};

}  // namespace auth
}  // namespace filters
}  // namespace sluice
