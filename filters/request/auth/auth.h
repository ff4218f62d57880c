#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "filters/request/auth/api_keys.h"
#include "source/common/ban/ban_table.h"
#include "source/common/policy/policy.h"
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
  // The key's policy group (AuthConfig::policy owns it).
  const policy::Group* group = nullptr;
  // The limits the key's requests are held to (its own and its group's), from the group.
  std::shared_ptr<policy::KeyLimiter> limiter;
  stats::Counter allowed;
  upstream::TunnelStats tunnel_stats;  // tunnel.key.<name>.*
};

// A number no other AuthConfig of the process has (a worker's credential memo is for one).
uint64_t nextAuthConfigId();

struct AuthConfig {
  const uint64_t id = nextAuthConfigId();
  std::vector<ApiKey> keys;
  std::string realm;
  stats::Counter allowed;
  stats::Counter denied_missing;  // no Proxy-Authorization
  stats::Counter denied_invalid;  // a credential that matches no key
  stats::Counter open_relay;      // requests let through because no key is configured
  stats::Counter denied_banned;   // refused because the client's address is banned
  stats::Counter denied_revoked;  // a key a reload took away (407)
  stats::Counter memo_hits;       // credentials recognised by a memo, not decoded or hashed
  // The process's ban table (null when bans are disabled): wrong keys are recorded in it, and
  // requests from a banned address are refused even with a right key.
  std::shared_ptr<ban::BanTable> bans;
  // The groups the keys belong to; without keys, every request is in the default group.
  policy::PolicySharedPtr policy = policy::Policy::empty();
  // Without keys: the default group's limits, for every request together.
  std::shared_ptr<policy::KeyLimiter> keyless_limiter;
};
using AuthConfigSharedPtr = std::shared_ptr<const AuthConfig>;

// Index of the key whose digest equals `digest`, or -1. Compares against every key, always,
// without an early exit, so the time taken says nothing about which key (or whether any) matched.
int32_t matchKey(const std::vector<ApiKey>& keys, const Digest& digest);

// The credential that last authenticated through one filter instance, so that a keep-alive
// connection presenting it again skips the decoding and the SHA-256 of its key.
//
// Why a hit is as safe as the full path: it matches only the very bytes (and form) that were
// accepted before, compared exactly and in constant time, never a hash of them, so no other
// credential can ever hit, even with several users on one connection (a pooling proxy in
// front). The index it gives is into the same filter config's keys, which a connection keeps
// for its lifetime, and the caller still runs every per-request check on it (the ban, the key's
// revoked flag, the counters). Only a credential that authenticated is remembered. A hit and a
// miss take different times, but a hit only happens for the credential this connection already
// used successfully; a guess that is not it always takes the full path.
//
// Inline and fixed-size (no allocation per connection): a longer credential is just not
// remembered.
class CredentialMemo {
 public:
  // Bytes of presented credential kept: "Basic " and the base64 of a 43-character key with a
  // user name of up to 19 characters (sluice init's keys are 43 characters).
  static constexpr size_t kCapacity = 90;

  // The key index remembered for exactly these bytes in this form, or -1.
  int32_t find(proxy::CredentialForm form, std::string_view presented) const;
  // A presented credential copied into a zeroed room of kCapacity, for findInFixedTime (made
  // once for several memos); size 0 when it could never be remembered (empty, or too long).
  struct Padded {
    explicit Padded(std::string_view presented);
    char bytes[kCapacity] = {};
    size_t size = 0;
  };
  // The same as find(), in a time that does not depend on what is remembered either (its
  // length): for a memo that holds other connections' credentials.
  int32_t findInFixedTime(proxy::CredentialForm form, const Padded& presented) const;
  // Remembers `presented` for key `index`, replacing what was there; a credential longer than
  // kCapacity leaves the memo empty.
  void remember(proxy::CredentialForm form, std::string_view presented, int32_t index);
  void forget() {
    length_ = 0;
    index_ = -1;
  }
  bool empty() const { return length_ == 0; }

 private:
  int32_t index_ = -1;
  uint8_t length_ = 0;  // 0: nothing remembered (an empty credential never authenticates)
  proxy::CredentialForm form_ = proxy::CredentialForm::None;
  char bytes_[kCapacity];
};
static_assert(sizeof(CredentialMemo) <= 96, "the memo is per connection: keep it small");
static_assert(CredentialMemo::kCapacity <= 255, "length_ is one byte");

// The credentials that authenticated recently on one worker thread, for one AuthConfig: a new
// connection presenting one of them skips the decoding and the SHA-256 too. kSets sets of two
// memos, the set chosen by a hash of the presented bytes (absl's, seeded per process, so a
// client cannot aim at a set). Two credentials whose hashes meet both stay; a third takes the
// place of the one used least recently.
//
// The same rules as one connection's memo (above), for every connection of the worker: a hit
// is the very bytes and form that authenticated before, compared in constant time; the caller
// runs every per-request check on it. A guess that is not one of them always takes the full
// path. The memo of an earlier config (before a reload) is emptied when the next config's
// first request on the worker looks: a key's index is only ever used with its own config.
class WorkerCredentials {
 public:
  static constexpr size_t kSets = 32;
  // Two memos whose credentials' hashes meet.
  class Set {
   public:
    // The key index remembered for exactly these bytes in this form, or -1; both memos are
    // compared in full, whatever they hold. A hit makes its memo the one used last.
    int32_t find(proxy::CredentialForm form, std::string_view presented);
    // Remembers `presented` in an empty memo, else in place of the one used least recently.
    void remember(proxy::CredentialForm form, std::string_view presented, int32_t index);
    // Forgets what the last find() hit.
    void forgetFound() { ways_[recent_].forget(); }
    void forgetAll() {
      ways_[0].forget();
      ways_[1].forget();
    }

   private:
    CredentialMemo ways_[2];
    uint8_t recent_ = 0;  // the memo hit or filled last
  };
  // The set for `presented` under `config`, on the calling thread.
  static Set& set(const AuthConfig& config, std::string_view presented);

 private:
  uint64_t config_id_ = 0;
  Set sets_[kSets];
};

// The "sluice.auth" request filter. An instance serves one connection (one HTTP/2 stream
// object, reused by the connection's later streams; one SOCKS5 handshake), so its memo holds
// what that connection last authenticated with. HTTP/2 keeps a memo per stream object rather
// than one per connection: one stream after another reuses the same object, concurrent streams
// warm one each (several users multiplexed on one connection keep theirs). A credential the
// connection has not used yet is looked up in its worker's memo (WorkerCredentials) before it
// is decoded and hashed.
//
// Once it knows the key (or, without keys, that the request is in the default group) it also
// admits the request under the key's and its group's rate and concurrency limits, into the
// slot the codec gave (ProxyRequest::limit_slot): here, before any other filter, so a refused
// request costs no lookup and no connect, and in the one filter every protocol's requests pass,
// so a full-form config cannot leave limits out of a chain that has keys. Over a limit: 429
// (TooManyRequests) with ProxyRequest::retry_after.
class AuthFilter : public proxy::RequestFilter {
 public:
  explicit AuthFilter(AuthConfigSharedPtr config) : config_(std::move(config)) {}
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;
  const CredentialMemo& memo() const { return memo_; }  // for tests

 private:
  // Admits the request under `limiter` when the codec gave a slot; false when a limit refused
  // it (the chain is denied).
  bool admit(proxy::ProxyRequest& request, policy::KeyLimiter* limiter);

  AuthConfigSharedPtr config_;
  CredentialMemo memo_;
};

}  // namespace auth
}  // namespace filters
}  // namespace sluice
