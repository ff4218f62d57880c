#include "tools/load/io.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>

namespace sluice {
namespace load {

bool startConnect(const sockaddr_storage& addr, socklen_t len, Results& r, int& fd,
                  uint64_t& started, ErrorKind& kind) {
  fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    kind = ErrorKind::ConnectFailed;
    return false;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ++r.connections;
  started = nowNs();
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
    kind = errno == ECONNREFUSED ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed;
    return false;
  }
  return true;
}

ConnectState connectState(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return err == ECONNREFUSED ? ConnectState::Refused : ConnectState::Failed;
  // Still connecting: writable is what says it is done.
  sockaddr_storage peer;
  socklen_t plen = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
    return errno == ENOTCONN ? ConnectState::InProgress : ConnectState::Failed;
  }
  return ConnectState::Done;
}

void updateInterest(int ep, int fd, Pollable* p, bool want_out, uint32_t& events) {
  if (fd < 0) return;
  const uint32_t want = EPOLLIN | (want_out ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = p;
  epoll_ctl(ep, events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
  events = want;
}

}  // namespace load
}  // namespace sluice
