#include "source/common/upstream/pipe_pool.h"

#include <fcntl.h>
#include <unistd.h>

namespace sluice {
namespace upstream {

PipePool& PipePool::forThisThread() {
  thread_local PipePool pool;
  return pool;
}

void PipePool::close(const Pipe& pipe) {
  if (pipe.capacity > static_cast<size_t>(kPipeBytes)) --large_;
  if (pipe.read_fd >= 0) ::close(pipe.read_fd);
  if (pipe.write_fd >= 0) ::close(pipe.write_fd);
}

PipePool::~PipePool() {
  for (Pipe& p : spare_) close(p);
}

Pipe PipePool::acquire(size_t max_in_use) {
  if (in_use_ >= max_in_use) return Pipe();
  if (!spare_.empty()) {
    Pipe p = spare_.back();
    spare_.pop_back();
    ++in_use_;
    return p;
  }
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return Pipe();
  ++in_use_;
  // Past /proc/sys/fs/pipe-max-size or the user's pipe quota the default size stays.
  int size = ::fcntl(fds[1], F_SETPIPE_SZ, large_ < kLargePipes ? kLargePipeBytes : kPipeBytes);
  if (size <= 0) size = ::fcntl(fds[1], F_GETPIPE_SZ);
  const Pipe pipe{fds[0], fds[1], static_cast<size_t>(size > 0 ? size : 65536)};
  if (pipe.capacity > static_cast<size_t>(kPipeBytes)) ++large_;
  return pipe;
}

void PipePool::release(Pipe pipe) {
  if (!pipe) return;
  --in_use_;
  if (spare_.size() < kMaxSpare) {
    spare_.push_back(pipe);
    return;
  }
  close(pipe);
}

void PipePool::destroy(Pipe pipe) {
  if (!pipe) return;
  --in_use_;
  close(pipe);
}

}  // namespace upstream
}  // namespace sluice
