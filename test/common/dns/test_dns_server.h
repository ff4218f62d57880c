#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "source/common/event/dispatcher.h"

namespace sluice {
namespace dns {
namespace test {

// A UDP DNS server on 127.0.0.1:<ephemeral>, driven by the same dispatcher as the resolver under
// test. Answers A/AAAA from a table; names not in the table get NXDOMAIN.
class TestDnsServer {
 public:
  static constexpr uint16_t kTypeA = 1;
  static constexpr uint16_t kTypeAaaa = 28;

  enum class Behaviour {
    Answer,    // Records of the asked type (none: NOERROR with no answer).
    NxDomain,  // RCODE 3.
    ServFail,  // RCODE 2.
    Silent,    // Never answers.
    Garbage,   // A reply whose header promises answers that are not there.
  };

  explicit TestDnsServer(event::Dispatcher& dispatcher);
  ~TestDnsServer();

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>", for Dns.resolvers.
  std::string address() const;

  void addHost(const std::string& name, std::vector<std::string> a, std::vector<std::string> aaaa,
               uint32_t ttl = 60);
  void setBehaviour(const std::string& name, Behaviour behaviour);
  // Drops queries of one type only (e.g. a server that ignores AAAA).
  void setSilentFor(const std::string& name, uint16_t qtype);

  // Queries received for a name (lowercased), per type or in total.
  int queries(const std::string& name, uint16_t qtype) const;
  int queries(const std::string& name) const;
  int totalQueries() const { return total_queries_; }
  int repliesSent() const { return replies_sent_; }

 private:
  struct Host {
    std::vector<std::string> a;
    std::vector<std::string> aaaa;
    uint32_t ttl = 60;
    Behaviour behaviour = Behaviour::Answer;
    uint16_t silent_type = 0;
  };

  void onReadable();
  void onSocketEvent(uint32_t events) {
    if (events & event::FileEvent::kRead) onReadable();
  }
  void handle(const uint8_t* query, size_t length, const void* peer, uint32_t peer_length);

  int fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<event::FileEvent> file_event_;
  std::map<std::string, Host> hosts_;
  std::map<std::pair<std::string, uint16_t>, int> queries_;
  int total_queries_ = 0;
  int replies_sent_ = 0;
};

}  // namespace test
}  // namespace dns
}  // namespace sluice
