// Bounded lock-free queue for many producers (sessions) and one consumer (a client thread).
// Each cell carries a sequence number (Vyukov's bounded MPMC design): a producer claims a slot
// with one CAS on the tail, so producers never wait on each other's copies, and the order of one
// producer's pushes is the order the consumer sees them — which is what keeps a session's
// program order across the hand-off.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace rc {

inline constexpr std::size_t kCacheLine = 64;

template <typename T>
class MpscQueue {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit MpscQueue(std::size_t capacity)
      : mask_(std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity) - 1),
        cells_(std::make_unique<Cell[]>(mask_ + 1)) {
    for (std::size_t i = 0; i <= mask_; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  std::size_t capacity() const { return mask_ + 1; }

  bool try_push(const T& value) {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const std::size_t seq = cell.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Single consumer: no CAS needed on the head.
  bool try_pop(T& out) {
    Cell& cell = cells_[head_ & mask_];
    const std::size_t seq = cell.seq.load(std::memory_order_acquire);
    if (static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(head_ + 1) < 0) return false;
    out = cell.value;
    cell.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

  // Racy by nature; good for "probably empty" decisions such as whether to flush a batch.
  bool empty_hint() const {
    const Cell& cell = cells_[head_ & mask_];
    return static_cast<std::ptrdiff_t>(cell.seq.load(std::memory_order_acquire)) -
               static_cast<std::ptrdiff_t>(head_ + 1) < 0;
  }

 private:
  struct alignas(kCacheLine) Cell {
    std::atomic<std::size_t> seq{0};
    T value{};
  };

  const std::size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(kCacheLine) std::atomic<std::size_t> tail_{0};
  alignas(kCacheLine) std::size_t head_ = 0;
};

// Bounded single-producer single-consumer queue: a client thread hands completions to the one
// application thread that owns the session.
template <typename T>
class SpscQueue {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit SpscQueue(std::size_t capacity)
      : mask_(std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity) - 1),
        items_(std::make_unique<T[]>(mask_ + 1)) {}

  std::size_t capacity() const { return mask_ + 1; }

  bool try_push(const T& value) {
    const std::size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_cache_ > mask_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail - head_cache_ > mask_) return false;
    }
    items_[tail & mask_] = value;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Pops up to `max` items into `out`; returns how many.
  std::size_t pop_many(T* out, std::size_t max) {
    const std::size_t head = head_.load(std::memory_order_relaxed);
    std::size_t available = tail_cache_ - head;
    if (available == 0) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      available = tail_cache_ - head;
    }
    const std::size_t n = available < max ? available : max;
    for (std::size_t i = 0; i < n; ++i) out[i] = items_[(head + i) & mask_];
    head_.store(head + n, std::memory_order_release);
    return n;
  }

  bool empty() const {
    return tail_.load(std::memory_order_acquire) == head_.load(std::memory_order_acquire);
  }

 private:
  const std::size_t mask_;
  std::unique_ptr<T[]> items_;
  alignas(kCacheLine) std::atomic<std::size_t> tail_{0};
  std::size_t head_cache_ = 0;  // producer's view of head
  alignas(kCacheLine) std::atomic<std::size_t> head_{0};
  std::size_t tail_cache_ = 0;  // consumer's view of tail
};

}  // namespace rc
