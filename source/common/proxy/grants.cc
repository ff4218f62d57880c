#include "source/common/proxy/grants.h"

#include <algorithm>

namespace sluice {
namespace proxy {

bool ListenerGrants::admits(const network::Address& client) const {
  for (const auto& check : client_checks) {
    if (!check(client)) return false;
  }
  return true;
}

bool ListenerGrants::accepts(const KeyDigest& digest) const {
  if (key_sets.empty()) return true;
  for (const auto& keys : key_sets) {
    if (keys.empty()) return true;
    for (const KeyGrantSharedPtr& key : keys) {
      if (key->digest() == digest) return true;
    }
  }
  return false;
}

KeyGrantSharedPtr ListenerGrants::find(const std::string& name, const KeyDigest& digest) const {
  for (const auto& keys : key_sets) {
    for (const KeyGrantSharedPtr& key : keys) {
      if (key->digest() == digest && key->name() == name) return key;
    }
  }
  return nullptr;
}

std::vector<KeyGrantSharedPtr> ListenerGrants::all() const {
  std::vector<KeyGrantSharedPtr> out;
  for (const auto& keys : key_sets) {
    for (const KeyGrantSharedPtr& key : keys) {
      if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
    }
  }
  return out;
}

}  // namespace proxy
}  // namespace sluice
