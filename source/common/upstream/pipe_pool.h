#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {
namespace upstream {

// One pipe for splice(2): bytes go socket → write end → read end → socket without entering
// user space.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  size_t capacity = 0;  // what F_SETPIPE_SZ gave
  explicit operator bool() const { return read_fd >= 0; }
};

// The calling worker's spare pipes. A tunnel takes a pipe only while bytes are on their way and
// gives it back (empty) as soon as they are through, so idle tunnels hold none; a few spares
// are kept so a busy tunnel does not pay pipe2() per burst. Per thread: no lock.
class PipePool {
 public:
  // Pipe capacity asked for with F_SETPIPE_SZ (the kernel may round it up). The first
  // kLargePipes pipes a worker holds (in use or spare) get kLargePipeBytes: a spliced GB costs
  // a fifth to a quarter less CPU through them than through the kernel's default 64 KiB, at
  // rates no lower (docs/benchmarks.md). The rest get kPipeBytes, and so does each read of a
  // shaped tunnel (TunnelRelay::pump). The kernel counts a pipe's
  // capacity against its user's pipe quota (fs.pipe-user-pages-soft, 64 MiB by default; past
  // it, new pipes get 8 KiB), so the large ones are few: 16 of 256 KiB are 4 MiB per worker,
  // and 64 KiB pipes fill the quota only at 1,024 in use.
  static constexpr int kPipeBytes = 64 * 1024;
  static constexpr int kLargePipeBytes = 256 * 1024;
  static constexpr size_t kLargePipes = 16;
  static constexpr size_t kMaxSpare = 32;

  static PipePool& forThisThread();
  ~PipePool();

  // A pipe, or an empty one when `max_in_use` pipes are already out or none can be made (out
  // of descriptors): the caller falls back to copying.
  Pipe acquire(size_t max_in_use);
  // Takes back an empty pipe.
  void release(Pipe pipe);
  // Closes a pipe that may hold bytes (a tunnel that ended mid-transfer).
  void destroy(Pipe pipe);
  size_t spareCount() const { return spare_.size(); }
  size_t inUse() const { return in_use_; }
  // Pipes of more than kPipeBytes this worker holds, in use or spare.
  size_t largeCount() const { return large_; }

 private:
  void close(const Pipe& pipe);

  std::vector<Pipe> spare_;
  size_t in_use_ = 0;
  size_t large_ = 0;
};

}  // namespace upstream
}  // namespace sluice
