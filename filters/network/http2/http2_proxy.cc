#include "filters/network/http2/http2_proxy.h"

#include "filters/network/http2/stream.h"
#include "source/common/proxy/worker_context.h"

namespace sluice {
namespace filters {
namespace http2proxy {

namespace {

using http2::ErrorCode;

// One flush serializes at most this much before writing: the connection's write buffer and its
// watermarks then decide whether to go on.
constexpr size_t kFlushBytes = 256 * 1024;

}  // namespace

Http2ProxyFilter::Http2ProxyFilter(Http2ConfigSharedPtr config)
    : config_(std::move(config)), flood_(config_->flood) {}

Http2ProxyFilter::~Http2ProxyFilter() {
  if (!closed_ && codec_) {
    closed_ = true;
    config_->stats.cx_active.dec();
  }
  for (auto& s : streams_) s->abort();
  streams_.clear();
}

void Http2ProxyFilter::initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) {
  callbacks_ = &callbacks;
}

network::FilterStatus Http2ProxyFilter::onNewConnection() {
  codec_ = http2::createNghttp2ServerCodec(*this, config_->codec);
  flush_timer_.emplace(downstream().dispatcher(), [this] { flush(); });
  idle_timer_.emplace(downstream().dispatcher(), [this] { onIdleTimer(); });
  config_->stats.cx_total.inc();
  config_->stats.cx_active.inc();
  codec_->start();
  // Until the preface is in, the connection is on the (short) preface deadline.
  idle_timer_->enable(config_->preface_timeout);
  flush();
  return network::FilterStatus::Continue;
}

network::FilterStatus Http2ProxyFilter::onData(buffer::Buffer& data, bool end_stream) {
  if (closed_ || !codec_) {
    data.clear();
    return network::FilterStatus::StopIteration;
  }
  in_receive_ = true;
  const bool ok = codec_->receive(data);
  in_receive_ = false;
  flush();
  if (!ok || end_stream) closeConnection();
  return network::FilterStatus::StopIteration;
}

void Http2ProxyFilter::scheduleFlush() {
  if (closed_) return;
  flush_pending_ = true;
  if (!in_receive_ && !in_flush_ && !flush_timer_->enabled()) {
    flush_timer_->enable(std::chrono::milliseconds(0));
  }
}

void Http2ProxyFilter::flush() {
  if (closed_ || in_flush_ || in_receive_) return;
  if (downstream().aboveHighWatermark()) {
    // Resumed by onBelowWriteLowWatermark; meanwhile the streams' queues fill and their
    // upstreams pause.
    flush_pending_ = true;
    return;
  }
  in_flush_ = true;
  flush_pending_ = false;
  flush_timer_->disable();
  bool ok = true;
  while (!closed_) {
    buffer::Buffer out;
    ok = codec_->serialize(out, kFlushBytes);
    if (out.empty()) break;
    downstream().write(out);
    if (closed_ || downstream().aboveHighWatermark()) {
      flush_pending_ = codec_->wantsWrite();
      break;
    }
    if (!ok || !codec_->wantsWrite()) break;
  }
  in_flush_ = false;
  if (closed_) return;
  if (!ok) {
    config_->stats.codec_error.inc();
    closeConnection();
    return;
  }
  if (codec_->finished()) closeConnection();
}

void Http2ProxyFilter::closeConnection() {
  if (closed_) return;
  downstream().close(network::CloseType::FlushWrite);
}

void Http2ProxyFilter::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected || closed_) return;
  closed_ = true;
  if (codec_) config_->stats.cx_active.dec();
  if (flush_timer_) flush_timer_->disable();
  if (idle_timer_) idle_timer_->disable();
  for (auto& s : streams_) s->abort();
}

void Http2ProxyFilter::onBelowWriteLowWatermark() {
  if (flush_pending_) flush();
}

void Http2ProxyFilter::onDrain() { startDrain(); }

uint32_t Http2ProxyFilter::onKeysRevoked() {
  if (closed_ || !codec_) return 0;
  uint32_t closed = 0;
  uint32_t others = 0;  // streams of other keys, still going
  for (auto& stream : streams_) {
    if (stream->cutIfRevoked()) {
      ++closed;
    } else if (stream->state() != Stream::State::Idle && stream->state() != Stream::State::Done) {
      ++others;
    }
  }
  if (last_grant_ == nullptr || !last_grant_->revoked()) {
    if (closed > 0) flush();
    return closed;
  }
  // The client's latest key is gone: its streams were cut; streams of other keys finish under
  // a GOAWAY, and an idle connection closes now.
  if (others == 0) {
    terminate(http2::ErrorCode::NoError);
    return closed + 1;
  }
  startDrain();
  return closed;
}

void Http2ProxyFilter::startDrain() {
  if (draining_ || closed_ || !codec_) return;
  draining_ = true;
  config_->stats.goaway_drain.inc();
  codec_->gracefulGoAway();
  scheduleFlush();
}

void Http2ProxyFilter::onQueued(size_t added) {
  queued_bytes_ += added;
  if (queue_full_ || queued_bytes_ < config_->connection_buffer_bytes) return;
  queue_full_ = true;
  config_->stats.connection_read_paused.inc();
  for (auto& s : streams_) s->updateOriginPause();
}

void Http2ProxyFilter::onDequeued(size_t removed) {
  queued_bytes_ -= removed;
  if (!queue_full_ || queued_bytes_ > config_->connection_buffer_bytes / 2) return;
  queue_full_ = false;
  for (auto& s : streams_) s->updateOriginPause();
}

