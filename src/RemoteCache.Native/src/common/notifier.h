// Sleep/wake between a polling thread that has gone idle and whoever has work for it.
// The sleeper announces itself in `sleeping` (which may live in shared memory), re-checks for
// work, then blocks on an eventfd; a producer that publishes work and then sees `sleeping` set
// writes the eventfd. Both sides use sequentially consistent accesses so that at least one of
// them notices the other (the producer's publish vs. the sleeper's re-check).
#pragma once

#include <atomic>
#include <cstdint>

namespace rc {

class EventFd {
 public:
  EventFd();  // creates a non-blocking eventfd; throws std::system_error on failure
  explicit EventFd(int adopted_fd) : fd_(adopted_fd) {}
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  EventFd(EventFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

  int fd() const { return fd_; }
  void signal() const;
  void drain() const;

 private:
  int fd_ = -1;
};

// Producer side: call after publishing work.
inline void wake_if_sleeping(std::atomic<uint32_t>& sleeping, const EventFd& event) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_relaxed) != 0) event.signal();
}

}  // namespace rc
