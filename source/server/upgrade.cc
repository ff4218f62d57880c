#include "source/server/upgrade.h"

#include <cerrno>
#include <climits>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

extern char** environ;

namespace sluice {
namespace server {

namespace {

// "L <address>" a listener's socket, "A <address>" the admin's, "E" the end; "S" back from the
// new process once it serves.
constexpr size_t kMaxMessage = 256;
constexpr char kServing[] = "S";

bool sendWithFd(int sock, const std::string& text, int fd) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(text.size())) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

}  // namespace

absl::StatusOr<std::vector<HandedSocket>> receiveHandedSockets(int fd,
                                                               std::chrono::milliseconds timeout) {
  std::vector<HandedSocket> out;
  auto fail = [&out](std::string message) -> absl::Status {
    for (const HandedSocket& s : out) ::close(s.fd);
    return absl::UnavailableError(std::move(message));
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      return fail("upgrade: the running process sent no sockets in time");
    }
    char text[kMaxMessage + 1];
    iovec iov{text, kMaxMessage};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("upgrade: the running process closed the handoff before its end");
    int received = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int))) {
        memcpy(&received, CMSG_DATA(c), sizeof(int));
      }
    }
    const std::string_view message(text, static_cast<size_t>(n));
    if (message == "E") {
      if (received >= 0) ::close(received);
      return out;
    }
    if (received < 0 || message.size() < 3 || message[1] != ' ' ||
        (message[0] != 'L' && message[0] != 'A')) {
      if (received >= 0) ::close(received);
      return fail(absl::StrFormat("upgrade: unexpected handoff message '%s'", message));
    }
    auto address = network::Address::parseHostPort(message.substr(2));
    if (!address.ok()) {
      ::close(received);
      return fail(absl::StrFormat("upgrade: bad address in '%s'", message));
    }
    out.push_back(
        HandedSocket{message[0] == 'L' ? HandedSocket::Kind::Listener : HandedSocket::Kind::Admin,
                     *address, received});
  }
}

void announceServing(int fd) {
  (void)sendWithFd(fd, kServing, -1);
  ::close(fd);
}

UpgradeHandoff::UpgradeHandoff(event::Dispatcher& dispatcher, std::function<void(pid_t)> on_serving,
                               std::function<void(const std::string&)> on_failed)
    : dispatcher_(dispatcher),
      on_serving_(std::move(on_serving)),
      on_failed_(std::move(on_failed)) {}

UpgradeHandoff::~UpgradeHandoff() {
  event_.reset();
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<pid_t> UpgradeHandoff::start(const std::vector<std::string>& argv,
                                            const std::vector<HandedSocket>& sockets,
                                            std::chrono::milliseconds timeout) {
  if (running()) return absl::FailedPreconditionError("an upgrade is already under way");
  int pair[2];
  // The child's end stays open across exec; ours closes there.
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) {
    return absl::InternalError(absl::StrFormat("upgrade: socketpair: %s", strerror(errno)));
  }
  ::fcntl(pair[0], F_SETFD, FD_CLOEXEC);
  std::vector<std::string> args = argv;
  args.push_back("--upgrade-fd");
  args.push_back(std::to_string(pair[1]));
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawn: nothing but exec runs in the child of this multi-threaded process.
  const int rc = ::posix_spawn(&pid, raw[0], nullptr, nullptr, raw.data(), environ);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    return absl::UnavailableError(
        absl::StrFormat("upgrade: cannot start %s: %s", args[0], strerror(rc)));
  }
  for (const HandedSocket& s : sockets) {
    const std::string text = absl::StrFormat(
        "%c %s", s.kind == HandedSocket::Kind::Listener ? 'L' : 'A', s.address.asString());
    if (!sendWithFd(pair[0], text, s.fd)) {
      ::close(pair[0]);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return absl::UnavailableError(absl::StrFormat(
          "upgrade: sending the sockets to pid %d failed: %s", pid, strerror(errno)));
    }
  }
  (void)sendWithFd(pair[0], "E", -1);
  ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
  fd_ = pair[0];
  child_ = pid;
  event_ = std::make_unique<event::FileEvent>(
      dispatcher_, fd_, this, event::FileEvent::To<&UpgradeHandoff::onSocketEvent>());
  timer_ = std::make_unique<event::Timer>(dispatcher_, [this] {
    finish(false,
           absl::StrFormat("the new process (pid %d) did not serve within the deadline", child_));
  });
  timer_->enable(timeout);
  return pid;
}

void UpgradeHandoff::onReadable() {
  char buf[kMaxMessage];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n == 1 && buf[0] == kServing[0]) {
      finish(true, "");
      return;
    }
    finish(false, absl::StrFormat("the new process (pid %d) exited before it served (see its "
                                  "log lines above)",
                                  child_));
    return;
  }
}

void UpgradeHandoff::finish(bool serving, const std::string& why) {
  // The callbacks below may start over: leave a clean state first, from the loop.
  const pid_t child = child_;
  timer_->disable();
  event_->remove();
  ::close(fd_);
  fd_ = -1;
  child_ = -1;
  dispatcher_.post([this, child, serving, why] {
    event_.reset();
    timer_.reset();
    if (serving) {
      on_serving_(child);
      return;
    }
    // A process that failed or hangs is not left behind; an exited one is reaped.
    ::kill(child, SIGTERM);
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == 0) {
      // Reaped later by whoever inherits it, or when this process exits.
    }
    on_failed_(why);
  });
}

std::string runningBinaryPath() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return {};
  std::string out(path, static_cast<size_t>(n));
  constexpr std::string_view kDeleted = " (deleted)";
  if (out.size() > kDeleted.size() &&
      out.compare(out.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
    out.resize(out.size() - kDeleted.size());
  }
  return out;
}

}  // namespace server
}  // namespace sluice
