#include "filters/network/http1/http1_proxy.h"

#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/http/field_line.h"
#include "source/common/http/head_scan.h"
#include "source/common/http/status.h"
#include "source/common/http/upgrade.h"
#include "source/common/memory/idle_cache.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/upstream/pool.h"

namespace sluice {
namespace filters {
namespace http1proxy {

namespace {

// A request in flight (head, proxy request, header edits) is several KiB and only needed until
// its head is sent, so each worker keeps a free list instead of every connection owning one:
// idle keep-alive connections and established tunnels hold none. A burst's worth is kept, and let
// go once it stayed unused for a memory_release_interval.
class PendingPool {
 public:
  Http1ProxyFilter::PendingRequest* acquire() {
    Http1ProxyFilter::PendingRequest* pending = free_.take();
    return pending != nullptr ? pending : new Http1ProxyFilter::PendingRequest();
  }
  void release(Http1ProxyFilter::PendingRequest* pending) {
    if (!free_.give(pending)) destroy(pending);
  }

 private:
  static void destroy(Http1ProxyFilter::PendingRequest* pending) { delete pending; }
  memory::FreeStack<Http1ProxyFilter::PendingRequest, destroy> free_{32};
};

thread_local PendingPool t_pending_pool;
// A response head waits here for the body bytes that came with it (onResponseHead is always
// followed by onResponseBody in the same turn): they leave in one write.
thread_local buffer::Buffer t_response_out;

// "HTTP/1.1 <status> <reason>\r\n" without a formatting library (no allocation).
void addStatusLine(buffer::Buffer& out, uint16_t status, std::string_view reason) {
  char line[13] = {'H', 'T', 'T', 'P', '/', '1', '.', '1', ' ', '0', '0', '0', ' '};
  line[9] = static_cast<char>('0' + status / 100 % 10);
  line[10] = static_cast<char>('0' + status / 10 % 10);
  line[11] = static_cast<char>('0' + status % 10);
  out.add(line, sizeof(line));
  out.add(reason);
  out.add("\r\n", 2);
}

// Content-Length goes out once, as the parsed number: duplicates ("5" twice) and lists ("5, 5")
// may be received but must not be forwarded (RFC 9110 8.6); a next hop might read them apart.
// `without_framing`: the body goes out decoded and ends with the connection, so the origin's
// Transfer-Encoding is not passed on.
void addForwardedHeaders(buffer::Buffer& out, const http1::HeaderField* headers, uint32_t count,
                         uint64_t content_length, bool without_framing = false) {
  constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
  bool length_sent = false;
  for (uint32_t i = 0; i < count; ++i) {
    const http1::HeaderField& h = headers[i];
    if ((h.flags & kSkip) != 0) continue;
    if (without_framing && h.name.size() == 17 && http1::isFieldName(h.name, "transfer-encoding")) {
      continue;
    }
    if (h.name.size() == 14 && http1::isFieldName(h.name, "content-length")) {
      if (length_sent) continue;
      length_sent = true;
      char digits[20];
      const auto result = std::to_chars(digits, digits + sizeof(digits), content_length);
      http::addFieldLine(out, h.name, std::string_view(digits, result.ptr - digits));
      continue;
    }
    http::addFieldLine(out, h.name, h.value);
  }
}

}  // namespace

Http1ProxyFilter::Http1ProxyFilter(Http1ConfigSharedPtr config) : config_(std::move(config)) {}

Http1ProxyFilter::~Http1ProxyFilter() {
  if (chain_) chain_->end();
  releaseUpstream();
  releaseHead();
  endRecord();
}

void Http1ProxyFilter::initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) {
  callbacks_ = &callbacks;
}

network::FilterStatus Http1ProxyFilter::onNewConnection() {
  chain_ = std::make_unique<proxy::RequestFilterChain>(callbacks_->worker(), *this,
                                                       config_->request_filters);
  timer_.emplace(downstream().dispatcher(), [this] { onTimer(); });
  // The first head must arrive within the head deadline, counted from the accept.
  timer_->enable(config_->request_head_timeout);
  head_timer_armed_ = true;
  return network::FilterStatus::Continue;
}

network::FilterStatus Http1ProxyFilter::onData(buffer::Buffer& data, bool end_stream) {
  switch (state_) {
    case State::ReadingHead:
      processHead(data);
      if (end_stream && state_ == State::ReadingHead) {
        // The client closed between requests (or gave up mid-head): nothing to answer.
        state_ = State::Closed;
        downstream().close(network::CloseType::FlushWrite);
      } else if (end_stream) {
        // The end came in the same read as the head: the request (or tunnel) it started must
        // hear it, since the connection reports an end only once.
        downstream_ended_ = true;
      }
      break;
    case State::Filtering:
      if (end_stream) downstream_ended_ = true;
      break;
    case State::Forwarding:
      relayRequestBody(data, end_stream);
      break;
    case State::Closed:
      data.clear();
      break;
  }
  return network::FilterStatus::StopIteration;
}

void Http1ProxyFilter::armHeadTimer() {
  if (!head_timer_armed_) {
    timer_->enable(config_->request_head_timeout);
    head_timer_armed_ = true;
  }
}

void Http1ProxyFilter::processHead(buffer::Buffer& data) {
  if (data.empty()) return;
  // The head deadline runs from the head's first bytes, so it is armed in the turn they came;
  // a head that came whole in one read never needs it.
  const std::string_view view =
      http::headToParse(data, config_->request_limits.max_head_bytes, head_scanned_);
  if (view.empty()) {
    armHeadTimer();
    return;
  }
  if (pending_ == nullptr) pending_ = t_pending_pool.acquire();
  http1::ParseError err;
  http1::ParseStatus status =
      http1::parseRequestHead(view, config_->request_limits, pending_->head, err);
  if (status == http1::ParseStatus::Incomplete) {
    armHeadTimer();
    return;
  }
  if (status == http1::ParseStatus::Error) {
    config_->stats.rq_rejected.inc();
    trace_.begin(downstream().dispatcher().now(), proxy::Protocol::Http1, "-", {}, 0,
                 &downstream().peer());
    sendLocalReply(err.status, http::ProxyError::HttpRequestError, err.reason, true);
    return;
  }
  // The idle or head deadline may stay armed: whatever follows the filters arms the timer
  // anew (the exchange, the tunnel, the next idle wait), and it does nothing while they run.
  head_timer_armed_ = false;
  head_scanned_ = 0;
  head_in_buffer_ = true;
  head_size_ = pending_->head.head_size;
  config_->stats.rq_total.inc();
  startRequest();
}

void Http1ProxyFilter::startRequest() {
  const http1::RequestHead& head = pending_->head;
  method_ = head.method;
  client_http10_ = head.version_minor == 0;
  client_keep_alive_ = head.keep_alive && !draining_ && !callbacks_->worker().draining();
  request_framing_ = head.framing;
  pending_->request = proxy::ProxyRequest();
  pending_->added_count = 0;
  retried_ = false;
  upgrade_ = false;
  downstream_ended_ = false;
  trace_.begin(downstream().dispatcher().now(), proxy::Protocol::Http1, head.method_text, head.host,
               head.port, &downstream().peer(),
               head.form == http1::TargetForm::Authority ? std::string_view() : head.path);

  if (head.form == http1::TargetForm::Authority) {
    if (head.framing != http1::BodyFraming::None) {
      config_->stats.rq_rejected.inc();
      sendLocalReply(400, http::ProxyError::HttpRequestError, "CONNECT with a body", true);
      return;
    }
    pending_->request.kind = proxy::RequestKind::Tunnel;
    config_->stats.rq_connect.inc();
  } else if (head.form == http1::TargetForm::Absolute) {
    // ws:// is http:// asking for a WebSocket (RFC 6455 §3; the parser defaults its port to 80).
    const bool ws = http1::isFieldName(head.scheme, "ws");
    if (http1::isFieldName(head.scheme, "wss")) {
      // TLS to the origin is the client's: it sends CONNECT and runs TLS through the tunnel.
      config_->stats.rq_rejected.inc();
      config_->stats.upgrade_rejected.inc();
      sendLocalReply(400, http::ProxyError::HttpRequestError,
                     "wss:// URLs are not relayed; use CONNECT", true);
      return;
    }
    if (!ws && !http1::isFieldName(head.scheme, "http")) {
      config_->stats.rq_rejected.inc();
      sendLocalReply(400, http::ProxyError::HttpRequestError,
                     "only http:// URLs are relayed; use CONNECT for others", true);
      return;
    }
    // Other upgrades (h2c, ...) are not relayed: their Upgrade is stripped as a hop-by-hop
    // header and the request goes on as a plain one.
    if (config_->websocket &&
        http::upgradeRequestKind(head) == http::UpgradeRequestKind::WebSocket) {
      if (const char* why = http::checkWebSocketRequest(head); why != nullptr) {
        config_->stats.rq_rejected.inc();
        config_->stats.upgrade_rejected.inc();
        sendLocalReply(400, http::ProxyError::HttpRequestError, why, true);
        return;
      }
      upgrade_ = true;
    } else if (ws) {
      config_->stats.rq_rejected.inc();
      config_->stats.upgrade_rejected.inc();
      sendLocalReply(400, http::ProxyError::HttpRequestError,
                     config_->websocket ? "ws:// URL without a websocket upgrade"
                                        : "websocket is disabled on this proxy",
                     true);
      return;
    }
    pending_->request.kind = proxy::RequestKind::Forward;
    pending_->request.headers = this;
    config_->stats.rq_forward.inc();
    if (upgrade_) {
      // A pooled connection is never upgraded: one the origin half-closed would fail after the
      // client's handshake, and an upgrade cannot be retried once pipelined bytes may follow.
      pending_->request.fresh_connection = true;
      pending_->request.websocket = true;
      config_->stats.rq_upgrade.inc();
    }
  } else {
    config_->stats.rq_rejected.inc();
    sendLocalReply(400, http::ProxyError::HttpRequestError,
                   "not a proxy request: use an absolute URL or CONNECT", true);
    return;
  }
  const uint64_t max_body = config_->max_request_body_bytes;
  if (max_body != 0 && head.framing == http1::BodyFraming::ContentLength &&
      head.content_length > max_body) {
    // Refused before any filter runs, so nothing reaches an origin.
    config_->stats.rq_body_too_large.inc();
    sendLocalReply(413, http::ProxyError::HttpRequestError,
                   "request body larger than the proxy allows", true);
    return;
  }
  pending_->request.protocol = proxy::Protocol::Http1;
  pending_->request.host = head.host;
  pending_->request.port = head.port;
  pending_->request.client = downstream().peer();
  pending_->request.client_fd = downstream().fd();
  if (head.proxy_authorization >= 0) {
    // As sent: sluice.auth decodes it only when it is not what this connection last
    // authenticated with.
    pending_->request.credential_form = proxy::CredentialForm::ProxyAuthorization;
    pending_->request.credential = head.headers[head.proxy_authorization].value;
  }
  // The request's place under its key's limits lives in its trace: a tunnel keeps it, the
  // record's end gives it back.
  pending_->request.limit_slot = trace_.limitSlot();
  state_ = State::Filtering;
  downstream().readDisable(true);
  chain_->start(pending_->request);
}

void Http1ProxyFilter::onDenied(proxy::Denial denial, std::string_view reason) {
  uint16_t status = http::denialStatus(denial);
  trace_.routed(pending_->request);
  trace_.fail(reason, pending_->request.failure.kind);
  // A body we did not read would be taken for the next request: close instead of skipping it.
  bool close = !client_keep_alive_ || request_framing_ != http1::BodyFraming::None ||
               downstream_ended_ || pending_->request.close_connection;
  chain_->end();
  sendLocalReply(
      status, http::denialError(denial, pending_->request.denial_cause, pending_->request.failure),
      reason, close, denial == proxy::Denial::Unauthorized,
      denial == proxy::Denial::TooManyRequests ? pending_->request.retry_after : 0);
  if (close) return;
  if (head_in_buffer_) {
    downstream().readBuffer().drain(head_size_);
    head_in_buffer_ = false;
  }
  releaseHead();
  state_ = State::ReadingHead;
  timer_->enable(config_->idle_timeout);
  downstream().readDisable(false);
}

void Http1ProxyFilter::onUpstreamReady(upstream::UpstreamHandle upstream) {
  key_tunnel_stats_ = pending_->request.principal_tunnel_stats;
  trace_.routed(pending_->request);
  chain_->end();
  if (pending_->request.kind == proxy::RequestKind::Tunnel) {
    buffer::Buffer out;
    out.add(std::string_view("HTTP/1.1 200 Connection Established\r\n\r\n"));
    downstream().write(out);
    config_->stats.countStatus(200);
    trace_.setStatus(200);
    downstream().readBuffer().drain(head_size_);
    head_in_buffer_ = false;
    releaseHead();
    // Bytes the client sent after the CONNECT head (an eager TLS hello) go first, then its end
    // if it already half-closed.
    startTunnel(std::move(upstream), /*upgrade=*/false, /*upstream_ended=*/false);
    return;
  }
  state_ = State::Forwarding;
  sendRequest(std::move(upstream));
}

void Http1ProxyFilter::sendRequest(upstream::UpstreamHandle&& upstream) {
  const http1::RequestHead& head = pending_->head;
  upstream::OriginRequest r;
  r.method_text = head.method_text;
  r.method = head.method;
  r.path = head.path;
  if (!upgrade_ && head.host_header < 0) {
    // HTTP/1.0 clients may omit Host; origins need it.
    const bool v6 = head.host.find(':') != std::string_view::npos;
    pending_->host = absl::StrFormat(v6 ? "[%s]" : "%s", head.host);
    if (head.port != 80) pending_->host += absl::StrFormat(":%d", head.port);
    r.host = pending_->host;
  }
  r.version_minor = client_http10_ ? 0 : 1;
  r.keep_alive_10 = client_http10_ && client_keep_alive_;
  r.fields = head.headers.data();
  r.field_count = head.headers.size();
  r.added = pending_->added;
  r.added_count = pending_->added_count;
  switch (request_framing_) {
    case http1::BodyFraming::ContentLength:
      r.body = upstream::RequestBody::Length;
      r.content_length = head.content_length;
      break;
    case http1::BodyFraming::Chunked:
      r.body = upstream::RequestBody::Chunked;
      break;
    default:
      r.body = upstream::RequestBody::None;
      break;
  }
  // The client's handshake passes through: the client checks the origin's accept value.
  r.upgrade = upgrade_ ? upstream::Upgrade::WebSocket : upstream::Upgrade::None;
  r.retry_allowed = !retried_;
  // A request that may be retried keeps its head at the front of the client's buffer until
  // the origin answers; any other is past its head once the head is written.
  const bool keep_head = upstream::OriginExchange::mayRetry(r, upstream.info());
  buffer::Buffer& client = downstream().readBuffer();
  exchange_ = upstream::OriginExchange::acquire(*this, config_->exchange);
  const upstream::BodyProgress progress =
      exchange_->start(std::move(upstream), r, *timer_, client, keep_head ? 0 : head_size_);
  if (!keep_head) {
    head_in_buffer_ = false;
    releaseHead();
  }
  afterBody(progress, downstream_ended_, false);
}

void Http1ProxyFilter::relayRequestBody(buffer::Buffer& data, bool end_stream) {
  if (end_stream) downstream_ended_ = true;
  if (!exchange_ || exchange_->requestDone()) {
    // The next pipelined request waits until this response is done.
    if (!data.empty() && downstream().readEnabled()) downstream().readDisable(true);
    return;
  }
  afterBody(exchange_->sendBody(data, end_stream), end_stream, true);
}

void Http1ProxyFilter::afterBody(upstream::BodyProgress progress, bool client_ended, bool reading) {
  if (progress == upstream::BodyProgress::Error) {
    config_->stats.rq_rejected.inc();
    if (!exchange_->responseStarted()) {
      sendLocalReply(400, http::ProxyError::HttpRequestError, exchange_->requestBodyError(), true);
    } else {
      closeAll();
    }
    return;
  }
  if (progress == upstream::BodyProgress::TooLarge) {
    config_->stats.rq_body_too_large.inc();
    if (!exchange_->responseStarted()) {
      sendLocalReply(413, http::ProxyError::HttpRequestError,
                     "request body larger than the proxy allows", true);
    } else {
      closeAll();
    }
    return;
  }
  if (progress == upstream::BodyProgress::Done) {
    // Pipelined bytes stay unread until the response is done.
    if (reading) downstream().readDisable(true);
  } else if (client_ended) {
    // The client ended its side in the middle of its body: nothing more will come.
    config_->stats.downstream_reset.inc();
    closeAll();
  } else if (!reading) {
    // Read the rest of the body.
    downstream().readDisable(false);
  }
}

void Http1ProxyFilter::forgetHead() {
  // The origin answered: this request will not be retried, its head is done with.
  if (head_in_buffer_) {
    downstream().readBuffer().drain(head_size_);
    head_in_buffer_ = false;
    releaseHead();
  }
}

void Http1ProxyFilter::onInterimResponse(const http1::ResponseHead& rh) {
  forgetHead();
  // Interim responses (100 Continue, 103 Early Hints) go to HTTP/1.1 clients as they come.
  if (client_http10_) return;
  buffer::Buffer out;
  addStatusLine(out, rh.status, rh.reason);
  addForwardedHeaders(out, rh.headers.data(), rh.headers.size(), rh.content_length);
  out.add("\r\n", 2);
  config_->stats.countStatus(rh.status);
  downstream().write(out);
}

void Http1ProxyFilter::onResponseHead(const http1::ResponseHead& rh) {
  forgetHead();
  // A final answer to an upgrade request: the origin declined; the exchange ends as a plain
  // one (its Upgrade and Connection fields were stripped as hop-by-hop).
  if (upgrade_) config_->stats.upgrade_refused.inc();
  // An HTTP/1.0 client never sees chunked framing (RFC 9112 6.1): the exchange decodes the body
  // and the connection's close ends it.
  const bool dechunked = client_http10_ && rh.framing == http1::BodyFraming::Chunked;
  response_close_client_ = !client_keep_alive_ || draining_ || callbacks_->worker().draining() ||
                           rh.framing == http1::BodyFraming::UntilClose || dechunked;
  // The head goes out with the body bytes that came with it, in one write (onResponseBody).
  buffer::Buffer& out = t_response_out;
  out.clear();
  addStatusLine(out, rh.status, rh.reason);
  addForwardedHeaders(out, rh.headers.data(), rh.headers.size(), rh.content_length, dechunked);
  if (response_close_client_) {
    http::addFieldLine(out, "Connection", "close");
  } else if (client_http10_) {
    http::addFieldLine(out, "Connection", "keep-alive");
  }
  out.add("\r\n", 2);
  config_->stats.countStatus(rh.status);
  trace_.setStatus(rh.status);
}

void Http1ProxyFilter::onResponseBody(buffer::Buffer& body, bool end) {
  buffer::Buffer& out = t_response_out;
  out.move(body);
  if (!out.empty()) downstream().write(out);
  if (end) finishExchange();
}

void Http1ProxyFilter::onUpgraded(const http1::ResponseHead& rh, upstream::UpstreamHandle upstream,
                                  buffer::Buffer& early, bool origin_ended) {
  forgetHead();
  // The 101 goes out with the fields the origin sent (Sec-WebSocket-Accept, -Protocol,
  // -Extensions), minus the hop-by-hop and framing ones, which are the proxy's to write; the
  // frames the origin sent right behind it go with it.
  buffer::Buffer out;
  addStatusLine(out, 101, rh.reason.empty() ? http::statusText(101) : rh.reason);
  constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
  for (uint32_t i = 0; i < rh.headers.size(); ++i) {
    const http1::HeaderField& h = rh.headers[i];
    if ((h.flags & kSkip) == 0 && !http::isUpgradeControlledField(h.name)) {
      http::addFieldLine(out, h.name, h.value);
    }
  }
  http::addFieldLine(out, "Upgrade", http::kWebSocket);
  http::addFieldLine(out, "Connection", "Upgrade");
  out.add("\r\n", 2);
  out.move(early);
  config_->stats.countStatus(101);
  config_->stats.upgrade_switched.inc();
  trace_.setStatus(101);
  exchange_->reportTo(trace_);
  exchange_.reset();
  downstream().write(out);
  // Bytes the client sent behind its request head were left unread in its buffer (reading was
  // off): only now, after the 101, may they reach the origin.
  startTunnel(std::move(upstream), /*upgrade=*/true, origin_ended);
}

void Http1ProxyFilter::onRetry() {
  // A pooled connection the origin had already closed: once more on a new one.
  exchange_->reportTo(trace_);
  exchange_.reset();
  retried_ = true;
  pending_->request.fresh_connection = true;
  state_ = State::Filtering;
  timer_->disable();
  chain_->start(pending_->request);
}

void Http1ProxyFilter::onExchangeError(upstream::ExchangeError error, std::string_view detail) {
  t_response_out.clear();
  exchange_->reportTo(trace_);
  trace_.fail(detail, upstream::failureKind(error));
  if (error == upstream::ExchangeError::BodyTimeout) config_->stats.rq_body_timeout.inc();
  if (exchange_->responseStarted() || !http::exchangeErrorAnswered(error)) {
    // The client must see a truncated message (or takes nothing more).
    closeAll();
    return;
  }
  sendLocalReply(http::exchangeErrorStatus(error),
                 http::exchangeError(error, exchange_->bytesFromOrigin() > 0), detail, true);
}

void Http1ProxyFilter::onOriginBackedUp(bool backed_up) {
  // The origin is not taking the body: stop reading the client until it drains (in pairs).
  downstream().readDisable(backed_up);
}

void Http1ProxyFilter::startTunnel(upstream::UpstreamHandle upstream, bool upgrade,
                                   bool upstream_ended) {
  // No request follows on a tunnel: the codec's part is done, and it gives its place to the
  // tunnel (which takes the request's trace) and goes.
  state_ = State::Closed;
  proxy::RequestFilterChain::release(chain_);
  releaseHead();
  timer_->disable();
  downstream().readDisable(false);
  upstream::ConnectionTunnel::replace(
      *callbacks_, *this, config_->tunnel, trace_,
      {std::move(upstream), key_tunnel_stats_, upgrade, downstream_ended_, upstream_ended});
}

void Http1ProxyFilter::finishExchange() {
  // The exchange disarmed the timer as it ended.
  const bool request_done = exchange_->requestDone();
  exchange_->reportTo(trace_);
  exchange_.reset();
  endRecord();
  if (response_close_client_ || !request_done || downstream_ended_ || draining_) {
    state_ = State::Closed;
    downstream().close(network::CloseType::FlushWrite);
    return;
  }
  state_ = State::ReadingHead;
  timer_->enable(config_->idle_timeout);
  // Pipelined bytes already buffered are delivered again on the next loop turn.
  downstream().readDisable(false);
}

void Http1ProxyFilter::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) return;
  if (state_ == State::Forwarding || state_ == State::Filtering) {
    config_->stats.downstream_reset.inc();
    trace_.fail("the client closed the connection");
  }
  state_ = State::Closed;
  if (chain_) chain_->end();
  if (timer_) timer_->disable();
  releaseUpstream();
  releaseHead();
  endRecord();
}

