#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "source/common/buffer/buffer.h"
#include "source/common/event/dispatcher.h"
#include "source/common/memory/slab.h"
#include "source/common/network/connection.h"
#include "source/common/policy/limits.h"
#include "source/common/upstream/pipe_pool.h"
#include "source/common/upstream/request_record.h"
#include "source/common/upstream/shaped_ways.h"
#include "source/common/upstream/tunnel_stats.h"
#include "source/common/upstream/upstream_handle.h"

namespace sluice {
namespace upstream {

// How a tunnel ended, for its owner's answer and counters.
enum class TunnelEnd : uint8_t {
  Done,             // both sides ended their stream (half-closes passed on both ways)
  IdleTimeout,      // no byte either way for the idle timeout
  UpstreamReset,    // the destination reset or closed before both sides ended
  DownstreamReset,  // the client's socket failed (seen by the relay while splicing)
  QuotaReached,     // the request's key or group reached its byte quota
};
const char* tunnelEndName(TunnelEnd end);

// The client side of a tunnel as the codec presents it: a whole client connection (HTTP/1.1
// CONNECT or upgrade, SOCKS5: an upstream::ConnectionTunnel) or one HTTP/2 stream.
class TunnelDownstream {
 public:
  virtual ~TunnelDownstream() = default;
  // Bytes from the destination for the client; end_stream once the destination ended its side.
  virtual void writeDownstream(buffer::Buffer& data, bool end_stream) = 0;
  // The destination is backed up (or drained): stop (resume) taking bytes from the client.
  virtual void readDisableDownstream(bool disable) = 0;
  // The client's whole connection, which splice may use when it is plain TCP (the relay checks),
  // or null (an HTTP/2 stream).
  virtual network::Connection* spliceableConnection() { return nullptr; }
  // The tunnel is over and the upstream is closed. Delivered from the loop, never from inside
  // a call the owner made. The owner ends its side and lets the relay go.
  virtual void onTunnelEnd(TunnelEnd end) = 0;
  // The request's trace, which the bytes each way and the destination's first byte go to.
  virtual RequestTrace& tunnelTrace() = 0;
  // The owner's own timer, which holds the relay's idle deadline and its deferred end (a tunnel
  // needs no other): while the tunnel runs, the owner passes its expiries to onTimer(). Its
  // dispatcher is the relay's.
  virtual event::Timer& tunnelTimer() = 0;
};

struct TunnelOptions {
  std::chrono::milliseconds idle_timeout{300000};
  bool splice = true;
  // Pipes the worker may have in flight at once (two descriptors each).
  size_t max_pipes = 1024;
  // Counters to add to (either may be null): the listener's and the authenticated key's.
  const TunnelStats* listener_stats = nullptr;
  const TunnelStats* key_stats = nullptr;
};

// The byte tunnel between a client side and a destination connection, for every protocol:
// both directions, half-close in either order, the idle timeout, backpressure (a backed-up
// side stops the other from being read) and one set of counters. The bytes each way and the
// destination's first byte go to the request's trace as they move.
//
// When both sides are plain TCP sockets, a tunnel that carries bulk data (a read that filled a
// whole read budget) moves to splice(2): bytes go socket → pipe → socket without entering user
// space, through pipes from the worker's PipePool that are held only while bytes are in flight.
// Without a pipe (out of descriptors) it falls back to copying.
class TunnelRelay : public event::DeferredDeletable,
                    public memory::SlabAllocated,
                    private network::ConnectionCallbacks,
                    private network::RawIoHandler {
 public:
  // A read of at least this many bytes marks a tunnel as bulk: it moves to splice.
  static constexpr size_t kSpliceAfterRead = 4 * buffer::kBlockSize;

  // The relay keeps its idle deadline and its deferred end on the downstream's timer, and its
  // bytes on the downstream's trace (TunnelDownstream::tunnelTimer(), tunnelTrace()): the
  // relay holds neither. `downstream` outlives the relay's use of it: it touches it no more
  // once it has ended.
  TunnelRelay(UpstreamHandle upstream, TunnelDownstream& downstream, const TunnelOptions& options);
  ~TunnelRelay() override;

  // How an owner that holds a relay apart from itself (an HTTP/2 stream) lets it go, from
  // anywhere (its own onTunnelEnd included): aborted if still running, deleted from the loop.
  static void dispose(std::unique_ptr<TunnelRelay>& relay);

  // Starts relaying. `early` holds client bytes that arrived before the tunnel existed (they go
  // first); downstream_ended / upstream_ended: that side already ended its stream (its end is
  // passed on now).
  void start(buffer::Buffer& early, bool downstream_ended, bool upstream_ended = false);
  // Bytes from the client (the owner's onData).
  void onDownstreamData(buffer::Buffer& data, bool end_stream);
  // The client side backed up (or drained): stop (resume) reading the destination.
  void onDownstreamBackedUp(bool backed_up);
  // The owner ends the tunnel (the client left, its stream was reset, a drain): the upstream is
  // closed now and onTunnelEnd is not called.
  void abort();
  // The owner's timer fired while the tunnel runs.
  void onTimer();

  bool upstreamBackedUp() const;
  bool spliced() const { return mode_ == Mode::Spliced; }
  bool finished() const { return finished_; }

 private:
  enum class Mode : uint8_t { Buffered, Spliced };
  // One direction while spliced: from → pipe → to.
  struct Direction {
    network::Connection* from = nullptr;
    network::Connection* to = nullptr;
    Pipe pipe;
    size_t in_pipe = 0;    // bytes spliced in, not yet out
    bool readable = true;  // `from` may have bytes (edge-triggered: until EAGAIN)
    bool writable = true;  // `to` may take bytes
    bool eof = false;      // `from` ended its stream
    bool shut = false;     // the end was passed on to `to`
    bool to_upstream = false;
  };

  // network::ConnectionCallbacks (the upstream connection)
  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;
  // network::RawIoHandler (both connections, while spliced)
  void onRawReadable(network::Connection& connection) override;
  void onRawWritable(network::Connection& connection) override;

  event::Dispatcher& dispatcher() const { return downstream_.tunnelTimer().dispatcher(); }
  void touch() { last_activity_ = dispatcher().now(); }
  // The listener's counters and, for an authenticated request, the key's.
  template <class F>
  void forEachStats(F f) const {
    if (listener_stats_ != nullptr) f(*listener_stats_);
    if (key_stats_ != nullptr) f(*key_stats_);
  }
  void countToUpstream(size_t n);
  void countToDownstream(size_t n);
  // Both sides ended: done once the destination took what was written to it.
  void maybeDone();
  // Ends the tunnel: counters, upstream closed, pipes back; onTunnelEnd follows from the loop.
  void finish(TunnelEnd end);
  void stop();
  void maybeSplice(size_t read_size);
  void enterSplice();
  void pump(Direction& d);
  Direction& direction(size_t i) { return splice_->dirs[i]; }
  // Leaves splice once no pipe holds bytes (no pipe could be had).
  void tryLeaveSplice();
  void releasePipes();
  // Bandwidth shaping: charges `bytes` that just moved one way (0 upload, 1 download) and,
  // when the limit says so, stops reading the side that produced them until the shaping timer
  // resumes it (readDisable while buffered; while spliced, pump() does not read it).
  void shape(size_t way, size_t bytes);
  bool shaping() const { return limiter_ != nullptr && limiter_->shapes(); }
  bool shapePaused(size_t way) const { return shaped_[way].paused; }
  void onShapeTimer();

  // The request's limits when it has any (bandwidth is charged to them), else null: a tunnel
  // without limits pays one null check per read.
  policy::KeyLimiter* const limiter_;
  TunnelUpstream upstream_;
  ShapedWays shaped_;  // [0] client → destination, [1] destination → client
  TunnelDownstream& downstream_;
  const TunnelStats* const listener_stats_;
  const TunnelStats* const key_stats_;
  event::MonotonicTime started_at_;
  event::MonotonicTime last_activity_;
  // Only while spliced: [0] client → destination, [1] destination → client.
  struct SpliceState {
    Direction dirs[2];
  };
  std::unique_ptr<SpliceState> splice_;
  const uint32_t idle_timeout_ms_;
  const uint32_t max_pipes_;
  const bool splice_allowed_;
  Mode mode_ = Mode::Buffered;
  // One bit each, all false at construction (an idle tunnel holds a relay).
  bool started_ : 1;
  bool downstream_ended_ : 1;  // the client's end was passed to the destination
  bool upstream_ended_ : 1;    // the destination's end was passed to the client
  bool bulk_ : 1;              // a full read was seen: splice when both sides allow
  bool splice_off_ : 1;        // no pipe could be had: this tunnel copies from now on
  bool leaving_splice_ : 1;
  bool closing_ : 1;  // both ended; the destination's last bytes are being flushed
  bool finished_ : 1;
  bool end_pending_ : 1;  // onTunnelEnd is due from the timer
  TunnelEnd end_ = TunnelEnd::Done;
};

}  // namespace upstream
}  // namespace sluice
