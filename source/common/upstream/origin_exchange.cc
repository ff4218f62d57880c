#include "source/common/upstream/origin_exchange.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include <openssl/rand.h>
#include <openssl/sha.h>

#include "absl/strings/escaping.h"

#include "source/common/http/field_line.h"
#include "source/common/http/head_scan.h"
#include "source/common/http/upgrade.h"
#include "source/common/memory/idle_cache.h"
#include "source/common/upstream/parent_handshake.h"

namespace sluice {
namespace upstream {

namespace {

constexpr uint8_t kSkip = http1::HeaderField::kHopByHop | http1::HeaderField::kRemoved;

// Response heads are parsed and handed on within one callback: one scratch per worker.
thread_local http1::ResponseHead t_response_head;
// Cookie fields joined into one (RFC 9113 8.2.3: an HTTP/2 client may split them).
thread_local std::string t_cookie;

bool isCookie(std::string_view name) {
  return name.size() == 6 && http1::isFieldName(name, "cookie");
}

// Calls f(name, value) for each field of the request that goes to the origin: flagged ones
// and Content-Length skipped, Cookie fields joined at the first one, then the additions.
template <class F>
void forEachField(const OriginRequest& r, F f) {
  bool cookie_done = false;
  for (uint32_t i = 0; i < r.field_count; ++i) {
    const http1::HeaderField& h = r.fields[i];
    if ((h.flags & kSkip) != 0) continue;
    if (h.name.size() == 14 && http1::isFieldName(h.name, "content-length")) continue;
    if (isCookie(h.name)) {
      if (cookie_done) continue;
      cookie_done = true;
      uint32_t crumbs = 0;
      for (uint32_t j = i; j < r.field_count; ++j) {
        if ((r.fields[j].flags & kSkip) == 0 && isCookie(r.fields[j].name)) ++crumbs;
      }
      if (crumbs > 1) {
        t_cookie.clear();
        for (uint32_t j = i; j < r.field_count; ++j) {
          if ((r.fields[j].flags & kSkip) != 0 || !isCookie(r.fields[j].name)) continue;
          if (!t_cookie.empty()) t_cookie.append("; ", 2);
          t_cookie.append(r.fields[j].value);
        }
        f(h.name, std::string_view(t_cookie));
        continue;
      }
    }
    f(h.name, h.value);
  }
  for (uint32_t i = 0; i < r.added_count; ++i) f(r.added[i].name, r.added[i].value);
}

void addChunkHeader(buffer::Buffer& out, size_t n) {
  char line[20];
  auto r = std::to_chars(line, line + 16, static_cast<uint64_t>(n), 16);
  *r.ptr++ = '\r';
  *r.ptr++ = '\n';
  out.add(line, static_cast<size_t>(r.ptr - line));
}

// RFC 6455 4.2.2: base64(SHA-1(key + GUID)).
std::string webSocketAccept(std::string_view key) {
  static constexpr std::string_view kGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  uint8_t digest[SHA_DIGEST_LENGTH];
  SHA_CTX ctx;
  SHA1_Init(&ctx);
  SHA1_Update(&ctx, key.data(), key.size());
  SHA1_Update(&ctx, kGuid.data(), kGuid.size());
  SHA1_Final(digest, &ctx);
  std::string out;
  absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)),
                     &out);
  return out;
}

// Exchanges not in use on this worker (bounded: a burst's worth is kept, and let go once it stayed
// unused for a memory_release_interval).
void destroyExchange(OriginExchange* e) { delete e; }
thread_local memory::FreeStack<OriginExchange, destroyExchange> t_free_exchanges{256};

}  // namespace

OriginExchangePtr OriginExchange::acquire(ExchangeOwner& owner, const ExchangeOptions& options) {
  OriginExchange* e = t_free_exchanges.take();
  if (e == nullptr) return OriginExchangePtr(new OriginExchange(owner, options));
  e->owner_ = &owner;
  e->options_ = &options;
  return OriginExchangePtr(e);
}

