#pragma once

#include <atomic>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice {

enum class LogLevel : int { Error = 0, Warn = 1, Info = 2, Debug = 3 };

namespace logger {

// Process-wide level; written at startup and on reload, read on every log call.
extern std::atomic<int> g_level;

inline bool enabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}
void setLevel(LogLevel level);
// "error" | "warn" | "info" | "debug"; false when the name is unknown.
bool parseLevel(std::string_view name, LogLevel& out);
// One line to stderr with a timestamp, the level and the thread's name.
void write(LogLevel level, std::string_view message);
// Names the calling thread in log lines ("main", "worker0", ...).
void setThreadName(std::string_view name);

}  // namespace logger
}  // namespace sluice

#define SLUICE_LOG(LEVEL, ...)                                                          \
  do {                                                                                  \
    if (::sluice::logger::enabled(::sluice::LogLevel::LEVEL)) {                         \
      ::sluice::logger::write(::sluice::LogLevel::LEVEL, absl::StrFormat(__VA_ARGS__)); \
    }                                                                                   \
  } while (false)

// For conditions that only a bug can produce; never for anything a peer can send.
#define SLUICE_ASSERT(COND, MSG)                                                                 \
  do {                                                                                           \
    if (!(COND)) {                                                                               \
      ::sluice::logger::write(                                                                   \
          ::sluice::LogLevel::Error,                                                             \
          absl::StrFormat("assertion failed: %s: %s at %s:%d", #COND, MSG, __FILE__, __LINE__)); \
      abort();                                                                                   \
    }                                                                                            \
  } while (false)
