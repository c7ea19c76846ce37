// A single-producer single-consumer ring of variable-size frames in memory shared by two
// processes. Each side keeps its own index privately and only publishes it; the peer's index is
// read from shared memory and validated, so a misbehaving peer can make the ring report a
// protocol error but never make this side read or write outside the ring.
//
// Record layout: u32 length, u32 zero, payload padded to 8. A length of kWrap means "skip to the
// start of the ring".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/mpsc_queue.h"
#include "common/status.h"

namespace rc::transport::shm {

struct alignas(kCacheLine) RingIndex {
  std::atomic<uint64_t> value{0};
};

// The head of a connection's shared segment; the two rings follow it.
struct SegmentHeader {
  RingIndex request_head;   // client publishes
  RingIndex request_tail;   // server publishes
  RingIndex response_head;  // server publishes
  RingIndex response_tail;  // client publishes
  alignas(kCacheLine) std::atomic<uint32_t> server_sleeping{0};
  alignas(kCacheLine) std::atomic<uint32_t> client_sleeping{0};
  uint32_t ring_bytes = 0;
};

inline constexpr uint32_t kRingBytes = 1u << 20;
inline constexpr std::size_t kSegmentBytes = sizeof(SegmentHeader) + 2 * std::size_t{kRingBytes};

class RingWriter {
 public:
  RingWriter(RingIndex& head, RingIndex& tail, std::byte* data, uint32_t size)
      : head_(head), tail_(tail), data_(data), size_(size) {}
  // RC_E_BUSY when there is no room; RC_E_PROTOCOL when the peer's index is impossible.
  Status write(std::span<const std::byte> frame);

 private:
  RingIndex& head_;
  RingIndex& tail_;
  std::byte* data_;
  uint32_t size_;
  uint64_t head_local_ = 0;
};

class RingReader {
 public:
  RingReader(RingIndex& head, RingIndex& tail, std::byte* data, uint32_t size)
      : head_(head), tail_(tail), data_(data), size_(size) {}
  // RC_OK with `frame` pointing into the ring until release(); RC_E_BUSY when empty.
  Status peek(std::span<const std::byte>& frame);
  void release();

 private:
  RingIndex& head_;
  RingIndex& tail_;
  std::byte* data_;
  uint32_t size_;
  uint64_t tail_local_ = 0;
  uint32_t pending_ = 0;  // bytes of the record handed out by peek
};

}  // namespace rc::transport::shm
