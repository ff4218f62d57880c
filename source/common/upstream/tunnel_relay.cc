#include "source/common/upstream/tunnel_relay.h"

#include <algorithm>
#include <cerrno>
#include <climits>

#include <fcntl.h>

namespace sluice {
namespace upstream {

namespace {
// Bytes one direction moves per readiness event while spliced before it yields the loop.
constexpr size_t kSpliceBudget = 1024 * 1024;
constexpr unsigned kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
// An idle timeout as the relay keeps it (at most about 49 days).
uint32_t clampMillis(std::chrono::milliseconds ms) {
  return static_cast<uint32_t>(std::clamp<int64_t>(ms.count(), 0, UINT32_MAX));
}
}  // namespace

const char* tunnelEndName(TunnelEnd end) {
  switch (end) {
    case TunnelEnd::Done:
      return "done";
    case TunnelEnd::IdleTimeout:
      return "idle_timeout";
    case TunnelEnd::UpstreamReset:
      return "upstream_reset";
    case TunnelEnd::DownstreamReset:
      return "downstream_reset";
    case TunnelEnd::QuotaReached:
      return "quota_reached";
  }
  return "done";
}

TunnelRelay::TunnelRelay(UpstreamHandle upstream, TunnelDownstream& downstream,
                         const TunnelOptions& options)
    : limiter_(upstream.info().limiter),
      upstream_(upstream.takeForTunnel()),
      downstream_(downstream),
      listener_stats_(options.listener_stats),
      key_stats_(options.key_stats),
      idle_timeout_ms_(clampMillis(options.idle_timeout)),
      max_pipes_(static_cast<uint32_t>(options.max_pipes)),
      splice_allowed_(options.splice),
      started_(false),
      downstream_ended_(false),
      upstream_ended_(false),
      bulk_(false),
      splice_off_(false),
      leaving_splice_(false),
      closing_(false),
      finished_(false),
      end_pending_(false) {
  upstream_->setCallbacks(this);
}

// Touches only what the relay owns: the client side may be gone by the time a deferred delete
// runs (abort() has let go of it).
TunnelRelay::~TunnelRelay() { stop(); }

void TunnelRelay::dispose(std::unique_ptr<TunnelRelay>& relay) {
  if (!relay) return;
  relay->abort();
  event::Dispatcher& dispatcher = relay->dispatcher();
  dispatcher.deferredDelete(std::move(relay));
}

void TunnelRelay::start(buffer::Buffer& early, bool downstream_ended, bool upstream_ended) {
  started_ = true;
  forEachStats([](const TunnelStats& s) {
    s.tunnels_total.inc();
    s.tunnels_active.inc();
  });
  touch();
  started_at_ = last_activity_;
  downstream_.tunnelTimer().enable(std::chrono::milliseconds(idle_timeout_ms_));
  if (!early.empty()) {
    countToUpstream(early.length());
    upstream_->write(early);
  }
  if (downstream_ended) {
    downstream_ended_ = true;
    buffer::Buffer none;
    upstream_->write(none, true);
  }
  if (upstream_ended) {
    upstream_ended_ = true;
    buffer::Buffer none;
    downstream_.writeDownstream(none, true);
  }
  maybeDone();
}

void TunnelRelay::countToUpstream(size_t n) {
  downstream_.tunnelTrace().addBytes(n, 0);
  forEachStats([n](const TunnelStats& s) { s.bytes_to_upstream.add(n); });
}

void TunnelRelay::countToDownstream(size_t n) {
  RequestTrace& trace = downstream_.tunnelTrace();
  if (n > 0 && !trace.hasFirstByte()) trace.firstByte(dispatcher().now());
  trace.addBytes(0, n);
  forEachStats([n](const TunnelStats& s) { s.bytes_to_downstream.add(n); });
}

void TunnelRelay::onDownstreamData(buffer::Buffer& data, bool end_stream) {
  if (finished_ || closing_) {
    data.clear();
    return;
  }
  const size_t n = data.length();
  if (n > 0) {
    countToUpstream(n);
    touch();
    upstream_->write(data);
    if (shaping()) shape(0, n);
  }
  if (end_stream && !downstream_ended_) {
    downstream_ended_ = true;
    buffer::Buffer none;
    upstream_->write(none, true);
    maybeDone();
    return;
  }
  maybeSplice(n);
}

void TunnelRelay::onData(buffer::Buffer& data, bool end_stream) {
  if (finished_) {
    data.clear();
    return;
  }
  const size_t n = data.length();
  if (n > 0) {
    countToDownstream(n);
    touch();
  }
  const bool end = end_stream && !upstream_ended_;
  if (end) upstream_ended_ = true;
  if (n > 0 || end) downstream_.writeDownstream(data, end);
  if (shaping() && n > 0 && !finished_) shape(1, n);
  if (end) {
    maybeDone();
    return;
  }
  maybeSplice(n);
}

void TunnelRelay::onEvent(network::ConnectionEvent event) {
  if (finished_ || event == network::ConnectionEvent::Connected) return;
  if (closing_ && event == network::ConnectionEvent::LocalClose) {
    finish(TunnelEnd::Done);
    return;
  }
  // The destination is gone. After its FIN that is only the end of what was left to write.
  finish(upstream_ended_ ? TunnelEnd::Done : TunnelEnd::UpstreamReset);
}

void TunnelRelay::onAboveWriteHighWatermark() {
  if (mode_ == Mode::Buffered) downstream_.readDisableDownstream(true);
}

void TunnelRelay::onBelowWriteLowWatermark() {
  if (mode_ == Mode::Buffered) downstream_.readDisableDownstream(false);
}

void TunnelRelay::onDownstreamBackedUp(bool backed_up) {
  if (finished_ || mode_ != Mode::Buffered) return;
  upstream_->readDisable(backed_up);
}

bool TunnelRelay::upstreamBackedUp() const {
  // An upload paused by its bandwidth limit holds the client back the same way.
  return (upstream_ && upstream_->aboveHighWatermark()) || shaped_[0].paused;
}

void TunnelRelay::shape(size_t way, size_t bytes) {
  const int64_t now = policy::monotonicNanos();
  const int64_t wait = limiter_->chargeBytes(
      way == 0 ? policy::Direction::Upload : policy::Direction::Download, bytes, now);
  if (wait == policy::KeyLimiter::kQuotaReached) {
    finish(TunnelEnd::QuotaReached);
    return;
  }
  if (wait <= 0) return;
  if (shaped_.pause(way, now, wait) && mode_ == Mode::Buffered) {
    shaped_.at(way).read_disabled = true;
    if (way == 0) {
      downstream_.readDisableDownstream(true);
    } else {
      upstream_->readDisable(true);
    }
  }
  shaped_.arm(dispatcher(), now, [this] { onShapeTimer(); });
}

void TunnelRelay::onShapeTimer() {
  if (finished_) return;
  const int64_t now = policy::monotonicNanos();
  for (size_t way = 0; way < 2 && !finished_; ++way) {
    ShapedWays::Way& s = shaped_.at(way);
    if (!s.paused || s.resume_at > now) continue;
    s.paused = false;
    if (s.read_disabled) {
      s.read_disabled = false;
      if (way == 0) {
        downstream_.readDisableDownstream(false);
      } else {
        upstream_->readDisable(false);
      }
    } else if (mode_ == Mode::Spliced && splice_) {
      pump(direction(way));
    }
  }
  if (!finished_) shaped_.arm(dispatcher(), now, [this] { onShapeTimer(); });
}

void TunnelRelay::onTimer() {
  if (end_pending_) {
    end_pending_ = false;
    // Clears the raw handler without a read: the owner is about to end the client side.
    if (network::Connection* c = downstream_.spliceableConnection(); c != nullptr) {
      if (mode_ == Mode::Spliced) c->setRawIoHandler(nullptr, false);
    }
    mode_ = Mode::Buffered;
    downstream_.onTunnelEnd(end_);
    return;
  }
  if (finished_) return;
  // The timer is armed once per idle period, not per byte: on expiry it checks when the last
  // byte moved and re-arms for the rest.
  const auto idle =
      std::chrono::duration_cast<std::chrono::milliseconds>(dispatcher().now() - last_activity_);
  const std::chrono::milliseconds idle_timeout(idle_timeout_ms_);
  if (idle < idle_timeout) {
    downstream_.tunnelTimer().enable(idle_timeout - idle);
    return;
  }
  finish(TunnelEnd::IdleTimeout);
}

void TunnelRelay::maybeDone() {
  if (!downstream_ended_ || !upstream_ended_ || finished_ || closing_) return;
  if (upstream_->writeBufferLength() > 0) {
    // The client's last bytes are still on their way: the end waits for the flushed close.
    closing_ = true;
    upstream_->close(network::CloseType::FlushWrite);
    return;
  }
  finish(TunnelEnd::Done);
}

void TunnelRelay::finish(TunnelEnd end) {
  if (finished_) return;
  forEachStats([end](const TunnelStats& s) {
    if (end == TunnelEnd::IdleTimeout) s.idle_timeout.inc();
    if (end == TunnelEnd::UpstreamReset) s.upstream_reset.inc();
    if (end == TunnelEnd::DownstreamReset) s.downstream_reset.inc();
  });
  stop();
  end_ = end;
  end_pending_ = true;
  downstream_.tunnelTimer().enable(std::chrono::milliseconds(0));
}

void TunnelRelay::abort() {
  end_pending_ = false;
  stop();
  downstream_.tunnelTimer().disable();
  if (mode_ == Mode::Spliced) {
    if (network::Connection* c = downstream_.spliceableConnection(); c != nullptr) {
      c->setRawIoHandler(nullptr, false);
    }
    mode_ = Mode::Buffered;
  }
}

void TunnelRelay::stop() {
  if (finished_) return;
  finished_ = true;
  downstream_.tunnelTimer().disable();
  shaped_.disarm();
  if (started_) {
    forEachStats([](const TunnelStats& s) { s.tunnels_active.dec(); });
    if (listener_stats_ != nullptr) {
      listener_stats_->duration.record(dispatcher().now() - started_at_);
    }
  }
  releasePipes();
  if (upstream_) {
    if (mode_ == Mode::Spliced) upstream_->setRawIoHandler(nullptr, false);
    upstream_.release();
  }
}

// ---- splice ----

void TunnelRelay::maybeSplice(size_t read_size) {
  if (read_size >= kSpliceAfterRead) bulk_ = true;
  if (!bulk_ || mode_ != Mode::Buffered || splice_off_ || !splice_allowed_ || finished_ ||
      downstream_ended_ || upstream_ended_) {
    return;
  }
  network::Connection* client = downstream_.spliceableConnection();
  if (client == nullptr) return;
  // A socket read by completion (the quiet side's, say) is read by readiness from now on: the
  // next read of bulk finds both sides ready to splice.
  client->readByReadinessOnly();
  upstream_->readByReadinessOnly();
  if (!client->rawCapable() || !upstream_->rawCapable()) return;
  if (!client->readEnabled() || !upstream_->readEnabled()) return;
  enterSplice();
}

void TunnelRelay::enterSplice() {
  network::Connection* client = downstream_.spliceableConnection();
  network::Connection* origin = &upstream_.connection();
  mode_ = Mode::Spliced;
  splice_ = std::make_unique<SpliceState>();
  Direction* dirs = splice_->dirs;
  dirs[0].from = client;
  dirs[0].to = origin;
  dirs[0].to_upstream = true;
  dirs[1].from = origin;
  dirs[1].to = client;
  // Both sockets start as readable and writable: a splice that finds nothing says EAGAIN, and
  // edge-triggered readiness reports what comes after. The first pumps run from the loop.
  client->setRawIoHandler(this);
  origin->setRawIoHandler(this);
  client->scheduleRead();
  origin->scheduleRead();
}

void TunnelRelay::onRawReadable(network::Connection& connection) {
  if (finished_) return;
  Direction& d = &connection == direction(0).from ? direction(0) : direction(1);
  d.readable = true;
  pump(d);
}

void TunnelRelay::onRawWritable(network::Connection& connection) {
  if (finished_) return;
  Direction& d = &connection == direction(0).to ? direction(0) : direction(1);
  d.writable = true;
  pump(d);
}

void TunnelRelay::pump(Direction& d) {
  size_t moved = 0;
  while (!finished_) {
    if (d.in_pipe > 0) {
      if (!d.writable) break;
      const ssize_t n =
          ::splice(d.pipe.read_fd, nullptr, d.to->fd(), nullptr, d.in_pipe, kSpliceFlags);
      if (n > 0) {
        const size_t k = static_cast<size_t>(n);
        d.in_pipe -= k;
        moved += k;
        d.to->countRawBytes(0, k);
        if (d.to_upstream) {
          countToUpstream(k);
        } else {
          countToDownstream(k);
        }
        forEachStats([k](const TunnelStats& s) { s.bytes_spliced.add(k); });
        if (d.in_pipe == 0 && moved >= kSpliceBudget) {
          // Enough for one event: the rest of this socket waits for the next loop turn.
          d.from->scheduleRead();
          break;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        d.writable = false;
        d.to->watchWrites();
        break;
      }
      finish(d.to_upstream ? TunnelEnd::UpstreamReset : TunnelEnd::DownstreamReset);
      return;
    }
    if (d.eof) {
      if (!d.shut) {
        d.shut = true;
        buffer::Buffer none;
        d.to->write(none, true);
        if (d.to_upstream) {
          downstream_ended_ = true;
        } else {
          upstream_ended_ = true;
        }
      }
      break;
    }
    if (!d.readable || leaving_splice_ || shapePaused(d.to_upstream ? 0 : 1)) break;
    if (!d.pipe) {
      d.pipe = PipePool::forThisThread().acquire(max_pipes_);
      if (!d.pipe) {
        // The worker's pipes are all in use, or no descriptor is left for one: this tunnel
        // copies through user space from here on.
        forEachStats([](const TunnelStats& s) { s.splice_fallback.inc(); });
        leaving_splice_ = true;
        break;
      }
    }
    // A shaped tunnel (a bandwidth limit, a byte quota) reads no more than a default pipe-full
    // at a time, so a large pipe does not make its bursts, or what it reads past its quota,
    // larger.
    const size_t want =
        shaping() ? std::min(d.pipe.capacity, size_t{PipePool::kPipeBytes}) : d.pipe.capacity;
    const ssize_t n = ::splice(d.from->fd(), nullptr, d.pipe.write_fd, nullptr, want, kSpliceFlags);
    if (n > 0) {
      d.in_pipe = static_cast<size_t>(n);
      d.from->countRawBytes(d.in_pipe, 0);
      touch();
      if (shaping()) shape(d.to_upstream ? 0 : 1, d.in_pipe);
      continue;
    }
    if (n == 0) {
      d.eof = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // The pipe is empty here, so EAGAIN means the socket is.
      d.readable = false;
      break;
    }
    finish(d.to_upstream ? TunnelEnd::DownstreamReset : TunnelEnd::UpstreamReset);
    return;
  }
  if (finished_) return;
  if (d.pipe && d.in_pipe == 0) {
    // An idle tunnel holds no pipe.
    PipePool::forThisThread().release(d.pipe);
    d.pipe = Pipe();
  }
  if (leaving_splice_) {
    tryLeaveSplice();
    return;
  }
  if (downstream_ended_ && upstream_ended_) maybeDone();
}

void TunnelRelay::tryLeaveSplice() {
  if (direction(0).in_pipe > 0 || direction(1).in_pipe > 0) return;
  releasePipes();
  leaving_splice_ = false;
  splice_off_ = true;
  mode_ = Mode::Buffered;
  // Back to the buffered path; each connection reads again from the loop.
  direction(0).from->setRawIoHandler(nullptr);
  direction(1).from->setRawIoHandler(nullptr);
  splice_.reset();
  if (downstream_ended_ && upstream_ended_) maybeDone();
}

void TunnelRelay::releasePipes() {
  if (!splice_) return;
  for (Direction& d : splice_->dirs) {
    if (!d.pipe) continue;
    if (d.in_pipe == 0) {
      PipePool::forThisThread().release(d.pipe);
    } else {
      PipePool::forThisThread().destroy(d.pipe);
    }
    d.pipe = Pipe();
    d.in_pipe = 0;
  }
}

}  // namespace upstream
}  // namespace sluice
