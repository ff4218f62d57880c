#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/str_format.h"

#include "api/sluice/filters/v1/auth.pb.h"
#include "filters/request/auth/auth.h"
#include "source/common/common/logger.h"
#include "source/common/extensions/registry.h"

namespace sluice {
namespace filters {
namespace auth {
namespace {

// Reachable only from this host: 127.0.0.0/8 and ::1 (also as ::ffff:127.x.y.z). The wildcard
// addresses 0.0.0.0 and :: are every interface, so not loopback.
bool isLoopback(const network::Address& a) {
  if (a.family() == AF_INET) return (ntohl(a.v4().sin_addr.s_addr) >> 24) == 127;
  if (a.family() != AF_INET6) return false;
  const in6_addr& v6 = a.v6().sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

class AuthFactory : public extensions::FactoryBase<extensions::RequestFilterFactory,
                                                   sluice::filters::v1::AuthConfig> {
 public:
  std::string name() const override { return "sluice.auth"; }
  proxy::RequestPhase phase() const override { return proxy::RequestPhase::Authenticate; }
  bool requiresCredential(const google::protobuf::Message& message) const override {
    const auto& proto = static_cast<const sluice::filters::v1::AuthConfig&>(message);
    return proto.api_keys_size() > 0 || !proto.api_keys_file().empty();
  }
  absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
      const sluice::filters::v1::AuthConfig& proto,
      extensions::FactoryContext& context) const override {
    auto config = std::make_shared<AuthConfig>();
    config->realm = proto.realm().empty() ? "sluice" : proto.realm();
    if (config->realm.find_first_of("\"\\\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.realm: must not contain quotes, backslashes or line breaks",
          context.path));
    }
    config->policy = context.policy != nullptr ? context.policy : policy::Policy::empty();
    stats::Store& store = stats::Store::get();
    // Adds one key; errors start with where its name and its key were given (config paths, or
    // file:line for the keys file).
    // Stat slots kept for everything registered after the keys (codecs, listeners, server).
    constexpr uint32_t kStatsReserve = 2048;
    size_t overflow_keys = 0;
    auto add_key = [&](std::string name, std::string_view key, std::string_view group,
                       const std::string& name_where, const std::string& key_where,
                       const std::string& group_where) -> absl::Status {
      const policy::Group* key_group =
          config->policy->find(group.empty() ? policy::kDefaultGroup : group);
      if (key_group == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: \"%s\" is not a group of policy.groups", group_where, group));
      }
      auto digest = configuredKeyDigest(key);
      if (!digest.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: %s", key_where, digest.status().message()));
      }
      for (const ApiKey& other : config->keys) {
        if (other.name == name) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: '%s' is used twice", name_where, name));
        }
        // Names, never keys, in errors: they end up in logs.
        if (other.digest == *digest) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: the same key as '%s' (a key given in clear and as sha256: counts once)",
              key_where, other.name));
        }
      }
      ApiKey entry;
      entry.name = std::move(name);
      entry.digest = *digest;
      entry.group = key_group;
      // The key's limiter: the running version's when the key stays in its group.
      entry.limiter = key_group->limiters->forKey(entry.name, kStatsReserve);
      // The running listener's grant when a reload keeps the key, so that revoking it later
      // reaches the connections of every config version that accepted it.
      if (context.running_grants != nullptr) {
        entry.grant = context.running_grants->find(entry.name, entry.digest);
      }
      if (entry.grant == nullptr) {
        entry.grant = std::make_shared<const proxy::KeyGrant>(entry.name, entry.digest);
      }
      const stats::Scope key_scope = stats::Scope("auth").scope("key", "key", entry.name);
      if (store.hasRoomFor(key_scope.name("allowed"), 1 + upstream::kKeyTunnelStats,
                           kStatsReserve)) {
        entry.allowed = key_scope.counter("allowed", "Requests allowed with this API key.");
        entry.tunnel_stats = upstream::keyTunnelStats(entry.name);
      } else {
        // Thousands of keys: the ones past the stats store's room share one set, and the
        // first of them says so.
        if (overflow_keys++ == 0) {
          SLUICE_LOG(Warn,
                     "%s: from key '%s' on, keys share auth.key_overflow.allowed and "
                     "tunnel.key_overflow.* (the stats store has no room for a set per key)",
                     context.path, entry.name);
        }
        entry.allowed = store.counter(
            "auth.key_overflow.allowed",
            "Requests allowed with the keys that have no per-key stats (the store was full).");
        entry.tunnel_stats = upstream::keyOverflowTunnelStats();
      }
      config->keys.push_back(std::move(entry));
      return absl::OkStatus();
    };
    for (int i = 0; i < proto.api_keys_size(); ++i) {
      const auto& k = proto.api_keys(i);
      const std::string where = absl::StrFormat("%s.typed_config.api_keys[%d]", context.path, i);
      if (k.key().empty()) return absl::InvalidArgumentError(where + ".key: empty");
      absl::Status status =
          add_key(k.name().empty() ? absl::StrFormat("key%d", i + 1) : k.name(), k.key(), k.group(),
                  where + ".name", where + ".key", where + ".group");
      if (!status.ok()) return status;
    }
    if (!proto.api_keys_file().empty()) {
      const std::string where = absl::StrFormat("%s.typed_config.api_keys_file", context.path);
      auto entries = readApiKeysFile(proto.api_keys_file());
      if (!entries.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: %s", where, entries.status().message()));
      }
      // An empty file would silently make the listener an open relay.
      if (entries->empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: %s: no keys in the file", where, proto.api_keys_file()));
      }
      for (const KeyFileEntry& e : *entries) {
        std::string name =
            e.name.empty() ? absl::StrFormat("key%d", config->keys.size() + 1) : e.name;
        const std::string line = absl::StrFormat("%s: %s:%d", where, proto.api_keys_file(), e.line);
        absl::Status status =
            add_key(std::move(name), e.key, e.group, line + ": name", line, line + ": group");
        if (!status.ok()) return status;
      }
      SLUICE_LOG(Info, "%s: %d keys from %s", context.path, entries->size(), proto.api_keys_file());
    }
    config->allowed =
        store.counter("auth.allowed", "Requests allowed with an API key, every key together.");
    config->denied_missing =
        store.counter("auth.denied_missing", "Requests refused without a key (407).");
    config->denied_invalid =
        store.counter("auth.denied_invalid", "Requests refused with a wrong key (407).");
    config->open_relay = store.counter(
        "auth.open_relay", "Requests let through by a listener without keys (an open relay).");
    config->denied_banned = store.counter("auth.denied_banned",
                                          "Requests refused because their client is banned (403).");
    config->denied_revoked = store.counter(
        "auth.denied_revoked",
        "Requests refused with a key a reload removed, on connections opened before it (407).");
    config->memo_hits = store.counter(
        "auth.memo_hits",
        "Requests whose credential was the one their connection last authenticated with, or one "
        "that authenticated on their worker before, recognised without decoding or hashing it "
        "again (still checked for bans and revocation).");
    config->bans = context.bans;
    if (config->keys.empty()) {
      config->keyless_limiter = config->policy->defaultGroup().limiters->keyless();
      // Beyond loopback a keyless listener serves anyone who finds it: only when said in words.
      const network::Address& where = context.listener_address;
      if (where.valid() && !isLoopback(where) && !proto.open_relay()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: no API keys, and listener '%s' listens on %s, which is not a loopback address: "
            "anyone who can reach it could use the proxy (an open relay). Set auth.api_keys or "
            "auth.api_keys_file (`sluice init` writes a config with a key), listen on 127.0.0.1 "
            "or [::1], or allow it with `auth.open_relay: true` (full form: `open_relay: true` "
            "in this sluice.auth config)",
            context.path, context.listener_name, where.asString()));
      }
      SLUICE_LOG(Warn,
                 "%s: no API keys: listener '%s' is an OPEN RELAY; anyone who reaches it can use "
                 "it (set auth.api_keys, or run `sluice init` for a config with a key)",
                 context.path, context.listener_name);
    }
    if (context.filter_list != nullptr) {
      // The groups whose requests get in here: their rules must be checked further down.
      policy::FilterListPolicy& list = *context.filter_list;
      list.authenticates = true;
      list.keyless = list.keyless || config->keys.empty();
      for (const ApiKey& key : config->keys) list.keys.push_back({key.name, key.group});
    }
    if (context.grants != nullptr) {
      std::vector<proxy::KeyGrantSharedPtr> keys;
      keys.reserve(config->keys.size());
      for (const ApiKey& key : config->keys) keys.push_back(key.grant);
      context.grants->key_sets.push_back(std::move(keys));
    }
    AuthConfigSharedPtr shared = std::move(config);
    return proxy::RequestFilterFactoryCb([shared](proxy::RequestFilterChain& chain) {
      chain.addFilter(std::make_unique<AuthFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(AuthFactory);

}  // namespace
}  // namespace auth
}  // namespace filters
}  // namespace sluice
