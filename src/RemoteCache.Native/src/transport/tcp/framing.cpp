#include "transport/tcp/framing.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rc::transport::tcp {

FrameReader::FrameReader() : buf_(2 * std::size_t{wire::kMaxFrame}) {}

Status FrameReader::next(int fd, wire::Kind kind, std::span<const std::byte>& frame, bool allow_notice) {
  const wire::Kind kinds[] = {kind, wire::Kind::Notice};
  return next_of(fd, std::span<const wire::Kind>(kinds, allow_notice ? 2 : 1), frame);
}

Status FrameReader::next_of(int fd, std::span<const wire::Kind> kinds, std::span<const std::byte>& frame) {
  consume();
  for (;;) {
    const std::size_t have = end_ - begin_;
    if (have >= sizeof(wire::FrameHeader)) {
      const auto h = wire::read_header(buf_.data() + begin_);
      const bool ok = std::any_of(kinds.begin(), kinds.end(),
                                  [&](wire::Kind kind) { return wire::header_ok(h, kind, wire::kMaxFrame); });
      if (!ok) return RC_E_PROTOCOL;
      if (have >= h.bytes) {
        frame = {buf_.data() + begin_, h.bytes};
        pending_ = h.bytes;
        return RC_OK;
      }
    }
    if (begin_ > 0 && buf_.size() - end_ < wire::kMaxFrame) {
      std::memmove(buf_.data(), buf_.data() + begin_, have);
      begin_ = 0;
      end_ = have;
    }
    const ssize_t n = recv(fd, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (n > 0) {
      end_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return RC_E_DISCONNECTED;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return RC_E_BUSY;
    if (errno == EINTR) continue;
    return RC_E_DISCONNECTED;
  }
}

void FrameReader::consume() {
  begin_ += pending_;
  pending_ = 0;
  if (begin_ == end_) begin_ = end_ = 0;
}

bool Outbox::push(int fd, std::span<const std::byte> data) {
  if (empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    data = data.subspan(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  if (!data.empty()) {
    compact();
    // Growing a buffer that still holds sent bytes would double them too: drop them first.
    if (begin_ > 0 && buf_.size() + data.size() > buf_.capacity()) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(begin_));
      begin_ = 0;
    }
    buf_.insert(buf_.end(), data.begin(), data.end());
  }
  return true;
}

bool Outbox::flush(int fd) {
  while (begin_ < buf_.size()) {
    const ssize_t n = send(fd, buf_.data() + begin_, buf_.size() - begin_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      begin_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    return false;
  }
  compact();
  return true;
}

// Sent bytes are dropped once they are at least half of what is held, and before the buffer grows,
// so it never holds more than about twice the unsent bytes (a reader that drains slowly but never
// completely must not make it grow), and a drained burst gives its memory back.
void Outbox::compact() {
  if (begin_ == buf_.size()) {
    buf_.clear();
    begin_ = 0;
    if (buf_.capacity() > kOutboxKeep) std::vector<std::byte>().swap(buf_);
    return;
  }
  if (begin_ > 0 && begin_ >= buf_.size() / 2) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(begin_));
    begin_ = 0;
  }
}

}  // namespace rc::transport::tcp
