#include "transport/shm/shm_ring.h"

#include <cstring>

#include "common/wire.h"

namespace rc::transport::shm {
namespace {
constexpr uint32_t kWrap = 0xffffffffu;
constexpr uint32_t kRecordHeader = 8;
}  // namespace

Status RingWriter::write(std::span<const std::byte> frame) {
  const auto length = static_cast<uint32_t>(frame.size());
  const uint32_t need = kRecordHeader + wire::pad8(length);
  if (need > size_ / 2) return RC_E_INVALID_ARGUMENT;
  const uint64_t tail = tail_.value.load(std::memory_order_acquire);
  const uint64_t used = head_local_ - tail;
  if (used > size_) return RC_E_PROTOCOL;
  const auto pos = static_cast<uint32_t>(head_local_ % size_);
  const uint32_t contiguous = size_ - pos;
  const uint32_t total = need + (contiguous < need ? contiguous : 0);
  if (size_ - used < total) return RC_E_BUSY;
  uint64_t head = head_local_;
  if (contiguous < need) {
    std::memcpy(data_ + pos, &kWrap, sizeof kWrap);
    head += contiguous;
  }
  std::byte* rec = data_ + head % size_;
  const uint32_t words[2] = {length, 0};
  std::memcpy(rec, words, sizeof words);
  if (length > 0) std::memcpy(rec + kRecordHeader, frame.data(), length);
  head += need;
  head_local_ = head;
  head_.value.store(head, std::memory_order_release);
  return RC_OK;
}

Status RingReader::peek(std::span<const std::byte>& frame) {
  for (;;) {
    const uint64_t head = head_.value.load(std::memory_order_acquire);
    if (head == tail_local_) return RC_E_BUSY;
    const uint64_t available = head - tail_local_;
    if (available > size_) return RC_E_PROTOCOL;
    const auto pos = static_cast<uint32_t>(tail_local_ % size_);
    uint32_t length = 0;
    std::memcpy(&length, data_ + pos, sizeof length);
    if (length == kWrap) {
      const uint32_t skip = size_ - pos;
      if (available < skip) return RC_E_PROTOCOL;
      tail_local_ += skip;
      continue;
    }
    if (length > wire::kMaxFrame) return RC_E_PROTOCOL;
    const uint32_t need = kRecordHeader + wire::pad8(length);
    if (need > size_ - pos || need > available) return RC_E_PROTOCOL;
    frame = {data_ + pos + kRecordHeader, length};
    pending_ = need;
    return RC_OK;
  }
}

void RingReader::release() {
  tail_local_ += pending_;
  pending_ = 0;
  tail_.value.store(tail_local_, std::memory_order_release);
}

}  // namespace rc::transport::shm
