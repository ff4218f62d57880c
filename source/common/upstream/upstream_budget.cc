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

std::atomic<uint64_t> g_next_budget_id{1};

// The leases this thread takes places through, of the budget `budget_id`. Their spares go back
// when the thread ends (or when it turns to another budget: tests).
struct ThreadLeases {
  uint64_t budget_id = 0;
  std::shared_ptr<network::LimiterLeases> leases;
  ~ThreadLeases() {
    if (leases != nullptr) leases->orphan();
  }
};
thread_local ThreadLeases t_leases;

}  // namespace

UpstreamBudget& UpstreamBudget::get() {
  static UpstreamBudget* budget = new UpstreamBudget();
  return *budget;
}

UpstreamBudget::UpstreamBudget() : id_(g_next_budget_id.fetch_add(1)) {
  limiter_ = std::make_unique<network::ConnectionLimiter>(1u << 30, per_client_);
}

UpstreamBudget::~UpstreamBudget() {
  // A thread still holding leases of this budget finds them orphaned (they touch the limiter no
  // more); every slot is gone by now.
  std::lock_guard<std::mutex> lock(leases_mutex_);
  for (const auto& leases : leases_) leases->orphan();
}

network::LimiterLeases& UpstreamBudget::threadLeases() {
  ThreadLeases& mine = t_leases;
  if (mine.budget_id == id_) return *mine.leases;
  if (mine.leases != nullptr) mine.leases->orphan();
  auto leases = std::make_shared<network::LimiterLeases>(*limiter_);
  {
    std::lock_guard<std::mutex> lock(leases_mutex_);
    leases_.push_back(leases);
  }
  mine.budget_id = id_;
  mine.leases = std::move(leases);
  return *mine.leases;
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
  if (threadLeases().tryAcquire(key, slot) != network::ConnectionLimiter::Admission::Admitted) {
    stats_.client_refused.inc();
    return false;
  }
  return true;
}

}  // namespace upstream
}  // namespace sluice
