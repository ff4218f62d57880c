#include "filters/network/http1/http1_proxy.h"

#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"
#include "source/common/http/head_scan.h"
#include "source/common/http/proxy_credential.h"
#include "source/common/http/status.h"
#include "source/common/http/upgrade.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/upstream/pool.h"

namespace sluice {
namespace filters {
namespace http1proxy {

namespace {

// A request in flight (head, proxy request, header edits) is several KiB and only needed until
// its head is sent, so each worker keeps a free list instead of every connection owning one:
// idle keep-alive connections and established tunnels hold none.
class PendingPool {
 public:
  Http1ProxyFilter::PendingRequest* acquire() {
    if (free_.empty()) return new Http1ProxyFilter::PendingRequest();
    Http1ProxyFilter::PendingRequest* pending = free_.back().release();
    free_.pop_back();
    return pending;
  }
  void release(Http1ProxyFilter::PendingRequest* pending) {
    if (free_.size() < kMaxFree) {
      free_.emplace_back(pending);
    } else {
      delete pending;
    }
  }

 private:
  static constexpr size_t kMaxFree = 32;
  std::vector<std::unique_ptr<Http1ProxyFilter::PendingRequest>> free_;
};

thread_local PendingPool t_pending_pool;
// Response heads are parsed and re-serialized within one callback: one scratch per worker.
thread_local http1::ResponseHead t_response_head;

bool idempotent(http1::Method m) {
  return m == http1::Method::Get || m == http1::Method::Head || m == http1::Method::Options ||
         m == http1::Method::Trace || m == http1::Method::Put || m == http1::Method::Delete;
}

void addHeaderLine(buffer::Buffer& out, std::string_view name, std::string_view value) {
  out.add(name);
  out.add(": ", 2);
  out.add(value);
  out.add("\r\n", 2);
}

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
void addForwardedHeaders(buffer::Buffer& out, const http1::HeaderField* headers, uint32_t count,
                         uint64_t content_length) {
  constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
  bool length_sent = false;
  for (uint32_t i = 0; i < count; ++i) {
    const http1::HeaderField& h = headers[i];
    if ((h.flags & kSkip) != 0) continue;
    if (h.name.size() == 14 && http1::equalsIgnoreCase(h.name, "content-length")) {
      if (length_sent) continue;
      length_sent = true;
      char digits[20];
      const auto result = std::to_chars(digits, digits + sizeof(digits), content_length);
      addHeaderLine(out, h.name, std::string_view(digits, result.ptr - digits));
      continue;
    }
    addHeaderLine(out, h.name, h.value);
  }
}

// Moves the part of `in` that belongs to a body with this framing into `out`. Returns false on
// a framing error; sets done when the body ended.
bool moveBody(http1::BodyFraming framing, uint64_t& left, http1::ChunkedDecoder& chunks,
              buffer::Buffer& in, buffer::Buffer& out, bool& done) {
  switch (framing) {
    case http1::BodyFraming::None:
      done = true;
      return true;
    case http1::BodyFraming::ContentLength: {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.length()));
      out.move(in, n);
      left -= n;
      done = left == 0;
      return true;
    }
    case http1::BodyFraming::Chunked:
      while (!in.empty()) {
        std::string_view piece = in.front();
        size_t used = 0;
        http1::ChunkedDecoder::Status st = chunks.consume(piece, used);
        out.move(in, used);
        if (st == http1::ChunkedDecoder::Status::Error) return false;
        if (st == http1::ChunkedDecoder::Status::Done) {
          done = true;
          return true;
        }
      }
      done = false;
      return true;
    case http1::BodyFraming::UntilClose:
      out.move(in);
      done = false;
      return true;
  }
  return false;
}

}  // namespace

Http1ProxyFilter::Http1ProxyFilter(Http1ConfigSharedPtr config)
    : config_(std::move(config)), upstream_callbacks_(*this) {}

Http1ProxyFilter::~Http1ProxyFilter() {
  if (chain_) chain_->end();
  releaseUpstream(false);
  releaseHead();
  setState(State::Closed);
}

void Http1ProxyFilter::setState(State state) {
  if (state_ == State::Tunnel && state != State::Tunnel) {
    config_->stats.tunnels_active.dec();
    if (upgraded_) {
      config_->stats.upgrades_active.dec();
      upgraded_ = false;
    }
  }
  if (state_ != State::Tunnel && state == State::Tunnel) {
    config_->stats.tunnels_active.inc();
    if (upgraded_) config_->stats.upgrades_active.inc();
  }
  state_ = state;
}

void Http1ProxyFilter::initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) {
  callbacks_ = &callbacks;
}

