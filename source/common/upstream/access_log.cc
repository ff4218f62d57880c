#include "source/common/upstream/access_log.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace upstream {
namespace {

thread_local AccessLogBuffer* t_buffer = nullptr;

// Writes one line into memory sized for it beforehand (see lineBound), with no check per byte
// and no temporary strings: the access log's cost per request is mostly this.
class LineWriter {
 public:
  explicit LineWriter(char* at) : begin_(at), p_(at) {}
  size_t size() const { return static_cast<size_t>(p_ - begin_); }

  void put(char c) { *p_++ = c; }
  void put(std::string_view s) {
    if (s.empty()) return;  // an empty view may have no data at all
    memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void number(int64_t n) { p_ = std::to_chars(p_, p_ + 24, n).ptr; }
  // Durations: microseconds, or -1 for a step that did not happen.
  void micros(std::chrono::microseconds d) { number(d.count() < 0 ? -1 : d.count()); }
  void digits3(int n) {
    put(static_cast<char>('0' + n / 100 % 10));
    put(static_cast<char>('0' + n / 10 % 10));
    put(static_cast<char>('0' + n % 10));
  }

  // JSON string content. Bytes outside printable ASCII (control bytes, and anything a client
  // sent that is not ASCII) become \u00XX, so every line is valid JSON and valid UTF-8.
  void jsonEscaped(std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u < 0x7f && u != '"' && u != '\\') {
        *p_++ = c;
      } else if (u == '"' || u == '\\') {
        *p_++ = '\\';
        *p_++ = c;
      } else {
        put(std::string_view("\\u00"));
        *p_++ = kHex[u >> 4];
        *p_++ = kHex[u & 15];
      }
    }
  }
  void jsonString(std::string_view s) {
    put('"');
    jsonEscaped(s);
    put('"');
  }
  // Squid's fields are separated by spaces: spaces and control bytes in one would shift the
  // columns, so they become '%'.
  void token(std::string_view s) {
    if (s.empty()) {
      put('-');
      return;
    }
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      *p_++ = u <= 0x20 || u >= 0x7f ? '%' : c;
    }
  }

  // "1.2.3.4" (formatted here: inet_ntop goes through sprintf) or an IPv6 address.
  void ip(const network::Address& a) {
    if (a.family() == AF_INET) {
      const uint32_t v = ntohl(a.v4().sin_addr.s_addr);
      number(v >> 24);
      put('.');
      number(v >> 16 & 255);
      put('.');
      number(v >> 8 & 255);
      put('.');
      number(v & 255);
    } else if (a.family() == AF_INET6) {
      char text[INET6_ADDRSTRLEN];
      if (inet_ntop(AF_INET6, &a.v6().sin6_addr, text, sizeof(text)) != nullptr) put(text);
    }
  }
  // "1.2.3.4:80" or "[::1]:80"; nothing when there is no address.
  void address(const network::Address& a) {
    if (!a.valid()) return;
    const bool v6 = a.family() == AF_INET6;
    if (v6) put('[');
    ip(a);
    if (v6) put(']');
    put(':');
    number(a.port());
  }
  // host:port, brackets around an IPv6 literal; `escape` for JSON, else as a Squid token.
  void target(const RequestRecord& r, bool json) {
    const bool v6 = r.host.find(':') != std::string_view::npos;
    if (v6) put('[');
    if (json) {
      jsonEscaped(r.host);
    } else {
      token(r.host);
    }
    if (v6) put(']');
    put(':');
    number(r.port);
  }

  // "2026-12-01T16:10:00.123Z"; the part up to the second is formatted once per second.
  void time(int64_t now_ms) {
    thread_local int64_t cached_second = -1;
    thread_local char cached[24];
    thread_local size_t cached_len = 0;
    const int64_t second = now_ms / 1000;
    if (second != cached_second) {
      const time_t t = static_cast<time_t>(second);
      tm parts{};
      gmtime_r(&t, &parts);
      cached_len = strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &parts);
      cached_second = second;
    }
    put(std::string_view(cached, cached_len));
    put('.');
    digits3(static_cast<int>(now_ms % 1000));
    put('Z');
  }

 private:
  char* begin_;
  char* p_;
};

