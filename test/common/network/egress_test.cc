#include "source/common/network/egress.h"

#include <cerrno>
#include <chrono>
#include <memory>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

#include "source/common/network/connection.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace network {
namespace {

Address ip(const char* text) { return *Address::parseIp(text, 0); }

// Not an address of this host: a bind fails (EADDRNOTAVAIL) before anything is sent.
constexpr const char* kNotOurs = "192.0.2.1";

std::string peerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len).ipString();
}

int openDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

class EgressConnectTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(listener_.ok()); }

  // Connects from `source` (null: the system's choice); the address the listener saw.
  std::string connectFrom(const Address* source) {
    bool bind_failed = true;
    ConnectionPtr conn =
        Connection::connectTo(dispatcher_, listener_.address(), 1 << 30, source, &bind_failed);
    EXPECT_NE(conn, nullptr);
    EXPECT_FALSE(bind_failed);
    if (conn == nullptr) return "";
    conn->setCallbacks(&callbacks_);
    const int fd = listener_.accept();
    EXPECT_GE(fd, 0);
    Connection* c = conn.get();
    EXPECT_TRUE(test::runUntil(dispatcher_, [c] { return !c->connecting(); }));
    EXPECT_TRUE(conn->open());
    const std::string seen = peerOf(fd);
    ::close(fd);
    conn->close(CloseType::NoFlush);
    dispatcher_.deferredDelete(std::move(conn));
    return seen;
  }

  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_;
  test::RecordingCallbacks callbacks_;
};

TEST_F(EgressConnectTest, TheOriginSeesTheSourceAddress) {
  const Address two = ip("127.0.0.2");
  const Address three = ip("127.0.0.3");
  EXPECT_EQ(connectFrom(&two), "127.0.0.2");
  EXPECT_EQ(connectFrom(&three), "127.0.0.3");
  EXPECT_EQ(connectFrom(nullptr), "127.0.0.1");
}

TEST_F(EgressConnectTest, ASourceThatCannotBeBoundFailsBeforeTheConnect) {
  const Address not_ours = ip(kNotOurs);
  const int before = openDescriptors();
  bool bind_failed = false;
  errno = 0;
  ConnectionPtr conn =
      Connection::connectTo(dispatcher_, listener_.address(), 1 << 30, &not_ours, &bind_failed);
  EXPECT_EQ(conn, nullptr);
  EXPECT_TRUE(bind_failed);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  EXPECT_EQ(openDescriptors(), before);  // the socket was closed
  EXPECT_EQ(listener_.accept(100), -1);  // nothing was sent
}

TEST(BindSourceTest, AConnectingSocketGetsItsPortFromTheConnect) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(bindSource(fd, *Address::parseIp("127.0.0.2", 80), /*defer_port=*/true), 0);
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  // The address is bound, no ephemeral port is taken yet (IP_BIND_ADDRESS_NO_PORT); the port
  // given in `source` is ignored.
  EXPECT_EQ(Address::fromSockaddr(reinterpret_cast<sockaddr*>(&sa), len).ipString(), "127.0.0.2");
  EXPECT_EQ(ntohs(sa.sin_port), 0);
  ::close(fd);

  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(bindSource(udp, ip("127.0.0.3"), /*defer_port=*/false), 0);
  len = sizeof(sa);
  ASSERT_EQ(getsockname(udp, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  EXPECT_NE(ntohs(sa.sin_port), 0);  // a datagram socket has its port at once
  ::close(udp);

  const int other = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(bindSource(other, ip(kNotOurs), false), EADDRNOTAVAIL);
  ::close(other);
}

TEST(EgressTest, SourcesPerFamily) {
  Egress none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.sourceFor(AF_INET), nullptr);
  EXPECT_TRUE(none.reaches(AF_INET));
  EXPECT_TRUE(none.reaches(AF_INET6));

  Egress v4;
  v4.ipv4 = ip("192.0.2.10");
  EXPECT_FALSE(v4.empty());
  ASSERT_NE(v4.sourceFor(AF_INET), nullptr);
  EXPECT_EQ(v4.sourceFor(AF_INET)->ipString(), "192.0.2.10");
  EXPECT_EQ(v4.sourceFor(AF_INET6), nullptr);
  EXPECT_TRUE(v4.reaches(AF_INET));
  EXPECT_FALSE(v4.reaches(AF_INET6));  // a group with an egress dials only its families

  Egress both = v4;
  both.ipv6 = ip("2001:db8::10");
  EXPECT_TRUE(both.reaches(AF_INET6));
  EXPECT_EQ(both.sourceFor(AF_INET6)->ipString(), "2001:db8::10");
}

TEST(EgressTest, EqualEgressesHashAlike) {
  Egress a;
  a.ipv4 = ip("127.0.0.2");
  Egress b;
  b.ipv4 = ip("127.0.0.2");
  Egress c;
  c.ipv6 = ip("::1");
  absl::flat_hash_set<Egress> set = {a, c, Egress()};
  EXPECT_EQ(set.size(), 3u);
  EXPECT_TRUE(set.contains(b));
  EXPECT_TRUE(set.contains(Egress()));
  b.ipv4 = ip("127.0.0.3");
  EXPECT_FALSE(set.contains(b));
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace network
}  // namespace sluice
