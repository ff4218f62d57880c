// Socket and epoll plumbing shared by a connection (Conn) and an HTTP/2 session (H2Session):
// the clock, the read/write results, non-blocking connect, and epoll interest.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "tools/load/results.h"

namespace sluice {
namespace load {

inline uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Besides a byte count, reads and writes return one of these.
constexpr ssize_t kAgain = -1;
constexpr ssize_t kError = -2;

// What epoll hands back: a connection or an HTTP/2 session.
class Pollable {
 public:
  virtual ~Pollable() = default;
  virtual void onEvent(uint32_t events) = 0;
};

// Where TLS records go (the BIO below an SSL): a socket, or an HTTP/2 CONNECT stream.
class RawIo {
 public:
  virtual ~RawIo() = default;
  virtual ssize_t rawRead(char* buf, size_t len) = 0;
  virtual ssize_t rawWrite(const char* buf, size_t len) = 0;
};

// One receive from a non-blocking socket with `flags`; the bytes are added to `wire` (the
// socket's count). kAgain when the socket has nothing.
inline ssize_t socketRecv(int fd, char* buf, size_t len, int flags, uint64_t& wire) {
  for (;;) {
    const ssize_t n = ::recv(fd, buf, len, flags);
    if (n >= 0) {
      wire += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return kAgain;
    return kError;
  }
}

// One read from a non-blocking socket.
inline ssize_t socketRead(int fd, char* buf, size_t len, uint64_t& wire) {
  return socketRecv(fd, buf, len, 0, wire);
}

// Up to len bytes dropped in the kernel (MSG_TRUNC on a TCP socket): counted, never copied to
// user space.
inline ssize_t socketDiscard(int fd, size_t len, uint64_t& wire) {
  return socketRecv(fd, nullptr, len, MSG_TRUNC | MSG_DONTWAIT, wire);
}

// One send to a non-blocking socket; a full socket sets want_write (wait for EPOLLOUT).
inline ssize_t socketWrite(int fd, const char* buf, size_t len, uint64_t& wire, bool& want_write) {
  for (;;) {
    const ssize_t n = ::send(fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0) {
      wire += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      want_write = true;
      return kAgain;
    }
    return kError;
  }
}

// Starts a non-blocking TCP connect (TCP_NODELAY) to addr, counted in r.connections; `started`
// is when (the connect phase's start). False with the error kind; fd may then be open all the
// same (the caller's close path closes it).
bool startConnect(const sockaddr_storage& addr, socklen_t len, Results& r, int& fd,
                  uint64_t& started, ErrorKind& kind);

enum class ConnectState { Done, InProgress, Refused, Failed };
// Where a connect started by startConnect stands, once the socket is writable (or not).
ConnectState connectState(int fd);
inline ErrorKind connectError(ConnectState s) {
  return s == ConnectState::Refused ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed;
}

// Asks epoll for EPOLLIN, plus EPOLLOUT when `want_out`; `events` is what is registered now
// (0: not yet), updated. Nothing is called when nothing changes.
void updateInterest(int ep, int fd, Pollable* p, bool want_out, uint32_t& events);

}  // namespace load
}  // namespace sluice
