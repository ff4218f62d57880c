#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "filters/network/http2/headers.h"
#include "filters/network/http2/http2_proxy.h"
#include "source/common/event/dispatcher.h"
#include "source/common/http/h1_parser.h"
#include "source/common/http/proxy_status.h"
#include "source/common/memory/slab.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/upstream/origin_exchange.h"
#include "source/common/upstream/tunnel_relay.h"

namespace sluice {
namespace filters {
namespace http2proxy {

// One client stream: a proxy request with its own filter chain, its upstream connection and
// the queue of response bytes waiting for the client's flow-control window. Objects are reused
// for later streams of the same connection (the filter chain is built once per object).
class Http2ProxyFilter::Stream : public memory::SlabAllocated,
                                 public proxy::RequestSink,
                                 public proxy::RequestHeaders,
                                 public upstream::ExchangeOwner,
                                 public upstream::TunnelDownstream {
 public:
  enum class State : uint8_t {
    Idle,        // free for reuse
    Headers,     // receiving the request header block
    Filtering,   // request filters running
    Forwarding,  // relaying an http:// request and its response
    Tunnel,      // CONNECT established
    Replied,     // a local reply was sent (or is being sent)
    Done,        // reset by us; waiting for the codec to close it
  };
  explicit Stream(Http2ProxyFilter& parent);
  ~Stream() override { abort(); }

  State state() const { return state_; }

  void begin(int32_t id);

  // Header fields are copied: the codec's views last only for the callback.
  void addHeader(std::string_view name, std::string_view value);
  void onHeadersComplete(bool end_stream);

  void onClientData(const uint8_t* data, size_t length);
  void onClientEnd();

  // The client reset the stream. True when it was still in progress (rapid-reset accounting).
  bool onClientReset();
  // The stream is closing with a reset the client did not send, before its response completed
  // (rapid-reset accounting). A tunnel's reset is how it ends (idle timeout, the destination
  // closed), not a refused request: it does not count.
  bool unfinishedReset() const { return !response_sent_ && !client_reset_ && !tunnel_; }
  void onResponseSent();

  // The codec forgot the stream: release everything and go back to the free list.
  void onClosed();
  size_t readBody(uint8_t* buf, size_t max, bool& eof);

  // Ends whatever the stream holds, without telling the codec (it closed the stream, or the
  // connection is gone).
  void abort();
  // A reload revoked the key this stream authenticated with: resets it (CANCEL). True when it
  // did.
  bool cutIfRevoked();
  // Pauses or resumes reading the origin as the queues say: this stream's (past
  // stream_buffer_bytes, until it drains to half) and the connection's.
  void updateOriginPause();

  // proxy::RequestSink
  void onUpstreamReady(upstream::UpstreamHandle upstream) override;

  void onDenied(proxy::Denial denial, std::string_view reason) override;

  // proxy::RequestHeaders
  std::string_view get(std::string_view name) const override;
  void remove(std::string_view name) override;
  bool add(std::string_view name, std::string_view value) override;

  // upstream::TunnelDownstream: this stream is the client side of a tunnel.
  void writeDownstream(buffer::Buffer& data, bool end_stream) override;
  // The destination is backed up: the client's window is not credited until it drains.
  void readDisableDownstream(bool disable) override;
  void onTunnelEnd(upstream::TunnelEnd end) override;
  upstream::RequestTrace& tunnelTrace() override { return trace_; }
  event::Timer& tunnelTimer() override { return timer_; }

  // upstream::ExchangeOwner: the http:// request's exchange with its origin.
  void onInterimResponse(const http1::ResponseHead& head) override;
  void onResponseHead(const http1::ResponseHead& head) override;
  void onResponseBody(buffer::Buffer& body, bool end) override;
  void onUpgraded(const http1::ResponseHead& head, upstream::UpstreamHandle upstream,
                  buffer::Buffer& early, bool origin_ended) override;
  void onRetry() override;
  void onExchangeError(upstream::ExchangeError error, std::string_view detail) override;
  void onOriginBackedUp(bool backed_up) override;

 private:
  struct FieldRef {
    uint32_t offset;
    uint32_t name_len;
    uint32_t value_len;
  };
  static constexpr uint32_t kMaxAddedHeaders = 16;
  static constexpr size_t kKeptHeaderBytes = 4096;
  static constexpr size_t kKeptHeaderFields = 32;

  const Http2Config& config() const { return *parent_.config_; }
  // The request filters of the config, added to this stream's chain.
  void buildChain();

  bool originBackedUp() const;
  // Stops (resumes) reading the origin or the tunnel's destination.
  void pauseOrigin(bool pause);
  // Adds to (empties) the queue toward the client, counted in the connection's total.
  void queueOutput(buffer::Buffer& data);
  void queueOutput(std::string_view data);
  void dropOutput();

  // Request bytes passed on: give their window back unless the upstream is pushing back, in
  // which case they are credited once it drains (onBelowWriteLowWatermark).
  void credit(size_t length);
  void creditPending();
  // The request goes to the origin through the exchange: an http:// request, or the RFC 8441
  // bridge (GET with Upgrade: websocket).
  void sendRequest(upstream::UpstreamHandle upstream);

  // The 200 is submitted: the stream becomes a byte tunnel (CONNECT, or a WebSocket the origin
  // switched to), relayed by the upstream layer. Request bytes held while the filters ran (or
  // the 101 was awaited) go first; `from_origin` is what the origin sent behind its 101.
  void enterTunnel(upstream::UpstreamHandle upstream, buffer::Buffer& from_origin,
                   bool origin_ended);

  // The origin's fields for HTTP/2 into t_headers: lowercase names, without the
  // connection-specific ones (Content-Length is added by the caller when it applies).
  void buildResponseHeaders(const http1::ResponseHead& rh);
  // New bytes for the client: wake the stream's DATA and push back on the upstream when the
  // queue is full (the client's window is closed or the connection is backed up).
  void afterOutput();

  void onTimer();

  // A reply made by the proxy itself, on this stream only, its proxy-status naming `error`.
  // retry_after: seconds for a retry-after field (0: none).
  void localReply(uint16_t status, http::ProxyError error, std::string_view detail,
                  bool auth_challenge = false, uint32_t retry_after = 0);
  void reset(http2::ErrorCode code);

  void releaseUpstream();
  // Takes what the exchange or the tunnel moved into the record.
  void reportUpstream();

  Http2ProxyFilter& parent_;
  std::unique_ptr<proxy::RequestFilterChain> chain_;  // null while a tunnel
  event::Timer timer_;
  int32_t id_ = 0;
  State state_ = State::Idle;

  // The request header block: copied fields, then views into the copy.
  std::string storage_;
  std::vector<FieldRef> refs_;
  std::vector<http1::HeaderField> fields_;
  size_t header_bytes_ = 0;
  const char* header_error_ = nullptr;
  http2::RequestInfo info_;
  proxy::ProxyRequest request_;
  upstream::AddedField added_[kMaxAddedHeaders];
  uint32_t added_count_ = 0;

  // http:// and RFC 8441 streams while the origin's part runs (from the worker's free list); it
  // holds the origin connection.
  upstream::OriginExchangePtr exchange_;
  // CONNECT streams and WebSocket streams once switched; it holds the origin connection.
  std::unique_ptr<upstream::TunnelRelay> tunnel_relay_;
  const upstream::TunnelStats* key_tunnel_stats_ = nullptr;
  buffer::Buffer pending_body_;  // request bytes received while the filters ran
  size_t unconsumed_ = 0;        // request bytes not yet credited to the client's window
  uint64_t body_received_ = 0;
  bool request_ended_ = false;
  bool retried_ = false;
  bool websocket_pending_ = false;  // upgrade sent, waiting for the origin's 101
  bool drain_after_reply_ = false;  // a filter asked to close the connection (a ban)

  bool response_started_ = false;  // HEADERS submitted
  buffer::Buffer out_;             // response bytes waiting for DATA frames
  bool out_eof_ = false;           // out_ holds the rest of the body
  bool deferred_ = false;          // the codec is waiting for resumeBody
  bool upstream_paused_ = false;
  bool response_sent_ = false;  // our END_STREAM went out
  bool tunnel_ = false;         // counted in tunnels_active
  bool client_reset_ = false;   // the client reset the stream (counted there)
  // What the stream's request leaves in its end-of-request record.
  upstream::RequestTrace trace_;
};

}  // namespace http2proxy
}  // namespace filters
}  // namespace sluice
