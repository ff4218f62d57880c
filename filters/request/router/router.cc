#include "filters/request/router/router.h"

#include <cstring>

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

void RouterFilter::route() {
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
  connectNext();
}

void RouterFilter::connectNext() {
  while (next_address_ < request_->pinned_count) {
    const network::Address& to = request_->pinned[next_address_++];
    config_->stats.cx_connect_total.inc();
    connecting_ = network::Connection::connectTo(callbacks_->worker().dispatcher(), to,
                                                 config_->budget->descriptorCeiling());
    if (connecting_) {
      connecting_->setCallbacks(this);
      return;
    }
    if (errno == EMFILE || errno == ENFILE) {
      // Out of descriptors (or into the reserve kept for accepts and the admin endpoint): no
      // other address would fare better.
      config_->budget->countReserveRefusal();
      timer_->disable();
      request_->denial_cause = proxy::DenialCause::ConnectionLimit;
      callbacks_->deny(proxy::Denial::ServiceUnavailable, kDescriptorsLow);
      return;
    }
    config_->stats.cx_connect_fail.inc();
    request_->failure = {upstream::kindForConnectError(errno), errno};
    error_ = absl::StrFormat("cannot open a socket to %s: %s", to.asString(), strerror(errno));
  }
  timer_->disable();
  callbacks_->deny(proxy::Denial::BadGateway, error_);
}

void RouterFilter::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) {
    timer_.reset();
    network::ConnectionPtr conn = std::move(connecting_);
    conn->setCallbacks(nullptr);
    request_->connect_time = since(started_, callbacks_->worker().dispatcher().now());
    config_->stats.cx_connect_duration.record(request_->connect_time);
    request_->upstream_address = conn->peer();
    proxy::UpstreamInfo info = config_->upstream;
    info.reused = false;
    callbacks_->upstreamReady(upstream::UpstreamHandle(
        std::move(conn), &callbacks_->worker().pool(), info, std::move(slot_)));
    return;
  }
  if (event == network::ConnectionEvent::RemoteClose && connecting_) {
    config_->stats.cx_connect_fail.inc();
    int err = connecting_->connectError();
    request_->failure = {
        err != 0 ? upstream::kindForConnectError(err) : upstream::FailureKind::Reset, err};
    error_ = absl::StrFormat("cannot connect to %s: %s", connecting_->peer().asString(),
                             err != 0 ? strerror(err) : "connection closed");
    dropConnecting();
    connectNext();
  }
}

void RouterFilter::onConnectTimeout() {
  if (!connecting_) return;
  config_->stats.cx_connect_timeout.inc();
  request_->failure = {upstream::FailureKind::Timeout, 0};
  dropConnecting();
  error_ = absl::StrFormat("connect to %s:%d timed out", request_->host, request_->port);
  callbacks_->deny(proxy::Denial::GatewayTimeout, error_);
}

void RouterFilter::dropConnecting() {
  if (!connecting_) return;
  connecting_->setCallbacks(nullptr);
  connecting_->close(network::CloseType::NoFlush);
  callbacks_->worker().dispatcher().deferredDelete(std::move(connecting_));
}

void RouterFilter::onRequestEnd() {
  if (query_ != nullptr) {
    query_->cancel();
    query_ = nullptr;
  }
  if (timer_) timer_->disable();
  if (connecting_) dropConnecting();
  slot_.reset();
  request_ = nullptr;
}

}  // namespace router
}  // namespace filters
}  // namespace sluice
