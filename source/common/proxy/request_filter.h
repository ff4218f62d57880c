#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "source/common/memory/slab.h"
#include "source/common/network/connection.h"
#include "source/common/proxy/request.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/upstream/upstream_handle.h"

namespace sluice {
namespace proxy {

using upstream::UpstreamHandle;
using upstream::UpstreamInfo;

// Why a request or what it became ends when a reload took its key away (the denial reason,
// the access log's, the Proxy-Status details).
inline constexpr std::string_view kRevokedReason = "proxy credentials revoked";

// A codec's side of a request: where the filter chain's outcome goes.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // The router connected (or took a pooled connection): the codec now holds it.
  virtual void onUpstreamReady(UpstreamHandle upstream) = 0;
  // A filter refused the request; reason is short, static or config-owned.
  virtual void onDenied(Denial denial, std::string_view reason) = 0;
};

class RequestFilterCallbacks {
 public:
  virtual ~RequestFilterCallbacks() = default;
  virtual WorkerContext& worker() = 0;
  // Resume the chain with the next filter after onRequest returned StopIteration.
  virtual void continueRequest() = 0;
  // End the request with a refusal. After this the filter must not touch the request.
  virtual void deny(Denial denial, std::string_view reason) = 0;
  // For the terminal filter (router): the request's upstream connection is ready.
  virtual void upstreamReady(UpstreamHandle upstream) = 0;
};

enum class RequestFilterStatus : uint8_t {
  Continue,       // on to the next filter
  StopIteration,  // paused until continueRequest() or deny() (e.g. waiting on DNS)
};

// A request filter: one named step every proxy request passes, whatever protocol carried it.
// Instances are per connection (or per HTTP/2 stream) and serve its requests one at a time.
class RequestFilter : public memory::SlabAllocatedPassing {
 public:
  virtual ~RequestFilter() = default;
  virtual void setCallbacks(RequestFilterCallbacks& callbacks) { callbacks_ = &callbacks; }
  // Runs once per request, in chain order, before any byte goes upstream. May read and edit
  // the request (headers, principal, pinned addresses) or refuse it through deny().
  virtual RequestFilterStatus onRequest(ProxyRequest& request) = 0;
  // The request ended (served, refused, or the client left): drop any pending async work.
  virtual void onRequestEnd() {}

 protected:
  RequestFilterCallbacks* callbacks_ = nullptr;
};
using RequestFilterPtr = std::unique_ptr<RequestFilter>;

struct RequestFilterSpec;

// Runs the request filters of one connection (or stream) over its requests, one at a time.
// Held by pointer (from the worker's slab) so that a connection or stream that becomes a
// tunnel lets the chain and its filters go: a tunnel holds none of them.
class RequestFilterChain : public RequestFilterCallbacks,
                           public memory::SlabAllocatedPassing,
                           public event::DeferredDeletable {
 public:
  RequestFilterChain(WorkerContext& worker, RequestSink& sink) : worker_(worker), sink_(sink) {}
  // A chain of every configured filter, in order (room for them all made once).
  RequestFilterChain(WorkerContext& worker, RequestSink& sink,
                     const std::vector<RequestFilterSpec>& specs);

  void addFilter(RequestFilterPtr filter);
  // Room for `n` filters, before they are added one by one.
  void reserve(size_t n) { filters_.reserve(n); }
  // Runs the chain from the first filter for this request (the request outlives the run).
  void start(ProxyRequest& request);
  // Ends the current request (if any): filters that saw it drop pending work.
  void end();
  bool active() const { return state_ == State::Running || state_ == State::Paused; }
  // Ends the chain's request and lets the chain and its filters go (deleted from the loop: the
  // chain or a filter may be on the stack): a connection that became a tunnel runs no more
  // requests. Leaves `chain` null.
  static void release(std::unique_ptr<RequestFilterChain>& chain);

  // RequestFilterCallbacks
  WorkerContext& worker() override { return worker_; }
  void continueRequest() override;
  void deny(Denial denial, std::string_view reason) override;
  void upstreamReady(UpstreamHandle upstream) override;

 private:
  enum class State : uint8_t { Idle, Running, Paused, Finished };
  void iterate();

  WorkerContext& worker_;
  RequestSink& sink_;
  // From the passing slabs, as the chain and its filters are.
  std::vector<RequestFilterPtr, memory::SlabAllocator<RequestFilterPtr>> filters_;
  ProxyRequest* request_ = nullptr;
  size_t next_ = 0;     // the filter to run next
  size_t reached_ = 0;  // filters that have seen this request
  State state_ = State::Idle;
};

// Where a request filter runs. A chain holds its filters in phase order (the config is checked
// for it), so a codec never slices a chain by position: SOCKS5 runs the Authenticate phase once
// per connection, when the client authenticates, and the rest per command.
enum class RequestPhase : uint8_t {
  Authenticate,  // who is asking: checks the credential, sets the principal (sluice.auth)
  Authorize,     // may they, and how: checks and edits the request (sluice.dest_guard, custom)
  Route,         // where to: picks and connects the upstream (sluice.router); terminal, last
};
const char* phaseName(RequestPhase phase);

// Made once from a filter's validated config; adds that filter to each new chain.
using RequestFilterFactoryCb = std::function<void(RequestFilterChain&)>;

// One configured request filter: its phase and how to add it to a chain.
struct RequestFilterSpec {
  RequestPhase phase = RequestPhase::Authorize;
  // An Authenticate filter that refuses requests without a credential (keys are configured):
  // SOCKS5 then requires username/password authentication.
  bool requires_credential = false;
  RequestFilterFactoryCb create;
  void operator()(RequestFilterChain& chain) const { create(chain); }
};

}  // namespace proxy
}  // namespace sluice
