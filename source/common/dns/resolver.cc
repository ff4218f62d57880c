#include "source/common/dns/resolver.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "event2/dns.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace dns {
namespace {

constexpr size_t kMaxHostnameLength = 253;
constexpr size_t kMaxLabelLength = 63;
// A hosts file is read up to this size; the rest is ignored with a warning.
constexpr size_t kMaxHostsFileBytes = 16 << 20;
// evdns sends each query this many times within the timeout, so one lost datagram is not fatal.
constexpr int kAttempts = 2;
// evdns queues requests beyond this per worker; its default of 64 is low for a busy proxy.
constexpr int kMaxRequestsInFlight = 256;
constexpr int kFamilyA = 0;
constexpr int kFamilyAaaa = 1;

const std::vector<network::Address>& noAddresses() {
  static const std::vector<network::Address> empty;
  return empty;
}

std::chrono::milliseconds toMillis(const google::protobuf::Duration& d) {
  return std::chrono::milliseconds(d.seconds() * 1000 + d.nanos() / 1000000);
}

// Untrusted text in an error message: bounded and printable.
std::string printable(std::string_view text) {
  constexpr size_t kMaxShown = 64;
  absl::string_view shown(text.data(), std::min(text.size(), kMaxShown));
  return absl::StrFormat("'%s'%s", absl::CHexEscape(shown), text.size() > kMaxShown ? "..." : "");
}

bool isHostnameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// "0x7f": URL parsers read such a last label as part of an IPv4 address.
bool isHexNumber(std::string_view label) {
  if (label.size() < 2 || label[0] != '0' || (label[1] != 'x' && label[1] != 'X')) return false;
  for (char c : label.substr(2)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}

// evdns's own diagnostics (a name server going down or coming back) into our log.
void evdnsLog(int is_warning, const char* message) {
  if (is_warning) {
    SLUICE_LOG(Warn, "evdns: %s", message);
  } else {
    SLUICE_LOG(Debug, "evdns: %s", message);
  }
}

char toLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Canonical IPv4 dotted quad or IPv6 text, without allocating (unlike Address::parseIp, whose
// error path builds a message for every host name).
bool parseLiteral(std::string_view text, network::Address& out) {
  char buf[INET6_ADDRSTRLEN + 1];
  if (text.empty() || text.size() >= sizeof(buf) || memchr(text.data(), '\0', text.size())) {
    return false;
  }
  memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  sockaddr_in in4;
  memset(&in4, 0, sizeof(in4));
  if (inet_pton(AF_INET, buf, &in4.sin_addr) == 1) {
    in4.sin_family = AF_INET;
    out = network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in4), sizeof(in4));
    return true;
  }
  sockaddr_in6 in6;
  memset(&in6, 0, sizeof(in6));
  if (inet_pton(AF_INET6, buf, &in6.sin6_addr) == 1) {
    in6.sin6_family = AF_INET6;
    out = network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
    return true;
  }
  return false;
}

void addUnique(std::vector<network::Address>& out, const network::Address& address) {
  if (out.size() >= Resolver::kMaxAddresses) return;
  if (std::find(out.begin(), out.end(), address) != out.end()) return;
  out.push_back(address);
}

// Name servers evdns asks from loopback whatever source it is told to bind (its own rule).
bool isLoopback(const network::Address& a) {
  if (a.family() == AF_INET) return (ntohl(a.v4().sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&a.v6().sin6_addr);
}

// Whether `source` can be bound for datagrams of its family: evdns only logs a failed bind.
int probeBind(const network::Address& source) {
  const int fd = ::socket(source.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int error = network::bindSource(fd, source, /*defer_port=*/false);
  ::close(fd);
  return error;
}

// A retry of the egress binds that failed, at most this often.
constexpr std::chrono::seconds kBindRetry{1};

bool validNameServer(const std::string& text) {
  network::Address ignored;
  if (parseLiteral(text, ignored)) return true;
  return network::Address::parseHostPort(text).ok();
}

// NXDOMAIN, or the name exists without addresses of this family.
bool isNegative(int error, bool has_addresses) {
  return error == DNS_ERR_NOTEXIST || error == DNS_ERR_NODATA ||
         (error == DNS_ERR_NONE && !has_addresses);
}

}  // namespace

// What evdns holds as the callback argument of one A or AAAA request. It outlives the lookup
// when the lookup ends first: evdns always calls back exactly once (with DNS_ERR_CANCEL after
// evdns_cancel_request), possibly later from the loop, and that callback frees it.
struct Resolver::FamilyRequest {
  // Null once the lookup no longer wants the answer.
  Lookup* lookup;
  int family;
  evdns_request* handle = nullptr;
};

class Resolver::Waiter : public Resolver::Query {
 public:
  Waiter(Lookup& lookup, Callback cb) : lookup_(&lookup), cb_(std::move(cb)) {}
  // Query
  void cancel() override;

  // Null once delivery has started, which makes cancel() a no-op.
  Lookup* lookup_;
  Callback cb_;
  std::list<Waiter>::iterator self_;
};

// One network lookup (A and AAAA in parallel) and everyone waiting for its answer.
class Resolver::Lookup : public event::DeferredDeletable {
 public:
  struct Family {
    FamilyRequest* request = nullptr;
    bool done = false;
    int error = DNS_ERR_NONE;
    int ttl = 0;
    std::vector<network::Address> addresses;
  };

  Lookup(Resolver& resolver, std::string key)
      : resolver_(resolver),
        key_(std::move(key)),
        timer_(resolver.dispatcher_, [this] { onTimeout(); }) {}
  ~Lookup() override {
    SLUICE_ASSERT(families_[0].request == nullptr && families_[1].request == nullptr,
                  "lookup destroyed with evdns requests attached");
  }

  Waiter& addWaiter(Callback cb) {
    waiters_.emplace_back(*this, std::move(cb));
    auto it = std::prev(waiters_.end());
    it->self_ = it;
    return *it;
  }

  // Detaches from evdns; the requests' callbacks will find nobody and only free their context.
  void orphanRequests() {
    timer_.disable();
    for (Family& family : families_) {
      if (family.request != nullptr) {
        family.request->lookup = nullptr;
        evdns_cancel_request(resolver_.evdns_, family.request->handle);
        family.request = nullptr;
      }
    }
  }

  void onAnswer(int family_index, int result, char type, int count, int ttl, void* addresses) {
    Family& family = families_[family_index];
    family.done = true;
    family.error = result;
    // evdns turns SERVFAIL into a retransmit and then DNS_ERR_TIMEOUT, at once; a real timeout
    // takes all attempts, so it cannot arrive this early.
    if (result == DNS_ERR_TIMEOUT &&
        resolver_.dispatcher_.now() < deadline_ - resolver_.timeout_ / 4) {
      family.error = DNS_ERR_SERVERFAILED;
    }
    family.ttl = std::max(ttl, 0);
    if (result == DNS_ERR_NONE && addresses != nullptr) {
      const auto* bytes = static_cast<const uint8_t*>(addresses);
      if (family_index == kFamilyA && type == DNS_IPv4_A) {
        for (int i = 0; i < count; ++i) {
          uint32_t raw;
          memcpy(&raw, bytes + 4 * i, 4);
          addUnique(family.addresses, network::Address::ipv4(ntohl(raw), 0));
        }
      } else if (family_index == kFamilyAaaa && type == DNS_IPv6_AAAA) {
        for (int i = 0; i < count; ++i) {
          sockaddr_in6 in6;
          memset(&in6, 0, sizeof(in6));
          in6.sin6_family = AF_INET6;
          memcpy(&in6.sin6_addr, bytes + 16 * i, 16);
          addUnique(family.addresses, network::Address::fromSockaddr(
                                          reinterpret_cast<const sockaddr*>(&in6), sizeof(in6)));
        }
      }
    }
    if (families_[0].done && families_[1].done) {
      resolver_.finishLookup(*this);
      return;
    }
    // Addresses or a negative answer settle this family; a failure does not.
    if (!family.addresses.empty() || isNegative(family.error, false)) {
      auto remaining = deadline_ - resolver_.dispatcher_.now();
      if (remaining > kFamilySkew) timer_.enable(kFamilySkew);
    }
  }

  void onTimeout() {
    for (Family& family : families_) {
      if (!family.done) {
        family.done = true;
        family.error = DNS_ERR_TIMEOUT;
      }
    }
    resolver_.finishLookup(*this);
  }

  Resolver& resolver_;
  const std::string key_;
  std::list<Waiter> waiters_;
  Family families_[2];
  event::Timer timer_;
  event::MonotonicTime started_;
  event::MonotonicTime deadline_;
  // Set once the answer is being handed out: cancel() then only removes its own waiter.
  bool delivering_ = false;
};

void Resolver::Waiter::cancel() {
  Lookup* lookup = lookup_;
  if (lookup == nullptr) return;
  lookup->waiters_.erase(self_);  // Destroys this waiter.
  if (lookup->waiters_.empty() && !lookup->delivering_) {
    lookup->resolver_.abandonLookup(*lookup);
  }
}

absl::Status Resolver::validateConfig(const config::v1::Dns& config) {
  for (const std::string& server : config.resolvers()) {
    if (!validNameServer(server)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dns.resolvers: %s is not an ip or ip:port", printable(server)));
    }
  }
  if (config.has_timeout() && toMillis(config.timeout()).count() <= 0) {
    return absl::InvalidArgumentError("dns.timeout must be at least 1ms");
  }
  if (config.has_max_cache_ttl() && toMillis(config.max_cache_ttl()).count() < 0) {
    return absl::InvalidArgumentError("dns.max_cache_ttl must not be negative");
  }
  return absl::OkStatus();
}

absl::Status Resolver::validateHostname(std::string_view host) {
  std::string_view name = host;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("empty host name %s", printable(host)));
  }
  if (name.size() > kMaxHostnameLength) {
    return absl::InvalidArgumentError(absl::StrFormat("host name longer than %d characters: %s",
                                                      kMaxHostnameLength, printable(host)));
  }
  size_t label_start = 0;
  bool label_all_digits = true;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      size_t length = i - label_start;
      if (length == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("empty label in host name %s", printable(host)));
      }
      if (length > kMaxLabelLength) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "label longer than %d characters in host name %s", kMaxLabelLength, printable(host)));
      }
      if (i == name.size() && (label_all_digits || isHexNumber(name.substr(label_start)))) {
        // "127.1" or "1.2.3.04" would be an IP to a browser; never send it to DNS as a name.
        return absl::InvalidArgumentError(
            absl::StrFormat("not a canonical IP address nor a host name: %s", printable(host)));
      }
      label_start = i + 1;
      label_all_digits = true;
      continue;
    }
    if (!isHostnameChar(name[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid character in host name %s", printable(host)));
    }
    if (name[i] < '0' || name[i] > '9') label_all_digits = false;
  }
  return absl::OkStatus();
}

