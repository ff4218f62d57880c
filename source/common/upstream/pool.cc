#include "source/common/upstream/pool.h"

#include <algorithm>

namespace sluice {
namespace upstream {

// Holds one idle connection and watches it: any byte or close from the origin while idle means
// the connection cannot be reused.
class Pool::Idle : public network::ConnectionCallbacks {
 public:
  explicit Idle(Pool& pool) : pool_(pool), timer_(pool.dispatcher_, [this] { onTimer(); }) {}

  // A connection is taken and given back once per request, so the timer is not re-armed each
  // time: it stays armed and, when it fires, measures from the last hold.
  void hold(network::ConnectionPtr conn, const Key& key) {
    conn_ = std::move(conn);
    key_ = key;
    conn_->setCallbacks(this);
    held_at_ = pool_.dispatcher_.now();
    if (!timer_armed_) {
      timer_.enable(pool_.idle_timeout_);
      timer_armed_ = true;
    }
  }
  network::ConnectionPtr take() {
    conn_->setCallbacks(nullptr);
    return std::move(conn_);
  }
  const Key& key() const { return key_; }

  // ConnectionCallbacks
  void onData(buffer::Buffer&, bool) override { pool_.remove(this); }
  void onEvent(network::ConnectionEvent event) override {
    if (event != network::ConnectionEvent::Connected) pool_.remove(this);
  }

 private:
  void onTimer() {
    timer_armed_ = false;
    if (conn_ == nullptr) return;  // taken (a spare now): the next hold arms it
    const auto idle = pool_.dispatcher_.now() - held_at_;
    if (idle >= pool_.idle_timeout_) {
      pool_.remove(this);
      return;
    }
    // Held again since the timer was armed: the rest of its idle time, rounded up.
    timer_.enable(std::chrono::ceil<std::chrono::milliseconds>(pool_.idle_timeout_ - idle));
    timer_armed_ = true;
  }

  Pool& pool_;
  event::Timer timer_;
  bool timer_armed_ = false;
  event::MonotonicTime held_at_{};
  network::ConnectionPtr conn_;
  Key key_;
};

Pool::Pool(event::Dispatcher& dispatcher, uint32_t max_idle_per_destination,
           std::chrono::milliseconds idle_timeout)
    : dispatcher_(dispatcher),
      max_idle_per_destination_(max_idle_per_destination),
      idle_timeout_(idle_timeout),
      idle_gauge_(
          stats::Store::get().gauge("upstream.pool_idle", "Idle pooled origin connections.")) {}

Pool::~Pool() { closeAll(); }

network::ConnectionPtr Pool::acquire(const network::Address& to, const network::Address& source,
                                     uint64_t via) {
  auto it = idle_.find(Key{source, to, via});
  if (it == idle_.end() || it->second.empty()) return nullptr;
  IdlePtr idle = std::move(it->second.back());
  it->second.pop_back();
  --idle_count_;
  idle_gauge_.dec();
  network::ConnectionPtr conn = idle->take();
  spare_.push_back(std::move(idle));
  return conn;
}

void Pool::release(network::ConnectionPtr conn, const network::Address& source, uint64_t via,
                   const network::Address& destination) {
  if (draining_ || !conn->open() || !conn->readBuffer().empty() || conn->writeBufferLength() > 0) {
    close(std::move(conn));
    return;
  }
  if (idle_.size() >= kSweepDestinations) sweepEmpty();
  const Key key{source, destination.valid() ? destination : conn->peer(), via};
  auto& list = idle_[key];
  if (list.size() >= max_idle_per_destination_) {
    close(std::move(conn));
    return;
  }
  IdlePtr idle;
  if (!spare_.empty()) {
    idle = std::move(spare_.back());
    spare_.pop_back();
  } else {
    idle = std::make_unique<Idle>(*this);
  }
  idle->hold(std::move(conn), key);
  list.push_back(std::move(idle));
  ++idle_count_;
  idle_gauge_.inc();
}

void Pool::remove(Idle* idle) {
  auto it = idle_.find(idle->key());
  if (it == idle_.end()) return;
  auto& list = it->second;
  auto pos =
      std::find_if(list.begin(), list.end(), [idle](const IdlePtr& p) { return p.get() == idle; });
  if (pos == list.end()) return;
  IdlePtr owned = std::move(*pos);
  list.erase(pos);
  --idle_count_;
  idle_gauge_.dec();
  close(owned->take());
  spare_.push_back(std::move(owned));
}

void Pool::close(network::ConnectionPtr conn) {
  conn->setCallbacks(nullptr);
  conn->close(network::CloseType::NoFlush);
  dispatcher_.deferredDelete(std::move(conn));
}

void Pool::sweepEmpty() {
  // Destinations with no idle connection keep their (empty) list so that a busy origin does
  // not allocate a new one per request; past a bound they are dropped in one sweep, so many
  // distinct destinations cannot grow the map without limit.
  absl::erase_if(idle_, [](const auto& entry) { return entry.second.empty(); });
}

void Pool::drain() {
  draining_ = true;
  closeAll();
}

void Pool::closeAll() {
  for (auto& [addr, list] : idle_) {
    for (auto& idle : list) close(idle->take());
    list.clear();
  }
  idle_.clear();
  idle_gauge_.add(-static_cast<int64_t>(idle_count_));
  idle_count_ = 0;
}

}  // namespace upstream
}  // namespace sluice
