#include "source/common/memory/slab.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/memory/idle_cache.h"

namespace sluice {
namespace memory {
namespace {

#if !defined(__SANITIZE_ADDRESS__)

struct Base : SlabAllocated {
  virtual ~Base() = default;
  char bytes[40];
};
struct Derived : Base {
  char more[600];
};

TEST(SlabTest, ObjectsArePackedInOneChunkAndNeverOverlap) {
  const SlabStats before = slabStats();
  std::vector<std::unique_ptr<Derived>> objects;
  std::set<uintptr_t> starts;
  for (int i = 0; i < 50; ++i) {
    objects.push_back(std::make_unique<Derived>());
    std::memset(objects.back()->more, i, sizeof(objects.back()->more));
    starts.insert(reinterpret_cast<uintptr_t>(objects.back().get()));
  }
  // 50 objects of 656 bytes (41 granules of 16) fit in one 64 KiB chunk.
  EXPECT_EQ(slabStats().chunks - before.chunks, 1u);
  EXPECT_EQ(slabStats().live_objects - before.live_objects, 50u);
  uintptr_t last = 0;
  for (uintptr_t s : starts) {
    if (last != 0) {
      EXPECT_GE(s - last, sizeof(Derived));
    }
    last = s;
  }
  for (int i = 0; i < 50; ++i) {
    for (char c : objects[i]->more) ASSERT_EQ(c, static_cast<char>(i));
  }
  objects.clear();
  EXPECT_EQ(slabStats().live_objects, before.live_objects);
}

TEST(SlabTest, DeleteThroughTheBaseFreesTheDerivedSize) {
  const SlabStats before = slabStats();
  std::unique_ptr<Base> b = std::make_unique<Derived>();
  void* first = b.get();
  b.reset();
  // The slot of a Derived is free again: the next Derived takes it.
  auto again = std::make_unique<Derived>();
  EXPECT_EQ(static_cast<void*>(again.get()), first);
  again.reset();
  EXPECT_EQ(slabStats().live_objects, before.live_objects);
}

TEST(SlabTest, EmptyChunksGoBackButTheLastOneStays) {
  const SlabStats before = slabStats();
  struct Big : SlabAllocated {
    char bytes[2000];
  };
  std::vector<std::unique_ptr<Big>> objects;
  for (int i = 0; i < 200; ++i) objects.push_back(std::make_unique<Big>());
  // 32 of them per chunk: 7 chunks.
  EXPECT_EQ(slabStats().chunks - before.chunks, 7u);
  objects.clear();
  EXPECT_EQ(slabStats().chunks - before.chunks, 1u);
  objects.push_back(std::make_unique<Big>());
  EXPECT_EQ(slabStats().chunks - before.chunks, 1u);
}

// Objects of one size that pass (request filters) never share a chunk with those that last
// (connections): when a burst's passing objects go, their chunks go back, whatever lasts.
TEST(SlabTest, PassingObjectsLeaveNoHolesAmongLastingOnes) {
  constexpr size_t kSize = 1520;  // a class no other test uses: 43 per chunk
  struct Lasting : SlabAllocated {
    char bytes[kSize];
  };
  struct Passing : SlabAllocatedPassing {
    char bytes[kSize];
  };
  const SlabStats before = slabStats();
  std::vector<std::unique_ptr<Lasting>> lasting;
  std::vector<std::unique_ptr<Passing>> passing;
  std::set<uintptr_t> lasting_chunks;
  // Allocated in turns, as a burst of tunnels and their request filters are.
  for (int i = 0; i < 200; ++i) {
    lasting.push_back(std::make_unique<Lasting>());
    passing.push_back(std::make_unique<Passing>());
    lasting_chunks.insert(reinterpret_cast<uintptr_t>(lasting.back().get()) &
                          ~(uintptr_t{kSlabChunkBytes} - 1));
  }
  for (const auto& p : passing) {
    const uintptr_t chunk =
        reinterpret_cast<uintptr_t>(p.get()) & ~(uintptr_t{kSlabChunkBytes} - 1);
    EXPECT_EQ(lasting_chunks.count(chunk), 0u);
  }
  // 200 of each, 43 per chunk: 5 chunks each.
  EXPECT_EQ(slabStats().chunks - before.chunks, 10u);
  passing.clear();
  // The passing set keeps its last chunk; the four others went back.
  EXPECT_EQ(slabStats().chunks - before.chunks, 6u);
  lasting.clear();
  EXPECT_EQ(slabStats().chunks - before.chunks, 2u);
}

// Pages of [p, p + bytes) resident in memory.
size_t residentPages(void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec(bytes / page);
  if (mincore(p, bytes, vec.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST(SlabTest, AChunkEmptyForAWholeIntervalGivesItsPagesBack) {
  struct Odd : SlabAllocated {
    char bytes[1900];  // a class of its own in this test
  };
  std::vector<std::unique_ptr<Odd>> objects;
  for (int i = 0; i < 30; ++i) {
    objects.push_back(std::make_unique<Odd>());
    std::memset(objects.back()->bytes, 1, sizeof(Odd::bytes));
  }
  void* const chunk = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(objects[0].get()) &
                                              ~(uintptr_t{kSlabChunkBytes} - 1));
  const size_t touched = residentPages(chunk, kSlabChunkBytes);
  EXPECT_GE(touched, 14u);  // 30 x 1.9 KB written
  objects.clear();          // the class's last chunk: kept, empty
  releaseIdleCaches();      // empty now: marked
  EXPECT_EQ(residentPages(chunk, kSlabChunkBytes), touched);
  releaseIdleCaches();  // still empty a whole interval later: its pages go, its header stays
  EXPECT_EQ(residentPages(chunk, kSlabChunkBytes), 1u);
  // It serves again, from its first slot, with the header intact.
  auto again = std::make_unique<Odd>();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.get()) & ~(uintptr_t{kSlabChunkBytes} - 1),
            reinterpret_cast<uintptr_t>(chunk));
  std::memset(again->bytes, 2, sizeof(Odd::bytes));
  std::vector<std::unique_ptr<Odd>> more;
  for (int i = 0; i < 20; ++i) more.push_back(std::make_unique<Odd>());
  std::set<void*> distinct;
  distinct.insert(again.get());
  for (auto& o : more) distinct.insert(o.get());
  EXPECT_EQ(distinct.size(), 21u) << "no slot handed out twice";
  // A chunk used since it was marked is not released.
  more.clear();
  again.reset();
  releaseIdleCaches();
  auto used = std::make_unique<Odd>();
  used.reset();
  const size_t before = residentPages(chunk, kSlabChunkBytes);
  releaseIdleCaches();
  EXPECT_EQ(residentPages(chunk, kSlabChunkBytes), before);
}

TEST(SlabTest, LargeObjectsComeFromTheHeap) {
  const SlabStats before = slabStats();
  void* p = slabAllocate(kSlabMaxObject + 1);
  EXPECT_EQ(slabStats().live_objects, before.live_objects);
  slabFree(p, kSlabMaxObject + 1);
}

TEST(SlabTest, ObjectsOutliveTheirThread) {
  const SlabStats before = slabStats();
  std::unique_ptr<Derived> kept;
  std::thread t([&] { kept = std::make_unique<Derived>(); });
  t.join();
  EXPECT_EQ(slabStats().live_objects, before.live_objects);  // not this thread's
  std::memset(kept->more, 7, sizeof(kept->more));
  for (char c : kept->more) ASSERT_EQ(c, 7);
  kept.reset();  // freed after the allocating thread stopped: its slab's count goes down
  EXPECT_EQ(slabStats().live_objects, before.live_objects);
  EXPECT_EQ(slabStats().chunks, before.chunks);
}

#else

TEST(SlabTest, SanitizedBuildsUseTheHeap) {
  void* p = slabAllocate(64);
  EXPECT_EQ(slabStats().chunks, 0u);
  slabFree(p, 64);
}

#endif

}  // namespace
}  // namespace memory
}  // namespace sluice