Resolver::Resolver(event::Dispatcher& dispatcher, const config::v1::Dns& config,
                   std::string hosts_file, std::string resolv_conf)
    : dispatcher_(dispatcher),
      timeout_(config.has_timeout() && toMillis(config.timeout()).count() > 0
                   ? toMillis(config.timeout())
                   : kDefaultTimeout),
      max_cache_ttl_(config.has_max_cache_ttl() && toMillis(config.max_cache_ttl()).count() >= 0
                         ? toMillis(config.max_cache_ttl())
                         : kDefaultMaxCacheTtl),
      cache_size_(config.cache_size() > 0 ? config.cache_size() : kDefaultCacheSize) {
  stats::Store& store = stats::Store::get();
  published_ = {
      store.counter("dns.queries", "Lookups sent to name servers."),
      store.counter("dns.cache_hits", "Lookups answered from the cache."),
      store.counter("dns.hosts_hits", "Lookups answered from /etc/hosts."),
      store.counter("dns.failures", "Lookups that failed."),
      store.counter("dns.timeouts", "Lookups that timed out."),
      store.counter("dns.invalid_names", "Names refused before any lookup: not a valid host name."),
      store.histogram("dns.lookup_duration_seconds", stats::latencyBuckets(),
                      "Lookups sent to name servers, from the query to the answer, "
                      "failure or timeout.")};
  // The log hook is process-wide; every worker would set the same one.
  static std::once_flag log_hook_once;
  std::call_once(log_hook_once, [] { evdns_set_log_fn(&evdnsLog); });
  // DISABLE_WHEN_INACTIVE: idle name server sockets must not keep a draining loop alive.
  evdns_ = evdns_base_new(dispatcher_.base(), EVDNS_BASE_DISABLE_WHEN_INACTIVE);
  SLUICE_ASSERT(evdns_ != nullptr, "evdns_base_new failed");
  configureNameServers(config, resolv_conf);
  if (config.ignore_hosts_file()) {
    hosts_ = std::make_shared<const HostsTable>();
  } else {
    loadHostsFile(hosts_file);
  }
  scratch_.reserve(1);
}