network::FilterStatus Http1ProxyFilter::onNewConnection() {
  chain_.emplace(callbacks_->worker(), *this);
  for (const auto& factory : config_->request_filters) factory(*chain_);
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
        setState(State::Closed);
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
    case State::Tunnel:
      tunnel_->onDownstreamData(data, end_stream);
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
  armHeadTimer();
  const std::string_view view =
      http::headToParse(data, config_->request_limits.max_head_bytes, head_scanned_);
  if (view.empty()) return;
  if (pending_ == nullptr) pending_ = t_pending_pool.acquire();
  http1::ParseError err;
  http1::ParseStatus status =
      http1::parseRequestHead(view, config_->request_limits, pending_->head, err);
  if (status == http1::ParseStatus::Incomplete) return;
  if (status == http1::ParseStatus::Error) {
    config_->stats.rq_rejected.inc();
    sendLocalReply(err.status, err.reason, true);
    return;
  }
  timer_->disable();
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

  if (head.form == http1::TargetForm::Authority) {
    if (head.framing != http1::BodyFraming::None) {
      config_->stats.rq_rejected.inc();
      sendLocalReply(400, "CONNECT with a body", true);
      return;
    }
    pending_->request.kind = proxy::RequestKind::Tunnel;
    config_->stats.rq_connect.inc();
  } else if (head.form == http1::TargetForm::Absolute) {
    // ws:// is http:// asking for a WebSocket (RFC 6455 §3; the parser defaults its port to 80).
    const bool ws = http1::equalsIgnoreCase(head.scheme, "ws");
    if (http1::equalsIgnoreCase(head.scheme, "wss")) {
      // TLS to the origin is the client's: it sends CONNECT and runs TLS through the tunnel.
      config_->stats.rq_rejected.inc();
      config_->stats.upgrade_rejected.inc();
      sendLocalReply(400, "wss:// URLs are not relayed; use CONNECT", true);
      return;
    }
    if (!ws && !http1::equalsIgnoreCase(head.scheme, "http")) {
      config_->stats.rq_rejected.inc();
      sendLocalReply(400, "only http:// URLs are relayed; use CONNECT for others", true);
      return;
    }
    // Other upgrades (h2c, ...) are not relayed: their Upgrade is stripped as a hop-by-hop
    // header and the request goes on as a plain one.
    if (config_->websocket &&
        http::upgradeRequestKind(head) == http::UpgradeRequestKind::WebSocket) {
      if (const char* why = http::checkWebSocketRequest(head); why != nullptr) {
        config_->stats.rq_rejected.inc();
        config_->stats.upgrade_rejected.inc();
        sendLocalReply(400, why, true);
        return;
      }
      upgrade_ = true;
    } else if (ws) {
      config_->stats.rq_rejected.inc();
      config_->stats.upgrade_rejected.inc();
      sendLocalReply(400,
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
      config_->stats.rq_upgrade.inc();
    }
  } else {
    config_->stats.rq_rejected.inc();
    sendLocalReply(400, "not a proxy request: use an absolute URL or CONNECT", true);
    return;
  }
  const uint64_t max_body = config_->max_request_body_bytes;
  if (max_body != 0 && head.framing == http1::BodyFraming::ContentLength &&
      head.content_length > max_body) {
    // Refused before any filter runs, so nothing reaches an origin.
    config_->stats.rq_body_too_large.inc();
    sendLocalReply(413, "request body larger than the proxy allows", true);
    return;
  }
  pending_->request.protocol = proxy::Protocol::Http1;
  pending_->request.host = head.host;
  pending_->request.port = head.port;
  pending_->request.client = downstream().peer();
  if (head.proxy_authorization >= 0) {
    pending_->request.has_credential = true;
    http::proxyAuthorizationKey(head.headers[head.proxy_authorization].value,
                                pending_->credential_scratch, pending_->request.credential);
  }
  setState(State::Filtering);
  downstream().readDisable(true);
  chain_->start(pending_->request);
}

void Http1ProxyFilter::onDenied(proxy::Denial denial, std::string_view reason) {
  uint16_t status = http::denialStatus(denial);
  // A body we did not read would be taken for the next request: close instead of skipping it.
  bool close = !client_keep_alive_ || request_framing_ != http1::BodyFraming::None ||
               downstream_ended_ || pending_->request.close_connection;
  chain_->end();
  sendLocalReply(status, reason, close, denial == proxy::Denial::Unauthorized);
  if (close) return;
  if (head_in_buffer_) {
    downstream().readBuffer().drain(head_size_);
    head_in_buffer_ = false;
  }
  releaseHead();
  setState(State::ReadingHead);
  timer_->enable(config_->idle_timeout);
  downstream().readDisable(false);
}

void Http1ProxyFilter::onUpstreamReady(upstream::UpstreamHandle upstream) {
  upstream_ = std::move(upstream);
  upstream_->setCallbacks(&upstream_callbacks_);
  upstream_info_ = upstream_.info();
  key_tunnel_stats_ = pending_->request.principal_tunnel_stats;
  chain_->end();
  if (pending_->request.kind == proxy::RequestKind::Tunnel) {
    buffer::Buffer out;
    out.add(std::string_view("HTTP/1.1 200 Connection Established\r\n\r\n"));
    downstream().write(out);
    config_->stats.countStatus(200);
    downstream().readBuffer().drain(head_size_);
    head_in_buffer_ = false;
    releaseHead();
    // Bytes the client sent after the CONNECT head (an eager TLS hello) go first, then its end
    // if it already half-closed.
    startTunnel(downstream().readBuffer(), false);
    downstream().readDisable(false);
    return;
  }
  setState(State::Forwarding);
  sendRequestHead();
}

void Http1ProxyFilter::sendRequestHead() {
  const http1::RequestHead& head = pending_->head;
  buffer::Buffer out;
  if (upgrade_) {
    // HTTP/1.1 only (so Host is there); the encoder writes Upgrade and Connection itself and
    // drops Content-Length: 0, the only body framing an upgrade may carry.
    http::UpgradeRequestEncoder encoder(out, head.path);
    constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
    for (uint32_t i = 0; i < head.header_count; ++i) {
      if ((head.headers[i].flags & kSkip) == 0) {
        encoder.header(head.headers[i].name, head.headers[i].value);
      }
    }
    for (uint32_t i = 0; i < pending_->added_count; ++i) {
      encoder.header(pending_->added[i].name, pending_->added[i].value);
    }
    encoder.finish();
  } else {
    out.add(head.method_text);
    out.add(" ", 1);
    out.add(head.path);
    out.add(client_http10_ ? std::string_view(" HTTP/1.0\r\n") : std::string_view(" HTTP/1.1\r\n"));
    addForwardedHeaders(out, head.headers.data(), head.header_count, head.content_length);
  }
  if (!upgrade_ && head.host_header < 0) {
    // HTTP/1.0 clients may omit Host; origins need it.
    bool v6 = head.host.find(':') != std::string_view::npos;
    std::string host = absl::StrFormat(v6 ? "[%s]" : "%s", head.host);
    if (head.port != 80) host += absl::StrFormat(":%d", head.port);
    addHeaderLine(out, "Host", host);
  }
  if (!upgrade_) {
    for (uint32_t i = 0; i < pending_->added_count; ++i)
      addHeaderLine(out, pending_->added[i].name, pending_->added[i].value);
    if (client_http10_ && client_keep_alive_) addHeaderLine(out, "Connection", "keep-alive");
    out.add("\r\n", 2);
  }

  request_body_left_ = head.content_length;
  request_chunks_.reset();
  request_done_ = request_framing_ == http1::BodyFraming::None;
  response_started_ = false;
  response_scanned_ = 0;
  buffer::Buffer& client = downstream().readBuffer();
  if (!retryable()) {
    // Past the head: body bytes follow it in the client's buffer.
    client.drain(head_size_);
    head_in_buffer_ = false;
    releaseHead();
    if (!request_done_) {
      bool ok = moveBody(request_framing_, request_body_left_, request_chunks_, client, out,
                         request_done_);
      if (!ok) {
        config_->stats.rq_rejected.inc();
        sendLocalReply(400, request_chunks_.error(), true);
        return;
      }
      if (requestBodyOverLimit()) {
        onRequestBodyTooLarge();
        return;
      }
      if (!request_done_ && downstream_ended_) {
        // The client ended its side in the middle of its body: nothing more will come.
        config_->stats.downstream_reset.inc();
        closeAll();
        return;
      }
    }
  }
  config_->stats.bytes_upstream_tx.add(out.length());
  upstream_->write(out);
  if (state_ != State::Forwarding) return;
  // The response deadline starts once the whole request is out; until then the client must
  // keep its body coming.
  timer_->enable(request_done_ ? upstream_info_.response_timeout : config_->request_body_timeout);
  // Read the rest of the body; a body-less request leaves pipelined bytes unread for now.
  if (!request_done_) downstream().readDisable(false);
}

void Http1ProxyFilter::relayRequestBody(buffer::Buffer& data, bool end_stream) {
  if (end_stream) downstream_ended_ = true;
  if (request_done_) {
    // The next pipelined request waits until this response is done.
    if (!data.empty() && downstream().readEnabled()) downstream().readDisable(true);
    return;
  }
  buffer::Buffer out;
  bool ok =
      moveBody(request_framing_, request_body_left_, request_chunks_, data, out, request_done_);
  if (ok && requestBodyOverLimit()) {
    onRequestBodyTooLarge();
    return;
  }
  const bool progressed = !out.empty();
  if (!out.empty()) {
    config_->stats.bytes_upstream_tx.add(out.length());
    upstream_->write(out);
    if (state_ != State::Forwarding) return;
  }
  if (!ok) {
    config_->stats.rq_rejected.inc();
    if (!response_started_) {
      sendLocalReply(400, request_chunks_.error(), true);
    } else {
      closeAll();
    }
    return;
  }
  if (request_done_) {
    downstream().readDisable(true);
    if (!response_started_) timer_->enable(upstream_info_.response_timeout);
  } else if (end_stream) {
    // The client left in the middle of its body.
    config_->stats.downstream_reset.inc();
    closeAll();
  } else if (progressed && !response_started_) {
    timer_->enable(config_->request_body_timeout);
  }
}

bool Http1ProxyFilter::requestBodyOverLimit() const {
  return config_->max_request_body_bytes != 0 && request_framing_ == http1::BodyFraming::Chunked &&
         request_chunks_.payloadBytes() > config_->max_request_body_bytes;
}

void Http1ProxyFilter::onRequestBodyTooLarge() {
  config_->stats.rq_body_too_large.inc();
  if (!response_started_) {
    sendLocalReply(413, "request body larger than the proxy allows", true);
  } else {
    closeAll();
  }
}

bool Http1ProxyFilter::retryable() const {
  return upstream_info_.reused && !retried_ && request_framing_ == http1::BodyFraming::None &&
         idempotent(method_) && !response_started_;
}

void Http1ProxyFilter::onUpstreamData(buffer::Buffer& data, bool end_stream) {
  if (state_ != State::Forwarding) {
    data.clear();
    return;
  }
  config_->stats.bytes_upstream_rx.add(data.length());
  // The response head and the body bytes that came with it leave in one write.
  buffer::Buffer out;
  if (!response_started_) {
    if (!processResponseHead(data, out)) {
      if (state_ == State::Tunnel) {
        onUpgraded(data, end_stream, out);
        return;
      }
      if (!out.empty() && state_ == State::Forwarding) downstream().write(out);
      if (state_ == State::Forwarding && end_stream) {
        onUpstreamEvent(network::ConnectionEvent::RemoteClose);
      }
      return;
    }
  }
  relayResponseBody(data, end_stream, out);
}

bool Http1ProxyFilter::processResponseHead(buffer::Buffer& data, buffer::Buffer& out) {
  http1::ResponseHead& rh = t_response_head;
  while (true) {
    const std::string_view view =
        http::headToParse(data, config_->response_limits.max_head_bytes, response_scanned_);
    if (view.empty()) return false;
    http1::ParseError err;
    http1::ParseStatus st =
        http1::parseResponseHead(view, config_->response_limits, method_, rh, err);
    if (st == http1::ParseStatus::Incomplete) return false;
    response_scanned_ = 0;
    if (st == http1::ParseStatus::Error) {
      config_->stats.upstream_rs_bad.inc();
      sendLocalReply(502, err.reason, true);
      return false;
    }
    // The origin answered: this request will not be retried, its head is done with.
    if (head_in_buffer_) {
      downstream().readBuffer().drain(head_size_);
      head_in_buffer_ = false;
      releaseHead();
    }
    if (rh.status >= 100 && rh.status < 200) {
      if (rh.status == 101) {
        if (upgrade_ && http::acceptsUpgrade(rh)) {
          // The 101 goes out with the fields the origin sent (Sec-WebSocket-Accept, -Protocol,
          // -Extensions), minus the hop-by-hop and framing ones, which are the proxy's to write.
          addStatusLine(out, 101, rh.reason.empty() ? http::statusText(101) : rh.reason);
          constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;
          for (uint32_t i = 0; i < rh.header_count; ++i) {
            const http1::HeaderField& h = rh.headers[i];
            if ((h.flags & kSkip) == 0 && !http::isUpgradeControlledField(h.name)) {
              addHeaderLine(out, h.name, h.value);
            }
          }
          addHeaderLine(out, "Upgrade", http::kWebSocket);
          addHeaderLine(out, "Connection", "Upgrade");
          out.add("\r\n", 2);
          data.drain(rh.head_size);
          config_->stats.countStatus(101);
          config_->stats.upgrade_switched.inc();
          upgraded_ = true;
          setState(State::Tunnel);
          return false;
        }
        config_->stats.upstream_rs_bad.inc();
        sendLocalReply(502,
                       upgrade_ ? "origin switched protocols but not to websocket"
                                : "origin switched protocols without an upgrade request",
                       true);
        return false;
      }
      // Interim responses (100 Continue, 103 Early Hints) go to HTTP/1.1 clients as they come.
      if (!client_http10_) {
        addStatusLine(out, rh.status, rh.reason);
        addForwardedHeaders(out, rh.headers.data(), rh.header_count, rh.content_length);
        out.add("\r\n", 2);
        config_->stats.countStatus(rh.status);
      }
      data.drain(rh.head_size);
      continue;
    }
    // A final answer to an upgrade request: the origin declined; the exchange ends as a plain
    // one (its Upgrade and Connection fields were stripped as hop-by-hop).
    if (upgrade_) config_->stats.upgrade_refused.inc();
    response_framing_ = rh.framing;
    response_body_left_ = rh.content_length;
    response_keep_alive_ = rh.keep_alive;
    response_chunks_.reset();
    response_close_client_ = !client_keep_alive_ || draining_ || callbacks_->worker().draining() ||
                             rh.framing == http1::BodyFraming::UntilClose;
    addStatusLine(out, rh.status, rh.reason);
    addForwardedHeaders(out, rh.headers.data(), rh.header_count, rh.content_length);
    if (response_close_client_) {
      addHeaderLine(out, "Connection", "close");
    } else if (client_http10_) {
      addHeaderLine(out, "Connection", "keep-alive");
    }
    out.add("\r\n", 2);
    data.drain(rh.head_size);
    config_->stats.countStatus(rh.status);
    response_started_ = true;
    return true;
  }
}

void Http1ProxyFilter::onUpgraded(buffer::Buffer& data, bool end_stream, buffer::Buffer& out) {
  // Frames the origin sent right behind its 101 go out with it.
  out.move(data);
  downstream().write(out);
  // Bytes the client sent behind its request head were left unread in its buffer (reading was
  // off): only now, after the 101, may they reach the origin.
  startTunnel(downstream().readBuffer(), end_stream);
  downstream().readDisable(false);
}

void Http1ProxyFilter::startTunnel(buffer::Buffer& early, bool upstream_ended) {
  setState(State::Tunnel);
  // No request follows on a tunnel: its filter instances are not needed any more.
  chain_->releaseFilters();
  upstream::TunnelOptions options;
  options.idle_timeout = upstream_info_.tunnel_idle_timeout;
  options.splice = upstream_info_.splice;
  options.max_pipes = upstream_info_.max_splice_pipes;
  options.listener_stats = &config_->tunnel_stats;
  options.key_stats = key_tunnel_stats_;
  tunnel_ = std::make_unique<upstream::TunnelRelay>(std::move(upstream_), downstream(), *this,
                                                    *timer_, options);
  tunnel_->start(early, downstream_ended_, upstream_ended);
}

void Http1ProxyFilter::onTunnelEnd(upstream::TunnelEnd end) {
  if (end == upstream::TunnelEnd::IdleTimeout) config_->stats.tunnel_idle_timeout.inc();
  if (end == upstream::TunnelEnd::UpstreamReset) config_->stats.upstream_reset.inc();
  if (end == upstream::TunnelEnd::DownstreamReset) config_->stats.downstream_reset.inc();
  closeAll();
}

void Http1ProxyFilter::relayResponseBody(buffer::Buffer& data, bool end_stream,
                                         buffer::Buffer& out) {
  bool done = false;
  bool ok = moveBody(response_framing_, response_body_left_, response_chunks_, data, out, done);
  if (!out.empty()) {
    downstream().write(out);
    if (state_ != State::Forwarding) return;
  }
  if (!ok) {
    config_->stats.upstream_rs_bad.inc();
    closeAll();
    return;
  }
  if (response_framing_ == http1::BodyFraming::UntilClose && end_stream) done = true;
  if (done) {
    // Anything after the response is not ours to relay: the origin connection is spoiled.
    if (!data.empty()) {
      response_keep_alive_ = false;
      data.clear();
    }
    if (end_stream) response_keep_alive_ = false;
    finishExchange();
    return;
  }
  if (end_stream) {
    // The origin closed before the body's end: the client must see a truncated message.
    config_->stats.upstream_reset.inc();
    closeAll();
    return;
  }
  timer_->enable(upstream_info_.response_timeout);
}

void Http1ProxyFilter::finishExchange() {
  timer_->disable();
  // An origin that declined an upgrade has seen Connection: Upgrade; its connection is not
  // pooled (it is rare, and no one depends on what the origin makes of it).
  bool reusable = response_keep_alive_ && request_done_ && !upgrade_ &&
                  response_framing_ != http1::BodyFraming::UntilClose;
  releaseUpstream(reusable);
  response_started_ = false;
  if (response_close_client_ || !request_done_ || downstream_ended_ || draining_) {
    setState(State::Closed);
    downstream().close(network::CloseType::FlushWrite);
    return;
  }
  setState(State::ReadingHead);
  timer_->enable(config_->idle_timeout);
  // Pipelined bytes already buffered are delivered again on the next loop turn.
  downstream().readDisable(false);
}

void Http1ProxyFilter::onUpstreamEvent(network::ConnectionEvent event) {
  if (event != network::ConnectionEvent::RemoteClose) return;
  if (state_ != State::Forwarding) return;
  if (!response_started_ && retryable() && head_in_buffer_) {
    // A pooled connection the origin had already closed: try once more on a new one.
    config_->stats.rq_retry.inc();
    releaseUpstream(false);
    retried_ = true;
    pending_->request.fresh_connection = true;
    setState(State::Filtering);
    timer_->disable();
    chain_->start(pending_->request);
    return;
  }
  config_->stats.upstream_reset.inc();
  if (!response_started_) {
    sendLocalReply(502, "origin closed the connection", true);
  } else {
    closeAll();
  }
}

void Http1ProxyFilter::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) return;
  if (state_ == State::Forwarding || state_ == State::Filtering) {
    config_->stats.downstream_reset.inc();
  }
  setState(State::Closed);
  if (chain_) chain_->end();
  if (timer_) timer_->disable();
  releaseUpstream(false);
  releaseHead();
}

