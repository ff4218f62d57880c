#include "filters/request/auth/auth.h"

#include <atomic>
#include <cstring>
#include <memory>

#include <openssl/crypto.h>

#include "absl/hash/hash.h"

#include "source/common/policy/limits.h"
#include "source/common/proxy/credential.h"

#ifndef OPENSSL_IS_BORINGSSL
#error "built against OpenSSL headers: depend on //third_party:boringssl"
#endif

namespace sluice {
namespace filters {
namespace auth {

int32_t matchKey(const std::vector<ApiKey>& keys, const Digest& digest) {
  int32_t found = -1;
  for (size_t i = 0; i < keys.size(); ++i) {
    // CRYPTO_memcmp takes the same time whatever the bytes; the branch-free select keeps the
    // loop's shape identical for matching and non-matching keys.
    int32_t equal = CRYPTO_memcmp(keys[i].digest.data(), digest.data(), digest.size()) == 0;
    int32_t mask = -equal;
    found = (found & ~mask) | (static_cast<int32_t>(i) & mask);
  }
  return found;
}

uint64_t nextAuthConfigId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

WorkerCredentials::Set& WorkerCredentials::set(const AuthConfig& config,
                                               std::string_view presented) {
  // Made on a worker's first new credential, gone with the thread.
  thread_local std::unique_ptr<WorkerCredentials> memo;
  if (memo == nullptr) memo = std::make_unique<WorkerCredentials>();
  if (memo->config_id_ != config.id) {
    for (Set& s : memo->sets_) s.forgetAll();
    memo->config_id_ = config.id;
  }
  return memo->sets_[absl::Hash<std::string_view>{}(presented) % kSets];
}

CredentialMemo::Padded::Padded(std::string_view presented) {
  if (presented.empty() || presented.size() > kCapacity) return;  // never remembered
  memcpy(bytes, presented.data(), presented.size());
  size = presented.size();
}

int32_t CredentialMemo::findInFixedTime(proxy::CredentialForm form, const Padded& presented) const {
  if (presented.size == 0) return -1;
  // Every byte of the room compared, the unused ones zero on both sides; the length and the
  // form folded in without a branch.
  const int differ = CRYPTO_memcmp(bytes_, presented.bytes, kCapacity) |
                     static_cast<int>(presented.size ^ length_) |
                     static_cast<int>(static_cast<uint8_t>(form) ^ static_cast<uint8_t>(form_));
  const int32_t hit = -static_cast<int32_t>(differ == 0 && length_ != 0);
  return (index_ & hit) | ~hit;
}

int32_t WorkerCredentials::Set::find(proxy::CredentialForm form, std::string_view presented) {
  const CredentialMemo::Padded padded(presented);
  const int32_t first = ways_[0].findInFixedTime(form, padded);
  const int32_t second = ways_[1].findInFixedTime(form, padded);
  // Both were compared; which one matched is what a hit already tells.
  if (first >= 0) {
    recent_ = 0;
    return first;
  }
  if (second >= 0) recent_ = 1;
  return second;
}

void WorkerCredentials::Set::remember(proxy::CredentialForm form, std::string_view presented,
                                      int32_t index) {
  uint8_t way = static_cast<uint8_t>(1 - recent_);
  if (ways_[0].empty()) {
    way = 0;
  } else if (ways_[1].empty()) {
    way = 1;
  }
  ways_[way].remember(form, presented, index);
  recent_ = way;
}

int32_t CredentialMemo::find(proxy::CredentialForm form, std::string_view presented) const {
  if (length_ == 0 || form != form_ || presented.size() != length_) return -1;
  // Constant time over the bytes: how long the comparison takes says nothing about how much of
  // the remembered credential a guess got right.
  return CRYPTO_memcmp(bytes_, presented.data(), length_) == 0 ? index_ : -1;
}

void CredentialMemo::remember(proxy::CredentialForm form, std::string_view presented,
                              int32_t index) {
  if (presented.empty() || presented.size() > kCapacity || index < 0) {
    forget();
    return;
  }
  memcpy(bytes_, presented.data(), presented.size());
  // The rest of the room zero, for findInFixedTime (Padded is zeroed the same way).
  memset(bytes_ + presented.size(), 0, kCapacity - presented.size());
  length_ = static_cast<uint8_t>(presented.size());
  form_ = form;
  index_ = index;
}

proxy::RequestFilterStatus AuthFilter::onRequest(proxy::ProxyRequest& request) {
  request.auth_realm = config_->realm;
  // One relaxed atomic load while nobody is banned. A keep-alive connection opened before its
  // client was banned gets no further request through, whatever key it shows.
  ban::BanTable* bans = config_->bans.get();
  if (bans != nullptr && bans->anyBanned() && bans->isBanned(request.client)) {
    config_->denied_banned.inc();
    request.close_connection = true;
    callbacks_->deny(proxy::Denial::Forbidden, "client address is banned");
    return proxy::RequestFilterStatus::StopIteration;
  }
  if (config_->keys.empty()) {
    config_->open_relay.inc();
    request.group = &config_->policy->defaultGroup();
    if (!admit(request, config_->keyless_limiter.get())) {
      return proxy::RequestFilterStatus::StopIteration;
    }
    return proxy::RequestFilterStatus::Continue;
  }
  if (request.credential_form == proxy::CredentialForm::None) {
    config_->denied_missing.inc();
    callbacks_->deny(proxy::Denial::Unauthorized, "proxy credentials required");
    return proxy::RequestFilterStatus::StopIteration;
  }
  // The credential this connection last authenticated with, presented again: the same key,
  // without decoding and hashing it again. Everything below still runs.
  int32_t index = memo_.find(request.credential_form, request.credential);
  const bool remembered = index >= 0;
  // Otherwise, one that authenticated on another connection of this worker (a credential too
  // long to remember leaves the worker's memo alone, as it never is in it).
  WorkerCredentials::Set* worker_memo = nullptr;
  if (!remembered && request.credential.size() <= CredentialMemo::kCapacity) {
    worker_memo = &WorkerCredentials::set(*config_, request.credential);
    index = worker_memo->find(request.credential_form, request.credential);
  }
  const bool worker_remembered = !remembered && index >= 0;
  if (index >= 0) {
    config_->memo_hits.inc();
  } else {
    http::CredentialScratch scratch;  // the decoded key lives only until it is hashed
    std::string_view key;
    if (proxy::presentedKey(request, scratch, key)) index = matchKey(config_->keys, sha256(key));
  }
  if (index < 0) {
    config_->denied_invalid.inc();
    // A missing credential is the first step of every 407 challenge; only a wrong one counts.
    if (bans != nullptr) bans->recordFailure(request.client, "invalid proxy credentials");
    callbacks_->deny(proxy::Denial::Unauthorized, "invalid proxy credentials");
    return proxy::RequestFilterStatus::StopIteration;
  }
  const ApiKey& matched = config_->keys[static_cast<size_t>(index)];
  // A key a reload removed, presented on a connection that began before the reload (new
  // connections run the new config, which does not know it).
  if (matched.grant != nullptr && matched.grant->revoked()) {
    if (remembered) memo_.forget();
    if (worker_remembered) worker_memo->forgetFound();
    config_->denied_revoked.inc();
    callbacks_->deny(proxy::Denial::Unauthorized, proxy::kRevokedReason);
    return proxy::RequestFilterStatus::StopIteration;
  }
  if (!remembered) {
    memo_.remember(request.credential_form, request.credential, index);
    if (worker_memo != nullptr && !worker_remembered) {
      worker_memo->remember(request.credential_form, request.credential, index);
    }
  }
  request.principal = matched.name;
  request.grant = matched.grant.get();
  request.group = matched.group;
  request.principal_tunnel_stats = &matched.tunnel_stats;
  config_->allowed.inc();
  matched.allowed.inc();
  if (!admit(request, matched.limiter.get())) return proxy::RequestFilterStatus::StopIteration;
  return proxy::RequestFilterStatus::Continue;
}

bool AuthFilter::admit(proxy::ProxyRequest& request, policy::KeyLimiter* limiter) {
  request.limiter = limiter;
  // A key without limits (nor its group) pays this relaxed load.
  if (limiter == nullptr || request.limit_slot == nullptr || !limiter->active()) return true;
  policy::LimitRefusal refusal;
  if (limiter->admit(*request.limit_slot, refusal)) return true;
  request.retry_after = refusal.retry_after;
  callbacks_->deny(proxy::Denial::TooManyRequests, refusal.reason);
  return false;
}

}  // namespace auth
}  // namespace filters
}  // namespace sluice