Resolver::Resolver(const Resolver& base, const network::Egress& source)
    : dispatcher_(base.dispatcher_),
      timeout_(base.timeout_),
      max_cache_ttl_(base.max_cache_ttl_),
      cache_size_(base.cache_size_),
      resolv_conf_(base.resolv_conf_),
      source_(source),
      hosts_(base.hosts_),
      published_(base.published_) {
  SLUICE_ASSERT(!source_.empty(), "an egress resolver without an egress address");
  evdns_ = evdns_base_new(dispatcher_.base(), EVDNS_BASE_DISABLE_WHEN_INACTIVE);
  SLUICE_ASSERT(evdns_ != nullptr, "evdns_base_new failed");
  if (!resolv_conf_.empty()) {
    // The search list and options only: the name servers are the base's, added below.
    const int rc = evdns_base_resolv_conf_parse(evdns_, DNS_OPTION_SEARCH | DNS_OPTION_MISC,
                                                resolv_conf_.c_str());
    if (rc != 0) {
      SLUICE_LOG(Debug, "dns: %s read for an egress resolver: evdns %d", resolv_conf_, rc);
    }
  }
  for (int i = 0;; ++i) {
    sockaddr_storage ss{};
    const int n = evdns_base_get_nameserver_addr(base.evdns_, i, reinterpret_cast<sockaddr*>(&ss),
                                                 sizeof(ss));
    if (n < 0) break;
    if (n > static_cast<int>(sizeof(ss))) continue;
    const network::Address server =
        network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), n);
    // A group with an egress sends nothing from an address not chosen for it.
    if (source_.sourceFor(server.family()) == nullptr) {
      SLUICE_LOG(Debug,
                 "dns: name server %s is not asked from egress %s/%s: no address of its family",
                 server.asString(), source_.ipv4.valid() ? source_.ipv4.ipString() : "-",
                 source_.ipv6.valid() ? source_.ipv6.ipString() : "-");
      skipped_servers_ = true;
      continue;
    }
    unbound_servers_.push_back(server);
  }
  addEgressNameServers();
  if (!has_name_servers_ && unbound_servers_.empty() && skipped_servers_) {
    SLUICE_LOG(Error,
               "dns: no name server of the families of egress %s/%s; lookups from it will fail",
               source_.ipv4.valid() ? source_.ipv4.ipString() : "-",
               source_.ipv6.valid() ? source_.ipv6.ipString() : "-");
  }
  applyOptions();
  scratch_.reserve(1);
}