void ExchangeRecycler::operator()(OriginExchange* exchange) const {
  exchange->abort();
  if (!t_free_exchanges.give(exchange)) delete exchange;
}

void OriginExchange::writeRequestHead(const OriginRequest& r, std::string_view websocket_key,
                                      const UpstreamInfo& info, buffer::Buffer& out) {
  // Through an HTTP parent proxy the target is in absolute-form, for the checked address (the
  // Host field keeps the name), and the request carries sluice's credentials for the parent.
  std::string absolute;
  std::string_view target = r.path;
  if (info.via_http_parent) {
    absolute = "http://" + parentAuthority(info.parent_target, info.parent_target_host,
                                           info.parent_target_port);
    absolute.append(r.path);
    target = absolute;
  }
  if (r.upgrade != Upgrade::None) {
    // The encoder writes Upgrade and Connection itself and drops the framing fields: an
    // upgrade request has no body.
    http::UpgradeRequestEncoder encoder(out, target);
    if (!r.host.empty()) encoder.header("Host", r.host);
    if (!info.parent_authorization.empty()) {
      encoder.header("Proxy-Authorization", info.parent_authorization);
    }
    const bool own_key = r.upgrade == Upgrade::WebSocketOwnKey;
    forEachField(r, [&](std::string_view name, std::string_view value) {
      if (own_key && (http1::isFieldName(name, "sec-websocket-key") ||
                      http1::isFieldName(name, "sec-websocket-accept"))) {
        return;
      }
      encoder.header(name, value);
    });
    if (own_key) encoder.header("Sec-WebSocket-Key", websocket_key);
    encoder.finish();
    return;
  }
  out.add(r.method_text);
  out.add(" ", 1);
  out.add(target);
  out.add(r.version_minor == 0 ? std::string_view(" HTTP/1.0\r\n")
                               : std::string_view(" HTTP/1.1\r\n"));
  if (!r.host.empty()) http::addFieldLine(out, "Host", r.host);
  if (!info.parent_authorization.empty()) {
    http::addFieldLine(out, "Proxy-Authorization", info.parent_authorization);
  }
  forEachField(r, [&](std::string_view name, std::string_view value) {
    http::addFieldLine(out, name, value);
  });
  if (r.version_minor == 0 && r.keep_alive_10) http::addFieldLine(out, "Connection", "keep-alive");
  if (r.body == RequestBody::Length) {
    // Once, as the parsed number: duplicates ("5" twice) and lists ("5, 5") may be received but
    // must not be forwarded (RFC 9110 8.6); a next hop might read them apart.
    char digits[20];
    const auto result = std::to_chars(digits, digits + sizeof(digits), r.content_length);
    http::addFieldLine(out, "Content-Length", std::string_view(digits, result.ptr - digits));
  } else if (r.body == RequestBody::ChunkEncode) {
    http::addFieldLine(out, "Transfer-Encoding", "chunked");
  }
  out.add("\r\n", 2);
}

bool OriginExchange::mayRetry(const OriginRequest& request, const UpstreamInfo& info) {
  return info.reused && request.retry_allowed && request.body == RequestBody::None &&
         request.upgrade == Upgrade::None && http1::idempotent(request.method);
}