void Http1ProxyFilter::onAboveWriteHighWatermark() {
  if (tunnel_) {
    tunnel_->onDownstreamBackedUp(true);
  } else if (upstream_) {
    upstream_->readDisable(true);
  }
}

void Http1ProxyFilter::onBelowWriteLowWatermark() {
  if (tunnel_) {
    tunnel_->onDownstreamBackedUp(false);
  } else if (upstream_) {
    upstream_->readDisable(false);
  }
}

void Http1ProxyFilter::onDrain() {
  draining_ = true;
  // Idle between requests (nothing of a next head arrived): close now. Anything in flight ends
  // with Connection: close.
  if (state_ == State::ReadingHead && (!head_timer_armed_ || downstream().readBuffer().empty())) {
    setState(State::Closed);
    downstream().close(network::CloseType::FlushWrite);
  }
}

void Http1ProxyFilter::onTimer() {
  switch (state_) {
    case State::ReadingHead:
      if (!downstream().readBuffer().empty()) {
        config_->stats.rq_head_timeout.inc();
        sendLocalReply(408, "request head not received in time", true);
      } else {
        config_->stats.downstream_idle_timeout.inc();
        setState(State::Closed);
        downstream().close(network::CloseType::FlushWrite);
      }
      break;
    case State::Forwarding:
      // Reading is enabled while a body is due unless the origin pushes back: then the stall
      // is the origin's.
      if (!request_done_ && !response_started_ && downstream().readEnabled()) {
        config_->stats.rq_body_timeout.inc();
        sendLocalReply(408, "request body not received in time", true);
        break;
      }
      config_->stats.upstream_rs_timeout.inc();
      if (!response_started_) {
        sendLocalReply(504, "origin did not answer in time", true);
      } else {
        closeAll();
      }
      break;
    case State::Tunnel:  // the relay keeps its idle deadline on this timer
      if (tunnel_) tunnel_->onTimer();
      break;
    case State::Filtering:
    case State::Closed:
      break;
  }
}

