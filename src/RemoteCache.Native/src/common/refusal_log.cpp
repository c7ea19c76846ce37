#include "common/refusal_log.h"

#include <cstdio>

#include "common/clock.h"
#include "common/log.h"

namespace rc {

RefusalLog::RefusalLog(uint64_t window_ns, std::size_t max_keys, Sink sink)
    : window_ns_(window_ns), max_keys_(max_keys), sink_(std::move(sink)) {}

void RefusalLog::expire_locked(uint64_t now_ns) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    const Window& w = it->second;
    if (now_ns != UINT64_MAX && now_ns - w.start_ns < window_ns_) {
      ++it;
      continue;
    }
    if (w.more > 0) {
      const double seconds = static_cast<double>((now_ns == UINT64_MAX ? w.start_ns + window_ns_ : now_ns) - w.start_ns) / 1e9;
      char head[128];
      std::snprintf(head, sizeof head, "refused %llu more connection(s) within %.1f s: ", static_cast<unsigned long long>(w.more), seconds);
      sink_(head + it->first.first + " from " + it->first.second + "; the last: " + w.last);
    }
    it = windows_.erase(it);
  }
}

void RefusalLog::refused(std::string_view cause, std::string_view peer, const std::string& message, uint64_t now_ns) {
  std::lock_guard lock(mutex_);
  expire_locked(now_ns);
  std::pair<std::string, std::string> key{std::string(cause), std::string(peer)};
  auto it = windows_.find(key);
  if (it == windows_.end() && windows_.size() >= max_keys_) {
    key.second = "other peers";
    it = windows_.find(key);
  }
  if (it != windows_.end()) {
    ++it->second.more;
    it->second.last = message;
    return;
  }
  windows_.emplace(std::move(key), Window{now_ns, 0, {}});
  sink_(message);
}

void RefusalLog::flush(uint64_t now_ns) {
  std::lock_guard lock(mutex_);
  expire_locked(now_ns);
}

RefusalLog& RefusalLog::process() {
  static RefusalLog log(kWindowNs, kMaxKeys, [](const std::string& line) { RC_LOG_WARN("%s", line.c_str()); });
  return log;
}

void log_refusal(std::string_view cause, std::string_view peer, const std::string& message) {
  RefusalLog::process().refused(cause, peer, message, now_ns());
}

}  // namespace rc
