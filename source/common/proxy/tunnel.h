#pragma once

#include "source/common/buffer/buffer.h"
#include "source/common/network/connection.h"

namespace sluice {
namespace proxy {

// Forwards an origin connection's callbacks to the HTTP/1.1 codec exchanging a request on it (a
// codec cannot be both a network filter and the upstream connection's callbacks: the onData
// signatures clash). An upstream that cannot take more pushes back on the client: reading from
// it stops until the upstream's write buffer drains. The owner (a friend, when these are private)
// provides onUpstreamData(Buffer&, bool), onUpstreamEvent(ConnectionEvent) and downstream(). A
// template, so the forwarding adds no call of its own.
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

}  // namespace proxy
}  // namespace sluice
