#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/server/server.h"

namespace sluice {
namespace server {
namespace {

int noDelay(int fd) {
  int value = -1;
  socklen_t len = sizeof(value);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &len), 0);
  return value;
}

// Accepted sockets get TCP_NODELAY from the listening socket, so nothing sets it per
// connection: the worker relies on it.
TEST(ListenSocketTest, AcceptedSocketsInheritNoDelay) {
  auto fd = createListenSocket(network::Address::ipv4(INADDR_LOOPBACK, 0), 16);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(noDelay(*fd), 1);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  ASSERT_EQ(getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &len), 0);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&bound), len), 0);
  int accepted = -1;
  for (int i = 0; i < 1000 && accepted < 0; ++i) {
    accepted = accept4(*fd, nullptr, nullptr, SOCK_NONBLOCK);
    if (accepted < 0) usleep(1000);
  }
  ASSERT_GE(accepted, 0);
  EXPECT_EQ(noDelay(accepted), 1);
  EXPECT_EQ(noDelay(client), 0) << "the client side is the test's own";
  close(accepted);
  close(client);
  close(*fd);
}

}  // namespace
}  // namespace server
}  // namespace sluice