void Http1ProxyFilter::onPeerEndWhileReadDisabled() {
  // The client left while its request waited for the filters (a lookup or a connect): nobody
  // waits for the answer, so both are cancelled now instead of running to their timeouts. A FIN
  // behind bytes still unread (a tunnel's first bytes, a body) is a half-close: the request goes
  // on and the FIN reaches the destination in turn.
  if (state_ != State::Filtering) return;
  if (downstream().hasUnreadBytes(head_in_buffer_ ? head_size_ : 0)) return;
  config_->stats.rq_abandoned.inc();
  downstream().close(network::CloseType::NoFlush);
}

void Http1ProxyFilter::onAboveWriteHighWatermark() {
  if (exchange_) exchange_->pauseResponse(true);
}

void Http1ProxyFilter::onBelowWriteLowWatermark() {
  if (exchange_) exchange_->pauseResponse(false);
}

void Http1ProxyFilter::onDrain() {
  draining_ = true;
  // Idle between requests (nothing of a next head arrived): a keep-alive client may have sent
  // its next request already, and closing now would reset it. It gets kDrainIdleGrace to
  // arrive (and is answered with Connection: close), then the connection closes. Anything in
  // flight ends with Connection: close.
  if (state_ == State::ReadingHead && (!head_timer_armed_ || downstream().readBuffer().empty())) {
    timer_->enable(kDrainIdleGrace);
  }
}