BodyProgress OriginExchange::start(UpstreamHandle&& upstream, const OriginRequest& request,
                                   event::Timer& timer, buffer::Buffer& from_client, size_t skip) {
  abort();
  upstream_ = std::move(upstream);
  upstream_->setCallbacks(this);
  timer_ = &timer;
  response_timeout_ = upstream_.info().response_timeout;
  limiter_ = upstream_.info().limiter;
  quota_reached_ = false;
  ++generation_;
  state_ = State::Head;
  upgrade_ = request.upgrade;
  // An upgrade asks the origin with a GET, whatever the client's method (RFC 8441: CONNECT).
  method_ = upgrade_ != Upgrade::None ? http1::Method::Get : request.method;
  request_body_ = upgrade_ != Upgrade::None ? RequestBody::None : request.body;
  request_body_left_ = request.content_length;
  request_chunks_.reset();
  request_done_ = request_body_ == RequestBody::None ||
                  (request_body_ == RequestBody::Length && request.content_length == 0);
  retryable_request_ = mayRetry(request, upstream_.info());
  response_started_ = false;
  response_keep_alive_ = true;
  response_paused_ = false;
  any_response_byte_ = false;
  decode_chunks_ = options_->response_body == ResponseBody::Payload || request.version_minor == 0;
  head_scanned_ = 0;
  response_body_left_ = 0;
  bytes_to_origin_ = 0;
  bytes_from_origin_ = 0;
  reported_to_ = 0;
  reported_from_ = 0;
  first_byte_at_ = {};

  std::string_view key;
  if (upgrade_ == Upgrade::WebSocketOwnKey) {
    uint8_t nonce[16];
    RAND_bytes(nonce, sizeof(nonce));
    std::string encoded;
    absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(nonce), sizeof(nonce)),
                       &encoded);
    memcpy(websocket_key_, encoded.data(), sizeof(websocket_key_));
    key = std::string_view(websocket_key_, sizeof(websocket_key_));
  }
  buffer::Buffer out;
  writeRequestHead(request, key, upstream_.info(), out);
  // The request's views are not used past this point: what they pointed into may go.
  from_client.drain(skip);
  const BodyProgress progress =
      request_done_ ? BodyProgress::Done : takeBody(from_client, false, out);
  if (progress == BodyProgress::Error || progress == BodyProgress::TooLarge) {
    // A body already refused in what came with the head: nothing reaches the origin.
    abort();
    return progress;
  }
  write(out);
  armTimer();
  return progress;
}

BodyProgress OriginExchange::sendBody(buffer::Buffer& from_client, bool client_ended) {
  if (state_ == State::Idle || request_done_) return BodyProgress::Done;
  buffer::Buffer out;
  const BodyProgress progress = takeBody(from_client, client_ended, out);
  if (progress == BodyProgress::Error || progress == BodyProgress::TooLarge) return progress;
  const bool progressed = !out.empty();
  if (progressed) write(out);
  // While no answer came, the client's body keeps its own deadline; once it is all out, the
  // origin's starts.
  if (!response_started_ && progressed) armTimer();
  return progress;
}

BodyProgress OriginExchange::takeBody(buffer::Buffer& from_client, bool client_ended,
                                      buffer::Buffer& out) {
  switch (request_body_) {
    case RequestBody::None:
      request_done_ = true;
      break;
    case RequestBody::Length: {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(request_body_left_, from_client.length()));
      out.move(from_client, n);
      request_body_left_ -= n;
      request_done_ = request_body_left_ == 0;
      break;
    }
    case RequestBody::Chunked: {
      // Nothing taken here is written when the body is refused (the caller drops `out`).
      const http1::Dechunker::Status st = request_chunks_.pass(from_client, out);
      if (st == http1::Dechunker::Status::Error) return BodyProgress::Error;
      if (options_->max_request_body_bytes != 0 &&
          request_chunks_.payloadBytes() > options_->max_request_body_bytes) {
        return BodyProgress::TooLarge;
      }
      request_done_ = st == http1::Dechunker::Status::Done;
      break;
    }
    case RequestBody::ChunkEncode:
      if (!from_client.empty()) {
        addChunkHeader(out, from_client.length());
        out.move(from_client);
        out.add("\r\n", 2);
      }
      if (client_ended) {
        out.add("0\r\n\r\n", 5);
        request_done_ = true;
      }
      break;
  }
  return request_done_ ? BodyProgress::Done : BodyProgress::More;
}

void OriginExchange::write(buffer::Buffer& out) {
  const size_t n = out.length();
  bytes_to_origin_ += n;
  if (options_->stats != nullptr) options_->stats->bytes_upstream_tx.add(n);
  upstream_->write(out);
  if (shaping()) shape(0, n);
}

