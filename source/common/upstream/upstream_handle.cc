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
  event::Dispatcher& dispatcher = connection_->dispatcher();
  connection_->close(network::CloseType::NoFlush);
  dispatcher.deferredDelete(std::move(connection_));
}

}  // namespace upstream
}  // namespace sluice