uint32_t Http1ProxyFilter::onKeysRevoked() {
  // The request in flight, the tunnel, or (between requests) the last request authenticated
  // with a key a reload took away.
  if (state_ == State::Closed || !trace_.revoked()) return 0;
  trace_.fail(proxy::kRevokedReason);
  closeAll();
  return 1;
}

void Http1ProxyFilter::onTimer() {
  switch (state_) {
    case State::ReadingHead:
      if (!downstream().readBuffer().empty()) {
        config_->stats.rq_head_timeout.inc();
        sendLocalReply(408, http::ProxyError::HttpRequestError, "request head not received in time",
                       true);
      } else {
        // A drain's grace for a request on its way is not an idle timeout.
        if (!draining_) config_->stats.downstream_idle_timeout.inc();
        state_ = State::Closed;
        downstream().close(network::CloseType::FlushWrite);
      }
      break;
    case State::Forwarding:  // the exchange keeps the body and response deadlines
      if (exchange_) exchange_->onTimer();
      break;
    case State::Filtering:
    case State::Closed:
      break;
  }
}

void Http1ProxyFilter::sendLocalReply(uint16_t status, http::ProxyError error,
                                      std::string_view detail, bool close, bool auth_challenge,
                                      uint32_t retry_after) {
  std::string body = http::localReplyBody(status, detail);
  std::string head = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n", status,
      http::statusText(status), body.size());
  if (auth_challenge) {
    head +=
        absl::StrFormat("Proxy-Authenticate: Basic realm=\"%s\"\r\n", pending_->request.auth_realm);
  }
  if (retry_after != 0) head += absl::StrFormat("Retry-After: %d\r\n", retry_after);
  head += "Proxy-Status: ";
  head += http::proxyStatusValue(error, detail);
  head += close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
  buffer::Buffer out;
  out.add(head);
  if (method_ != http1::Method::Head || state_ == State::ReadingHead) out.add(body);
  config_->stats.countStatus(status);
  downstream().write(out);
  trace_.setStatus(status);
  trace_.setProxyStatusError(http::proxyErrorName(error));
  trace_.fail(detail);
  if (exchange_) exchange_->reportTo(trace_);
  endRecord();
  if (!close) return;
  state_ = State::Closed;
  if (chain_) chain_->end();
  releaseUpstream();
  releaseHead();
  downstream().close(network::CloseType::FlushWrite);
}

