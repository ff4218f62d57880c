#include "source/server/admin_client.h"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace sluice {
namespace server {

namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remainingMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool isWildcard(const network::Address& a) {
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == htonl(INADDR_ANY);
  return a.family() == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a.v6().sin6_addr);
}

absl::StatusOr<AdminAnswer> parseAnswer(absl::string_view raw, const std::string& where) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == absl::string_view::npos) {
    return absl::DataLossError(absl::StrFormat("%s sent no complete HTTP answer", where));
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(raw.substr(0, head_end), absl::ByString("\r\n"));
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  AdminAnswer answer;
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status[1], &answer.code)) {
    return absl::DataLossError(absl::StrFormat("%s is not an HTTP server (it answered '%s')", where,
                                               absl::CHexEscape(lines[0].substr(0, 80))));
  }
  absl::string_view body = raw.substr(head_end + 4);
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "transfer-encoding") {
      return absl::DataLossError(absl::StrFormat("%s answered with a chunked body", where));
    }
    size_t length = 0;
    if (name == "content-length" && absl::SimpleAtoi(value, &length)) {
      if (length > body.size()) {
        return absl::DataLossError(absl::StrFormat("%s closed before the whole answer", where));
      }
      body = body.substr(0, length);
    }
  }
  answer.body = std::string(body);
  return answer;
}

}  // namespace

network::Address adminDialAddress(const network::Address& admin) {
  if (!isWildcard(admin)) return admin;
  auto loopback =
      network::Address::parseIp(admin.family() == AF_INET6 ? "::1" : "127.0.0.1", admin.port());
  return loopback.ok() ? *loopback : admin;
}

absl::StatusOr<AdminAnswer> adminGet(const network::Address& admin, std::string_view path,
                                     std::chrono::milliseconds timeout) {
  return adminRequest(admin, "GET", path, timeout);
}

absl::StatusOr<AdminAnswer> adminPost(const network::Address& admin, std::string_view path,
                                      std::chrono::milliseconds timeout) {
  return adminRequest(admin, "POST", path, timeout);
}

absl::StatusOr<AdminAnswer> adminRequest(const network::Address& admin, std::string_view method,
                                         std::string_view path, std::chrono::milliseconds timeout) {
  const network::Address dial = adminDialAddress(admin);
  const std::string where = absl::StrFormat("the admin endpoint at %s", dial.asString());
  const Clock::time_point deadline = Clock::now() + timeout;
  Socket sock(::socket(dial.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (sock.fd() < 0) {
    return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  }
  if (::connect(sock.fd(), dial.sockaddr_ptr(), dial.length()) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrFormat("%s: %s", where, strerror(errno)));
    }
    if (!waitFor(sock.fd(), POLLOUT, deadline)) {
      return absl::UnavailableError(
          absl::StrFormat("%s: no answer to connect within %d ms", where, timeout.count()));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return absl::UnavailableError(absl::StrFormat("%s: %s", where, strerror(err)));
  }
  // The endpoint answers only its own address in Host (DNS rebinding guard): the address
  // dialled is one it accepts, a wildcard endpoint taking any IP literal.
  const std::string request = absl::StrFormat(
      "%s %s HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\nConnection: close\r\n"
      "User-Agent: sluice-cli\r\n%s\r\n",
      method, path, dial.asString(), method == "POST" ? "Content-Length: 0\r\n" : "");
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(sock.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && waitFor(sock.fd(), POLLOUT, deadline)) {
      continue;
    } else {
      return absl::UnavailableError(absl::StrFormat("%s: sending the request failed", where));
    }
  }
  std::string raw;
  char buf[16 * 1024];
  for (;;) {
    ssize_t n = ::recv(sock.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      if (raw.size() + static_cast<size_t>(n) > kMaxAdminAnswerBytes) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("%s answered more than %d bytes", where, kMaxAdminAnswerBytes));
      }
      raw.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN) {
      if (!waitFor(sock.fd(), POLLIN, deadline)) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "%s did not finish answering %s within %d ms", where, path, timeout.count()));
      }
    } else {
      return absl::UnavailableError(absl::StrFormat("%s: %s", where, strerror(errno)));
    }
  }
  return parseAnswer(absl::string_view(raw), where);
}

}  // namespace server
}  // namespace sluice
