#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "source/common/buffer/buffer.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/network/connection.h"

namespace sluice {
namespace test {

// Runs the dispatcher's loop until done() holds or the timeout passes; false on timeout.
inline bool runUntil(event::Dispatcher& dispatcher, const std::function<bool()>& done,
                     std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    // A short guard timer makes each turn return even when nothing else is ready.
    event::Timer guard(dispatcher, [] {});
    guard.enable(std::chrono::milliseconds(5));
    dispatcher.runOnce();
  }
  return true;
}

// Runs the loop for a while, whatever happens (to show that something does NOT happen).
inline void runFor(event::Dispatcher& dispatcher, std::chrono::milliseconds duration) {
  runUntil(
      dispatcher, [] { return false; }, duration);
}

// A listening TCP socket on 127.0.0.1, port chosen by the kernel. Accepted sockets are left
// blocking: Connection must make them non-blocking itself.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    port_ = ntohs(sa.sin_port);
  }
  ~LoopbackListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  bool ok() const { return fd_ >= 0; }
  uint16_t port() const { return port_; }
  network::Address address() const { return network::Address::ipv4(INADDR_LOOPBACK, port_); }
  // An accepted socket, or -1 if none arrived within the timeout.
  int accept(int timeout_ms = 5000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return -1;
    return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A raw, non-blocking peer socket (a test's client, or a test's origin).
class RawPeer {
 public:
  explicit RawPeer(int fd) : fd_(fd) { fcntl(fd_, F_SETFL, O_NONBLOCK); }
  ~RawPeer() { closeNow(); }
  int fd() const { return fd_; }
  // Writes what the socket takes now; returns how much.
  size_t send(std::string_view data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  // Reads what is there; true once the peer's FIN was read.
  bool receive() {
    char buf[65536];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        received.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) eof = true;
      if (n < 0 && errno == ECONNRESET) reset = true;
      return eof;
    }
  }
  void shutWrite() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a RST.
  void reset_close() {
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    closeNow();
  }
  void closeNow() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string received;
  bool eof = false;
  bool reset = false;

 private:
  int fd_;
};

// Runs the loop until done() holds, taking in between whatever reached the two raw peers (a
// tunnel's client and origin; either may be unset); false on timeout.
inline bool runWithPeers(event::Dispatcher& dispatcher, std::optional<RawPeer>& a,
                         std::optional<RawPeer>& b, const std::function<bool()>& done,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return runUntil(
      dispatcher,
      [&] {
        if (a) a->receive();
        if (b) b->receive();
        return done();
      },
      timeout);
}

// A loopback port with nothing listening on it (bound once, then released).
inline uint16_t closedLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), len);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

// Records what a connection reports. Drains what it receives unless told to keep it.
class RecordingCallbacks : public network::ConnectionCallbacks {
 public:
  void onData(buffer::Buffer& data, bool end_stream) override {
    ++data_calls;
    if (end_stream) ++end_stream_calls;
    if (drain) {
      received.append(data.linearize(data.length()));
      data.drain(data.length());
    } else {
      last_seen = std::string(data.linearize(data.length()));
    }
    if (on_data) on_data(data, end_stream);
  }
  void onEvent(network::ConnectionEvent event) override {
    events.push_back(event);
    if (on_event) on_event(event);
  }
  void onAboveWriteHighWatermark() override { ++above_high; }
  void onBelowWriteLowWatermark() override { ++below_low; }
  void onPeerEndWhileReadDisabled() override { ++peer_end_while_disabled; }

  int peer_end_while_disabled = 0;

  int count(network::ConnectionEvent event) const {
    int n = 0;
    for (auto e : events) n += e == event ? 1 : 0;
    return n;
  }

  bool drain = true;
  std::string received;
  std::string last_seen;
  int data_calls = 0;
  int end_stream_calls = 0;
  int above_high = 0;
  int below_low = 0;
  std::vector<network::ConnectionEvent> events;
  std::function<void(buffer::Buffer&, bool)> on_data;
  std::function<void(network::ConnectionEvent)> on_event;
};

}  // namespace test
}  // namespace sluice