void Http1ProxyFilter::sendLocalReply(uint16_t status, std::string_view detail, bool close,
                                      bool auth_challenge) {
  std::string body = http::localReplyBody(status, detail);
  std::string head = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n", status,
      http::statusText(status), body.size());
  if (auth_challenge) {
    head +=
        absl::StrFormat("Proxy-Authenticate: Basic realm=\"%s\"\r\n", pending_->request.auth_realm);
  }
  head += close ? "Connection: close\r\n\r\n" : "\r\n";
  buffer::Buffer out;
  out.add(head);
  if (method_ != http1::Method::Head || state_ == State::ReadingHead) out.add(body);
  config_->stats.countStatus(status);
  downstream().write(out);
  if (!close) return;
  setState(State::Closed);
  if (chain_) chain_->end();
  releaseUpstream(false);
  releaseHead();
  downstream().close(network::CloseType::FlushWrite);
}

void Http1ProxyFilter::releaseUpstream(bool reusable) {
  upstream::TunnelRelay::dispose(tunnel_);
  upstream_.release(reusable && !draining_);
}

void Http1ProxyFilter::closeAll() {
  setState(State::Closed);
  if (chain_) chain_->end();
  if (timer_) timer_->disable();
  releaseUpstream(false);
  releaseHead();
  downstream().close(network::CloseType::FlushWrite);
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
    int32_t i = http1::findHeader(pending_->head.headers.data(), pending_->head.header_count, name);
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
    for (uint32_t i = 0; i < pending_->head.header_count; ++i) {
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