void Http2ProxyFilter::updateIdleTimer() {
  if (!idle_timer_ || !preface_received_) return;
  if (open_streams_ == 0) {
    idle_timer_->enable(config_->idle_timeout);
  } else {
    idle_timer_->disable();
  }
}

void Http2ProxyFilter::onIdleTimer() {
  if (closed_) return;
  if (!preface_received_) {
    config_->stats.preface_timeout.inc();
    terminate(ErrorCode::ProtocolError);
    return;
  }
  config_->stats.downstream_idle_timeout.inc();
  terminate(ErrorCode::NoError);
}

void Http2ProxyFilter::terminate(http2::ErrorCode code) {
  if (closed_) return;
  codec_->terminate(code);
  flush();
  closeConnection();
}

bool Http2ProxyFilter::onFlood(http2::Flood flood) {
  if (flood == http2::Flood::None) return true;
  const Http2Stats& s = config_->stats;
  switch (flood) {
    case http2::Flood::RapidReset:
      s.rapid_reset.inc();
      break;
    case http2::Flood::Control:
      s.control_flood.inc();
      break;
    case http2::Flood::EmptyData:
      s.empty_data_flood.inc();
      break;
    case http2::Flood::Continuation:
      s.continuation_flood.inc();
      break;
    case http2::Flood::ProtocolErrors:
      s.protocol_error_flood.inc();
      break;
    case http2::Flood::None:
      break;
  }
  codec_->terminate(ErrorCode::EnhanceYourCalm);
  return false;
}

bool Http2ProxyFilter::onFrameHeader(const http2::FrameInfo& frame) {
  if (!preface_received_) {
    // nghttp2 checked the magic; the first frame (it must be SETTINGS) ends the preface.
    preface_received_ = true;
    updateIdleTimer();
  }
  return onFlood(flood_.onFrameHeader(frame, downstream().dispatcher().now()));
}

bool Http2ProxyFilter::onFrame(const http2::FrameInfo& frame) {
  // A window opened while the queue is full may let a paused stream read on.
  if (queue_full_ && frame.type == http2::FrameType::WindowUpdate) {
    for (auto& s : streams_) s->updateOriginPause();
  }
  return onFlood(flood_.onFrame(frame, downstream().dispatcher().now()));
}

void* Http2ProxyFilter::onStreamBegin(int32_t stream_id) {
  if (closed_ || open_streams_ >= config_->codec.max_concurrent_streams) {
    config_->stats.streams_refused.inc();
    return nullptr;
  }
  Stream* s = acquireStream();
  s->begin(stream_id);
  ++open_streams_;
  updateIdleTimer();
  return s;
}

bool Http2ProxyFilter::onHeader(void* stream, std::string_view name, std::string_view value) {
  static_cast<Stream*>(stream)->addHeader(name, value);
  return true;
}

void Http2ProxyFilter::onRequestHeaders(void* stream, bool end_stream) {
  static_cast<Stream*>(stream)->onHeadersComplete(end_stream);
}

void Http2ProxyFilter::onRequestData(void* stream, const uint8_t* data, size_t length) {
  static_cast<Stream*>(stream)->onClientData(data, length);
}

void Http2ProxyFilter::onRequestEnd(void* stream) { static_cast<Stream*>(stream)->onClientEnd(); }

bool Http2ProxyFilter::onStreamReset(void* stream, http2::ErrorCode) {
  if (!static_cast<Stream*>(stream)->onClientReset()) return true;
  return onFlood(flood_.onStreamReset(downstream().dispatcher().now()));
}

void Http2ProxyFilter::onResponseSent(void* stream) {
  static_cast<Stream*>(stream)->onResponseSent();
}

void Http2ProxyFilter::onStreamClose(void* stream, http2::ErrorCode code) {
  Stream* s = static_cast<Stream*>(stream);
  // A reset the proxy (or nghttp2, for a malformed stream) sent before the response completed
  // spends the rapid-reset budget like a client's; one the client sent was counted already.
  const bool reset_here = code != http2::ErrorCode::NoError && s->unfinishedReset();
  s->onClosed();
  if (reset_here && !closed_) onFlood(flood_.onStreamReset(downstream().dispatcher().now()));
}

bool Http2ProxyFilter::onProtocolError(const http2::FrameInfo& frame) {
  config_->stats.protocol_error.inc();
  if (frame.type == http2::FrameType::Headers &&
      open_streams_ >= config_->codec.max_concurrent_streams) {
    config_->stats.streams_refused.inc();
  }
  return onFlood(flood_.onProtocolError(downstream().dispatcher().now()));
}

size_t Http2ProxyFilter::readResponseBody(void* stream, uint8_t* buf, size_t max, bool& eof) {
  return static_cast<Stream*>(stream)->readBody(buf, max, eof);
}

Http2ProxyFilter::Stream* Http2ProxyFilter::acquireStream() {
  if (!free_streams_.empty()) {
    Stream* s = free_streams_.back();
    free_streams_.pop_back();
    return s;
  }
  streams_.push_back(std::make_unique<Stream>(*this));
  return streams_.back().get();
}

void Http2ProxyFilter::releaseStream(Stream* stream) {
  free_streams_.push_back(stream);
  if (open_streams_ > 0) --open_streams_;
  updateIdleTimer();
  if (draining_) scheduleFlush();
}

}  // namespace http2proxy
}  // namespace filters
}  // namespace sluice
