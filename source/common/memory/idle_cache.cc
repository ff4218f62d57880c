#include "source/common/memory/idle_cache.h"

namespace sluice {
namespace memory {

namespace {
// This thread's caches (an intrusive list: a plain pointer, so nothing to destroy at exit).
thread_local IdleCache* t_caches = nullptr;
}  // namespace

IdleCache::IdleCache() : next_(t_caches) {
  if (next_ != nullptr) next_->prev_ = this;
  t_caches = this;
}

IdleCache::~IdleCache() {
  if (prev_ != nullptr) {
    prev_->next_ = next_;
  } else if (t_caches == this) {
    t_caches = next_;
  }
  if (next_ != nullptr) next_->prev_ = prev_;
}

size_t releaseIdleCaches() {
  size_t released = 0;
  for (IdleCache* c = t_caches; c != nullptr; c = c->next_) released += c->releaseIdle();
  return released;
}

}  // namespace memory
}  // namespace sluice