void Resolver::addEgressNameServers() {
  std::vector<network::Address> failed;
  for (const network::Address& server : unbound_servers_) {
    const network::Address& from = *source_.sourceFor(server.family());
    int error = isLoopback(server) ? 0 : probeBind(from);
    if (error == 0) {
      // evdns binds each name server's socket to the "bind-to" address set when it is added.
      const std::string bind_to =
          server.family() == AF_INET6 ? absl::StrFormat("[%s]", from.ipString()) : from.ipString();
      if (evdns_base_set_option(evdns_, "bind-to:", bind_to.c_str()) == 0 &&
          evdns_base_nameserver_sockaddr_add(evdns_, server.sockaddr_ptr(), server.length(), 0) ==
              0) {
        continue;
      }
      error = EADDRNOTAVAIL;
    }
    const bool first = unbound_error_.empty();
    unbound_error_ = absl::StrFormat("cannot send DNS queries to %s from egress %s: %s",
                                     server.asString(), from.ipString(), strerror(error));
    if (first) {
      SLUICE_LOG(Error, "dns: %s (tried again at most once a second)", unbound_error_);
    }
    failed.push_back(server);
  }
  if (failed.empty() && !unbound_error_.empty()) {
    SLUICE_LOG(Info, "dns: every name server is now asked from egress %s/%s",
               source_.ipv4.valid() ? source_.ipv4.ipString() : "-",
               source_.ipv6.valid() ? source_.ipv6.ipString() : "-");
    unbound_error_.clear();
  }
  unbound_servers_ = std::move(failed);
  next_bind_try_ = dispatcher_.now() + kBindRetry;
  has_name_servers_ = evdns_base_count_nameservers(evdns_) > 0;
}

