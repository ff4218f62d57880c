// sluice-origin: a fast HTTP/1.1 upstream for tests and benchmarks.
//
//   GET /bytes/N  -> 200 with N bytes (N <= 1 GiB), streamed from one pre-filled block
//   POST /echo    -> 200 echoing the request body (Content-Length or chunked), streamed
//   GET /stats    -> {"requests": R, "bytes_sent": B, "bytes_received": C}
//   else 404; malformed requests 400 (or the parser's 431/501/505) and close.
//
// One event loop per thread (-t N), each with its own SO_REUSEPORT listen socket.

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

#include "source/common/buffer/buffer.h"
#include "source/common/common/logger.h"
#include "source/common/event/dispatcher.h"
#include "source/common/http/chunked.h"
#include "source/common/http/h1_parser.h"
#include "source/common/network/address.h"
#include "source/common/network/connection.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace origin {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 30;
// One below a block, so that linearizing max + 1 bytes still fits a pooled block.
constexpr uint32_t kMaxHeadBytes = buffer::kBlockSize - 1;
// Enough to keep loopback busy; small enough that a slow reader pins little memory.
constexpr uint32_t kHighWatermark = 256 * 1024;
constexpr int kAcceptsPerEvent = 64;

// Body byte i of /bytes/N is kPattern[i % 64]; the block size is a multiple of 64, so the one
// block can be written repeatedly and clients can still check every byte.
constexpr std::string_view kPattern =
    "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
static_assert(kPattern.size() == 64 && buffer::kBlockSize % 64 == 0);
char g_block[buffer::kBlockSize];

struct Counters {
  stats::Counter requests;
  stats::Counter rx;
  stats::Counter tx;
};

class Worker;

// One client connection: parses requests in order and streams each response.
class Session : public network::ConnectionCallbacks, public event::DeferredDeletable {
 public:
  Session(Worker& worker, network::ConnectionPtr conn);

  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override;
  void onBelowWriteLowWatermark() override;

  std::list<std::unique_ptr<Session>>::iterator position;

 private:
  enum class Phase : uint8_t { Head, SendBytes, EchoLength, EchoChunked, Closing };

  // Handles as much of data as the current phase allows; stops when waiting for the peer or
  // for the write buffer to drain.
  void process(buffer::Buffer& data, bool end_stream);
  void onHead(const http1::RequestHead& head);
  void fillBytes();
  void finishResponse();
  void sendSimple(std::string_view status_line, std::string_view content_type,
                  std::string_view body, bool close);
  void writeHead(std::string_view status_line, std::string_view extra);
  void setReadDisabled(bool disabled);
  void abort();

  Worker& worker_;
  network::ConnectionPtr conn_;
  buffer::Buffer out_;
  http1::ChunkedDecoder decoder_;
  Phase phase_ = Phase::Head;
  uint64_t left_ = 0;  // body bytes still to send (SendBytes) or to echo (EchoLength)
  bool keep_alive_ = true;
  bool read_disabled_ = false;
};

class Worker {
 public:
  Worker(int index, int listen_fd, const Counters& counters)
      : index_(index), listen_fd_(listen_fd), counters_(counters) {}
  ~Worker() {
    sessions_.clear();
    accept_event_.reset();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  void run() {
    logger::setThreadName(absl::StrFormat("worker%d", index_));
    stats::Store::bindThreadShard(stats::Store::get().createShard());
    accept_event_ = std::make_unique<event::FileEvent>(dispatcher_, listen_fd_,
                                                       [this](uint32_t) { onAcceptReady(); });
    accept_event_->activate(event::FileEvent::kRead);
    dispatcher_.run();
  }

  event::Dispatcher& dispatcher() { return dispatcher_; }
  const Counters& counters() const { return counters_; }
  http1::RequestHead& scratchHead() { return head_; }

  void remove(Session& session) {
    std::unique_ptr<Session> owned = std::move(*session.position);
    sessions_.erase(session.position);
    dispatcher_.deferredDelete(std::move(owned));
  }

 private:
  void onAcceptReady() {
    for (int i = 0; i < kAcceptsPerEvent; ++i) {
      sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        SLUICE_LOG(Warn, "accept: %s", strerror(errno));
        return;
      }
      network::setNoDelay(fd);
      auto conn = std::make_unique<network::Connection>(
          dispatcher_, fd, network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len),
          network::Connection::Blocking::NonBlocking);
      conn->setByteCounters({counters_.rx, counters_.tx});
      conn->setHighWatermark(kHighWatermark);
      sessions_.push_front(std::make_unique<Session>(*this, std::move(conn)));
      sessions_.front()->position = sessions_.begin();
    }
    // More may be waiting: edge-triggered readiness will not say so again.
    accept_event_->activate(event::FileEvent::kRead);
  }

  int index_;
  int listen_fd_;
  Counters counters_;
  event::Dispatcher dispatcher_;
  std::unique_ptr<event::FileEvent> accept_event_;
  std::list<std::unique_ptr<Session>> sessions_;
  // Parsed heads are used and dropped within one callback, so one per thread serves all.
  http1::RequestHead head_;
};