void Http1ProxyFilter::releaseUpstream() {
  if (exchange_) {
    exchange_->reportTo(trace_);
    exchange_.reset();
  }
}

void Http1ProxyFilter::closeAll() {
  state_ = State::Closed;
  if (chain_) chain_->end();
  if (timer_) timer_->disable();
  releaseUpstream();
  releaseHead();
  endRecord();
  downstream().close(network::CloseType::FlushWrite);
}

void Http1ProxyFilter::endRecord() {
  if (!trace_.open()) return;  // nothing began (and perhaps no connection was ever given)
  trace_.end(downstream().dispatcher().now(), config_->listener_name, config_->request_duration);
}

void Http1ProxyFilter::releaseHead() {
  if (pending_ != nullptr) {
    t_pending_pool.release(pending_);
    pending_ = nullptr;
  }
}

std::string_view Http1ProxyFilter::get(std::string_view name) const {
  if (pending_ == nullptr) return {};
  {
    int32_t i =
        http1::findHeader(pending_->head.headers.data(), pending_->head.headers.size(), name);
    if (i >= 0) return pending_->head.headers[i].value;
  }
  for (uint32_t i = 0; i < pending_->added_count; ++i) {
    if (http1::equalsIgnoreCase(pending_->added[i].name, name)) return pending_->added[i].value;
  }
  return {};
}

void Http1ProxyFilter::remove(std::string_view name) {
  if (pending_ == nullptr) return;
  {
    for (uint32_t i = 0; i < pending_->head.headers.size(); ++i) {
      if (http1::equalsIgnoreCase(pending_->head.headers[i].name, name)) {
        pending_->head.headers[i].flags |= http1::HeaderField::kRemoved;
      }
    }
  }
  uint32_t kept = 0;
  for (uint32_t i = 0; i < pending_->added_count; ++i) {
    if (!http1::equalsIgnoreCase(pending_->added[i].name, name))
      pending_->added[kept++] = pending_->added[i];
  }
  pending_->added_count = kept;
}

bool Http1ProxyFilter::add(std::string_view name, std::string_view value) {
  if (pending_ == nullptr || pending_->added_count == kMaxAddedHeaders) return false;
  pending_->added[pending_->added_count++] = {name, value};
  return true;
}

}  // namespace http1proxy
}  // namespace filters
}  // namespace sluice
