#include "filters/network/http2/stream.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/strings/str_format.h"

#include "source/common/http/status.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/upstream/pool.h"

namespace sluice {
namespace filters {
namespace http2proxy {

namespace {

using http2::ErrorCode;

// Response heads are translated within one callback: scratch per worker, capacity kept.
thread_local std::string t_names;
thread_local std::vector<http2::ResponseHeader> t_headers;

}  // namespace

Http2ProxyFilter::Stream::Stream(Http2ProxyFilter& parent)
    : parent_(parent), timer_(parent.downstream().dispatcher(), [this] { onTimer(); }) {
  buildChain();
}

void Http2ProxyFilter::Stream::buildChain() {
  chain_ = std::make_unique<proxy::RequestFilterChain>(parent_.callbacks_->worker(), *this,
                                                       parent_.config_->request_filters);
}

void Http2ProxyFilter::Stream::begin(int32_t id) {
  // A tunnel let its filters go (it runs no more requests); this stream needs them again.
  if (chain_ == nullptr) buildChain();
  id_ = id;
  state_ = State::Headers;
  storage_.clear();
  refs_.clear();
  fields_.clear();
  header_bytes_ = 0;
  header_error_ = nullptr;
  info_ = http2::RequestInfo();
  request_ = proxy::ProxyRequest();
  added_count_ = 0;
  unconsumed_ = 0;
  body_received_ = 0;
  request_ended_ = false;
  response_started_ = false;
  out_eof_ = false;
  deferred_ = false;
  upstream_paused_ = false;
  response_sent_ = false;
  retried_ = false;
  websocket_pending_ = false;
  drain_after_reply_ = false;
  tunnel_ = false;
  client_reset_ = false;
  config().stats.streams_total.inc();
  config().stats.streams_active.inc();
  // A header block left unfinished blocks the whole connection (HPACK state is shared).
  timer_.enable(config().exchange.request_body_timeout);
}

void Http2ProxyFilter::Stream::addHeader(std::string_view name, std::string_view value) {
  header_bytes_ += name.size() + value.size() + 32;  // RFC 9113 6.5.2 accounting
  if (header_error_ != nullptr) return;
  if (header_bytes_ > config().codec.max_header_list_size) {
    header_error_ = "header list too large";
    return;
  }
  if (refs_.size() >= config().max_request_headers) {
    header_error_ = "too many header fields";
    return;
  }
  refs_.push_back({static_cast<uint32_t>(storage_.size()), static_cast<uint32_t>(name.size()),
                   static_cast<uint32_t>(value.size())});
  storage_.append(name);
  storage_.append(value);
}

void Http2ProxyFilter::Stream::onHeadersComplete(bool end_stream) {
  timer_.disable();
  request_ended_ = end_stream;
  trace_.begin(timer_.dispatcher().now(), proxy::Protocol::Http2, "-", {}, 0,
               &parent_.downstream().peer());
  if (header_error_ != nullptr) {
    config().stats.rq_header_list_too_large.inc();
    localReply(431, http::ProxyError::HttpRequestError, header_error_);
    return;
  }
  fields_.resize(refs_.size());
  for (size_t i = 0; i < refs_.size(); ++i) {
    const char* base = storage_.data() + refs_[i].offset;
    fields_[i].name = std::string_view(base, refs_[i].name_len);
    fields_[i].value = std::string_view(base + refs_[i].name_len, refs_[i].value_len);
    fields_[i].flags = 0;
  }
  http2::RequestError err;
  if (!http2::parseRequest(fields_.data(), static_cast<uint32_t>(fields_.size()), info_, err,
                           !config().disable_websocket)) {
    config().stats.rq_rejected.inc();
    localReply(err.status, http::ProxyError::HttpRequestError, err.reason);
    return;
  }
  const uint64_t max_body = config().max_request_body_bytes;
  if (max_body != 0 && info_.has_content_length && info_.content_length > max_body) {
    config().stats.rq_body_too_large.inc();
    localReply(413, http::ProxyError::HttpRequestError,
               "request body larger than the proxy allows");
    return;
  }
  trace_.begin(timer_.dispatcher().now(), proxy::Protocol::Http2, info_.method_text, info_.host,
               info_.port, &parent_.downstream().peer(),
               info_.kind == proxy::RequestKind::Tunnel ? std::string_view() : info_.path);
  request_ = proxy::ProxyRequest();
  request_.protocol = proxy::Protocol::Http2;
  request_.kind = info_.kind;
  request_.host = info_.host;
  request_.port = info_.port;
  request_.client = parent_.downstream().peer();
  request_.client_fd = parent_.downstream().fd();
  if (info_.proxy_authorization >= 0) {
    // As sent (the first field): sluice.auth decodes it only when it is not what this stream
    // object last authenticated with.
    request_.credential_form = proxy::CredentialForm::ProxyAuthorization;
    request_.credential = fields_[static_cast<size_t>(info_.proxy_authorization)].value;
  }
  if (info_.websocket) {
    request_.headers = this;
    request_.websocket = true;
    // An upgraded origin connection is never pooled, so it never comes from the pool either.
    request_.fresh_connection = true;
    config().stats.rq_websocket.inc();
  } else if (info_.kind == proxy::RequestKind::Forward) {
    request_.headers = this;
    config().stats.rq_forward.inc();
  } else {
    config().stats.rq_connect.inc();
  }
  // The stream's place under its key's limits lives in its trace: a tunnel keeps it, the
  // record's end (the stream closing) gives it back.
  request_.limit_slot = trace_.limitSlot();
  state_ = State::Filtering;
  chain_->start(request_);
}

void Http2ProxyFilter::Stream::onClientData(const uint8_t* data, size_t length) {
  body_received_ += length;
  const uint64_t max_body = config().max_request_body_bytes;
  if (max_body != 0 && info_.kind == proxy::RequestKind::Forward && !info_.websocket &&
      body_received_ > max_body && (state_ == State::Filtering || state_ == State::Forwarding)) {
    config().stats.rq_body_too_large.inc();
    parent_.codec_->consume(id_, length);
    if (!response_started_) {
      localReply(413, http::ProxyError::HttpRequestError,
                 "request body larger than the proxy allows");
    } else {
      reset(ErrorCode::Cancel);
    }
    return;
  }
  switch (state_) {
    case State::Headers:
    case State::Filtering:
      // Held (and not credited) until the upstream is ready: the stream window bounds it.
      pending_body_.add(data, length);
      unconsumed_ += length;
      return;
    case State::Forwarding: {
      if (websocket_pending_) {
        // Nothing reaches the origin before its 101: held, within the stream window.
        pending_body_.add(data, length);
        unconsumed_ += length;
        return;
      }
      buffer::Buffer in;
      in.add(data, length);
      if (exchange_) exchange_->sendBody(in, false);
      credit(length);
      return;
    }
    case State::Tunnel: {
      if (!tunnel_relay_) {
        parent_.codec_->consume(id_, length);
        parent_.scheduleFlush();
        return;
      }
      buffer::Buffer out;
      out.add(data, length);
      tunnel_relay_->onDownstreamData(out, false);
      credit(length);
      return;
    }
    case State::Idle:
    case State::Replied:
    case State::Done:
      // Nobody wants these bytes: give the window back so the connection keeps flowing.
      parent_.codec_->consume(id_, length);
      parent_.scheduleFlush();
      return;
  }
}

void Http2ProxyFilter::Stream::onClientEnd() {
  request_ended_ = true;
  if (state_ == State::Forwarding) {
    if (websocket_pending_) return;  // half-closed upstream once switched
    buffer::Buffer none;
    if (exchange_) exchange_->sendBody(none, true);
  } else if (state_ == State::Tunnel && tunnel_relay_) {
    buffer::Buffer none;
    tunnel_relay_->onDownstreamData(none, true);
  }
}

bool Http2ProxyFilter::Stream::onClientReset() {
  client_reset_ = true;
  if (response_sent_) return false;
  if (state_ == State::Filtering || state_ == State::Forwarding || state_ == State::Tunnel) {
    config().stats.downstream_reset.inc();
    trace_.fail("the client reset the stream");
  }
  return true;
}

void Http2ProxyFilter::Stream::onResponseSent() {
  response_sent_ = true;
  if (drain_after_reply_) {
    drain_after_reply_ = false;
    parent_.startDrain();
  }
  // A complete answer ends the exchange; a request body still coming is not wanted
  // (RFC 9113 8.1). Tunnels stay half-open until the client ends its side.
  if (!request_ended_ && state_ != State::Tunnel) {
    parent_.codec_->resetStream(id_, ErrorCode::NoError);
    parent_.scheduleFlush();
  }
}

void Http2ProxyFilter::Stream::onClosed() {
  if (drain_after_reply_) {
    drain_after_reply_ = false;
    parent_.startDrain();
  }
  abort();
  parent_.releaseStream(this);
}

size_t Http2ProxyFilter::Stream::readBody(uint8_t* buf, size_t max, bool& eof) {
  size_t n = 0;
  while (n < max && !out_.empty()) {
    std::string_view front = out_.front();
    size_t k = std::min(front.size(), max - n);
    memcpy(buf + n, front.data(), k);
    out_.drain(k);
    n += k;
  }
  eof = out_eof_ && out_.empty();
  if (n == 0 && !eof) deferred_ = true;
  parent_.onDequeued(n);
  updateOriginPause();
  if (n > 0 && state_ == State::Forwarding) {
    // The client reads: the origin's deadline (or, once it is done, the client's) starts over.
    if (exchange_ && exchange_->active()) {
      exchange_->onResponseProgress();
    } else {
      timer_.enable(parent_.config_->idle_timeout);
    }
  }
  return n;
}

void Http2ProxyFilter::Stream::abort() {
  if (state_ == State::Idle) return;
  if (chain_ != nullptr) chain_->end();
  timer_.disable();
  releaseUpstream();
  trace_.end(timer_.dispatcher().now(), parent_.config_->listener_name,
             parent_.config_->request_duration);
  pending_body_.clear();
  dropOutput();
  upstream_paused_ = false;
  // Capacity is kept for the next stream, but not what one large header list needed: an idle
  // connection should not hold max_concurrent_streams times max_header_list_size.
  if (storage_.capacity() > kKeptHeaderBytes) std::string().swap(storage_);
  if (refs_.capacity() > kKeptHeaderFields) std::vector<FieldRef>().swap(refs_);
  if (fields_.capacity() > kKeptHeaderFields) std::vector<http1::HeaderField>().swap(fields_);
  if (tunnel_) config().stats.tunnels_active.dec();
  tunnel_ = false;
  config().stats.streams_active.dec();
  state_ = State::Idle;
}

bool Http2ProxyFilter::Stream::cutIfRevoked() {
  if (state_ == State::Idle || state_ == State::Done || !trace_.revoked()) return false;
  trace_.fail(proxy::kRevokedReason);
  reset(ErrorCode::Cancel);
  return true;
}

void Http2ProxyFilter::Stream::onDenied(proxy::Denial denial, std::string_view reason) {
  if (chain_ != nullptr) chain_->end();
  trace_.routed(request_);
  trace_.fail(reason, request_.failure.kind);
  // The refusal goes out first, then the GOAWAY (onResponseSent).
  drain_after_reply_ = request_.close_connection;
  // Over a limit the stream gets a 429 with Retry-After, like an HTTP/1.1 request, rather than
  // RST_STREAM(REFUSED_STREAM), which tells the client it may retry at once (RFC 9113 8.7).
  localReply(http::denialStatus(denial),
             http::denialError(denial, request_.denial_cause, request_.failure), reason,
             denial == proxy::Denial::Unauthorized,
             denial == proxy::Denial::TooManyRequests ? request_.retry_after : 0);
}

std::string_view Http2ProxyFilter::Stream::get(std::string_view name) const {
  for (const http1::HeaderField& f : fields_) {
    if ((f.flags & http1::HeaderField::kRemoved) == 0 && http1::equalsIgnoreCase(f.name, name)) {
      return f.value;
    }
  }
  for (uint32_t i = 0; i < added_count_; ++i) {
    if (http1::equalsIgnoreCase(added_[i].name, name)) return added_[i].value;
  }
  if (http1::isFieldName(name, "host")) return info_.authority;
  return {};
}

void Http2ProxyFilter::Stream::remove(std::string_view name) {
  for (http1::HeaderField& f : fields_) {
    if (http1::equalsIgnoreCase(f.name, name)) f.flags |= http1::HeaderField::kRemoved;
  }
  uint32_t kept = 0;
  for (uint32_t i = 0; i < added_count_; ++i) {
    if (!http1::equalsIgnoreCase(added_[i].name, name)) added_[kept++] = added_[i];
  }
  added_count_ = kept;
}

bool Http2ProxyFilter::Stream::add(std::string_view name, std::string_view value) {
  if (added_count_ == kMaxAddedHeaders) return false;
  added_[added_count_++] = {name, value};
  return true;
}

void Http2ProxyFilter::Stream::writeDownstream(buffer::Buffer& data, bool end_stream) {
  queueOutput(data);
  if (end_stream) out_eof_ = true;
  afterOutput();
}

void Http2ProxyFilter::Stream::readDisableDownstream(bool disable) {
  if (!disable) creditPending();
}

void Http2ProxyFilter::Stream::onTunnelEnd(upstream::TunnelEnd end) {
  upstream::TunnelRelay::dispose(tunnel_relay_);
  if (end == upstream::TunnelEnd::UpstreamReset) {
    trace_.fail("the destination closed the tunnel", upstream::FailureKind::Reset);
  }
  switch (end) {
    case upstream::TunnelEnd::Done:
      // Both ends passed on; the queued bytes and our END_STREAM still go out.
      break;
    case upstream::TunnelEnd::IdleTimeout:
      config().stats.tunnel_idle_timeout.inc();
      reset(ErrorCode::Cancel);
      break;
    case upstream::TunnelEnd::UpstreamReset:
      config().stats.upstream_reset.inc();
      reset(ErrorCode::ConnectError);
      break;
    case upstream::TunnelEnd::DownstreamReset:  // only a spliced client socket reports this
      config().stats.downstream_reset.inc();
      reset(ErrorCode::ConnectError);
      break;
    case upstream::TunnelEnd::QuotaReached:
      trace_.fail("byte quota reached");
      reset(ErrorCode::Cancel);
      break;
  }
}

bool Http2ProxyFilter::Stream::originBackedUp() const {
  if (tunnel_relay_) return tunnel_relay_->upstreamBackedUp();
  return exchange_ && exchange_->originBackedUp();
}

void Http2ProxyFilter::Stream::pauseOrigin(bool pause) {
  if (tunnel_relay_) {
    tunnel_relay_->onDownstreamBackedUp(pause);
  } else {
    if (exchange_) exchange_->pauseResponse(pause);
  }
}

void Http2ProxyFilter::Stream::credit(size_t length) {
  if (originBackedUp()) {
    unconsumed_ += length;
    return;
  }
  parent_.codec_->consume(id_, length);
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::creditPending() {
  if (unconsumed_ == 0 || originBackedUp()) return;
  if (state_ != State::Forwarding && state_ != State::Tunnel) return;
  parent_.codec_->consume(id_, unconsumed_);
  unconsumed_ = 0;
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::onUpstreamReady(upstream::UpstreamHandle upstream) {
  key_tunnel_stats_ = request_.principal_tunnel_stats;
  trace_.routed(request_);
  if (request_.grant != nullptr) parent_.last_grant_ = request_.grant;
  if (chain_ != nullptr) chain_->end();
  if (info_.kind == proxy::RequestKind::Tunnel) {
    parent_.codec_->submitResponse(id_, 200, nullptr, 0, false);
    config().stats.countStatus(200);
    trace_.setStatus(200);
    buffer::Buffer none;
    enterTunnel(std::move(upstream), none, false);
    return;
  }
  state_ = State::Forwarding;
  sendRequest(std::move(upstream));
}

void Http2ProxyFilter::Stream::sendRequest(upstream::UpstreamHandle upstream) {
  upstream::OriginRequest r;
  r.method_text = info_.method_text;
  r.method = info_.method;
  r.path = info_.path;
  // :authority as the client wrote it (validated): "host", "host:port" or "[v6]:port".
  r.host = info_.authority;
  r.fields = fields_.data();
  r.field_count = static_cast<uint32_t>(fields_.size());
  r.added = added_;
  r.added_count = added_count_;
  r.retry_allowed = !retried_;
  buffer::Buffer none;
  buffer::Buffer* body = &pending_body_;
  if (info_.websocket) {
    // The RFC 8441 bridge: GET :path with Upgrade: websocket and a key of the proxy's own (an
    // HTTP/2 client sends none), on a fresh origin connection. Client bytes wait for the 101.
    r.upgrade = upstream::Upgrade::WebSocketOwnKey;
    websocket_pending_ = true;
    body = &none;
  } else {
    if (request_ended_ && !info_.has_content_length && !pending_body_.empty()) {
      // The whole body arrived while the filters ran: its length is known.
      info_.has_content_length = true;
      info_.content_length = pending_body_.length();
    }
    if (info_.has_content_length) {
      r.body = upstream::RequestBody::Length;
      r.content_length = info_.content_length;
    } else if (!request_ended_) {
      r.body = upstream::RequestBody::ChunkEncode;
    }
  }
  response_started_ = false;
  exchange_ = upstream::OriginExchange::acquire(*this, parent_.config_->exchange);
  exchange_->start(std::move(upstream), r, timer_, *body, 0);
  if (!info_.websocket) {
    // A body longer than its content-length is nghttp2's to refuse; nothing more is sent.
    pending_body_.clear();
    if (request_ended_) exchange_->sendBody(none, true);
  }
  creditPending();
  // The connection's queue may be full already: then the response waits for room.
  updateOriginPause();
}

void Http2ProxyFilter::Stream::onInterimResponse(const http1::ResponseHead& rh) {
  // Interim responses (100 Continue, 103 Early Hints) go out as non-final HEADERS.
  buildResponseHeaders(rh);
  parent_.codec_->submitInterim(id_, rh.status, t_headers.data(), t_headers.size());
  config().stats.countStatus(rh.status);
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::onResponseHead(const http1::ResponseHead& rh) {
  buildResponseHeaders(rh);
  char digits[20];
  const bool send_length =
      rh.framing == http1::BodyFraming::ContentLength ||
      (info_.method == http1::Method::Head && rh.status != 204 &&
       http1::findHeader(rh.headers.data(), rh.headers.size(), "content-length") >= 0);
  if (send_length) {
    auto r = std::to_chars(digits, digits + sizeof(digits), rh.content_length);
    t_headers.push_back({"content-length", std::string_view(digits, r.ptr - digits)});
  }
  if (websocket_pending_) {
    // The origin declined the upgrade: its answer is relayed as a normal response and the held
    // client bytes are dropped with the stream.
    websocket_pending_ = false;
    config().stats.websocket_refused.inc();
    parent_.codec_->consume(id_, unconsumed_);
    unconsumed_ = 0;
    pending_body_.clear();
  }
  const bool no_body = rh.framing == http1::BodyFraming::None ||
                       (rh.framing == http1::BodyFraming::ContentLength && rh.content_length == 0);
  parent_.codec_->submitResponse(id_, rh.status, t_headers.data(), t_headers.size(), no_body);
  config().stats.countStatus(rh.status);
  trace_.setStatus(rh.status);
  response_started_ = true;
  if (no_body) out_eof_ = true;
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::onResponseBody(buffer::Buffer& body, bool end) {
  queueOutput(body);
  if (end) {
    // The origin's part is over (its connection is pooled or closed): the exchange goes back.
    exchange_->reportTo(trace_);
    exchange_.reset();
    out_eof_ = true;
    // The origin is done; a client that stops reading cannot keep the stream (and its queue).
    timer_.enable(parent_.config_->idle_timeout);
  }
  afterOutput();
}

void Http2ProxyFilter::Stream::onUpgraded(const http1::ResponseHead& rh,
                                          upstream::UpstreamHandle upstream, buffer::Buffer& early,
                                          bool origin_ended) {
  t_headers.clear();
  for (uint32_t i = 0; i < rh.headers.size(); ++i) {
    const http1::HeaderField& f = rh.headers[i];
    // Only the negotiated subprotocol and extensions mean anything to the HTTP/2 client.
    if (http1::isFieldName(f.name, "sec-websocket-protocol")) {
      t_headers.push_back({"sec-websocket-protocol", f.value});
    } else if (http1::isFieldName(f.name, "sec-websocket-extensions")) {
      t_headers.push_back({"sec-websocket-extensions", f.value});
    }
  }
  parent_.codec_->submitResponse(id_, 200, t_headers.data(), t_headers.size(), false);
  config().stats.countStatus(200);
  config().stats.websocket_switched.inc();
  trace_.setStatus(200);
  exchange_->reportTo(trace_);
  exchange_.reset();
  websocket_pending_ = false;
  // What followed the 101 is the origin's first frames.
  enterTunnel(std::move(upstream), early, origin_ended);
}

void Http2ProxyFilter::Stream::onRetry() {
  // A pooled connection the origin had already closed: once more on a new one.
  exchange_->reportTo(trace_);
  exchange_.reset();
  retried_ = true;
  request_.fresh_connection = true;
  state_ = State::Filtering;
  timer_.disable();
  chain_->start(request_);
}

void Http2ProxyFilter::Stream::onExchangeError(upstream::ExchangeError error,
                                               std::string_view detail) {
  const bool origin_answered = exchange_->bytesFromOrigin() > 0;
  exchange_->reportTo(trace_);
  exchange_.reset();
  trace_.fail(detail, upstream::failureKind(error));
  if (error == upstream::ExchangeError::BodyTimeout) config().stats.rq_body_timeout.inc();
  if (error == upstream::ExchangeError::BadResponse && websocket_pending_) {
    config().stats.websocket_rejected.inc();
  }
  if (response_started_ || !http::exchangeErrorAnswered(error)) {
    // The client must see a truncated stream (or takes nothing more).
    const bool timeout = error == upstream::ExchangeError::ResponseTimeout ||
                         error == upstream::ExchangeError::ClientStalled;
    reset(timeout ? ErrorCode::Cancel : ErrorCode::InternalError);
    return;
  }
  localReply(http::exchangeErrorStatus(error), http::exchangeError(error, origin_answered), detail);
}

void Http2ProxyFilter::Stream::onOriginBackedUp(bool backed_up) {
  if (!backed_up) creditPending();
}

void Http2ProxyFilter::Stream::enterTunnel(upstream::UpstreamHandle upstream,
                                           buffer::Buffer& from_origin, bool origin_ended) {
  // A tunnel runs no more requests: its filter instances go until the stream is reused, and so
  // does the copy of its header block (nothing reads the request's fields from here on; the
  // record copied what it keeps).
  proxy::RequestFilterChain::release(chain_);
  std::string().swap(storage_);
  std::vector<FieldRef>().swap(refs_);
  std::vector<http1::HeaderField>().swap(fields_);
  // Views into the released copy go with it; what the stream still reads stays.
  http2::RequestInfo kept;
  kept.method = info_.method;
  kept.kind = info_.kind;
  kept.websocket = info_.websocket;
  kept.port = info_.port;
  info_ = kept;
  request_.host = {};
  request_.credential = {};
  request_.headers = nullptr;
  response_started_ = true;
  state_ = State::Tunnel;
  tunnel_ = true;
  config().stats.tunnels_active.inc();
  upstream::TunnelOptions options;
  options.idle_timeout = upstream.info().tunnel_idle_timeout;
  options.listener_stats = &parent_.config_->tunnel_stats;
  options.key_stats = key_tunnel_stats_;
  tunnel_relay_ = std::make_unique<upstream::TunnelRelay>(std::move(upstream), *this, options);
  if (!from_origin.empty()) queueOutput(from_origin);
  tunnel_relay_->start(pending_body_, request_ended_, origin_ended);
  creditPending();
  afterOutput();
}

void Http2ProxyFilter::Stream::buildResponseHeaders(const http1::ResponseHead& rh) {
  t_names.clear();
  t_names.reserve(rh.head_size);
  t_headers.clear();
  for (uint32_t i = 0; i < rh.headers.size(); ++i) {
    const http1::HeaderField& f = rh.headers[i];
    if (http2::dropResponseField(f)) continue;
    // HTTP/2 field names are lowercase; the scratch was reserved, so views stay valid.
    const size_t at = t_names.size();
    for (char c : f.name) t_names.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    t_headers.push_back({std::string_view(t_names.data() + at, f.name.size()), f.value});
  }
}

void Http2ProxyFilter::Stream::afterOutput() {
  if (deferred_ && (!out_.empty() || out_eof_)) {
    deferred_ = false;
    parent_.codec_->resumeBody(id_);
  }
  updateOriginPause();
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::updateOriginPause() {
  if (!exchange_ && !tunnel_relay_) return;
  const size_t queued = out_.length();
  const size_t limit = config().stream_buffer_bytes;
  // Past the connection's budget a stream reads on only while the client would take what it
  // has queued at once (its window is open): a stream the client reads is not held up by
  // streams it does not.
  const bool connection_full = parent_.queue_full_ && queued >= parent_.codec_->sendWindow(id_);
  const bool pause = connection_full || queued >= limit || (upstream_paused_ && queued > limit / 2);
  if (pause == upstream_paused_) return;
  upstream_paused_ = pause;
  pauseOrigin(pause);
  if (pause) config().stats.upstream_read_paused.inc();
}

void Http2ProxyFilter::Stream::queueOutput(buffer::Buffer& data) {
  parent_.onQueued(data.length());
  out_.move(data);
}

void Http2ProxyFilter::Stream::queueOutput(std::string_view data) {
  parent_.onQueued(data.size());
  out_.add(data);
}

void Http2ProxyFilter::Stream::dropOutput() {
  const size_t dropped = out_.length();
  out_.clear();
  parent_.onDequeued(dropped);
}

void Http2ProxyFilter::Stream::onTimer() {
  switch (state_) {
    case State::Headers:
      config().stats.rq_head_timeout.inc();
      parent_.terminate(ErrorCode::ProtocolError);
      break;
    case State::Forwarding:
      if (exchange_) {
        exchange_->onTimer();  // the body and response deadlines
      } else {
        reset(ErrorCode::Cancel);  // the response sat unread past the idle timeout
      }
      break;
    case State::Tunnel:  // the relay keeps its idle deadline on this timer
      if (tunnel_relay_) tunnel_relay_->onTimer();
      break;
    case State::Replied:
      reset(ErrorCode::Cancel);
      break;
    default:
      break;
  }
}

void Http2ProxyFilter::Stream::localReply(uint16_t status, http::ProxyError error,
                                          std::string_view detail, bool auth_challenge,
                                          uint32_t retry_after) {
  timer_.disable();
  releaseUpstream();
  if (response_started_) {
    reset(ErrorCode::InternalError);
    return;
  }
  state_ = State::Replied;
  dropOutput();
  std::string body = http::localReplyBody(status, detail);
  std::string length = absl::StrFormat("%d", body.size());
  std::string proxy_status = http::proxyStatusValue(error, detail);
  std::string challenge;
  std::string retry;
  http2::ResponseHeader headers[5] = {{"content-type", "text/plain; charset=utf-8"},
                                      {"content-length", length},
                                      {"proxy-status", proxy_status},
                                      {},
                                      {}};
  size_t count = 3;
  if (auth_challenge) {
    challenge = absl::StrFormat("Basic realm=\"%s\"", request_.auth_realm);
    headers[count++] = {"proxy-authenticate", challenge};
  }
  if (retry_after != 0) {
    retry = absl::StrFormat("%d", retry_after);
    headers[count++] = {"retry-after", retry};
  }
  const bool head = info_.method == http1::Method::Head;
  if (!head) queueOutput(body);
  out_eof_ = true;
  response_started_ = true;
  config().stats.countStatus(status);
  trace_.setStatus(status);
  trace_.setProxyStatusError(http::proxyErrorName(error));
  trace_.fail(detail);
  parent_.codec_->submitResponse(id_, status, headers, count, head);
  // A client that stops reading cannot keep the stream (and its queued reply) forever.
  timer_.enable(parent_.config_->idle_timeout);
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::reset(ErrorCode code) {
  if (state_ == State::Done || state_ == State::Idle) return;
  if (chain_ != nullptr) chain_->end();
  timer_.disable();
  releaseUpstream();
  state_ = State::Done;
  parent_.codec_->resetStream(id_, code);
  parent_.scheduleFlush();
}

void Http2ProxyFilter::Stream::reportUpstream() {
  if (exchange_) exchange_->reportTo(trace_);
}

void Http2ProxyFilter::Stream::releaseUpstream() {
  reportUpstream();
  upstream::TunnelRelay::dispose(tunnel_relay_);
  upstream_paused_ = false;
  exchange_.reset();
}

}  // namespace http2proxy
}  // namespace filters
}  // namespace sluice