Session::Session(Worker& worker, network::ConnectionPtr conn)
    : worker_(worker), conn_(std::move(conn)) {
  conn_->setCallbacks(this);
}

void Session::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::RemoteClose ||
      event == network::ConnectionEvent::LocalClose) {
    phase_ = Phase::Closing;
    worker_.remove(*this);
  }
}

void Session::onAboveWriteHighWatermark() {
  // Echo: stop reading the request body until the client reads the response.
  if (phase_ == Phase::EchoLength || phase_ == Phase::EchoChunked) setReadDisabled(true);
}

void Session::onBelowWriteLowWatermark() {
  if (phase_ == Phase::SendBytes) {
    fillBytes();
  } else if (phase_ == Phase::EchoLength || phase_ == Phase::EchoChunked) {
    setReadDisabled(false);
  }
}

void Session::setReadDisabled(bool disabled) {
  if (disabled == read_disabled_ || !conn_->open()) return;
  read_disabled_ = disabled;
  // Re-enabling delivers whatever is buffered (pipelined requests) on the next iteration.
  conn_->readDisable(disabled);
}

void Session::abort() {
  phase_ = Phase::Closing;
  conn_->close(network::CloseType::NoFlush);
}

void Session::onData(buffer::Buffer& data, bool end_stream) { process(data, end_stream); }

void Session::process(buffer::Buffer& data, bool end_stream) {
  while (conn_->open()) {
    switch (phase_) {
      case Phase::Closing:
        data.drain(data.length());
        return;
      case Phase::SendBytes:
        // Pipelined requests wait (reads are disabled) until this response is out.
        return;
      case Phase::Head: {
        if (data.empty()) {
          if (end_stream) conn_->close(network::CloseType::FlushWrite);
          return;
        }
        http1::ParseLimits limits;
        limits.max_head_bytes = kMaxHeadBytes;
        http1::ParseError err;
        http1::RequestHead& head = worker_.scratchHead();
        // The head is nearly always inside the first block; copy only when it spans blocks.
        std::string_view bytes = data.front();
        http1::ParseStatus status = http1::parseRequestHead(bytes, limits, head, err);
        if (status == http1::ParseStatus::Incomplete && data.length() > bytes.size()) {
          bytes = data.linearize(std::min<size_t>(data.length(), kMaxHeadBytes + 1));
          status = http1::parseRequestHead(bytes, limits, head, err);
        }
        if (status == http1::ParseStatus::Incomplete) {
          if (end_stream) conn_->close(network::CloseType::NoFlush);
          return;
        }
        if (status == http1::ParseStatus::Error) {
          char line[64];
          snprintf(line, sizeof(line), "HTTP/1.1 %u Bad Request", err.status);
          data.drain(data.length());
          sendSimple(line, "text/plain", "", true);
          return;
        }
        worker_.counters().requests.inc();
        onHead(head);  // head points into data: use it before draining
        data.drain(head.head_size);
        if (phase_ == Phase::SendBytes) fillBytes();
        break;
      }
      case Phase::EchoLength: {
        const size_t n = std::min<uint64_t>(data.length(), left_);
        if (n > 0) {
          out_.move(data, n);
          left_ -= n;
          conn_->write(out_);
          if (!conn_->open()) return;
        }
        if (left_ == 0) {
          finishResponse();
          break;
        }
        if (end_stream) abort();  // the body was cut short
        return;
      }
      case Phase::EchoChunked: {
        // The request's chunked framing is forwarded as is: the response decodes to the same
        // payload, and no copy or re-framing is needed.
        http1::ChunkedDecoder::Status st = http1::ChunkedDecoder::Status::NeedMore;
        while (!data.empty() && st == http1::ChunkedDecoder::Status::NeedMore) {
          size_t consumed = 0;
          st = decoder_.consume(data.front(), consumed);
          out_.move(data, consumed);
        }
        if (st == http1::ChunkedDecoder::Status::Error) {
          // The 200 is already on its way; cutting the connection tells the client.
          abort();
          return;
        }
        if (!out_.empty()) {
          conn_->write(out_);
          if (!conn_->open()) return;
        }
        if (st == http1::ChunkedDecoder::Status::Done) {
          finishResponse();
          break;
        }
        if (end_stream) abort();
        return;
      }
    }
  }
}

