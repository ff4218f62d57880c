#include "source/common/network/egress.h"

#include <cerrno>

#include <netinet/in.h>
#include <sys/socket.h>

namespace sluice {
namespace network {

int bindSource(int fd, const Address& source, bool defer_port) {
  if (defer_port) {
    // Also for AF_INET6 sockets: the option is read from the socket's inet part. An old kernel
    // without it binds a port at once, which works, only with the ports' limit.
    const int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  }
  Address at = source;
  at.setPort(0);
  if (::bind(fd, at.sockaddr_ptr(), at.length()) != 0) return errno;
  return 0;
}

}  // namespace network
}  // namespace sluice