// Most bytes a line of this record can take: every text field escaped at 6 bytes a byte.
size_t lineBound(const RequestRecord& r) {
  return 512 + 6 * (r.listener.size() + r.key.size() + r.method.size() + r.host.size() +
                    r.path.size() + r.denial.size() + r.policy_rule.size());
}

// Formats with `fill` into `out`, through a per-thread scratch area (a line is appended in one
// piece, so `out` keeps its reserved capacity and never sees a partial line).
template <typename Fill>
void appendLine(std::string& out, const RequestRecord& r, Fill fill) {
  static constexpr size_t kScratch = 32 * 1024;
  thread_local std::unique_ptr<char[]> scratch(new char[kScratch]);
  const size_t bound = lineBound(r);
  if (bound <= kScratch) {
    LineWriter w(scratch.get());
    fill(w);
    out.append(scratch.get(), w.size());
    return;
  }
  std::unique_ptr<char[]> large(new char[bound]);
  LineWriter w(large.get());
  fill(w);
  out.append(large.get(), w.size());
}

uint16_t socksStatus(uint16_t reply, bool served) {
  switch (reply) {
    case 0:
      return served ? 200 : 502;
    case 2:
      return 403;  // not allowed by the rules
    case 6:
      return 504;  // TTL expired: the connect timed out
    default:
      return 502;
  }
}

bool isTunnel(const RequestRecord& r) {
  return r.protocol == proxy::Protocol::Socks5 || r.method == "CONNECT";
}

}  // namespace

bool parseAccessLogMode(std::string_view name, AccessLogMode& out) {
  if (name == "off") {
    out = AccessLogMode::Off;
  } else if (name == "errors") {
    out = AccessLogMode::Errors;
  } else if (name == "all") {
    out = AccessLogMode::All;
  } else {
    return false;
  }
  return true;
}

bool parseAccessLogFormat(std::string_view name, AccessLogFormat& out) {
  if (name == "json") {
    out = AccessLogFormat::Json;
  } else if (name == "squid") {
    out = AccessLogFormat::Squid;
  } else {
    return false;
  }
  return true;
}

void appendJsonLine(std::string& out, const RequestRecord& r, int64_t now_ms) {
  appendLine(out, r, [&](LineWriter& w) {
    w.put("{\"time\":\"");
    w.time(now_ms);
    w.put("\",\"client\":\"");
    w.address(r.client);
    w.put("\",\"key\":");
    w.jsonString(r.key);
    w.put(",\"protocol\":\"");
    w.put(protocolName(r.protocol));
    w.put("\",\"listener\":");
    w.jsonString(r.listener);
    w.put(",\"method\":");
    w.jsonString(r.method);
    w.put(",\"target\":\"");
    if (r.host.empty()) {
      w.put('-');
    } else {
      w.target(r, true);
    }
    w.put("\",\"path\":");
    w.jsonString(r.path);
    w.put(",\"status\":");
    w.number(r.status);
    w.put(",\"bytes_to_origin\":");
    w.number(static_cast<int64_t>(r.bytes_to_origin));
    w.put(",\"bytes_from_origin\":");
    w.number(static_cast<int64_t>(r.bytes_from_origin));
    w.put(",\"resolve_us\":");
    w.micros(r.resolve);
    w.put(",\"connect_us\":");
    w.micros(r.connect);
    w.put(",\"first_byte_us\":");
    w.micros(r.first_byte);
    w.put(",\"total_us\":");
    w.micros(r.total);
    w.put(",\"upstream\":\"");
    w.address(r.upstream);
    w.put("\",\"failure\":\"");
    w.put(failureName(r.failure));
    w.put("\",\"denial\":");
    w.jsonString(r.denial);
    w.put(",\"proxy_status\":\"");
    w.put(r.proxy_status_error);
    w.put("\",\"policy_rule\":");
    w.jsonString(r.policy_rule);
    w.put(",\"policy_report_only\":");
    w.put(r.policy_report_only ? "true" : "false");
    w.put("}\n");
  });
}