void OriginExchange::shape(size_t way, size_t bytes) {
  const int64_t now = policy::monotonicNanos();
  const int64_t wait = limiter_->chargeBytes(
      way == 0 ? policy::Direction::Upload : policy::Direction::Download, bytes, now);
  if (wait == policy::KeyLimiter::kQuotaReached) {
    quota_reached_ = true;
    return;
  }
  // A request body that is all out has nothing left to hold back.
  if (wait <= 0 || (way == 0 && request_done_)) return;
  if (shaped_.pause(way, now, wait)) {
    if (way == 0) {
      owner_->onOriginBackedUp(true);
    } else {
      upstream_->readDisable(true);
    }
  }
  shaped_.arm(upstream_->dispatcher(), now, [this] { onShapeTimer(); });
}

void OriginExchange::onShapeTimer() {
  if (state_ == State::Idle || !upstream_) return;
  const int64_t now = policy::monotonicNanos();
  const uint32_t generation = generation_;
  ShapedWays::Way& download = shaped_.at(1);
  if (download.paused && download.resume_at <= now) {
    download.paused = false;
    upstream_->readDisable(false);
  }
  ShapedWays::Way& upload = shaped_.at(0);
  if (upload.paused && upload.resume_at <= now) {
    upload.paused = false;
    owner_->onOriginBackedUp(false);
    if (generation != generation_ || state_ == State::Idle) return;
  }
  shaped_.arm(upstream_->dispatcher(), now, [this] { onShapeTimer(); });
}

void OriginExchange::stopShaping(bool tell_owner) {
  shaped_.disarm();
  const ShapedWays& shaped = shaped_;
  if (shaped[1].paused && upstream_) upstream_->readDisable(false);
  const bool body_paused = shaped[0].paused;
  shaped_.clear();
  if (body_paused && tell_owner) owner_->onOriginBackedUp(false);
}

void OriginExchange::armTimer() {
  timer_->enable(!request_done_ && !response_started_ ? options_->request_body_timeout
                                                      : response_timeout_);
}

void OriginExchange::reportTo(RequestTrace& trace) {
  trace.addBytes(bytes_to_origin_ - reported_to_, bytes_from_origin_ - reported_from_);
  reported_to_ = bytes_to_origin_;
  reported_from_ = bytes_from_origin_;
  trace.firstByte(first_byte_at_);
}

bool OriginExchange::originBackedUp() const {
  // A request body paused by its bandwidth limit holds the client back the same way.
  return (upstream_ && upstream_->aboveHighWatermark()) || shaped_[0].paused;
}

void OriginExchange::onTimer() {
  if (state_ == State::Idle) return;
  // Until the body is all out, silence is the client's, unless the origin is not taking it.
  if (!request_done_ && !response_started_ && !originBackedUp()) {
    fail(ExchangeError::BodyTimeout, "request body not received in time");
    return;
  }
  // The origin is held back because the client is not taking the response: the silence is the
  // client's.
  if (response_paused_) {
    if (options_->stats != nullptr) options_->stats->downstream_rs_timeout.inc();
    fail(ExchangeError::ClientStalled, "client did not take the response in time");
    return;
  }
  if (options_->stats != nullptr) options_->stats->upstream_rs_timeout.inc();
  fail(ExchangeError::ResponseTimeout, "origin did not answer in time");
}

void OriginExchange::pauseResponse(bool pause) {
  if (state_ == State::Idle || pause == response_paused_) return;
  response_paused_ = pause;
  upstream_->readDisable(pause);
  // The origin was held back, not silent: its deadline starts over.
  if (!pause) armTimer();
}

void OriginExchange::onResponseProgress() {
  if (state_ == State::Body) armTimer();
}

void OriginExchange::abort() {
  stopShaping(false);
  if (state_ == State::Idle && !upstream_) return;
  state_ = State::Idle;
  upstream_.release(false);
}

