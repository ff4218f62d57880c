#include "source/common/memory/idle_cache.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace memory {
namespace {

int g_destroyed = 0;
void destroyInt(int* p) {
  ++g_destroyed;
  delete p;
}
using IntStack = FreeStack<int, destroyInt>;

TEST(FreeStackTest, KeepsUpToItsBoundAndHandsBackTheLastGiven) {
  g_destroyed = 0;
  {
    IntStack stack(2);
    EXPECT_EQ(stack.take(), nullptr);
    int* a = new int(1);
    int* b = new int(2);
    int* c = new int(3);
    EXPECT_TRUE(stack.give(a));
    EXPECT_TRUE(stack.give(b));
    EXPECT_FALSE(stack.give(c)) << "full: the caller frees it";
    delete c;
    EXPECT_EQ(stack.take(), b);
    delete b;
    EXPECT_EQ(stack.size(), 1u);
  }
  EXPECT_EQ(g_destroyed, 1) << "what it holds goes with it";
}

TEST(FreeStackTest, ReleasesWhatStayedUnusedSinceTheLastRelease) {
  g_destroyed = 0;
  IntStack stack(8);
  // A burst leaves four.
  std::vector<int*> burst;
  for (int i = 0; i < 4; ++i) burst.push_back(new int(i));
  for (int* p : burst) stack.give(p);
  // They came after the last release: all were in use since.
  EXPECT_EQ(releaseIdleCaches(), 0u);
  EXPECT_EQ(stack.size(), 4u);
  // One taken and given back: three stayed unused for a whole interval and go.
  stack.give(stack.take());
  EXPECT_EQ(releaseIdleCaches(), 3u);
  EXPECT_EQ(stack.size(), 1u);
  EXPECT_EQ(g_destroyed, 3);
  EXPECT_EQ(releaseIdleCaches(), 1u);
  EXPECT_EQ(stack.size(), 0u);
  EXPECT_EQ(releaseIdleCaches(), 0u);
}

TEST(IdleCacheTest, EachThreadReleasesItsOwnCaches) {
  g_destroyed = 0;
  IntStack here(4);
  here.give(new int(1));
  EXPECT_EQ(releaseIdleCaches(), 0u);
  std::thread([] {
    IntStack there(4);
    there.give(new int(2));
    EXPECT_EQ(releaseIdleCaches(), 0u);
    EXPECT_EQ(releaseIdleCaches(), 1u) << "only this thread's cache";
  }).join();
  EXPECT_EQ(here.size(), 1u);
  EXPECT_EQ(releaseIdleCaches(), 1u);
  EXPECT_EQ(g_destroyed, 2);
}

TEST(IdleCacheTest, ACacheGoneIsNoLongerReleased) {
  g_destroyed = 0;
  IntStack kept(4);
  {
    IntStack gone(4);
    gone.give(new int(1));
  }
  kept.give(new int(2));
  releaseIdleCaches();
  EXPECT_EQ(releaseIdleCaches(), 1u);
  EXPECT_EQ(g_destroyed, 2);
}

}  // namespace
}  // namespace memory
}  // namespace sluice
