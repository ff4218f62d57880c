#include "source/common/proxy/request_filter.h"

namespace sluice {
namespace proxy {

const char* phaseName(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::Authenticate:
      return "authenticate";
    case RequestPhase::Authorize:
      return "authorize";
    case RequestPhase::Route:
      return "route";
  }
  return "authorize";
}

void RequestFilterChain::release(std::unique_ptr<RequestFilterChain>& chain) {
  if (chain == nullptr) return;
  chain->end();
  event::Dispatcher& dispatcher = chain->worker_.dispatcher();
  dispatcher.deferredDelete(std::move(chain));
}

RequestFilterChain::RequestFilterChain(WorkerContext& worker, RequestSink& sink,
                                       const std::vector<RequestFilterSpec>& specs)
    : RequestFilterChain(worker, sink) {
  filters_.reserve(specs.size());
  for (const RequestFilterSpec& spec : specs) spec(*this);
}

void RequestFilterChain::addFilter(RequestFilterPtr filter) {
  filter->setCallbacks(*this);
  filters_.push_back(std::move(filter));
}

void RequestFilterChain::start(ProxyRequest& request) {
  end();
  request_ = &request;
  next_ = 0;
  reached_ = 0;
  state_ = State::Running;
  iterate();
}

void RequestFilterChain::iterate() {
  while (state_ == State::Running) {
    if (next_ >= filters_.size()) {
      // The config loader requires a terminal router; reaching here is a config bug.
      request_->denial_cause = DenialCause::NoRoute;
      deny(Denial::BadGateway, "no route");
      return;
    }
    RequestFilter& filter = *filters_[next_++];
    reached_ = next_;
    RequestFilterStatus status = filter.onRequest(*request_);
    // The filter may have finished the request (deny/upstreamReady) from inside onRequest.
    if (state_ != State::Running) return;
    if (status == RequestFilterStatus::StopIteration) {
      state_ = State::Paused;
      return;
    }
  }
}

void RequestFilterChain::continueRequest() {
  if (state_ != State::Paused) return;
  state_ = State::Running;
  iterate();
}

void RequestFilterChain::deny(Denial denial, std::string_view reason) {
  if (state_ != State::Running && state_ != State::Paused) return;
  state_ = State::Finished;
  sink_.onDenied(denial, reason);
}

void RequestFilterChain::upstreamReady(UpstreamHandle upstream) {
  if (state_ != State::Running && state_ != State::Paused) return;
  // A reload revoked the key while the lookup or the connect ran: nothing goes upstream (the
  // handle gives its connection back as it goes).
  if (request_->grant != nullptr && request_->grant->revoked()) {
    deny(Denial::Unauthorized, kRevokedReason);
    return;
  }
  state_ = State::Finished;
  sink_.onUpstreamReady(std::move(upstream));
}

void RequestFilterChain::end() {
  if (state_ == State::Idle) return;
  for (size_t i = 0; i < reached_ && i < filters_.size(); ++i) filters_[i]->onRequestEnd();
  reached_ = 0;
  request_ = nullptr;
  state_ = State::Idle;
}

}  // namespace proxy
}  // namespace sluice
