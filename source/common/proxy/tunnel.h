#pragma once

#include "source/common/buffer/buffer.h"
#include "source/common/network/connection.h"

namespace sluice {
namespace proxy {

// Forwards an upstream connection's callbacks to the codec that owns it (a codec cannot be both
// a network filter and the upstream connection's callbacks: the onData signatures clash). An
// upstream that cannot take more pushes back on the client: reading from it stops until the
// upstream's write buffer drains. The owner (a friend, when these are private) provides
// onUpstreamData(Buffer&, bool), onUpstreamEvent(ConnectionEvent) and downstream().
// A template, so the forwarding adds no call of its own.
template <class Owner>
class UpstreamCallbacks final : public network::ConnectionCallbacks {
 public:
  explicit UpstreamCallbacks(Owner& owner) : owner_(owner) {}
  void onData(buffer::Buffer& data, bool end_stream) override {
    owner_.onUpstreamData(data, end_stream);
  }
  void onEvent(network::ConnectionEvent event) override { owner_.onUpstreamEvent(event); }
  void onAboveWriteHighWatermark() override { owner_.downstream().readDisable(true); }
  void onBelowWriteLowWatermark() override { owner_.downstream().readDisable(false); }

 private:
  Owner& owner_;
};

// The client's write buffer crossed a watermark: stop (or resume) reading the upstream that
// fills it, if there is one.
inline void pauseUpstreamReading(const network::ConnectionPtr& upstream, bool pause) {
  if (upstream) upstream->readDisable(pause);
}

// A byte tunnel's half-close: one side ended (sent end of stream) and `ended` is its flag. The
// first time, the end is passed on to the other side's connection `to`. True when the other side
// had ended too: the tunnel is over and the caller closes it.
inline bool passTunnelEnd(network::Connection& to, bool& ended, const bool& other_ended) {
  if (ended) return false;
  ended = true;
  buffer::Buffer none;
  to.write(none, true);
  return other_ended;
}

}  // namespace proxy
}  // namespace sluice
