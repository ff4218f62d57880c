#include "source/common/upstream/upstream_budget.h"

#include <algorithm>

#include <sys/resource.h>

namespace sluice {
namespace upstream {
namespace {

uint64_t openFilesLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 30;
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace

UpstreamBudget& UpstreamBudget::get() {
  static UpstreamBudget* budget = new UpstreamBudget();
  return *budget;
}

UpstreamBudget::UpstreamBudget() {
  limiter_ = std::make_unique<network::ConnectionLimiter>(1u << 30, per_client_);
}

void UpstreamBudget::configure(uint32_t per_client, uint32_t reserve) {
  configured_reserve_ = reserve;
  if (!configured_) {
    // Once: at a reload, workers are counting into these already.
    configured_ = true;
    stats::Store& store = stats::Store::get();
    stats_.client_refused = store.counter(
        "upstream.client_limit_refused",
        "Upstream sockets refused: the client holds max_connections_per_client (503).");
    stats_.reserve_refused =
        store.counter("upstream.descriptor_reserve_refused",
                      "Upstream sockets refused: they would take a reserved descriptor (503).");
  }
  refreshDescriptorLimit();
  const uint64_t usable = static_cast<uint64_t>(descriptorCeiling());
  per_client_ = per_client != 0 ? per_client
                                : static_cast<uint32_t>(std::max<uint64_t>(
                                      1, std::min<uint64_t>(kDefaultPerClient, usable / 4)));
  // Open slots refer to the limiter: it stays, with the new limit for the next sockets.
  limiter_->setLimits(1u << 30, per_client_);
}

void UpstreamBudget::refreshDescriptorLimit() {
  const uint64_t limit = std::min<uint64_t>(openFilesLimit(), 1 << 30);
  reserve_ = configured_reserve_ != 0
                 ? configured_reserve_
                 : static_cast<uint32_t>(std::min<uint64_t>(kDefaultReserve, limit / 4));
  const uint64_t usable = limit > reserve_ ? limit - reserve_ : 0;
  ceiling_.store(static_cast<int>(usable), std::memory_order_relaxed);
}

bool UpstreamBudget::admit(const network::Address& client, network::ConnectionSlot& slot) {
  const network::ClientKey key = network::ClientKey::of(client);
  if (limiter_->tryAcquire(key) != network::ConnectionLimiter::Admission::Admitted) {
    stats_.client_refused.inc();
    return false;
  }
  slot = network::ConnectionSlot(*limiter_, key);
  return true;
}

}  // namespace upstream
}  // namespace sluice
