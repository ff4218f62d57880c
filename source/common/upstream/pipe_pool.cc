#include "source/common/upstream/pipe_pool.h"

#include <fcntl.h>
#include <unistd.h>

namespace sluice {
namespace upstream {

PipePool& PipePool::forThisThread() {
  thread_local PipePool pool;
  return pool;
}

namespace {
void closePipe(const Pipe& pipe) {
  if (pipe.read_fd >= 0) ::close(pipe.read_fd);
  if (pipe.write_fd >= 0) ::close(pipe.write_fd);
}
}  // namespace

PipePool::~PipePool() {
  for (Pipe& p : spare_) closePipe(p);
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
  int size = ::fcntl(fds[1], F_SETPIPE_SZ, kPipeBytes);
  if (size <= 0) size = ::fcntl(fds[1], F_GETPIPE_SZ);
  return Pipe{fds[0], fds[1], static_cast<size_t>(size > 0 ? size : 65536)};
}

void PipePool::release(Pipe pipe) {
  if (!pipe) return;
  --in_use_;
  if (spare_.size() < kMaxSpare) {
    spare_.push_back(pipe);
    return;
  }
  closePipe(pipe);
}

void PipePool::destroy(Pipe pipe) {
  if (!pipe) return;
  --in_use_;
  closePipe(pipe);
}

}  // namespace upstream
}  // namespace sluice