void Session::onHead(const http1::RequestHead& head) {
  keep_alive_ = head.keep_alive;
  const std::string_view path = head.path;
  const bool has_body = head.framing != http1::BodyFraming::None;
  constexpr std::string_view kBytes = "/bytes/";

  if (path.size() > kBytes.size() && path.substr(0, kBytes.size()) == kBytes &&
      (head.method == http1::Method::Get || head.method == http1::Method::Head) && !has_body) {
    uint64_t n = 0;
    bool ok = path.size() - kBytes.size() <= 10;
    for (size_t i = kBytes.size(); ok && i < path.size(); ++i) {
      const char c = path[i];
      ok = c >= '0' && c <= '9';
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || n > kMaxBytes) {
      sendSimple("HTTP/1.1 400 Bad Request", "text/plain", "bad size\n", !keep_alive_);
      return;
    }
    char extra[96];
    snprintf(extra, sizeof(extra), "Content-Type: application/octet-stream\r\nContent-Length: %llu",
             static_cast<unsigned long long>(n));
    writeHead("HTTP/1.1 200 OK", extra);
    left_ = head.method == http1::Method::Head ? 0 : n;
    if (left_ == 0) {
      finishResponse();
      return;
    }
    phase_ = Phase::SendBytes;
    setReadDisabled(true);
    return;
  }

  if (path == "/echo" && head.method == http1::Method::Post) {
    if (head.expect_continue) {
      out_.add("HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (head.framing == http1::BodyFraming::Chunked) {
      writeHead("HTTP/1.1 200 OK",
                "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked");
      decoder_.reset();
      phase_ = Phase::EchoChunked;
      return;
    }
    char extra[96];
    snprintf(extra, sizeof(extra), "Content-Type: application/octet-stream\r\nContent-Length: %llu",
             static_cast<unsigned long long>(head.content_length));
    writeHead("HTTP/1.1 200 OK", extra);
    left_ = head.framing == http1::BodyFraming::ContentLength ? head.content_length : 0;
    if (left_ == 0) {
      finishResponse();
    } else {
      phase_ = Phase::EchoLength;
    }
    return;
  }

  if (path == "/stats" && head.method == http1::Method::Get && !has_body) {
    // Rare (a benchmark's cross-check), so the store's lock and lookups are fine here.
    const stats::Store& store = stats::Store::get();
    char body[160];
    const int len =
        snprintf(body, sizeof(body),
                 "{\"requests\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu}\n",
                 static_cast<unsigned long long>(store.counterValue("origin.requests")),
                 static_cast<unsigned long long>(store.counterValue("origin.bytes_sent")),
                 static_cast<unsigned long long>(store.counterValue("origin.bytes_received")));
    sendSimple("HTTP/1.1 200 OK", "application/json",
               std::string_view(body, static_cast<size_t>(len)), !keep_alive_);
    return;
  }

  // A body we do not read would be taken for the next request: close after answering instead.
  sendSimple("HTTP/1.1 404 Not Found", "text/plain", "not found\n", !keep_alive_ || has_body);
}

void Session::writeHead(std::string_view status_line, std::string_view extra) {
  out_.add(status_line);
  out_.add("\r\n");
  out_.add(extra);
  out_.add(keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  conn_->write(out_);
}

void Session::sendSimple(std::string_view status_line, std::string_view content_type,
                         std::string_view body, bool close) {
  if (close) keep_alive_ = false;
  char extra[128];
  snprintf(extra, sizeof(extra), "Content-Type: %.*s\r\nContent-Length: %zu",
           static_cast<int>(content_type.size()), content_type.data(), body.size());
  out_.add(status_line);
  out_.add("\r\n");
  out_.add(extra);
  out_.add(keep_alive_ ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  out_.add(body);
  conn_->write(out_);
  if (conn_->open()) finishResponse();
}

void Session::fillBytes() {
  // Stops at the high watermark; onBelowWriteLowWatermark() calls back in for the rest.
  while (left_ > 0 && conn_->open() && !conn_->aboveHighWatermark()) {
    const size_t n = std::min<uint64_t>(left_, buffer::kBlockSize);
    out_.add(g_block, n);
    left_ -= n;
    conn_->write(out_);
  }
  if (left_ == 0 && conn_->open() && phase_ == Phase::SendBytes) finishResponse();
}

void Session::finishResponse() {
  if (!keep_alive_) {
    phase_ = Phase::Closing;
    conn_->close(network::CloseType::FlushWrite);
    return;
  }
  phase_ = Phase::Head;
  setReadDisabled(false);
}

void usage() {
  fprintf(stderr, "usage: sluice-origin --listen HOST:PORT [-t THREADS] [--log-level LEVEL]\n");
}

absl::StatusOr<int> createListenSocket(const network::Address& address) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (address.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (::bind(fd, address.sockaddr_ptr(), address.length()) != 0 || ::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s", address.asString(), strerror(err)));
  }
  return fd;
}

network::Address localAddress(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

int run(int argc, char** argv) {
  std::string_view listen;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if ((arg == "--listen" || arg == "-l") && has_value) {
      listen = argv[++i];
    } else if ((arg == "-t" || arg == "--threads") && has_value) {
      char* end = nullptr;
      const long t = strtol(argv[++i], &end, 10);
      if (*end != '\0' || t < 1 || t > 256) {
        fprintf(stderr, "sluice-origin: -t must be 1-256\n");
        return 2;
      }
      threads = static_cast<int>(t);
    } else if (arg == "--log-level" && has_value) {
      LogLevel level;
      if (!logger::parseLevel(argv[++i], level)) {
        fprintf(stderr, "sluice-origin: unknown log level\n");
        return 2;
      }
      logger::setLevel(level);
    } else {
      usage();
      return 2;
    }
  }
  if (listen.empty()) {
    usage();
    return 2;
  }
  absl::StatusOr<network::Address> address = network::Address::parseHostPort(listen);
  // parseHostPort() refuses port 0, which tests need to get a free port from the kernel.
  if (!address.ok() && listen.size() > 2 && listen.substr(listen.size() - 2) == ":0") {
    std::string any(listen.substr(0, listen.size() - 1));
    any += '1';
    address = network::Address::parseHostPort(any);
    if (address.ok()) address->setPort(0);
  }
  if (!address.ok()) {
    fprintf(stderr, "sluice-origin: --listen: %s\n",
            std::string(address.status().message()).c_str());
    return 2;
  }

  // Writes to a connection the peer reset must fail with EPIPE, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  logger::setThreadName("main");
  memset(g_block, 0, sizeof(g_block));
  for (size_t i = 0; i < sizeof(g_block); ++i) g_block[i] = kPattern[i % kPattern.size()];

  stats::Store& store = stats::Store::get();
  const Counters counters{store.counter("origin.requests"), store.counter("origin.bytes_received"),
                          store.counter("origin.bytes_sent")};

  network::Address bound = *address;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < threads; ++w) {
    absl::StatusOr<int> fd = createListenSocket(bound);
    if (!fd.ok()) {
      fprintf(stderr, "sluice-origin: %s\n", std::string(fd.status().message()).c_str());
      return 1;
    }
    // With port 0 the first socket picks the port; the others join it.
    if (w == 0) bound = localAddress(*fd);
    workers.push_back(std::make_unique<Worker>(w, *fd, counters));
  }

  std::vector<std::thread> running;
  for (auto& worker : workers) {
    running.emplace_back([&worker] { worker->run(); });
  }
  printf("listening on %s\n", bound.asString().c_str());
  fflush(stdout);
  for (auto& t : running) t.join();
  return 0;
}

}  // namespace
}  // namespace origin
}  // namespace sluice

int main(int argc, char** argv) { return sluice::origin::run(argc, argv); }
