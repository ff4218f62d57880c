#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "source/common/network/address.h"

namespace sluice {
namespace network {

// The addresses of this host's interfaces: whatever a client names among them, on any port,
// reaches the proxy host itself (a service bound to 0.0.0.0, say), not the outside world. One
// set per process, re-read by the main loop every few seconds so it follows interfaces coming
// and going; contains() is lock-free unless the set changed since the calling thread last
// looked (then it copies one pointer under the lock).
class HostAddresses {
 public:
  // The process's set; the first call reads the interfaces.
  static HostAddresses& get();

  HostAddresses() = default;
  HostAddresses(const HostAddresses&) = delete;
  HostAddresses& operator=(const HostAddresses&) = delete;

  // Re-reads the interfaces (getifaddrs). True when the set changed.
  bool refresh();
  // Replaces the set (tests, and refresh).
  void set(const std::vector<Address>& addresses);
  // Whether the IP of `address` (any port, any scope) is one of this host's.
  bool contains(const Address& address) const;
  size_t size() const;

  // The interfaces' addresses as getifaddrs lists them.
  static std::vector<Address> readInterfaces();

 private:
  // IPv4 addresses as IPv4-mapped IPv6, sorted.
  using Ip = std::array<uint8_t, 16>;
  using Set = std::vector<Ip>;
  std::shared_ptr<const Set> snapshot() const;

  mutable std::mutex mutex_;
  std::shared_ptr<const Set> set_ = std::make_shared<const Set>();
  std::atomic<uint64_t> version_{1};
};

// Ports of the sockets sluice opens for its clients while it runs (SOCKS5 BIND listeners, UDP
// relay sockets), per transport: a destination on a local address and one of these ports is
// sluice itself. Lock-free; a port may be held by several sockets (different addresses).
class OwnPorts {
 public:
  enum class Transport : uint8_t { Tcp = 0, Udp = 1 };
  static OwnPorts& get();

  void add(Transport transport, uint16_t port);
  void remove(Transport transport, uint16_t port);
  bool contains(Transport transport, uint16_t port) const {
    return counts_[static_cast<size_t>(transport)][port].load(std::memory_order_relaxed) != 0;
  }

 private:
  // 256 KiB in static storage (see get()): only the pages of ports in use are ever touched.
  std::atomic<uint16_t> counts_[2][65536];
};

// One port held in OwnPorts for as long as the socket that bound it lives.
class OwnPort {
 public:
  OwnPort() = default;
  ~OwnPort() { release(); }
  OwnPort(const OwnPort&) = delete;
  OwnPort& operator=(const OwnPort&) = delete;

  void hold(OwnPorts::Transport transport, uint16_t port);
  void release();

 private:
  uint16_t port_ = 0;  // 0: none held
  OwnPorts::Transport transport_ = OwnPorts::Transport::Tcp;
};

}  // namespace network
}  // namespace sluice
