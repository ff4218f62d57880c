#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"

#include "source/common/event/dispatcher.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/request_record.h"

namespace sluice {
namespace upstream {

enum class AccessLogMode : uint8_t { Off, Errors, All };
enum class AccessLogFormat : uint8_t { Json, Squid };

struct AccessLogConfig {
  AccessLogMode mode = AccessLogMode::Off;
  AccessLogFormat format = AccessLogFormat::Json;
  std::string path = "-";  // "-": standard output
  // A worker hands its lines to the writer in batches of about this size, or every
  // kFlushInterval when fewer come.
  uint32_t batch_bytes = 64 * 1024;
  // Lines waiting for the writer, over all workers; past it records are dropped (counted)
  // rather than making a worker wait for a slow disk.
  uint32_t max_pending_bytes = 8 * 1024 * 1024;
};

// "off" | "errors" | "all"; "json" | "squid". False when the name is unknown.
bool parseAccessLogMode(std::string_view name, AccessLogMode& out);
bool parseAccessLogFormat(std::string_view name, AccessLogFormat& out);

// The record as one JSON object, or one line of Squid's native format, appended to `out` with
// its newline. `now_ms` is the wall-clock time the record ended (milliseconds since 1970).
void appendJsonLine(std::string& out, const RequestRecord& record, int64_t now_ms);
void appendSquidLine(std::string& out, const RequestRecord& record, int64_t now_ms);
// The record's line in `format`, stamped with the wall clock now.
void appendRecordLine(std::string& out, const RequestRecord& record, AccessLogFormat format);

// The process's access log: one line per request, tunnel and SOCKS5 command, from the
// end-of-request record. Workers never write it themselves: each formats its lines into its
// own buffer (AccessLogBuffer) and hands whole batches to one writer thread, which appends them
// to the file or standard output. A writer that falls behind makes records drop (counted), not
// workers wait.
class AccessLog {
 public:
  static AccessLog& get();

  // Opens the sink and starts the writer (a second call replaces the config: reopens the sink).
  absl::Status configure(const AccessLogConfig& config);
  // Whether records are logged at all, and whether this one is.
  bool enabled() const { return mode_.load(std::memory_order_relaxed) != AccessLogMode::Off; }
  bool wants(const RequestRecord& record) const;
  AccessLogFormat format() const { return format_.load(std::memory_order_relaxed); }
  uint32_t batchBytes() const { return batch_bytes_.load(std::memory_order_relaxed); }
  // Whether the sink of `config` can be opened (a reload checks before it commits).
  static absl::Status checkSink(const AccessLogConfig& config);
  // Thread-safe, while workers log (a reload): the next records follow `config`; the sink is
  // opened again (at its new path, if it moved). Workers without a line buffer need one
  // before they log (AccessLogBuffer).
  void reconfigure(const AccessLogConfig& config);
  // Thread-safe. The file is opened again (after logrotate moved it) before the next write.
  void reopen();
  // Thread-safe: takes a batch of `records` lines; false when it was dropped (the writer is
  // over max_pending_bytes).
  bool submit(std::string&& batch, uint32_t records);
  // Writes what is queued and stops the writer (the sink stays configured for a restart).
  void stop();

 private:
  void run();
  void openSink(const std::string& path);

  std::atomic<AccessLogMode> mode_{AccessLogMode::Off};
  std::atomic<AccessLogFormat> format_{AccessLogFormat::Json};
  std::atomic<uint32_t> batch_bytes_{64 * 1024};
  uint32_t max_pending_bytes_ = 8 * 1024 * 1024;
  std::string path_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::string, uint32_t>> queue_;
  size_t queued_bytes_ = 0;
  bool stopping_ = false;
  bool reopen_ = false;
  std::thread writer_;
  int fd_ = -1;  // the writer's

  stats::Counter written_;       // access_log.records
  stats::Counter dropped_;       // access_log.dropped
  stats::Counter write_errors_;  // access_log.write_errors
  stats::Counter reopened_;      // access_log.reopened
};

// One worker's lines on their way to the access log: formatted here, handed over when a batch
// is full or when the worker's timer fires. install() makes it the calling thread's buffer;
// emitRecord() finds it there.
class AccessLogBuffer {
 public:
  static constexpr std::chrono::milliseconds kFlushInterval{200};

  explicit AccessLogBuffer(event::Dispatcher& dispatcher);
  ~AccessLogBuffer();

  void install();
  static AccessLogBuffer* current();
  void add(const RequestRecord& record);
  void flush();

 private:
  event::Timer timer_;
  std::string lines_;
  uint32_t records_ = 0;
};

// Writes the record to the access log when it wants it: through the thread's buffer, or (no
// buffer: the main thread, tests) at once.
void logRecord(const RequestRecord& record);

}  // namespace upstream
}  // namespace sluice