void OriginExchange::onData(buffer::Buffer& data, bool end_stream) {
  if (state_ == State::Idle) {
    data.clear();
    return;
  }
  bytes_from_origin_ += data.length();
  if (options_->stats != nullptr) options_->stats->bytes_upstream_rx.add(data.length());
  if (shaping() && !data.empty()) {
    shape(1, data.length());
    if (quota_reached_) {
      data.clear();
      fail(ExchangeError::OriginClosed, "byte quota reached");
      return;
    }
  }
  if (!data.empty() && !any_response_byte_) {
    any_response_byte_ = true;
    first_byte_at_ = upstream_->dispatcher().now();
  }
  if (state_ == State::Head) {
    onHeadData(data, end_stream);
  } else {
    onBodyData(data, end_stream);
  }
}

void OriginExchange::onEvent(network::ConnectionEvent event) {
  if (event != network::ConnectionEvent::RemoteClose || state_ == State::Idle) return;
  onOriginClosed();
}

void OriginExchange::onHeadData(buffer::Buffer& data, bool end_stream) {
  http1::ResponseHead& rh = t_response_head;
  while (true) {
    const std::string_view view =
        http::headToParse(data, options_->response_limits.max_head_bytes, head_scanned_);
    http1::ParseError err;
    const http1::ParseStatus st =
        view.empty() ? http1::ParseStatus::Incomplete
                     : http1::parseResponseHead(view, options_->response_limits, method_, rh, err);
    if (st == http1::ParseStatus::Incomplete) {
      if (end_stream) onOriginClosed();
      return;
    }
    head_scanned_ = 0;
    if (st == http1::ParseStatus::Error) {
      if (options_->stats != nullptr) options_->stats->upstream_rs_bad.inc();
      fail(ExchangeError::BadResponse, err.reason);
      return;
    }
    if (rh.status == 101) {
      if (upgrade_ == Upgrade::None) {
        if (options_->stats != nullptr) options_->stats->upstream_rs_bad.inc();
        fail(ExchangeError::BadResponse, "origin switched protocols without an upgrade request");
        return;
      }
      onSwitched(rh, data, end_stream);
      return;
    }
    if (rh.status < 200) {
      // Interim responses (100 Continue, 103 Early Hints) go on as they come.
      const uint32_t generation = generation_;
      owner_->onInterimResponse(rh);
      if (generation != generation_ || state_ == State::Idle) return;
      data.drain(rh.head_size);
      continue;
    }
    // A final answer to an upgrade request: the origin declined. The exchange ends as a plain
    // one, but the connection saw Connection: Upgrade and is not pooled.
    response_framing_ = rh.framing;
    response_body_left_ = rh.content_length;
    response_keep_alive_ = rh.keep_alive && upgrade_ == Upgrade::None;
    response_chunks_.reset();
    response_started_ = true;
    state_ = State::Body;
    const uint32_t generation = generation_;
    owner_->onResponseHead(rh);
    if (generation != generation_ || state_ == State::Idle) return;
    data.drain(rh.head_size);
    onBodyData(data, end_stream, true);
    return;
  }
}

