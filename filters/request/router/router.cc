#include "filters/request/router/router.h"

#include <cstring>

#include <netinet/in.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "source/common/upstream/pool.h"

namespace sluice {
namespace filters {
namespace router {

RouterFilter::RouterFilter(RouterConfigSharedPtr config) : config_(std::move(config)) {}

RouterFilter::~RouterFilter() { onRequestEnd(); }

proxy::RequestFilterStatus RouterFilter::onRequest(proxy::ProxyRequest& request) {
  request_ = &request;
  next_address_ = 0;
  // Addresses an earlier filter checked (or an earlier attempt resolved) are dialled as they are.
  if (request.pinned_count > 0) {
    route();
    return proxy::RequestFilterStatus::StopIteration;
  }
  started_ = callbacks_->worker().dispatcher().now();
  query_ = callbacks_->worker().resolver().resolve(
      request.host, [this](const absl::Status& status, const std::vector<network::Address>& a) {
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

void RouterFilter::route() {
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
  if (request_->kind == proxy::RequestKind::Forward && !request_->fresh_connection) {
    for (uint32_t i = 0; i < request_->pinned_count; ++i) {
      network::ConnectionPtr pooled = callbacks_->worker().pool().acquire(request_->pinned[i]);
      if (pooled) {
        config_->stats.pool_reuse.inc();
        proxy::UpstreamInfo info = config_->upstream;
        info.reused = true;
        request_->upstream_address = request_->pinned[i];
        callbacks_->upstreamReady(upstream::UpstreamHandle(
            std::move(pooled), &callbacks_->worker().pool(), info, std::move(slot_)));
        return;
      }
    }
  }
  // The connect timer exists only while connecting: pooled requests and established tunnels
  // (the long-lived, idle ones) do not carry it.
  if (!timer_) {
    timer_ = std::make_unique<event::Timer>(callbacks_->worker().dispatcher(),
                                            [this] { onConnectTimeout(); });
  }
  timer_->enable(config_->connect_timeout);
  started_ = callbacks_->worker().dispatcher().now();
  attempts_[0].slot = std::move(slot_);
  connectNext();
}

bool RouterFilter::startAttempt(Attempt& attempt) {
  while (next_address_ < request_->pinned_count) {
    const network::Address& to = request_->pinned[next_address_++];
    config_->stats.cx_connect_total.inc();
    attempt.connection = network::Connection::connectTo(callbacks_->worker().dispatcher(), to,
                                                        config_->budget->descriptorCeiling());
    if (attempt.connection) {
      attempt.connection->setCallbacks(&attempt);
      return true;
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
    if (next_address_ < request_->pinned_count && config_->happy_eyeballs_delay.count() > 0 &&
        !(attempts_[0].connection && attempts_[1].connection)) {
      if (!race_timer_) {
        race_timer_ = std::make_unique<event::Timer>(callbacks_->worker().dispatcher(),
                                                     [this] { onRaceTimer(); });
      }
      race_timer_->enable(config_->happy_eyeballs_delay);
    }
    return;
  }
  timer_->disable();
  if (race_timer_) race_timer_->disable();
  if (descriptors_low_) {
    request_->denial_cause = proxy::DenialCause::ConnectionLimit;
    callbacks_->deny(proxy::Denial::ServiceUnavailable, kDescriptorsLow);
    return;
  }
  callbacks_->deny(proxy::Denial::BadGateway, error_);
}

void RouterFilter::onRaceTimer() {
  if (next_address_ >= request_->pinned_count) return;
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
    proxy::UpstreamInfo info = config_->upstream;
    info.reused = false;
    callbacks_->upstreamReady(upstream::UpstreamHandle(
        std::move(conn), &callbacks_->worker().pool(), info, std::move(attempt.slot)));
    return;
  }
  if (event == network::ConnectionEvent::RemoteClose && attempt.connection) {
    config_->stats.cx_connect_fail.inc();
    int err = attempt.connection->connectError();
    request_->failure = {
        err != 0 ? upstream::kindForConnectError(err) : upstream::FailureKind::Reset, err};
    error_ = absl::StrFormat("cannot connect to %s: %s", attempt.connection->peer().asString(),
                             err != 0 ? strerror(err) : "connection closed");
    drop(attempt);
    connectNext();
  }
}

void RouterFilter::onConnectTimeout() {
  if (!connecting()) return;
  config_->stats.cx_connect_timeout.inc();
  request_->failure = {upstream::FailureKind::Timeout, 0};
  for (Attempt& attempt : attempts_) drop(attempt);
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
  slot_.reset();
  descriptors_low_ = false;
  request_ = nullptr;
}

}  // namespace router
}  // namespace filters
}  // namespace sluice
