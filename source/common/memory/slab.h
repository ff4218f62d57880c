#pragma once

#include <cstddef>
#include <cstdint>

// Per-thread slabs for the objects a connection keeps for its whole life (the connection, its
// codec and request filters, a tunnel's relay). They sit packed in 64 KiB chunks of one size
// each, apart from the heap where requests' short-lived memory comes and goes: a burst of
// requests in flight leaves no holes between long-lived objects, so what the burst used goes back
// to the system once it is over, and an idle connection costs its objects' size, no more.
//
// A thread allocates from its own slabs without locks. An object must be freed by the thread
// that allocated it, or after that thread has stopped (a worker's connections destroyed at
// shutdown): the chunk's lists belong to the allocating thread.
namespace sluice {
namespace memory {

inline constexpr size_t kSlabChunkBytes = 64 * 1024;
inline constexpr size_t kSlabGranule = 16;
// Larger objects come from the heap.
inline constexpr size_t kSlabMaxObject = 2048;

// A thread's slabs are two sets of size classes: what a connection keeps for its whole life
// (the connection, its filter manager, a tunnel and its relay), and what passes with a request
// or goes when a connection becomes a tunnel (request filters and their chain, a request's
// header fields). Apart, the objects that pass leave no holes in the chunks of those that
// stay: a burst of CONNECTs lets its request filters go once its tunnels are up, and their
// chunks go back instead of staying pinned by the tunnels' connections.
enum class SlabSet : uint8_t { Lasting, Passing };

void* slabAllocate(size_t size, SlabSet set = SlabSet::Lasting);
void slabFree(void* p, size_t size);

struct SlabStats {
  uint64_t chunks = 0;        // chunks mapped by this thread
  uint64_t live_objects = 0;  // objects allocated by this thread and not yet freed
};
SlabStats slabStats();  // this thread's

// Derive from it (once in a hierarchy with virtual destructors: sized delete then receives
// the dynamic type's size) to place a class's objects in the slabs.
struct SlabAllocated {
  static void* operator new(size_t size) { return slabAllocate(size); }
  static void operator delete(void* p, size_t size) { slabFree(p, size); }
};

// The same for objects of the passing set.
struct SlabAllocatedPassing {
  static void* operator new(size_t size) { return slabAllocate(size, SlabSet::Passing); }
  static void operator delete(void* p, size_t size) { slabFree(p, size); }
};

// A standard allocator over the passing slabs, for containers that live and die on one thread
// (a request's header fields).
template <class T>
struct SlabAllocator {
  using value_type = T;
  SlabAllocator() = default;
  template <class U>
  SlabAllocator(const SlabAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(slabAllocate(n * sizeof(T), SlabSet::Passing)); }
  void deallocate(T* p, size_t n) { slabFree(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const SlabAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const SlabAllocator<U>&) const {
    return false;
  }
};

}  // namespace memory
}  // namespace sluice
