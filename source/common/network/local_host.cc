#include "source/common/network/local_host.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <ifaddrs.h>

#include "source/common/common/logger.h"

namespace sluice {
namespace network {
namespace {

std::array<uint8_t, 16> ipOf(const Address& a) {
  std::array<uint8_t, 16> ip{};
  if (a.family() == AF_INET) {
    ip[10] = 0xff;
    ip[11] = 0xff;
    memcpy(ip.data() + 12, &a.v4().sin_addr, 4);
  } else if (a.family() == AF_INET6) {
    memcpy(ip.data(), a.v6().sin6_addr.s6_addr, 16);
  }
  return ip;
}

// What each thread last saw of a set: contains() takes the lock only when the version moved.
struct SeenSnapshot {
  const void* owner = nullptr;
  uint64_t version = 0;
  std::shared_ptr<const std::vector<std::array<uint8_t, 16>>> set;
};
thread_local SeenSnapshot t_seen;

}  // namespace

HostAddresses& HostAddresses::get() {
  static HostAddresses* addresses = [] {
    auto* a = new HostAddresses();
    a->refresh();
    return a;
  }();
  return *addresses;
}

std::vector<Address> HostAddresses::readInterfaces() {
  std::vector<Address> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    SLUICE_LOG(Warn, "cannot list the host's interface addresses: %s", strerror(errno));
    return out;
  }
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    const int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back(Address::fromSockaddr(
        it->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)));
  }
  freeifaddrs(list);
  return out;
}

bool HostAddresses::refresh() {
  std::vector<Address> now = readInterfaces();
  Set next;
  next.reserve(now.size());
  for (const Address& a : now) next.push_back(ipOf(a));
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  std::lock_guard<std::mutex> lock(mutex_);
  if (*set_ == next) return false;
  set_ = std::make_shared<const Set>(std::move(next));
  version_.fetch_add(1, std::memory_order_release);
  return true;
}

void HostAddresses::set(const std::vector<Address>& addresses) {
  Set next;
  for (const Address& a : addresses) {
    if (a.valid()) next.push_back(ipOf(a));
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  std::lock_guard<std::mutex> lock(mutex_);
  set_ = std::make_shared<const Set>(std::move(next));
  version_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const HostAddresses::Set> HostAddresses::snapshot() const {
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (t_seen.owner != this || t_seen.version != version) {
    std::lock_guard<std::mutex> lock(mutex_);
    t_seen.owner = this;
    t_seen.version = version_.load(std::memory_order_relaxed);
    t_seen.set = set_;
  }
  return t_seen.set;
}

bool HostAddresses::contains(const Address& address) const {
  if (!address.valid()) return false;
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (t_seen.owner != this || t_seen.version != version) snapshot();
  const Set& set = *t_seen.set;
  return std::binary_search(set.begin(), set.end(), ipOf(address));
}

size_t HostAddresses::size() const { return snapshot()->size(); }

OwnPorts& OwnPorts::get() {
  // Static storage, zero before the program starts (its atomics have trivial constructors): no
  // dynamic initialisation writes it, so only the pages of ports in use ever become resident.
  static OwnPorts ports;
  return ports;
}

void OwnPorts::add(Transport transport, uint16_t port) {
  counts_[static_cast<size_t>(transport)][port].fetch_add(1, std::memory_order_relaxed);
}

void OwnPorts::remove(Transport transport, uint16_t port) {
  counts_[static_cast<size_t>(transport)][port].fetch_sub(1, std::memory_order_relaxed);
}

void OwnPort::hold(OwnPorts::Transport transport, uint16_t port) {
  release();
  if (port == 0) return;
  transport_ = transport;
  port_ = port;
  OwnPorts::get().add(transport, port);
}

void OwnPort::release() {
  if (port_ == 0) return;
  OwnPorts::get().remove(transport_, port_);
  port_ = 0;
}

}  // namespace network
}  // namespace sluice
