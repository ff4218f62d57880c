#include "source/common/upstream/access_log.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

#include "source/common/common/logger.h"

namespace sluice {
namespace upstream {
namespace {

thread_local AccessLogBuffer* t_buffer = nullptr;

void appendNumber(std::string& out, int64_t n) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof(digits), n);
  out.append(digits, static_cast<size_t>(r.ptr - digits));
}

// Durations: microseconds, or -1 for a step that did not happen.
void appendMicros(std::string& out, std::chrono::microseconds d) {
  appendNumber(out, d.count() < 0 ? -1 : d.count());
}

// A JSON string. Bytes outside printable ASCII (control bytes, and anything a client sent that
// is not ASCII) are written as \u00XX, so every line is valid JSON and valid UTF-8.
void appendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20 || u >= 0x7f) {
      out.append("\\u00");
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// For a field that may be absent: "-" in Squid's format.
std::string_view orDash(std::string_view s) { return s.empty() ? std::string_view("-") : s; }

const char* protocolName(proxy::Protocol p) {
  switch (p) {
    case proxy::Protocol::Http1:
      return "http1";
    case proxy::Protocol::Http2:
      return "http2";
    case proxy::Protocol::Socks5:
      return "socks5";
  }
  return "unknown";
}

// host:port, with brackets around an IPv6 literal.
void appendTarget(std::string& out, const RequestRecord& r) {
  if (r.host.empty()) {
    out.push_back('-');
    return;
  }
  const bool v6 = r.host.find(':') != std::string_view::npos;
  if (v6) out.push_back('[');
  out.append(r.host);
  if (v6) out.push_back(']');
  out.push_back(':');
  appendNumber(out, r.port);
}

// "2026-12-01T16:10:00.123Z"; the part up to the second is formatted once per second.
void appendTime(std::string& out, int64_t now_ms) {
  thread_local int64_t cached_second = -1;
  thread_local char cached[24];
  const int64_t second = now_ms / 1000;
  if (second != cached_second) {
    const time_t t = static_cast<time_t>(second);
    tm parts{};
    gmtime_r(&t, &parts);
    strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &parts);
    cached_second = second;
  }
  out.append(cached);
  char ms[8];
  snprintf(ms, sizeof(ms), ".%03dZ", static_cast<int>(now_ms % 1000));
  out.append(ms);
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
  out.append("{\"time\":\"");
  appendTime(out, now_ms);
  out.append("\",\"client\":\"");
  if (r.client.valid()) out.append(r.client.asString());
  out.append("\",\"key\":");
  appendJsonString(out, r.key);
  out.append(",\"protocol\":\"");
  out.append(protocolName(r.protocol));
  out.append("\",\"listener\":");
  appendJsonString(out, r.listener);
  out.append(",\"method\":");
  appendJsonString(out, r.method);
  out.append(",\"target\":");
  std::string target;
  appendTarget(target, r);
  appendJsonString(out, target);
  out.append(",\"path\":");
  appendJsonString(out, r.path);
  out.append(",\"status\":");
  appendNumber(out, r.status);
  out.append(",\"bytes_to_origin\":");
  appendNumber(out, static_cast<int64_t>(r.bytes_to_origin));
  out.append(",\"bytes_from_origin\":");
  appendNumber(out, static_cast<int64_t>(r.bytes_from_origin));
  out.append(",\"resolve_us\":");
  appendMicros(out, r.resolve);
  out.append(",\"connect_us\":");
  appendMicros(out, r.connect);
  out.append(",\"first_byte_us\":");
  appendMicros(out, r.first_byte);
  out.append(",\"total_us\":");
  appendMicros(out, r.total);
  out.append(",\"upstream\":\"");
  if (r.upstream.valid()) out.append(r.upstream.asString());
  out.append("\",\"failure\":\"");
  out.append(failureName(r.failure));
  out.append("\",\"denial\":");
  appendJsonString(out, r.denial);
  out.append("}\n");
}

void appendSquidLine(std::string& out, const RequestRecord& r, int64_t now_ms) {
  // %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt (Squid's "squid" logformat).
  char head[48];
  snprintf(head, sizeof(head), "%lld.%03d %6lld ", static_cast<long long>(now_ms / 1000),
           static_cast<int>(now_ms % 1000), static_cast<long long>(r.total.count() / 1000));
  out.append(head);
  out.append(r.client.valid() ? r.client.ipString() : std::string("-"));
  out.push_back(' ');
  // Squid's result codes: a tunnel or a relayed request; refused before any destination was
  // reached (TCP_DENIED), or failed after (TCP_MISS_ABORTED). A SOCKS5 reply is shown as the
  // HTTP status Squid would have logged for it.
  uint16_t status = r.status;
  if (r.protocol == proxy::Protocol::Socks5) status = socksStatus(r.status, r.denial.empty());
  if (r.denial.empty()) {
    out.append(isTunnel(r) ? "TCP_TUNNEL" : "TCP_MISS");
  } else {
    out.append(r.upstream.valid() ? "TCP_MISS_ABORTED" : "TCP_DENIED");
  }
  char code[8];
  snprintf(code, sizeof(code), "/%03d ", static_cast<int>(status % 1000));
  out.append(code);
  appendNumber(out, static_cast<int64_t>(r.bytes_from_origin));
  out.push_back(' ');
  // Squid's fields are separated by spaces: any in a client's text would shift the columns.
  auto appendToken = [&out](std::string_view s) {
    if (s.empty()) {
      out.push_back('-');
      return;
    }
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      out.push_back(u <= 0x20 || u >= 0x7f ? '%' : c);
    }
  };
  appendToken(r.protocol == proxy::Protocol::Socks5 ? std::string_view("CONNECT") : r.method);
  out.push_back(' ');
  std::string url;
  if (isTunnel(r)) {
    appendTarget(url, r);
  } else if (!r.host.empty()) {
    url = "http://";
    appendTarget(url, r);
    url.append(r.path.empty() ? std::string_view("/") : r.path);
  }
  appendToken(url);
  out.push_back(' ');
  appendToken(orDash(r.key));
  out.append(r.upstream.valid() ? " HIER_DIRECT/" : " HIER_NONE/");
  out.append(r.upstream.valid() ? r.upstream.ipString() : std::string("-"));
  out.append(" -\n");
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
  format_ = config.format;
  batch_bytes_ = config.batch_bytes;
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
      return !record.denial.empty() || record.failure != FailureKind::None;
    case AccessLogMode::All:
      return true;
  }
  return false;
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

void AccessLog::openSink() {
  if (path_ == "-") return;
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    SLUICE_LOG(Error, "access log: cannot reopen %s: %s (writing on to the old file)", path_,
               strerror(errno));
    return;
  }
  if (fd_ >= 0) ::close(fd_);
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
      lock.unlock();
      openSink();
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
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  if (lines_.empty()) timer_.enable(kFlushInterval);
  if (log.format() == AccessLogFormat::Json) {
    appendJsonLine(lines_, record, now_ms);
  } else {
    appendSquidLine(lines_, record, now_ms);
  }
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
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::string line;
  if (log.format() == AccessLogFormat::Json) {
    appendJsonLine(line, record, now_ms);
  } else {
    appendSquidLine(line, record, now_ms);
  }
  log.submit(std::move(line), 1);
}

}  // namespace upstream
}  // namespace sluice
