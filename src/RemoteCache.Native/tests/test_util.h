// Small helpers shared by the test files: scaling of work under sanitizers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace rctest {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

inline bool under_sanitizer() {
  const char* v = std::getenv("RC_UNDER_SANITIZER");
  return kSanitizedBuild || (v != nullptr && *v != '\0' && std::string(v) != "0");
}

inline double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return (end != v && d > 0) ? d : fallback;
}

// Multiplies operation counts: RC_TEST_SCALE (default 1, or 0.25 in a sanitizer build when unset).
inline double test_scale() {
  static const double s = env_double("RC_TEST_SCALE", under_sanitizer() ? 0.25 : 1.0);
  return s;
}

// Multiplies no-progress / startup deadlines (never a lower bound on how fast something must be):
// RC_TEST_TIME_SCALE (default 1, or 3 under a sanitizer).
inline double time_scale() {
  static const double s = env_double("RC_TEST_TIME_SCALE", under_sanitizer() ? 3.0 : 1.0);
  return s;
}

inline uint64_t scaled(uint64_t n, uint64_t at_least = 1) {
  const double v = static_cast<double>(n) * test_scale();
  const auto r = static_cast<uint64_t>(v);
  return std::max(r, at_least);
}

inline int scaled_ms(int ms) { return static_cast<int>(static_cast<double>(ms) * time_scale()); }

}  // namespace rctest
