#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace rc {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("RC_LOG");
  if (env == nullptr) return LogLevel::Off;
  if (std::strcmp(env, "debug") == 0) return LogLevel::Debug;
  if (std::strcmp(env, "info") == 0) return LogLevel::Info;
  if (std::strcmp(env, "error") == 0) return LogLevel::Error;
  return LogLevel::Warn;
}

std::atomic<LogLevel> g_level{initial_level()};

}  // namespace

void set_log_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log(LogLevel level, const char* fmt, ...) {
  if (level < log_level()) return;
  static const char* const kNames[] = {"debug", "info", "warn", "error"};
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  std::fprintf(stderr, "[%lld.%06ld remotecache %s] %s\n", static_cast<long long>(ts.tv_sec),
               ts.tv_nsec / 1000, kNames[static_cast<int>(level)], line);
}

}  // namespace rc