Resolver::~Resolver() {
  SLUICE_ASSERT(callback_depth_ == 0, "resolver destroyed from inside one of its callbacks");
  for (auto& entry : inflight_) entry.second->orphanRequests();
  inflight_.clear();
  // Nothing of ours is left in evdns; 0 drops its internal requests (probes) silently.
  evdns_base_free(evdns_, 0);
}

void Resolver::configureNameServers(const config::v1::Dns& config, const std::string& resolv_conf) {
  if (config.resolvers_size() > 0) {
    resolv_conf_.clear();
    for (const std::string& server : config.resolvers()) {
      if (!validNameServer(server) || evdns_base_nameserver_ip_add(evdns_, server.c_str()) != 0) {
        SLUICE_LOG(Error, "dns: ignoring name server %s: not an ip or ip:port", printable(server));
      }
    }
  } else {
    resolv_conf_ = resolv_conf;
    // Not DNS_OPTIONS_ALL: the hosts file is ours to read (evdns consults it only in
    // evdns_getaddrinfo), and NO_DEFAULT stops evdns from guessing 127.0.0.1.
    int rc = evdns_base_resolv_conf_parse(evdns_,
                                          DNS_OPTION_NAMESERVERS | DNS_OPTION_SEARCH |
                                              DNS_OPTION_MISC | DNS_OPTION_NAMESERVERS_NO_DEFAULT,
                                          resolv_conf.c_str());
    if (rc != 0) {
      SLUICE_LOG(Error, "dns: cannot use %s (evdns error %d)", resolv_conf, rc);
    }
  }
  has_name_servers_ = evdns_base_count_nameservers(evdns_) > 0;
  if (!has_name_servers_) {
    SLUICE_LOG(Error, "dns: no name server configured; lookups of names will fail");
  }
  applyOptions();
}

void Resolver::applyOptions() {
  // Set after resolv.conf so its "options timeout:/attempts:" do not override the config.
  double per_try = std::max(0.01, timeout_.count() / 1000.0 / kAttempts);
  const std::pair<const char*, std::string> options[] = {
      {"timeout:", absl::StrFormat("%.3f", per_try)},
      {"attempts:", absl::StrFormat("%d", kAttempts)},
      {"max-inflight:", absl::StrFormat("%d", kMaxRequestsInFlight)},
  };
  for (const auto& option : options) {
    if (evdns_base_set_option(evdns_, option.first, option.second.c_str()) != 0) {
      SLUICE_LOG(Warn, "dns: evdns refused option %s%s", option.first, option.second);
    }
  }
}

