#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/network/egress.h"
#include "source/common/stats/stats.h"

struct evdns_base;

namespace sluice {
namespace dns {

// One worker's asynchronous resolver: an evdns_base on the worker's dispatcher, a private answer
// cache and the hosts file. Used only from the dispatcher's thread; nothing here locks.
class Resolver {
 public:
  // Addresses have port 0: IPv4 first, then IPv6, in the server's order, deduplicated, at most
  // kMaxAddresses. Empty when the status is not OK.
  using Callback = std::function<void(const absl::Status& status,
                                      const std::vector<network::Address>& addresses)>;

  // A lookup in flight. Owned by the resolver: valid until its callback returns or cancel() is
  // called, whichever comes first.
  class Query {
   public:
    virtual ~Query() = default;
    // The callback will never run. From inside its own callback this is a no-op.
    virtual void cancel() = 0;
  };

  struct Counters {
    // Lookups sent to the name servers (an A+AAAA pair counts once; coalesced waiters do not).
    uint64_t queries = 0;
    // resolve() calls answered from the cache, positive or negative.
    uint64_t cache_hits = 0;
    // resolve() calls answered from the hosts file.
    uint64_t hosts_hits = 0;
    // Lookups that ended in an error other than a timeout (NXDOMAIN, SERVFAIL, no name server).
    uint64_t failures = 0;
    // Lookups that ended with DeadlineExceeded.
    uint64_t timeouts = 0;
    // resolve() calls refused because the name is not a valid host name.
    uint64_t invalid_names = 0;
  };

  static constexpr size_t kMaxAddresses = 16;
  static constexpr std::chrono::milliseconds kDefaultTimeout{5000};
  static constexpr std::chrono::milliseconds kDefaultMaxCacheTtl{60000};
  static constexpr uint32_t kDefaultCacheSize = 4096;
  // Upper bound on how long NXDOMAIN / no-address answers are remembered.
  static constexpr std::chrono::milliseconds kNegativeTtl{5000};
  // Once one address family has answered, the other gets at most this much longer: a server
  // that drops AAAA queries must not cost every lookup the full timeout.
  static constexpr std::chrono::milliseconds kFamilySkew{500};

  // Checks what the constructor would otherwise skip with a log line: name server syntax,
  // negative or zero durations.
  static absl::Status validateConfig(const config::v1::Dns& config);
  // Letters, digits, '-', '_' and '.'; at most 253 characters and 63 per label; no empty label
  // except one trailing dot; the last label must not be all digits (that is an IP, not a name).
  static absl::Status validateHostname(std::string_view host);

  // Name servers come from config.resolvers, or from resolv_conf when that list is empty. If
  // neither yields one, every lookup that needs the network fails with Unavailable.
  Resolver(event::Dispatcher& dispatcher, const config::v1::Dns& config,
           std::string hosts_file = "/etc/hosts", std::string resolv_conf = "/etc/resolv.conf");
  // A resolver whose queries leave from `source` (a group's egress, not empty): it asks the
  // name servers `base` asks, those of the families `source` has an address for, each from
  // that address (evdns binds no source for a name server on loopback, 127.0.0.0/8 or ::1:
  // those are asked from loopback), and shares its options, search list and hosts file. Its
  // cache is its own, so groups of different egress never see each other's answers (nor their
  // timing). A source address that cannot be bound is tried again, at most once a second, by
  // the lookups that find no name server to ask.
  Resolver(const Resolver& base, const network::Egress& source);
  // Drops every outstanding lookup without calling its callback. Must not be called from inside
  // one of this resolver's callbacks. evdns frees its cancelled requests from the loop's next
  // iteration: destroying the dispatcher without one more iteration leaks a few bytes per lookup.
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Literal IPs, invalid names, hosts-file entries and fresh cache entries complete synchronously:
  // the callback runs before resolve() returns and nullptr is returned. Otherwise the callback
  // runs exactly once, later, from the loop, unless the returned Query is cancelled first.
  Query* resolve(std::string_view host, Callback cb);

  const Counters& counters() const { return counters_; }
  size_t cacheEntries() const { return cache_.size(); }
  size_t lookupsInFlight() const { return inflight_.size(); }
  bool hasNameServers() const { return has_name_servers_; }
  // The source addresses of its queries (empty: the system's choice).
  const network::Egress& source() const { return source_; }

 private:
  class Lookup;
  class Waiter;
  struct FamilyRequest;

  struct CacheEntry {
    std::string key;
    // Empty for a negative answer.
    std::vector<network::Address> addresses;
    event::MonotonicTime expires;
  };
  using CacheList = std::list<CacheEntry>;

  using HostsTable = absl::flat_hash_map<std::string, std::vector<network::Address>>;

  static void onEvdnsAnswer(int result, char type, int count, int ttl, void* addresses, void* arg);
  void configureNameServers(const config::v1::Dns& config, const std::string& resolv_conf);
  // Timeout, attempts and in-flight limit; after resolv.conf, whose options they override.
  void applyOptions();
  // Adds the name servers not added yet from the egress address of their family; those whose
  // source cannot be bound stay for a later try.
  void addEgressNameServers();
  void loadHostsFile(const std::string& path);
  // Runs a synchronous answer's callback, keeping track of callback depth.
  void complete(const Callback& cb, const absl::Status& status,
                const std::vector<network::Address>& addresses);
  Query* startLookup(absl::string_view key, Callback cb);
  void finishLookup(Lookup& lookup);
  // Stops a lookup whose last waiter went away.
  void abandonLookup(Lookup& lookup);
  void cacheInsert(const std::string& key, const std::vector<network::Address>& addresses,
                   std::chrono::milliseconds ttl);

  event::Dispatcher& dispatcher_;
  evdns_base* evdns_ = nullptr;
  bool has_name_servers_ = false;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds max_cache_ttl_;
  size_t cache_size_;
  // The resolv.conf its name servers and search list came from (empty: Dns.resolvers).
  std::string resolv_conf_;
  network::Egress source_;
  // An egress resolver's name servers not added yet (their source did not bind), the error
  // that said why, and when the next try may be.
  std::vector<network::Address> unbound_servers_;
  std::string unbound_error_;
  event::MonotonicTime next_bind_try_{};
  // Name servers of a family the egress has no address for were left out.
  bool skipped_servers_ = false;

  // Shared with the egress resolvers made from this one.
  std::shared_ptr<const HostsTable> hosts_;
  // Most recently used first; cache_ keys point into the list's own strings.
  CacheList lru_;
  absl::flat_hash_map<absl::string_view, CacheList::iterator> cache_;
  absl::flat_hash_map<std::string, std::unique_ptr<Lookup>> inflight_;

  // Reused for literal-IP answers so the common CONNECT-to-an-IP path does not allocate.
  std::vector<network::Address> scratch_;
  // How many of this resolver's callbacks are running right now.
  int callback_depth_ = 0;
  Counters counters_;
  // The same counts, summed over every worker's resolver in /stats (dns.*).
  struct Published {
    stats::Counter queries, cache_hits, hosts_hits, failures, timeouts, invalid_names;
    // Lookups sent to name servers, from the first query to the answer, failure or timeout.
    stats::Histogram lookup_duration;
  } published_;
  void count(uint64_t Counters::*field, stats::Counter Published::*stat) {
    ++(counters_.*field);
    (published_.*stat).inc();
  }
};

}  // namespace dns
}  // namespace sluice
