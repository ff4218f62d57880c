#include "source/common/upstream/upstream_handle.h"

#include "source/common/upstream/pool.h"

namespace sluice {
namespace upstream {

UpstreamHandle& UpstreamHandle::operator=(UpstreamHandle&& other) noexcept {
  if (this == &other) return *this;
  release(false);
  connection_ = std::move(other.connection_);
  pool_ = other.pool_;
  info_ = other.info_;
  slot_ = std::move(other.slot_);
  return *this;
}

namespace {
void closeConnection(network::ConnectionPtr& connection) {
  event::Dispatcher& dispatcher = connection->dispatcher();
  connection->close(network::CloseType::NoFlush);
  dispatcher.deferredDelete(std::move(connection));
}
}  // namespace

void TunnelUpstream::release() {
  slot_.reset();
  if (!connection_) return;
  connection_->setCallbacks(nullptr);
  closeConnection(connection_);
}

TunnelUpstream UpstreamHandle::takeForTunnel() {
  pool_ = nullptr;
  return TunnelUpstream(std::move(connection_), std::move(slot_));
}

void UpstreamHandle::release(bool reusable) {
  slot_.reset();
  if (!connection_) return;
  connection_->setCallbacks(nullptr);
  if (reusable && connection_->open()) {
    // A paused connection goes back readable: the pool watches it for the origin's close.
    while (!connection_->readEnabled()) connection_->readDisable(false);
  }
  if (reusable && connection_->open() && connection_->writeBufferLength() == 0 &&
      pool_ != nullptr) {
    pool_->release(std::move(connection_), info_.source, info_.via, info_.pool_destination);
    return;
  }
  closeConnection(connection_);
}

}  // namespace upstream
}  // namespace sluice