void Resolver::loadHostsFile(const std::string& path) {
  hosts_ = std::make_shared<const HostsTable>();
  FILE* file = fopen(path.c_str(), "re");
  if (file == nullptr) {
    SLUICE_LOG(Debug, "dns: no hosts file at %s", path);
    return;
  }
  std::string data;
  char chunk[16384];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), file)) > 0) {
    if (data.size() + n > kMaxHostsFileBytes) {
      SLUICE_LOG(Warn, "dns: %s is larger than %d bytes; the rest is ignored", path,
                 kMaxHostsFileBytes);
      data.append(chunk, kMaxHostsFileBytes - data.size());
      break;
    }
    data.append(chunk, n);
  }
  fclose(file);

  // Per name: IPv4 then IPv6, each in file order, as a resolver answer would be.
  absl::flat_hash_map<std::string,
                      std::pair<std::vector<network::Address>, std::vector<network::Address>>>
      by_name;
  std::string_view rest(data);
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    line = line.substr(0, line.find('#'));
    network::Address address;
    bool first = true;
    while (!line.empty()) {
      size_t start = line.find_first_not_of(" \t\r\v\f");
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      size_t end = std::min(line.find_first_of(" \t\r\v\f"), line.size());
      std::string_view field = line.substr(0, end);
      line.remove_prefix(end);
      if (first) {
        first = false;
        if (!parseLiteral(field, address)) break;  // Scoped or malformed: skip the line.
        continue;
      }
      if (!validateHostname(field).ok()) continue;
      std::string name(field);
      if (name.back() == '.') name.pop_back();
      for (char& c : name) c = toLower(c);
      auto& lists = by_name[name];
      addUnique(address.family() == AF_INET ? lists.first : lists.second, address);
    }
  }
  auto hosts = std::make_shared<HostsTable>();
  hosts->reserve(by_name.size());
  for (auto& entry : by_name) {
    std::vector<network::Address>& merged = entry.second.first;
    for (const auto& v6 : entry.second.second) addUnique(merged, v6);
    hosts->emplace(entry.first, std::move(merged));
  }
  hosts_ = std::move(hosts);
}

void Resolver::complete(const Callback& cb, const absl::Status& status,
                        const std::vector<network::Address>& addresses) {
  ++callback_depth_;
  cb(status, addresses);
  --callback_depth_;
}

Resolver::Query* Resolver::resolve(std::string_view host, Callback cb) {
  SLUICE_ASSERT(cb != nullptr, "resolve() without a callback");
  network::Address literal;
  if (parseLiteral(host, literal)) {
    // A nested call (from inside a callback) must not overwrite what the outer one is reading.
    std::vector<network::Address> nested;
    std::vector<network::Address>& out = callback_depth_ == 0 ? scratch_ : nested;
    out.clear();
    out.push_back(literal);
    complete(cb, absl::OkStatus(), out);
    return nullptr;
  }
  absl::Status valid = validateHostname(host);
  if (!valid.ok()) {
    count(&Counters::invalid_names, &Published::invalid_names);
    complete(cb, valid, noAddresses());
    return nullptr;
  }

  // validateHostname bounds the size: 253 characters and a trailing dot.
  char buf[kMaxHostnameLength + 2];
  for (size_t i = 0; i < host.size(); ++i) buf[i] = toLower(host[i]);
  const absl::string_view key(buf, host.size());
  const absl::string_view bare = key.back() == '.' ? key.substr(0, key.size() - 1) : key;

  if (!hosts_->empty()) {
    auto found = hosts_->find(bare);
    if (found != hosts_->end()) {
      count(&Counters::hosts_hits, &Published::hosts_hits);
      complete(cb, absl::OkStatus(), found->second);
      return nullptr;
    }
  }

  auto cached = cache_.find(key);
  if (cached != cache_.end()) {
    CacheEntry& entry = *cached->second;
    // An expired entry stays until the new answer replaces it: a callback may still hold a
    // reference to its addresses.
    if (dispatcher_.now() < entry.expires) {
      lru_.splice(lru_.begin(), lru_, cached->second);
      count(&Counters::cache_hits, &Published::cache_hits);
      if (entry.addresses.empty()) {
        complete(cb, absl::NotFoundError(absl::StrFormat("%s: no such host", entry.key)),
                 entry.addresses);
      } else {
        complete(cb, absl::OkStatus(), entry.addresses);
      }
      return nullptr;
    }
  }

  auto pending = inflight_.find(key);
  if (pending != inflight_.end()) return &pending->second->addWaiter(std::move(cb));

  // An egress address that could not be bound may have come up since.
  if (!unbound_servers_.empty() && dispatcher_.now() >= next_bind_try_) addEgressNameServers();
  if (!has_name_servers_) {
    count(&Counters::failures, &Published::failures);
    complete(
        cb,
        absl::UnavailableError(
            !unbound_error_.empty() ? absl::StrFormat("%s: %s", std::string(key), unbound_error_)
            : skipped_servers_
                ? absl::StrFormat("%s: no DNS name server of the egress address's family",
                                  std::string(key))
                : absl::StrFormat("%s: no DNS name server configured", std::string(key))),
        noAddresses());
    return nullptr;
  }
  return startLookup(key, std::move(cb));
}