void OriginExchange::onSwitched(const http1::ResponseHead& parsed, buffer::Buffer& data,
                                bool end_stream) {
  const char* bad = nullptr;
  if (!http::acceptsUpgrade(parsed)) {
    bad = "origin switched protocols but not to websocket";
  } else if (upgrade_ == Upgrade::WebSocketOwnKey) {
    const int32_t accept =
        http1::findHeader(parsed.headers.data(), parsed.headers.size(), "sec-websocket-accept");
    if (accept < 0 ||
        parsed.headers[accept].value !=
            webSocketAccept(std::string_view(websocket_key_, sizeof(websocket_key_)))) {
      bad = "origin answered the websocket upgrade badly";
    }
  }
  if (bad != nullptr) {
    if (options_->stats != nullptr) options_->stats->upstream_rs_bad.inc();
    fail(ExchangeError::BadResponse, bad);
    return;
  }
  // The head moves into a buffer of its own (and is parsed there again: an upgrade is rare) so
  // that what followed it is the codec's to relay while the head's fields stay readable.
  const uint32_t head_size = parsed.head_size;
  buffer::Buffer head_bytes;
  head_bytes.move(data, head_size);
  http1::ResponseHead& rh = t_response_head;
  http1::ParseError err;
  http1::parseResponseHead(head_bytes.linearize(head_size), options_->response_limits, method_, rh,
                           err);
  response_started_ = true;
  state_ = State::Idle;
  timer_->disable();
  // The tunnel charges its own bytes from here on; the connection goes over unpaused.
  stopShaping(false);
  owner_->onUpgraded(rh, std::move(upstream_), data, end_stream);
}

void OriginExchange::onBodyData(buffer::Buffer& data, bool end_stream, bool after_head) {
  buffer::Buffer body;
  bool done = false;
  bool ok = true;
  switch (response_framing_) {
    case http1::BodyFraming::None:
      done = true;
      break;
    case http1::BodyFraming::ContentLength: {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(response_body_left_, data.length()));
      body.move(data, n);
      response_body_left_ -= n;
      done = response_body_left_ == 0;
      break;
    }
    case http1::BodyFraming::Chunked: {
      const http1::Dechunker::Status st =
          decode_chunks_ ? response_chunks_.decode(data, body) : response_chunks_.pass(data, body);
      ok = st != http1::Dechunker::Status::Error;
      done = st == http1::Dechunker::Status::Done;
      break;
    }
    case http1::BodyFraming::UntilClose:
      body.move(data);
      done = end_stream;
      break;
  }
  if (!ok || (end_stream && !done)) {
    // What came before the bad bytes (or the origin's close) is passed on, then the failure.
    if (!body.empty() || after_head) {
      const uint32_t generation = generation_;
      owner_->onResponseBody(body, false);
      if (generation != generation_ || state_ == State::Idle) return;
    }
    if (!ok) {
      if (options_->stats != nullptr) options_->stats->upstream_rs_bad.inc();
      fail(ExchangeError::BadResponse, response_chunks_.error());
      return;
    }
    // The origin closed before the body's end.
    onOriginClosed();
    return;
  }
  if (done) {
    // Anything after the response is not ours to relay: the connection is spoiled.
    const bool reusable = response_keep_alive_ && request_done_ && data.empty() && !end_stream &&
                          response_framing_ != http1::BodyFraming::UntilClose;
    data.clear();
    finish(reusable);
    owner_->onResponseBody(body, true);
    return;
  }
  armTimer();
  if (!body.empty() || after_head) owner_->onResponseBody(body, false);
}

void OriginExchange::onOriginClosed() {
  if (state_ == State::Head && !any_response_byte_ && retryable()) {
    // A pooled connection the origin had already closed: the codec tries once more on a new
    // one. The close comes from the loop (a write never closes under its caller).
    if (options_->stats != nullptr) options_->stats->rq_retry.inc();
    state_ = State::Idle;
    timer_->disable();
    upstream_.release(false);
    owner_->onRetry();
    return;
  }
  if (options_->stats != nullptr) options_->stats->upstream_reset.inc();
  fail(ExchangeError::OriginClosed, state_ == State::Head
                                        ? "origin closed the connection"
                                        : "origin closed before the response ended");
}

bool OriginExchange::retryable() const { return retryable_request_ && request_done_; }

void OriginExchange::finish(bool reusable) {
  stopShaping(true);
  state_ = State::Idle;
  timer_->disable();
  upstream_.release(reusable);
}

void OriginExchange::fail(ExchangeError error, std::string_view detail) {
  stopShaping(true);
  state_ = State::Idle;
  timer_->disable();
  upstream_.release(false);
  owner_->onExchangeError(error, detail);
}

}  // namespace upstream
}  // namespace sluice
