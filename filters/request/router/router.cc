#include "filters/request/router/router.h"

#include <cstring>

#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/network/proxy_protocol.h"
#include "source/common/policy/policy.h"
#include "source/common/upstream/pool.h"

namespace sluice {
namespace filters {
namespace router {

RouterFilter::RouterFilter(RouterConfigSharedPtr config) : config_(std::move(config)) {}

RouterFilter::~RouterFilter() { onRequestEnd(); }

const network::Address& RouterFilter::clientLocal() {
  if (!client_local_known_) {
    client_local_known_ = true;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (request_->client_fd >= 0 &&
        ::getsockname(request_->client_fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      client_local_ = network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
    }
  }
  return client_local_;
}

proxy::RequestFilterStatus RouterFilter::onRequest(proxy::ProxyRequest& request) {
  request_ = &request;
  client_local_known_ = false;
  client_local_ = network::Address();
  next_address_ = 0;
  unbindable_families_ = 0;
  // Addresses an earlier filter checked (or an earlier attempt resolved) are dialled as they are;
  // a destination its route's parent resolves is not looked up here at all.
  if (request.pinned_count > 0 || request.parent_route != nullptr ||
      (request.parent_route = config_->routes->resolvedByParent(request)) != nullptr) {
    route();
    return proxy::RequestFilterStatus::StopIteration;
  }
  started_ = callbacks_->worker().dispatcher().now();
  query_ = callbacks_->worker()
               .resolver(policy::egressOf(request.group))
               .resolve(request.host,
                        [this](const absl::Status& status, const std::vector<network::Address>& a) {
                          query_ = nullptr;
                          onResolved(status, a);
                        });
  return proxy::RequestFilterStatus::StopIteration;
}

namespace {

std::chrono::microseconds since(event::MonotonicTime start, event::MonotonicTime now) {
  return std::chrono::duration_cast<std::chrono::microseconds>(now - start);
}

}  // namespace

void RouterFilter::onResolved(const absl::Status& status,
                              const std::vector<network::Address>& addresses) {
  request_->resolve_time = since(started_, callbacks_->worker().dispatcher().now());
  if (!status.ok() || addresses.empty()) {
    config_->stats.dns_fail.inc();
    request_->failure = upstream::dnsFailure(absl::IsDeadlineExceeded(status));
    error_ = status.ok() ? absl::StrFormat("%s: no addresses", request_->host)
                         : std::string(status.message());
    callbacks_->deny(proxy::Denial::BadGateway, error_);
    return;
  }
  // Kept in the request, so a retry dials the same addresses without another lookup.
  for (const network::Address& a : addresses) {
    if (request_->pinned_count == proxy::ProxyRequest::kMaxPinned) break;
    network::Address& pinned = request_->pinned[request_->pinned_count++];
    pinned = a;
    pinned.setPort(request_->port);
  }
  route();
}

uint32_t orderAddresses(network::Address* addresses, uint32_t count, FamilyPreference prefer,
                        int only_family) {
  // One address (a literal, a pooled destination) has no order to settle.
  if (count <= 1) {
    return count == 1 && (only_family == 0 || addresses[0].family() == only_family) ? 1 : 0;
  }
  const int first = prefer == FamilyPreference::Ipv6 ? AF_INET6 : AF_INET;
  network::Address preferred[proxy::ProxyRequest::kMaxPinned];
  network::Address other[proxy::ProxyRequest::kMaxPinned];
  uint32_t np = 0, no = 0;
  for (uint32_t i = 0; i < count && i < proxy::ProxyRequest::kMaxPinned; ++i) {
    const int family = addresses[i].family();
    if (only_family != 0 && family != only_family) continue;
    (family == first ? preferred[np++] : other[no++]) = addresses[i];
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < np || i < no; ++i) {
    if (i < np) addresses[n++] = preferred[i];
    if (i < no) addresses[n++] = other[i];
  }
  return n;
}

uint32_t keepReachable(network::Address* addresses, uint32_t count, const network::Egress& egress) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (egress.reaches(addresses[i].family())) addresses[n++] = addresses[i];
  }
  return n;
}

void RouterFilter::route() {
  if (request_->parent_route != nullptr) {
    routeToNamingParent();
    return;
  }
  const uint32_t before = request_->pinned_count;
  request_->pinned_count = orderAddresses(request_->pinned, request_->pinned_count, config_->prefer,
                                          config_->only_family);
  if (request_->pinned_count == 0) {
    request_->failure = upstream::dnsFailure(false);
    error_ = absl::StrFormat("%s: no IPv%d address (of %d)", request_->host,
                             config_->only_family == AF_INET6 ? 6 : 4, before);
    callbacks_->deny(proxy::Denial::BadGateway, error_);
    return;
  }
  // Every upstream socket a client holds counts, pooled or new, across all its connections and
  // streams.
  if (!slot_.held() && !config_->budget->admit(request_->client, slot_)) {
    request_->denial_cause = proxy::DenialCause::ConnectionLimit;
    callbacks_->deny(proxy::Denial::ServiceUnavailable, kClientUpstreamsFull);
    return;
  }
  uint32_t at = 0;
  route_ = config_->routes->empty() ? nullptr : config_->routes->match(*request_, at);
  if (route_ != nullptr && route_->parents.empty()) route_ = nullptr;  // direct
  if (route_ == nullptr && request_->kind == proxy::RequestKind::UdpAssociation) {
    // Direct datagrams are the relay's own to send.
    error_ =
        absl::StrFormat("%s:%d: no route through a SOCKS5 parent", request_->host, request_->port);
    callbacks_->deny(proxy::Denial::BadGateway, error_);
    return;
  }
  const network::Egress& egress = policy::egressOf(request_->group);
  if (route_ == nullptr) {
    // Direct: only destinations of the families the group's egress has (through a parent, it
    // is the parent's addresses that must be).
    const uint32_t of_family = request_->pinned_count;
    request_->pinned_count = keepReachable(request_->pinned, request_->pinned_count, egress);
    if (request_->pinned_count == 0) {
      request_->failure = upstream::dnsFailure(false);
      error_ = absl::StrFormat("%s: no IPv%d address (of %d), the family of group %s's egress",
                               request_->host, egress.ipv4.valid() ? 4 : 6, of_family,
                               request_->group->name);
      callbacks_->deny(proxy::Denial::BadGateway, error_);
      return;
    }
  }
  if (route_ == nullptr && request_->kind == proxy::RequestKind::Forward &&
      !request_->fresh_connection) {
    for (uint32_t i = 0; i < request_->pinned_count; ++i) {
      // Only a connection made from the source this request would dial from: a group never
      // gets one another group's egress opened.
      const network::Address* source = egress.sourceFor(request_->pinned[i].family());
      network::ConnectionPtr pooled = callbacks_->worker().pool().acquire(
          request_->pinned[i], source != nullptr ? *source : network::Address());
      if (pooled) {
        config_->stats.pool_reuse.inc();
        request_->upstream_address = request_->pinned[i];
        ready(std::move(pooled), std::move(slot_), true);
        return;
      }
    }
  }
  beginConnecting();
  if (route_ != nullptr) {
    target_ = request_->pinned[at];
    startParents();
    return;
  }
  dial_ = request_->pinned;
  dial_count_ = request_->pinned_count;
  next_address_ = 0;
  connectNext();
}

void RouterFilter::routeToNamingParent() {
  if (request_->host.size() > 255) {  // no DNS name is; SOCKS5 cannot carry one
    callbacks_->deny(proxy::Denial::BadRequest, "destination name longer than 255 bytes");
    return;
  }
  if (!slot_.held() && !config_->budget->admit(request_->client, slot_)) {
    request_->denial_cause = proxy::DenialCause::ConnectionLimit;
    callbacks_->deny(proxy::Denial::ServiceUnavailable, kClientUpstreamsFull);
    return;
  }
  route_ = request_->parent_route;
  beginConnecting();
  target_ = network::Address();  // the parent gets request_->host
  startParents();
}

void RouterFilter::beginConnecting() {
  // The connect timer exists only while connecting: pooled requests and established tunnels
  // (the long-lived, idle ones) do not carry it. Through parents it covers every parent tried.
  if (!timer_) {
    timer_ = std::make_unique<event::Timer>(callbacks_->worker().dispatcher(),
                                            [this] { onConnectTimeout(); });
  }
  timer_->enable(config_->connect_timeout);
  started_ = callbacks_->worker().dispatcher().now();
  attempts_[0].slot = std::move(slot_);
}

void RouterFilter::startParents() {
  parents_tried_ = 0;
  first_parent_ = route_->balance == upstream::Balance::RoundRobin
                      ? route_->next.fetch_add(1, std::memory_order_relaxed) %
                            static_cast<uint32_t>(route_->parents.size())
                      : 0;
  if (!nextParent()) callbacks_->deny(proxy::Denial::BadGateway, error_);
}

void RouterFilter::ready(network::ConnectionPtr connection, network::ConnectionSlot slot,
                         bool reused) {
  proxy::UpstreamInfo info = config_->upstream;
  info.reused = reused;
  info.limiter = request_->limit_slot != nullptr ? request_->limit_slot->limiter() : nullptr;
  // The pool keeps it under the source it was made from.
  const network::Address* source =
      policy::egressOf(request_->group).sourceFor(connection->peer().family());
  info.source = source != nullptr ? *source : network::Address();
  upstream::Pool* pool = &callbacks_->worker().pool();
  if (request_->kind == proxy::RequestKind::UdpAssociation) {
    // A control connection: it carries no requests, so it never goes to the pool.
    pool = nullptr;
    info.udp_relay = handshake_ ? handshake_->udpRelay() : network::Address();
  } else if (parent_ != nullptr) {
    // Its first bytes named this request's client: no other request may take it.
    if (parent_->proxy_protocol != 0) pool = nullptr;
    // Kept apart from direct connections, under the parent (dialParent looks there).
    info.via = parent_->health->id();
    if (parent_->protocol == upstream::ParentProtocol::Socks5) {
      info.pool_destination = target_;
      // A tunnel to a name the parent resolved is kept for nobody: the name is not a key.
      if (!target_.valid()) pool = nullptr;
    }
    if (parent_->protocol == upstream::ParentProtocol::Http &&
        request_->kind == proxy::RequestKind::Forward) {
      info.via_http_parent = true;
      info.parent_target = target_;
      if (!target_.valid()) {
        info.parent_target_host = request_->host;
        info.parent_target_port = request_->port;
      }
      info.parent_authorization = parent_->auth.proxy_authorization;
    }
  }
  callbacks_->upstreamReady(
      upstream::UpstreamHandle(std::move(connection), pool, info, std::move(slot)));
}

bool RouterFilter::nextParent() {
  const event::MonotonicTime now = callbacks_->worker().dispatcher().now();
  const uint32_t count = static_cast<uint32_t>(route_->parents.size());
  // The next healthy parent not tried yet; when every one left is unhealthy, the next one
  // anyway: a route does not refuse a request only because its parents failed before.
  const upstream::Parent* chosen = nullptr;
  for (uint32_t i = parents_tried_; i < count && chosen == nullptr; ++i) {
    const upstream::Parent* candidate = route_->parents[(first_parent_ + i) % count];
    if (candidate->health->healthy(now)) {
      chosen = candidate;
      // The unhealthy ones passed over are not tried for this request.
      for (uint32_t j = parents_tried_; j < i; ++j) {
        route_->parents[(first_parent_ + j) % count]->stats.skipped.inc();
      }
      parents_tried_ = i + 1;
    }
  }
  if (chosen == nullptr && parents_tried_ < count) {
    chosen = route_->parents[(first_parent_ + parents_tried_) % count];
    ++parents_tried_;
  }
  if (chosen == nullptr) return false;
  parent_ = chosen;
  if (request_->kind == proxy::RequestKind::UdpAssociation &&
      parent_->protocol != upstream::ParentProtocol::Socks5) {
    // Only SOCKS5 carries datagrams: passed by, not the parent's failure.
    error_ = absl::StrFormat("parent proxy %s cannot carry UDP (not SOCKS5)", parent_->name);
    return nextParent();
  }
  const network::Egress& egress = policy::egressOf(request_->group);
  if (parent_->literal.valid() && !egress.reaches(parent_->literal.family())) {
    // Not the parent's fault: no health mark, the next parent is tried.
    request_->failure = upstream::dnsFailure(false);
    error_ = absl::StrFormat("parent proxy %s: %s is not IPv%d, the family of group %s's egress",
                             parent_->name, parent_->literal.asString(),
                             egress.ipv4.valid() ? 4 : 6, request_->group->name);
    return nextParent();
  }
  parent_->stats.requests.inc();
  if (parent_->literal.valid()) {
    ParentAddresses& addresses = parentAddresses();
    addresses[0] = parent_->literal;
    dial_ = addresses.data();
    dial_count_ = 1;
    dialParent();
    return true;
  }
  query_ = callbacks_->worker().resolver(egress).resolve(
      parent_->host, [this](const absl::Status& status, const std::vector<network::Address>& a) {
        query_ = nullptr;
        onParentResolved(status, a);
      });
  return true;
}

void RouterFilter::onParentResolved(const absl::Status& status,
                                    const std::vector<network::Address>& addresses) {
  ParentAddresses& parent_addresses = parentAddresses();
  uint32_t n = 0;
  for (const network::Address& a : addresses) {
    if (n == proxy::ProxyRequest::kMaxPinned) break;
    parent_addresses[n] = a;
    parent_addresses[n++].setPort(parent_->port);
  }
  n = orderAddresses(parent_addresses.data(), n, config_->prefer, config_->only_family);
  const uint32_t of_family = n;
  const network::Egress& egress = policy::egressOf(request_->group);
  n = keepReachable(parent_addresses.data(), n, egress);
  if (status.ok() && of_family > 0 && n == 0) {
    request_->failure = upstream::dnsFailure(false);
    error_ = absl::StrFormat(
        "parent proxy %s: %s has no IPv%d address, the family of group %s's "
        "egress",
        parent_->name, parent_->host, egress.ipv4.valid() ? 4 : 6, request_->group->name);
    if (nextParent()) return;
    timer_->disable();
    callbacks_->deny(proxy::Denial::BadGateway, error_);
    return;
  }
  if (!status.ok() || n == 0) {
    request_->failure = upstream::dnsFailure(absl::IsDeadlineExceeded(status));
    error_ = absl::StrFormat("parent proxy %s: %s does not resolve", parent_->name, parent_->host);
    parentFailed();
    return;
  }
  dial_ = parent_addresses.data();
  dial_count_ = n;
  dialParent();
}

void RouterFilter::dialParent() {
  if (request_->kind == proxy::RequestKind::Forward && !request_->fresh_connection &&
      parent_->proxy_protocol == 0) {
    // A kept-alive connection through this parent: to it (an HTTP parent takes requests for
    // any destination), or a SOCKS5 parent's tunnel to this very destination.
    const network::Egress& egress = policy::egressOf(request_->group);
    const uint64_t via = parent_->health->id();
    for (uint32_t i = 0; i < dial_count_; ++i) {
      const network::Address* source = egress.sourceFor(dial_[i].family());
      const bool socks5 = parent_->protocol == upstream::ParentProtocol::Socks5;
      if (socks5 && !target_.valid()) break;
      const network::Address& key = socks5 ? target_ : dial_[i];
      network::ConnectionPtr pooled = callbacks_->worker().pool().acquire(
          key, source != nullptr ? *source : network::Address(), via);
      if (pooled) {
        config_->stats.pool_reuse.inc();
        timer_->disable();
        request_->upstream_address = pooled->peer();
        ready(std::move(pooled), std::move(attempts_[0].slot), true);
        return;
      }
    }
  }
  next_address_ = 0;
  connectNext();
}

void RouterFilter::parentFailed() {
  parent_->stats.failures.inc();
  if (parent_->health->recordFailure(callbacks_->worker().dispatcher().now(), parent_->max_failures,
                                     parent_->unhealthy_for)) {
    parent_->stats.unhealthy.inc();
  }
  if (nextParent()) return;
  timer_->disable();
  if (race_timer_) race_timer_->disable();
  callbacks_->deny(request_->failure.kind == upstream::FailureKind::Timeout
                       ? proxy::Denial::GatewayTimeout
                       : proxy::Denial::BadGateway,
                   error_);
}

void RouterFilter::onParentReady() {
  parent_->health->recordSuccess();
  timer_.reset();
  race_timer_.reset();
  network::ConnectionPtr connection = std::move(handshaking_);
  // What the destination sent right behind the parent's answer reaches the codec's side from
  // the loop, once it holds the connection.
  if (!connection->readBuffer().empty()) connection->scheduleRead();
  ready(std::move(connection), std::move(handshake_slot_), false);
}

void RouterFilter::onParentFailed(upstream::Failure failure, std::string_view reason) {
  request_->failure = failure;
  error_ = absl::StrFormat("parent proxy %s: %s", parent_->name, reason);
  handshaking_->close(network::CloseType::NoFlush);
  callbacks_->worker().dispatcher().deferredDelete(std::move(handshaking_));
  // The place in the budget goes to the next parent's attempt.
  attempts_[0].slot = std::move(handshake_slot_);
  parentFailed();
}

bool RouterFilter::startAttempt(Attempt& attempt) {
  const policy::GroupEgress* group_egress =
      request_->group != nullptr ? &request_->group->egress : nullptr;
  while (next_address_ < dial_count_) {
    const network::Address& to = dial_[next_address_++];
    const network::Address* source =
        group_egress != nullptr ? group_egress->addresses.sourceFor(to.family()) : nullptr;
    if (source != nullptr && (unbindable_families_ & familyBit(to.family())) != 0) continue;
    config_->stats.cx_connect_total.inc();
    bool bind_failed = false;
    attempt.connection =
        network::Connection::connectTo(callbacks_->worker().dispatcher(), to,
                                       config_->budget->descriptorCeiling(), source, &bind_failed);
    if (attempt.connection) {
      if (source != nullptr) group_egress->cx.inc();
      attempt.connection->setCallbacks(&attempt);
      // A parent that asks for PROXY protocol hears whose connection it is first, before TLS.
      if (parent_ != nullptr && parent_->proxy_protocol != 0) {
        attempt.connection->setConnectPrefix(
            network::writeProxyHeader(parent_->proxy_protocol, request_->client, clientLocal()));
      }
      // An https parent: TLS first, and Connected once its handshake is done.
      if (parent_ != nullptr && parent_->transport != nullptr) {
        attempt.connection->setTransportSocket(parent_->transport->createTransportSocket());
      }
      return true;
    }
    if (bind_failed) {
      // The address is not (or no longer) one of this host's: every connect from it fails
      // alike, whatever the destination. An address of the other family may still go.
      const int error = errno;
      unbindable_families_ |= familyBit(to.family());
      group_egress->bind_failed.inc();
      config_->stats.cx_connect_fail.inc();
      request_->failure = {upstream::FailureKind::EgressBind, error};
      error_ = absl::StrFormat("cannot bind the egress address %s of group %s: %s",
                               source->ipString(), request_->group->name, strerror(error));
      SLUICE_LOG(Warn, "router: %s (connecting to %s)", error_, to.asString());
      continue;
    }
    if (errno == EMFILE || errno == ENFILE) {
      // Out of descriptors (or into the reserve kept for accepts and the admin endpoint): no
      // other address would fare better.
      config_->budget->countReserveRefusal();
      descriptors_low_ = true;
      return false;
    }
    config_->stats.cx_connect_fail.inc();
    request_->failure = {upstream::kindForConnectError(errno), errno};
    error_ = absl::StrFormat("cannot open a socket to %s: %s", to.asString(), strerror(errno));
  }
  return false;
}

void RouterFilter::connectNext() {
  // The attempt that failed (or the first) dials the next address at once.
  for (Attempt& attempt : attempts_) {
    if (attempt.connection || !attempt.slot.held()) continue;
    if (startAttempt(attempt)) break;
  }
  if (connecting()) {
    // Another address is left: it races this one if this one is slow.
    if (next_address_ < dial_count_ && config_->happy_eyeballs_delay.count() > 0 &&
        !(attempts_[0].connection && attempts_[1].connection)) {
      if (!race_timer_) {
        race_timer_ = std::make_unique<event::Timer>(callbacks_->worker().dispatcher(),
                                                     [this] { onRaceTimer(); });
      }
      race_timer_->enable(config_->happy_eyeballs_delay);
    }
    return;
  }
  if (descriptors_low_) {
    timer_->disable();
    if (race_timer_) race_timer_->disable();
    request_->denial_cause = proxy::DenialCause::ConnectionLimit;
    callbacks_->deny(proxy::Denial::ServiceUnavailable, kDescriptorsLow);
    return;
  }
  // A bind that failed is sluice's, not the parent's: no parent would fare better.
  if (parent_ != nullptr && request_->failure.kind != upstream::FailureKind::EgressBind) {
    parentFailed();
    return;
  }
  timer_->disable();
  if (race_timer_) race_timer_->disable();
  callbacks_->deny(proxy::Denial::BadGateway, error_);
}

void RouterFilter::onRaceTimer() {
  if (next_address_ >= dial_count_) return;
  Attempt& idle = attempts_[0].connection ? attempts_[1] : attempts_[0];
  if (idle.connection) return;
  // A second socket is a second place in the client's budget: without one, no race.
  if (!idle.slot.held() && !config_->budget->admit(request_->client, idle.slot)) return;
  config_->stats.cx_connect_raced.inc();
  startAttempt(idle);
}

void RouterFilter::onAttemptEvent(Attempt& attempt, network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) {
    timer_.reset();
    race_timer_.reset();
    Attempt& other = &attempt == &attempts_[0] ? attempts_[1] : attempts_[0];
    drop(other);
    other.slot.reset();
    network::ConnectionPtr conn = std::move(attempt.connection);
    conn->setCallbacks(nullptr);
    request_->connect_time = since(started_, callbacks_->worker().dispatcher().now());
    config_->stats.cx_connect_duration.record(request_->connect_time);
    request_->upstream_address = conn->peer();
    if (parent_ != nullptr && !(parent_->protocol == upstream::ParentProtocol::Http &&
                                request_->kind == proxy::RequestKind::Forward)) {
      // Connected to the parent: it is asked for the destination; the connect timer still runs.
      if (!timer_) {
        timer_ = std::make_unique<event::Timer>(callbacks_->worker().dispatcher(),
                                                [this] { onConnectTimeout(); });
        timer_->enable(config_->connect_timeout);
      }
      handshaking_ = std::move(conn);
      handshake_slot_ = std::move(attempt.slot);
      retireHandshake();
      handshake_ =
          std::make_unique<upstream::ParentHandshake>(parent_->protocol, parent_->auth, *this);
      if (request_->kind == proxy::RequestKind::UdpAssociation) {
        handshake_->startUdpAssociate(*handshaking_);
      } else {
        handshake_->start(*handshaking_, target_, request_->host, request_->port);
      }
      return;
    }
    if (parent_ != nullptr) parent_->health->recordSuccess();
    ready(std::move(conn), std::move(attempt.slot), false);
    return;
  }
  if (event == network::ConnectionEvent::RemoteClose && attempt.connection) {
    config_->stats.cx_connect_fail.inc();
    int err = attempt.connection->connectError();
    const network::TransportFailure tls = attempt.connection->transportFailure();
    if (tls.kind != network::TransportFailure::Kind::None) {
      request_->failure = {tls.kind == network::TransportFailure::Kind::Certificate
                               ? upstream::FailureKind::TlsCertificate
                               : upstream::FailureKind::TlsProtocol,
                           0};
      error_ = absl::StrFormat("parent proxy %s: TLS to %s: %s", parent_->name,
                               attempt.connection->peer().asString(), tls.reason);
    } else {
      request_->failure = {
          err != 0 ? upstream::kindForConnectError(err) : upstream::FailureKind::Reset, err};
      error_ = absl::StrFormat("cannot connect to %s: %s", attempt.connection->peer().asString(),
                               err != 0 ? strerror(err) : "connection closed");
    }
    drop(attempt);
    connectNext();
  }
}

void RouterFilter::onConnectTimeout() {
  if (!connecting() && !handshaking_ && query_ == nullptr) return;
  config_->stats.cx_connect_timeout.inc();
  request_->failure = {upstream::FailureKind::Timeout, 0};
  for (Attempt& attempt : attempts_) drop(attempt);
  if (handshaking_) {
    handshaking_->setCallbacks(nullptr);
    handshaking_->close(network::CloseType::NoFlush);
    callbacks_->worker().dispatcher().deferredDelete(std::move(handshaking_));
  }
  if (query_ != nullptr) {
    query_->cancel();
    query_ = nullptr;
  }
  if (parent_ != nullptr) {
    parent_->stats.failures.inc();
    if (parent_->health->recordFailure(callbacks_->worker().dispatcher().now(),
                                       parent_->max_failures, parent_->unhealthy_for)) {
      parent_->stats.unhealthy.inc();
    }
  }
  if (race_timer_) race_timer_->disable();
  error_ = absl::StrFormat("connect to %s:%d timed out", request_->host, request_->port);
  callbacks_->deny(proxy::Denial::GatewayTimeout, error_);
}

void RouterFilter::drop(Attempt& attempt) {
  if (!attempt.connection) return;
  attempt.connection->setCallbacks(nullptr);
  attempt.connection->close(network::CloseType::NoFlush);
  callbacks_->worker().dispatcher().deferredDelete(std::move(attempt.connection));
}

void RouterFilter::retireHandshake() {
  // Deleted from the loop: its callback may be on the stack.
  if (handshake_) callbacks_->worker().dispatcher().deferredDelete(std::move(handshake_));
}

void RouterFilter::onRequestEnd() {
  if (query_ != nullptr) {
    query_->cancel();
    query_ = nullptr;
  }
  if (timer_) timer_->disable();
  if (race_timer_) race_timer_->disable();
  for (Attempt& attempt : attempts_) {
    drop(attempt);
    attempt.slot.reset();
  }
  if (handshaking_) {
    handshaking_->setCallbacks(nullptr);
    handshaking_->close(network::CloseType::NoFlush);
    callbacks_->worker().dispatcher().deferredDelete(std::move(handshaking_));
  }
  retireHandshake();
  handshake_slot_.reset();
  slot_.reset();
  descriptors_low_ = false;
  unbindable_families_ = 0;
  route_ = nullptr;
  parent_ = nullptr;
  request_ = nullptr;
}

}  // namespace router
}  // namespace filters
}  // namespace sluice