Resolver::Query* Resolver::startLookup(absl::string_view key, Callback cb) {
  auto lookup = std::make_unique<Lookup>(*this, std::string(key));
  std::string name(key);
  int flags = 0;
  if (name.back() == '.') {
    // Fully qualified: no search domains.
    name.pop_back();
    flags = DNS_QUERY_NO_SEARCH;
  }
  for (int family = kFamilyA; family <= kFamilyAaaa; ++family) {
    auto* request = new FamilyRequest{lookup.get(), family};
    evdns_request* handle = family == kFamilyA
                                ? evdns_base_resolve_ipv4(evdns_, name.c_str(), flags,
                                                          &Resolver::onEvdnsAnswer, request)
                                : evdns_base_resolve_ipv6(evdns_, name.c_str(), flags,
                                                          &Resolver::onEvdnsAnswer, request);
    Lookup::Family& state = lookup->families_[family];
    if (handle == nullptr) {
      // evdns never calls back for a request it did not create.
      delete request;
      state.done = true;
      state.error = DNS_ERR_UNKNOWN;
    } else {
      request->handle = handle;
      state.request = request;
    }
  }
  count(&Counters::queries, &Published::queries);
  if (lookup->families_[kFamilyA].done && lookup->families_[kFamilyAaaa].done) {
    count(&Counters::failures, &Published::failures);
    complete(cb,
             absl::UnavailableError(absl::StrFormat("%s: cannot start lookup", std::string(key))),
             noAddresses());
    return nullptr;
  }
  lookup->started_ = dispatcher_.now();
  lookup->deadline_ = lookup->started_ + timeout_;
  lookup->timer_.enable(timeout_);
  Waiter& waiter = lookup->addWaiter(std::move(cb));
  inflight_.emplace(std::string(key), std::move(lookup));
  return &waiter;
}

void Resolver::onEvdnsAnswer(int result, char type, int count, int ttl, void* addresses,
                             void* arg) {
  std::unique_ptr<FamilyRequest> request(static_cast<FamilyRequest*>(arg));
  Lookup* lookup = request->lookup;
  if (lookup == nullptr) return;  // Orphaned: the lookup ended or was cancelled.
  lookup->families_[request->family].request = nullptr;
  lookup->onAnswer(request->family, result, type, count, ttl, addresses);
}