void appendSquidLine(std::string& out, const RequestRecord& r, int64_t now_ms) {
  // %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt (Squid's "squid" logformat).
  appendLine(out, r, [&](LineWriter& w) {
    w.number(now_ms / 1000);
    w.put('.');
    w.digits3(static_cast<int>(now_ms % 1000));
    w.put(' ');
    const int64_t elapsed_ms = r.total.count() / 1000;
    for (int64_t width = 100000; width > 1 && elapsed_ms < width; width /= 10) w.put(' ');
    w.number(elapsed_ms);
    w.put(' ');
    if (r.client.valid()) {
      w.ip(r.client);
    } else {
      w.put('-');
    }
    w.put(' ');
    // Squid's result codes: a tunnel or a relayed request; refused before any destination was
    // reached (TCP_DENIED), or failed after (TCP_MISS_ABORTED). A SOCKS5 reply is shown as the
    // HTTP status Squid would have logged for it.
    uint16_t status = r.status;
    if (r.protocol == proxy::Protocol::Socks5) status = socksStatus(r.status, r.denial.empty());
    if (r.denial.empty()) {
      w.put(isTunnel(r) ? "TCP_TUNNEL/" : "TCP_MISS/");
    } else {
      w.put(r.upstream.valid() ? "TCP_MISS_ABORTED/" : "TCP_DENIED/");
    }
    w.digits3(status % 1000);
    w.put(' ');
    w.number(static_cast<int64_t>(r.bytes_from_origin));
    w.put(' ');
    w.token(r.protocol == proxy::Protocol::Socks5 ? std::string_view("CONNECT") : r.method);
    w.put(' ');
    if (r.host.empty()) {
      w.put('-');
    } else if (isTunnel(r)) {
      w.target(r, false);
    } else {
      w.put("http://");
      w.target(r, false);
      w.token(r.path.empty() ? std::string_view("/") : r.path);
    }
    w.put(' ');
    w.token(r.key);
    if (r.upstream.valid()) {
      w.put(" HIER_DIRECT/");
      w.ip(r.upstream);
    } else {
      w.put(" HIER_NONE/-");
    }
    w.put(" -");
    // After Squid's ten fields, which its tools read by position: the rule that refused the
    // request, or would have in a report-only group.
    if (!r.policy_rule.empty()) {
      w.put(r.policy_report_only ? " report_only_rule=" : " policy_rule=");
      w.token(r.policy_rule);
    }
    w.put('\n');
  });
}

void appendRecordLine(std::string& out, const RequestRecord& record, AccessLogFormat format) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  if (format == AccessLogFormat::Json) {
    appendJsonLine(out, record, now_ms);
  } else {
    appendSquidLine(out, record, now_ms);
  }
}

// ---- AccessLog

AccessLog& AccessLog::get() {
  static AccessLog* log = new AccessLog();
  return *log;
}

absl::Status AccessLog::configure(const AccessLogConfig& config) {
  stop();
  stats::Store& store = stats::Store::get();
  written_ = store.counter("access_log.records");
  dropped_ = store.counter("access_log.dropped");
  write_errors_ = store.counter("access_log.write_errors");
  reopened_ = store.counter("access_log.reopened");
  format_.store(config.format, std::memory_order_relaxed);
  batch_bytes_.store(config.batch_bytes, std::memory_order_relaxed);
  max_pending_bytes_ = config.max_pending_bytes;
  path_ = config.path;
  if (config.mode == AccessLogMode::Off) {
    mode_.store(AccessLogMode::Off, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (path_ != "-") {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("access_log.path: cannot open %s: %s", path_, strerror(errno)));
    }
    fd_ = fd;
  } else {
    fd_ = STDOUT_FILENO;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    reopen_ = false;
  }
  writer_ = std::thread([this] { run(); });
  mode_.store(config.mode, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool AccessLog::wants(const RequestRecord& record) const {
  switch (mode_.load(std::memory_order_relaxed)) {
    case AccessLogMode::Off:
      return false;
    case AccessLogMode::Errors:
      // A request a report-only rule would have refused is what a policy trial looks for.
      return !record.denial.empty() || record.failure != FailureKind::None ||
             !record.policy_rule.empty();
    case AccessLogMode::All:
      return true;
  }
  return false;
}

absl::Status AccessLog::checkSink(const AccessLogConfig& config) {
  if (config.mode == AccessLogMode::Off || config.path == "-") return absl::OkStatus();
  const int fd = ::open(config.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("access_log.path: cannot open %s: %s", config.path, strerror(errno)));
  }
  ::close(fd);
  return absl::OkStatus();
}

void AccessLog::reconfigure(const AccessLogConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  format_.store(config.format, std::memory_order_relaxed);
  batch_bytes_.store(config.batch_bytes, std::memory_order_relaxed);
  max_pending_bytes_ = config.max_pending_bytes;
  // The sink is opened again in any case: a reload also serves logrotate.
  path_ = config.path;
  reopen_ = true;
  if (config.mode != AccessLogMode::Off && !writer_.joinable()) {
    stopping_ = false;
    // Starts by taking the lock, once this returns: it opens the sink first (reopen_).
    writer_ = std::thread([this] { run(); });
  }
  mode_.store(config.mode, std::memory_order_relaxed);
  wake_.notify_one();
}

void AccessLog::reopen() {
  std::lock_guard<std::mutex> lock(mutex_);
  reopen_ = true;
  wake_.notify_one();
}

bool AccessLog::submit(std::string&& batch, uint32_t records) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || !writer_.joinable() || queued_bytes_ + batch.size() > max_pending_bytes_) {
    dropped_.add(records);
    return false;
  }
  queued_bytes_ += batch.size();
  queue_.emplace_back(std::move(batch), records);
  wake_.notify_one();
  return true;
}

