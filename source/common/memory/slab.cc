#include "source/common/memory/slab.h"

#include <mutex>
#include <new>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "source/common/memory/idle_cache.h"

namespace sluice {
namespace memory {

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer every object comes from the heap, so overflows and uses after free
// stay visible.
void* slabAllocate(size_t size, SlabSet) { return ::operator new(size); }
void slabFree(void* p, size_t) { ::operator delete(p); }
SlabStats slabStats() { return {}; }
#else

namespace {

struct SizeClass;
struct ThreadSlabs;

// At the start of every chunk (chunks are aligned to their size, so an object finds its chunk by
// masking its address).
struct Chunk {
  Chunk* prev = nullptr;  // in the size class's list of chunks with free slots
  Chunk* next = nullptr;
  SizeClass* size_class = nullptr;
  void* free = nullptr;    // slots given back, each holding the next
  char* unused = nullptr;  // slots never handed out start here
  char* end = nullptr;
  uint32_t live = 0;
  uint32_t capacity = 0;
  bool listed = false;
  // Empty at the last release and not used since: its pages go back at the next one.
  bool idle = false;
};

struct SizeClass {
  ThreadSlabs* owner = nullptr;
  size_t object_size = 0;
  Chunk* open = nullptr;  // chunks with a free slot
  uint32_t chunks = 0;
};

constexpr size_t kClasses = kSlabMaxObject / kSlabGranule;
constexpr size_t kHeaderBytes = (sizeof(Chunk) + kSlabGranule - 1) / kSlabGranule * kSlabGranule;

// A class keeps its last chunk when it empties (a connection opening and closing does not map
// and unmap one each time), which a burst of short-lived objects (request heads, request
// filters) has touched whole. As a memory::IdleCache of its thread, a chunk that stayed empty
// for a whole memory_release_interval gives its pages back (the mapping stays; the pages come
// back zeroed on the next use).
struct ThreadSlabs final : IdleCache {
  static constexpr size_t kSets = 2;  // SlabSet::Lasting, SlabSet::Passing
  SizeClass classes[kSets * kClasses];
  uint64_t chunks = 0;
  uint64_t live = 0;
  ThreadSlabs() {
    for (size_t i = 0; i < kSets * kClasses; ++i) {
      classes[i].owner = this;
      classes[i].object_size = (i % kClasses + 1) * kSlabGranule;
    }
  }
  size_t releaseIdle() override;
};

// Slabs outlive their thread (objects may be freed after it stopped); the registry keeps them
// reachable.
std::mutex g_registry_mutex;
std::vector<ThreadSlabs*>* g_registry = nullptr;
thread_local ThreadSlabs* t_slabs = nullptr;

ThreadSlabs& threadSlabs() {
  if (t_slabs == nullptr) {
    t_slabs = new ThreadSlabs();
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    if (g_registry == nullptr) g_registry = new std::vector<ThreadSlabs*>();
    g_registry->push_back(t_slabs);
  }
  return *t_slabs;
}

void link(SizeClass& c, Chunk* chunk) {
  chunk->prev = nullptr;
  chunk->next = c.open;
  if (c.open != nullptr) c.open->prev = chunk;
  c.open = chunk;
  chunk->listed = true;
}

void unlink(SizeClass& c, Chunk* chunk) {
  if (chunk->prev != nullptr) chunk->prev->next = chunk->next;
  if (chunk->next != nullptr) chunk->next->prev = chunk->prev;
  if (c.open == chunk) c.open = chunk->next;
  chunk->prev = chunk->next = nullptr;
  chunk->listed = false;
}

Chunk* mapChunk(ThreadSlabs& slabs, SizeClass& c) {
  // Twice the size, then the unaligned ends go back: the chunk starts on a kSlabChunkBytes
  // boundary.
  void* raw = mmap(nullptr, 2 * kSlabChunkBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kSlabChunkBytes - 1) & ~(uintptr_t{kSlabChunkBytes} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + kSlabChunkBytes;
  const uintptr_t raw_end = start + 2 * kSlabChunkBytes;
  if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
  auto* chunk = new (reinterpret_cast<void*>(aligned)) Chunk();
  chunk->size_class = &c;
  chunk->unused = reinterpret_cast<char*>(aligned) + kHeaderBytes;
  chunk->end = reinterpret_cast<char*>(aligned) + kSlabChunkBytes;
  chunk->capacity = static_cast<uint32_t>((kSlabChunkBytes - kHeaderBytes) / c.object_size);
  ++c.chunks;
  ++slabs.chunks;
  return chunk;
}

}  // namespace

void* slabAllocate(size_t size, SlabSet set) {
  if (size == 0 || size > kSlabMaxObject) return ::operator new(size);
  ThreadSlabs& slabs = threadSlabs();
  SizeClass& c = slabs.classes[static_cast<size_t>(set) * kClasses + (size - 1) / kSlabGranule];
  Chunk* chunk = c.open;
  if (chunk == nullptr) {
    chunk = mapChunk(slabs, c);
    link(c, chunk);
  }
  void* slot;
  if (chunk->free != nullptr) {
    slot = chunk->free;
    chunk->free = *static_cast<void**>(slot);
  } else {
    slot = chunk->unused;
    chunk->unused += c.object_size;
  }
  ++chunk->live;
  ++slabs.live;
  chunk->idle = false;
  if (chunk->live == chunk->capacity) unlink(c, chunk);
  return slot;
}

void slabFree(void* p, size_t size) {
  if (p == nullptr) return;
  if (size == 0 || size > kSlabMaxObject) {
    ::operator delete(p);
    return;
  }
  auto* chunk =
      reinterpret_cast<Chunk*>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kSlabChunkBytes} - 1));
  SizeClass& c = *chunk->size_class;
  *static_cast<void**>(p) = chunk->free;
  chunk->free = p;
  --chunk->live;
  ThreadSlabs& owner = *c.owner;  // the allocating thread's, even when another frees
  --owner.live;
  if (chunk->live == 0 && c.chunks > 1) {
    // An empty chunk goes back to the system unless it is the class's last one (kept, so a
    // connection opening and closing does not map and unmap a chunk each time).
    if (chunk->listed) unlink(c, chunk);
    --c.chunks;
    --owner.chunks;
    munmap(chunk, kSlabChunkBytes);
    return;
  }
  if (!chunk->listed) link(c, chunk);
}

size_t ThreadSlabs::releaseIdle() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t released = 0;
  for (SizeClass& c : classes) {
    // Only a class's last chunk can be empty (the others are unmapped as they empty), and an
    // empty chunk has free slots, so it is on the class's list.
    for (Chunk* chunk = c.open; chunk != nullptr; chunk = chunk->next) {
      if (chunk->live != 0) continue;
      if (!chunk->idle) {
        chunk->idle = true;
        continue;
      }
      // Every page but the one holding the header; the slots start over, none handed out.
      char* const start = reinterpret_cast<char*>(chunk);
      if (madvise(start + page, kSlabChunkBytes - page, MADV_DONTNEED) == 0) ++released;
      chunk->free = nullptr;
      chunk->unused = start + kHeaderBytes;
      chunk->idle = false;
    }
  }
  return released;
}

SlabStats slabStats() {
  if (t_slabs == nullptr) return {};
  return {t_slabs->chunks, t_slabs->live};
}

#endif

}  // namespace memory
}  // namespace sluice
