#include "source/common/upstream/pipe_pool.h"

#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace sluice {
namespace upstream {
namespace {

// Whether this process may make a pipe of `bytes` (fs.pipe-max-size, the user's pipe quota).
bool largePipesAllowed(int bytes) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  const bool ok = ::fcntl(fds[1], F_SETPIPE_SZ, bytes) >= bytes;
  ::close(fds[0]);
  ::close(fds[1]);
  return ok;
}

TEST(PipePoolTest, TheFirstPipesAreLargeAndTheRestTheDefault) {
  if (!largePipesAllowed(PipePool::kLargePipeBytes)) {
    GTEST_SKIP() << "pipes of " << PipePool::kLargePipeBytes << " bytes are not allowed here";
  }
  PipePool pool;  // a pool of this test's own, not the thread's
  std::vector<Pipe> pipes;
  for (size_t i = 0; i < PipePool::kLargePipes + 4; ++i) {
    pipes.push_back(pool.acquire(1000));
    ASSERT_TRUE(pipes.back());
  }
  for (size_t i = 0; i < pipes.size(); ++i) {
    if (i < PipePool::kLargePipes) {
      EXPECT_GE(pipes[i].capacity, static_cast<size_t>(PipePool::kLargePipeBytes)) << i;
    } else {
      EXPECT_EQ(static_cast<size_t>(PipePool::kPipeBytes), pipes[i].capacity) << i;
    }
  }
  EXPECT_EQ(PipePool::kLargePipes, pool.largeCount());
  // A large pipe closed (past the spares) leaves room for a new large one.
  pool.destroy(pipes.front());
  EXPECT_EQ(PipePool::kLargePipes - 1, pool.largeCount());
  Pipe again = pool.acquire(1000);
  EXPECT_GE(again.capacity, static_cast<size_t>(PipePool::kLargePipeBytes));
  EXPECT_EQ(PipePool::kLargePipes, pool.largeCount());
  pool.destroy(again);
  for (size_t i = 1; i < pipes.size(); ++i) pool.release(pipes[i]);
  EXPECT_EQ(0u, pool.inUse());
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