void AccessLog::stop() {
  mode_.store(AccessLogMode::Off, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  if (fd_ >= 0 && fd_ != STDOUT_FILENO) ::close(fd_);
  fd_ = -1;
}

void AccessLog::openSink(const std::string& path) {
  if (path == "-") {
    if (fd_ >= 0 && fd_ != STDOUT_FILENO) ::close(fd_);
    fd_ = STDOUT_FILENO;
    return;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    SLUICE_LOG(Error, "access log: cannot open %s: %s (writing on to the old sink)", path,
               strerror(errno));
    return;
  }
  if (fd_ >= 0 && fd_ != STDOUT_FILENO) ::close(fd_);
  fd_ = fd;
  reopened_.inc();
}

void AccessLog::run() {
  logger::setThreadName("access_log");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || reopen_ || !queue_.empty(); });
    if (reopen_) {
      reopen_ = false;
      const std::string path = path_;
      lock.unlock();
      openSink(path);
      lock.lock();
    }
    while (!queue_.empty()) {
      std::pair<std::string, uint32_t> batch = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= batch.first.size();
      lock.unlock();
      const char* p = batch.first.data();
      size_t left = batch.first.size();
      bool ok = true;
      while (left > 0) {
        const ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
          if (errno == EINTR) continue;
          ok = false;
          break;
        }
        p += n;
        left -= static_cast<size_t>(n);
      }
      if (ok) {
        written_.add(batch.second);
      } else {
        write_errors_.inc();
        dropped_.add(batch.second);
      }
      lock.lock();
    }
    if (stopping_) return;
  }
}

// ---- AccessLogBuffer

AccessLogBuffer::AccessLogBuffer(event::Dispatcher& dispatcher)
    : timer_(dispatcher, [this] { flush(); }) {}

AccessLogBuffer::~AccessLogBuffer() {
  flush();
  if (t_buffer == this) t_buffer = nullptr;
}

void AccessLogBuffer::install() { t_buffer = this; }

AccessLogBuffer* AccessLogBuffer::current() { return t_buffer; }

void AccessLogBuffer::add(const RequestRecord& record) {
  AccessLog& log = AccessLog::get();
  if (lines_.empty()) timer_.enable(kFlushInterval);
  appendRecordLine(lines_, record, log.format());
  ++records_;
  if (lines_.size() >= log.batchBytes()) flush();
}

void AccessLogBuffer::flush() {
  timer_.disable();
  if (lines_.empty()) return;
  std::string batch;
  batch.reserve(AccessLog::get().batchBytes() + 1024);
  batch.swap(lines_);
  AccessLog::get().submit(std::move(batch), records_);
  records_ = 0;
}

void logRecord(const RequestRecord& record) {
  AccessLog& log = AccessLog::get();
  if (!log.wants(record)) return;
  if (AccessLogBuffer* buffer = AccessLogBuffer::current()) {
    buffer->add(record);
    return;
  }
  std::string line;
  appendRecordLine(line, record, log.format());
  log.submit(std::move(line), 1);
}

}  // namespace upstream
}  // namespace sluice
