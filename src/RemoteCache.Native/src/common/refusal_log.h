// Refused connections, logged at most once per (cause, peer) and window: the first refusal of a kind from a peer is
// logged whole; the ones after it within the window are counted and summed up in one line when the window has
// passed (at the next refusal of any kind, or at flush). A client that retries, or a peer that floods the server
// with forged capabilities or silent connections, costs a line per window, not one per connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace rc {

class RefusalLog {
 public:
  using Sink = std::function<void(const std::string& line)>;

  // Peers beyond max_keys distinct (cause, peer) pairs in one window are counted together as "other peers".
  RefusalLog(uint64_t window_ns, std::size_t max_keys, Sink sink);

  // A connection from `peer` was refused for `cause` (a short, fixed phrase); `message` says why in full.
  void refused(std::string_view cause, std::string_view peer, const std::string& message, uint64_t now_ns);
  // Sums up every window that has passed by `now_ns` (UINT64_MAX: every window, as a server stops).
  void flush(uint64_t now_ns);

  // The one the server logs through: a 10 s window, lines at warning level.
  static RefusalLog& process();

  static constexpr uint64_t kWindowNs = 10'000'000'000;
  static constexpr std::size_t kMaxKeys = 256;

 private:
  struct Window {
    uint64_t start_ns = 0;
    uint64_t more = 0;  // refused after the first, not logged yet
    std::string last;
  };
  void expire_locked(uint64_t now_ns);

  const uint64_t window_ns_;
  const std::size_t max_keys_;
  const Sink sink_;
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Window> windows_;
};

// Logs a refusal through RefusalLog::process() at now_ns().
void log_refusal(std::string_view cause, std::string_view peer, const std::string& message);

}  // namespace rc