void Resolver::finishLookup(Lookup& lookup) {
  auto it = inflight_.find(lookup.key_);
  SLUICE_ASSERT(it != inflight_.end() && it->second.get() == &lookup, "finishing unknown lookup");
  std::unique_ptr<Lookup> owned = std::move(it->second);
  inflight_.erase(it);
  owned->orphanRequests();
  published_.lookup_duration.record(dispatcher_.now() - owned->started_);

  const Lookup::Family& a = owned->families_[kFamilyA];
  const Lookup::Family& aaaa = owned->families_[kFamilyAaaa];
  std::vector<network::Address> addresses = a.addresses;
  for (const auto& v6 : aaaa.addresses) addUnique(addresses, v6);

  absl::Status status;
  const bool a_negative = isNegative(a.error, !a.addresses.empty());
  const bool aaaa_negative = isNegative(aaaa.error, !aaaa.addresses.empty());
  if (!addresses.empty()) {
    int ttl = INT32_MAX;
    if (!a.addresses.empty()) ttl = std::min(ttl, a.ttl);
    if (!aaaa.addresses.empty()) ttl = std::min(ttl, aaaa.ttl);
    cacheInsert(owned->key_, addresses,
                std::min<std::chrono::milliseconds>(std::chrono::seconds(ttl), max_cache_ttl_));
  } else if (a_negative || aaaa_negative) {
    count(&Counters::failures, &Published::failures);
    status = absl::NotFoundError(absl::StrFormat("%s: no such host", owned->key_));
    // Only a negative answer for both families is trusted enough to remember.
    cacheInsert(owned->key_, addresses,
                a_negative && aaaa_negative ? std::min(kNegativeTtl, max_cache_ttl_)
                                            : std::chrono::milliseconds(0));
  } else if (a.error == DNS_ERR_TIMEOUT || aaaa.error == DNS_ERR_TIMEOUT) {
    count(&Counters::timeouts, &Published::timeouts);
    status = absl::DeadlineExceededError(absl::StrFormat("%s: lookup timed out", owned->key_));
    cacheInsert(owned->key_, addresses, std::chrono::milliseconds(0));
  } else {
    count(&Counters::failures, &Published::failures);
    const int error = a.error != DNS_ERR_NONE ? a.error : aaaa.error;
    status = absl::UnavailableError(
        absl::StrFormat("%s: lookup failed: %s", owned->key_, evdns_err_to_string(error)));
    cacheInsert(owned->key_, addresses, std::chrono::milliseconds(0));
  }

  owned->delivering_ = true;
  while (!owned->waiters_.empty()) {
    auto waiter = owned->waiters_.begin();
    waiter->lookup_ = nullptr;
    complete(waiter->cb_, status, addresses);
    owned->waiters_.erase(waiter);
  }
  // The lookup's own timer may be the caller: free it after this callback returns.
  dispatcher_.deferredDelete(std::move(owned));
}

void Resolver::abandonLookup(Lookup& lookup) {
  auto it = inflight_.find(lookup.key_);
  SLUICE_ASSERT(it != inflight_.end() && it->second.get() == &lookup, "abandoning unknown lookup");
  it->second->orphanRequests();
  inflight_.erase(it);
}

void Resolver::cacheInsert(const std::string& key, const std::vector<network::Address>& addresses,
                           std::chrono::milliseconds ttl) {
  auto found = cache_.find(key);
  if (ttl.count() <= 0) {
    // Not cacheable: drop any stale entry so it does not hold a slot.
    if (found != cache_.end()) {
      CacheList::iterator entry = found->second;
      cache_.erase(found);
      lru_.erase(entry);
    }
    return;
  }
  const event::MonotonicTime expires = dispatcher_.now() + ttl;
  if (found != cache_.end()) {
    found->second->addresses = addresses;
    found->second->expires = expires;
    lru_.splice(lru_.begin(), lru_, found->second);
    return;
  }
  if (cache_.size() >= cache_size_) {
    cache_.erase(absl::string_view(lru_.back().key));
    lru_.pop_back();
  }
  lru_.push_front(CacheEntry{key, addresses, expires});
  cache_.emplace(absl::string_view(lru_.front().key), lru_.begin());
}

}  // namespace dns
}  // namespace sluice
