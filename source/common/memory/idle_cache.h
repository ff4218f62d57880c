#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

// Per-thread caches of free objects that a burst leaves for the next one (buffer blocks, request
// heads in flight, SOCKS5 handshakes, origin exchanges). Every cache registers with the thread it
// is made on; each worker calls releaseIdleCaches() every memory_release_interval, and every cache
// frees what it held unused since the last call, so a worker whose burst is over keeps none of it.
namespace sluice {
namespace memory {

class IdleCache {
 public:
  IdleCache();  // registers with this thread's caches
  virtual ~IdleCache();
  IdleCache(const IdleCache&) = delete;
  IdleCache& operator=(const IdleCache&) = delete;

  // Frees the objects no one took since the last call; returns how many.
  virtual size_t releaseIdle() = 0;

 private:
  friend size_t releaseIdleCaches();
  IdleCache* prev_ = nullptr;
  IdleCache* next_ = nullptr;
};

// Every cache of this thread releases what it held unused; returns how many objects went.
size_t releaseIdleCaches();

// A bounded stack of free objects of one kind. `Destroy` frees one.
template <class T, void (*Destroy)(T*)>
class FreeStack final : public IdleCache {
 public:
  explicit FreeStack(size_t max) : max_(max) {}
  ~FreeStack() override {
    for (T* p : free_) Destroy(p);
  }

  // A free object, or null.
  T* take() {
    if (free_.empty()) return nullptr;
    T* p = free_.back();
    free_.pop_back();
    low_ = std::min(low_, free_.size());
    return p;
  }
  // Keeps `p` for a later take(); false (not kept) when the stack is full.
  bool give(T* p) {
    if (free_.size() >= max_) return false;
    free_.push_back(p);
    return true;
  }
  size_t size() const { return free_.size(); }

  size_t releaseIdle() override {
    const size_t idle = std::min(low_, free_.size());
    for (size_t i = 0; i < idle; ++i) {
      Destroy(free_.back());
      free_.pop_back();
    }
    low_ = free_.size();
    return idle;
  }

 private:
  const size_t max_;
  // The fewest objects the stack held since the last releaseIdle(): that many stayed unused.
  size_t low_ = 0;
  std::vector<T*> free_;
};

}  // namespace memory
}  // namespace sluice
