#include "source/common/common/logger.h"

#include <cstdio>
#include <cstring>

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace logger {

std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};

namespace {
thread_local char t_thread_name[16] = "main";
constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void setLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool parseLevel(std::string_view name, LogLevel& out) {
  for (int i = 0; i < 4; ++i) {
    if (name == kLevelNames[i]) {
      out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

void setThreadName(std::string_view name) {
  size_t n = std::min(name.size(), sizeof(t_thread_name) - 1);
  memcpy(t_thread_name, name.data(), n);
  t_thread_name[n] = '\0';
}

void write(LogLevel level, std::string_view message) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line =
      absl::StrFormat("[%s.%03dZ] [%s] [%s] %s\n", stamp, static_cast<int>(tv.tv_usec / 1000),
                      t_thread_name, kLevelNames[static_cast<int>(level)], message);
  // One write(2) per line keeps lines from different threads whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace logger
}  // namespace sluice
