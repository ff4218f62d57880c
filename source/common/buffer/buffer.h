#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <sys/types.h>
#include <sys/uio.h>

namespace sluice {
namespace buffer {

inline constexpr uint32_t kBlockSize = 16384;
// A small block's capacity: with its header, one 1 KiB allocation.
inline constexpr uint32_t kSmallBlockSize = 1024 - 32;

// A slice of bytes. Standard blocks (kBlockSize) and small ones (kSmallBlockSize) come from and
// return to per-thread free lists, so steady-state traffic does not touch the heap; larger ones
// (a linearized head bigger than a block) are allocated and freed directly.
struct Block {
  Block* next;
  uint32_t start;  // first readable byte
  uint32_t end;    // one past the last readable byte
  uint32_t capacity;
  char* data() { return reinterpret_cast<char*>(this + 1); }
  uint32_t readable() const { return end - start; }
  uint32_t writable() const { return capacity - end; }
};

// Per-thread cache of free standard blocks.
class BlockPool {
 public:
  static Block* acquire(uint32_t min_capacity);
  static Block* acquireSmall();
  static void release(Block* block);
  // Blocks kept free per thread (1 MiB); beyond this they go back to the allocator, so a burst
  // does not leave its buffers resident.
  static constexpr uint32_t kMaxFree = 64;
  static constexpr uint32_t kMaxFreeSmall = 256;  // small blocks kept free per thread (256 KiB)
  // Blocks currently handed out by this thread (for tests and stats).
  static int64_t outstanding();
  // The free lists are memory::IdleCaches: what stayed unused for a whole
  // memory_release_interval goes back. Blocks in this thread's free lists (for tests).
  static size_t freeBlocks();
};

// A byte queue made of blocks. Holds no memory while empty: an idle connection's buffers cost
// nothing. Moving between buffers relinks whole blocks instead of copying.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { clear(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t length() const { return length_; }
  bool empty() const { return length_ == 0; }

  // Inline while the bytes fit the tail block: heads are written a few bytes at a time (a field
  // line is four adds), so the call and the loop would cost more than the copy.
  void add(const void* data, size_t n) {
    if (tail_ != nullptr && tail_->writable() >= n) {
      memcpy(tail_->data() + tail_->end, data, n);
      tail_->end += static_cast<uint32_t>(n);
      length_ += n;
      return;
    }
    addSlow(data, n);
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  // Appends all of other; other becomes empty. Its blocks are relinked, no copy, unless it holds
  // at most kCoalesceBytes and this buffer's tail has room for them: then they are copied there,
  // so a small message after a head leaves as one slice (one send(2), not a writev(2) of two)
  // and its blocks go back at once.
  void move(Buffer& other);
  static constexpr size_t kCoalesceBytes = 4096;
  // Appends the first n bytes of other; whole blocks are relinked, a partial one copied.
  void move(Buffer& other, size_t n);
  void drain(size_t n);
  void clear();

  // The first min(n, length()) bytes as one contiguous span; copies them into one block only
  // if they span several.
  // `reserve` sizes the joined block: bytes read later land in its free space, so a head that
  // keeps growing (a client sending a byte at a time) is copied once, not on every read.
  std::string_view linearize(size_t n, size_t reserve = 0);
  // The first block's bytes (empty if none).
  std::string_view front() const;

  // Room to write into without copying (a decoder's output): the tail's free space when it
  // has some, otherwise a fresh block not yet part of the buffer. commit() appends the n bytes
  // written there (releasing an unused fresh block).
  struct Reservation {
    Block* block;
    char* data;
    size_t size;
  };
  Reservation reserve();
  void commit(const Reservation& reservation, size_t n);
  // Where one receive of a socket's next message lands, as readFrom's one_region picks it: the
  // tail's room when it holds a small block's worth, else (small_first, empty buffer) a small
  // block, else a fresh block. commit() takes what arrived.
  Reservation reserveRead(bool small_first);
  // The first bytes as up to `max` slices, front first; `bytes` is their total. Nothing moves:
  // the slices stay valid until the buffer is drained or cleared.
  unsigned slices(iovec* iov, unsigned max, size_t& bytes) const;

  // One readv(2) into the tail's free space and up to four fresh blocks (at most `max` bytes);
  // blocks left empty go back to the free list. Returns bytes read, 0 on EOF,
  // -1 with err = errno on error (EAGAIN included). `asked` is how many bytes were asked for:
  // a read that returns fewer has emptied the socket. small_first: an empty buffer reads into
  // a small block (kSmallBlockSize) ahead of the standard ones. one_region: a socket whose
  // messages are small reads into one region only (the tail's room when it holds a small block's
  // worth, else the small block or one fresh block) with recv(2), which costs the kernel less than
  // readv(2) (no iovec to import, no file layer); a read that fills it is followed by another.
  ssize_t readFrom(int fd, size_t max, int& err, size_t& asked, bool small_first = false,
                   bool one_region = false);
  // Sends up to 64 blocks, drains what was written; `fd` is a socket. One block goes with
  // send(2), several with one writev(2). -1 with err = errno on error. `asked` as for readFrom:
  // a write that takes fewer has filled the socket's send buffer.
  ssize_t writeTo(int fd, int& err, size_t& asked);

 private:
  void addSlow(const void* data, size_t n);
  void append(Block* block);
  void dropFront();

  Block* head_ = nullptr;
  Block* tail_ = nullptr;
  size_t length_ = 0;
};

}  // namespace buffer
}  // namespace sluice
