#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "source/common/network/address.h"

namespace sluice {
namespace proxy {

using KeyDigest = std::array<uint8_t, 32>;

// One API key as the requests that authenticated with it hold it. The same key keeps the same
// grant across reloads for as long as its listener accepts it; a reload that takes it away
// revokes the grant: from then on a request presenting the key is refused, and whatever
// authenticated with it (keep-alive connections, tunnels, HTTP/2 streams, SOCKS5 sessions) is
// closed once reload.revoke_grace has passed. Only the revoked flag changes after
// construction; workers read it with one relaxed load.
class KeyGrant {
 public:
  KeyGrant(std::string name, const KeyDigest& digest) : name_(std::move(name)), digest_(digest) {}
  KeyGrant(const KeyGrant&) = delete;
  KeyGrant& operator=(const KeyGrant&) = delete;

  const std::string& name() const { return name_; }
  const KeyDigest& digest() const { return digest_; }
  bool revoked() const { return revoked_.load(std::memory_order_relaxed); }
  // Main thread, at a reload's swap.
  void revoke() const { revoked_.store(true, std::memory_order_relaxed); }

 private:
  const std::string name_;
  const KeyDigest digest_;
  mutable std::atomic<bool> revoked_{false};
};
using KeyGrantSharedPtr = std::shared_ptr<const KeyGrant>;

// What one listener's config lets in, gathered from its filters while they are built: the keys
// of each authenticating filter and the client checks of its listener filters. A reload
// compares a running listener's grants with the next config's to find the keys and the client
// addresses it takes away. Built at config time, read-only afterwards.
struct ListenerGrants {
  // One entry per authenticating filter (sluice.auth), holding the keys it accepts; an empty
  // entry is a filter without keys, which lets every client in.
  std::vector<std::vector<KeyGrantSharedPtr>> key_sets;
  // From the listener filters that admit by address (sluice.ip_allowlist): false refuses.
  std::vector<std::function<bool(const network::Address&)>> client_checks;

  // Whether a client at this address would be accepted by this listener now.
  bool admits(const network::Address& client) const;
  // Whether some filter chain of this listener takes this key: one of its authenticating
  // filters holds it or has no keys, or the listener has none.
  bool accepts(const KeyDigest& digest) const;
  // The grant this listener already holds for the key (so that a reload keeping the key keeps
  // its grant), or null.
  KeyGrantSharedPtr find(const std::string& name, const KeyDigest& digest) const;
  // Every grant, each once.
  std::vector<KeyGrantSharedPtr> all() const;
};

}  // namespace proxy
}  // namespace sluice
