#include "test/common/dns/test_dns_server.h"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace dns {
namespace test {
namespace {

constexpr size_t kHeaderSize = 12;
constexpr uint8_t kRcodeServFail = 2;
constexpr uint8_t kRcodeNxDomain = 3;

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v & 0xff));
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v & 0xffff));
}

}  // namespace

TestDnsServer::TestDnsServer(event::Dispatcher& dispatcher) {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  SLUICE_ASSERT(fd_ >= 0, "socket");
  sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  SLUICE_ASSERT(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
  socklen_t len = sizeof(addr);
  SLUICE_ASSERT(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
  port_ = ntohs(addr.sin_port);
  file_event_ = std::make_unique<event::FileEvent>(
      dispatcher, fd_, this, event::FileEvent::To<&TestDnsServer::onSocketEvent>());
}

TestDnsServer::~TestDnsServer() {
  file_event_.reset();
  ::close(fd_);
}

std::string TestDnsServer::address() const { return absl::StrFormat("127.0.0.1:%d", port_); }

void TestDnsServer::addHost(const std::string& name, std::vector<std::string> a,
                            std::vector<std::string> aaaa, uint32_t ttl) {
  Host& host = hosts_[lower(name)];
  host.a = std::move(a);
  host.aaaa = std::move(aaaa);
  host.ttl = ttl;
}

void TestDnsServer::setBehaviour(const std::string& name, Behaviour behaviour) {
  hosts_[lower(name)].behaviour = behaviour;
}

void TestDnsServer::setSilentFor(const std::string& name, uint16_t qtype) {
  hosts_[lower(name)].silent_type = qtype;
}

int TestDnsServer::queries(const std::string& name, uint16_t qtype) const {
  auto it = queries_.find({lower(name), qtype});
  return it == queries_.end() ? 0 : it->second;
}

int TestDnsServer::queries(const std::string& name) const {
  return queries(name, kTypeA) + queries(name, kTypeAaaa);
}

void TestDnsServer::onReadable() {
  // Edge-triggered: drain until EAGAIN.
  while (true) {
    uint8_t buf[1500];
    sockaddr_storage peer;
    socklen_t peer_length = sizeof(peer);
    ssize_t n =
        ::recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&peer), &peer_length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    handle(buf, static_cast<size_t>(n), &peer, peer_length);
  }
}

void TestDnsServer::handle(const uint8_t* query, size_t length, const void* peer,
                           uint32_t peer_length) {
  if (length < kHeaderSize) return;
  // Question: labels, then type and class. Queries carry no compression.
  size_t pos = kHeaderSize;
  std::string name;
  while (true) {
    if (pos >= length) return;
    uint8_t label = query[pos++];
    if (label == 0) break;
    if (label > 63 || pos + label > length) return;
    if (!name.empty()) name.push_back('.');
    name.append(reinterpret_cast<const char*>(query + pos), label);
    pos += label;
  }
  if (pos + 4 > length) return;
  const uint16_t qtype = static_cast<uint16_t>(query[pos] << 8 | query[pos + 1]);
  pos += 4;
  const size_t question_end = pos;
  name = lower(name);
  ++queries_[{name, qtype}];
  ++total_queries_;

  auto found = hosts_.find(name);
  const Host* host = found == hosts_.end() ? nullptr : &found->second;
  Behaviour behaviour = host == nullptr ? Behaviour::NxDomain : host->behaviour;
  if (behaviour == Behaviour::Silent || (host != nullptr && host->silent_type == qtype)) return;

  std::vector<std::vector<uint8_t>> rdatas;
  uint8_t rcode = 0;
  if (behaviour == Behaviour::NxDomain) {
    rcode = kRcodeNxDomain;
  } else if (behaviour == Behaviour::ServFail) {
    rcode = kRcodeServFail;
  } else if (behaviour == Behaviour::Answer) {
    if (qtype == kTypeA) {
      for (const auto& ip : host->a) {
        in_addr a;
        SLUICE_ASSERT(inet_pton(AF_INET, ip.c_str(), &a) == 1, "bad test IPv4");
        const auto* b = reinterpret_cast<const uint8_t*>(&a);
        rdatas.emplace_back(b, b + 4);
      }
    } else if (qtype == kTypeAaaa) {
      for (const auto& ip : host->aaaa) {
        in6_addr a;
        SLUICE_ASSERT(inet_pton(AF_INET6, ip.c_str(), &a) == 1, "bad test IPv6");
        const auto* b = reinterpret_cast<const uint8_t*>(&a);
        rdatas.emplace_back(b, b + 16);
      }
    }
  }

  std::vector<uint8_t> reply;
  reply.push_back(query[0]);  // Transaction id.
  reply.push_back(query[1]);
  // QR, the query's RD, RA, RCODE.
  put16(reply, static_cast<uint16_t>(0x8000 | ((query[2] & 0x01) << 8) | 0x0080 | rcode));
  put16(reply, 1);
  put16(reply, behaviour == Behaviour::Garbage ? 3 : static_cast<uint16_t>(rdatas.size()));
  put16(reply, 0);
  put16(reply, 0);
  // The question exactly as asked: evdns checks it, case included (0x20 randomisation).
  reply.insert(reply.end(), query + kHeaderSize, query + question_end);
  if (behaviour == Behaviour::Garbage) {
    // A name pointer and half a record, then nothing.
    reply.push_back(0xc0);
    reply.push_back(0x0c);
    put16(reply, qtype);
  }
  for (const auto& rdata : rdatas) {
    reply.push_back(0xc0);  // Pointer to the question's name at offset 12.
    reply.push_back(0x0c);
    put16(reply, qtype);
    put16(reply, 1);  // IN
    put32(reply, host->ttl);
    put16(reply, static_cast<uint16_t>(rdata.size()));
    reply.insert(reply.end(), rdata.begin(), rdata.end());
  }
  ssize_t sent =
      ::sendto(fd_, reply.data(), reply.size(), 0, static_cast<const sockaddr*>(peer), peer_length);
  if (sent == static_cast<ssize_t>(reply.size())) ++replies_sent_;
}

}  // namespace test
}  // namespace dns
}  // namespace sluice
