// Minimal leveled logging to stderr. The server logs why it closed a connection; the library
// logs only warnings, and only when RC_LOG is set, so that embedding applications stay quiet.
#pragma once

#include <cstdarg>

namespace rc {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace rc

#define RC_LOG_INFO(...) ::rc::log(::rc::LogLevel::Info, __VA_ARGS__)
#define RC_LOG_WARN(...) ::rc::log(::rc::LogLevel::Warn, __VA_ARGS__)
#define RC_LOG_ERROR(...) ::rc::log(::rc::LogLevel::Error, __VA_ARGS__)
