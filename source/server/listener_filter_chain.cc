#include "source/server/listener_filter_chain.h"

#include <cerrno>
#include <vector>

#include <sys/socket.h>

namespace sluice {
namespace server {

ListenerFilterChain::ListenerFilterChain(event::Dispatcher& dispatcher, int fd,
                                         const network::Address& peer,
                                         std::chrono::milliseconds timeout, Done done)
    : dispatcher_(dispatcher),
      fd_(fd),
      peer_(peer),
      done_(std::move(done)),
      timeout_(timeout),
      timer_(dispatcher, [this] {
        timed_out_ = true;
        finish(false);
      }) {}

ListenerFilterChain::~ListenerFilterChain() = default;

namespace {
class Collector : public network::ListenerFilterManager {
 public:
  void addListenerFilter(network::ListenerFilterPtr filter) override {
    filters.push_back(std::move(filter));
  }
  std::vector<network::ListenerFilterPtr> filters;
};
}  // namespace

std::vector<network::ListenerFilterPtr> ListenerFilterChain::makeFilters(
    const std::vector<network::ListenerFilterFactoryCb>& factories) {
  Collector collector;
  for (const auto& factory : factories) factory(collector);
  return std::move(collector.filters);
}

void ListenerFilterChain::run(std::vector<network::ListenerFilterPtr> filters) {
  filters_ = std::move(filters);
  if (!filters_.empty()) timer_.enable(timeout_);
  iterate();
}

void ListenerFilterChain::iterate() {
  while (!finished_) {
    if (waiting_data_) {
      if (!peek()) return;
      continue;
    }
    if (next_ >= filters_.size()) {
      finish(true);
      return;
    }
    network::ListenerFilter& filter = *filters_[next_++];
    if (filter.onAccept(*this) == network::FilterStatus::StopIteration) {
      paused_ = !finished_;
      return;
    }
    if (finished_) return;
    waiting_data_ = filter.maxReadBytes() > 0;
  }
}

bool ListenerFilterChain::peek() {
  network::ListenerFilter& filter = *filters_[next_ - 1];
  // One scratch buffer per worker thread, grown to the largest peek (a whole TLS ClientHello
  // record, 16 KiB): nothing is allocated or zeroed per accepted socket.
  thread_local std::vector<char> t_peek;
  if (t_peek.size() < filter.maxReadBytes()) t_peek.resize(filter.maxReadBytes());
  char* const buf = t_peek.data();
  const size_t cap = filter.maxReadBytes();
  ssize_t n;
  do {
    n = ::recv(fd_, buf, cap, MSG_PEEK);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) n = -2;
  if (n == 0 || n == -1) {
    // The peer closed (or the socket failed) before the filter could decide.
    finish(false);
    return false;
  }
  if (n > 0) {
    peeked_ = true;
    network::FilterStatus status =
        filter.onData(std::string_view(buf, static_cast<size_t>(n)), *this);
    if (finished_) return false;
    if (status == network::FilterStatus::Continue) {
      waiting_data_ = false;
      readable_.reset();
      return true;
    }
    if (static_cast<size_t>(n) == cap) {
      // It has all it asked for and still cannot decide: refuse rather than wait forever.
      finish(false);
      return false;
    }
  }
  // Wait for more bytes; edge-triggered, so each arrival is reported once.
  if (!readable_) {
    readable_ = std::make_unique<event::FileEvent>(
        dispatcher_, fd_, this, event::FileEvent::To<&ListenerFilterChain::onSocketEvent>());
  }
  return false;
}

void ListenerFilterChain::onSocketEvent(uint32_t events) {
  if (events & event::FileEvent::kRead) iterate();
}

void ListenerFilterChain::continueFilterChain(bool success) {
  if (finished_) return;
  if (!success) {
    finish(false);
    return;
  }
  if (paused_) {
    // The filter that paused in onAccept may still want to see bytes.
    paused_ = false;
    waiting_data_ = filters_[next_ - 1]->maxReadBytes() > 0;
  }
  iterate();
}

void ListenerFilterChain::finish(bool success) {
  if (finished_) return;
  finished_ = true;
  timer_.disable();
  readable_.reset();
  // `done` may delete this chain: nothing after it.
  done_(success);
}

}  // namespace server
}  // namespace sluice
