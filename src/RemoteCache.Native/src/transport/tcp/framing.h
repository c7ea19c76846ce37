// tcp's two stream buffers, apart from the sockets so that they can be tested and fuzzed alone:
// FrameReader cuts a byte stream into whole frames; Outbox keeps what the socket did not take yet.
// Both hold memory bounded by their capacity, never by how much a peer sends or fails to read.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/wire.h"

namespace rc::transport::tcp {

// Above this much unsent response data the server stops reading a connection's requests: a client
// that does not drain its responses must not make the server buffer without bound. An outbox then
// holds at most about twice this plus one frame.
inline constexpr std::size_t kOutboxLimit = 1u << 20;
// An outbox that grew past this for a burst gives the memory back once it has drained.
inline constexpr std::size_t kOutboxKeep = 256 * 1024;

class FrameReader {
 public:
  FrameReader();

  // RC_OK with the next frame (of `kind`, or a Notice when `allow_notice`), valid until consume();
  // RC_E_BUSY when incomplete; RC_E_DISCONNECTED on end of stream; RC_E_PROTOCOL when the stream
  // is not frames.
  Status next(int fd, wire::Kind kind, std::span<const std::byte>& frame, bool allow_notice = false);
  // Like next(), for a stream whose next frame may be of any of `kinds` (a connection's first
  // frame: a Connect or an AdminHello; the frames of an admin connection).
  Status next_of(int fd, std::span<const wire::Kind> kinds, std::span<const std::byte>& frame);
  void consume();
  // The bytes read and not consumed (after RC_E_PROTOCOL: what did not parse, to say why).
  std::span<const std::byte> buffered() const { return {buf_.data() + begin_, end_ - begin_}; }

 private:
  std::vector<std::byte> buf_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::size_t pending_ = 0;
};

class Outbox {
 public:
  // Sends what it can without blocking and keeps the rest; false when the peer is gone.
  bool push(int fd, std::span<const std::byte> data);
  // Sends what it can; false when the peer is gone (check empty() for whether all went).
  bool flush(int fd);

  bool empty() const { return begin_ == buf_.size(); }
  std::size_t size() const { return buf_.size() - begin_; }
  // Bytes held, sent or not: what the connection costs (at most about twice the most unsent bytes
  // since it was last empty, or kOutboxKeep once drained).
  std::size_t capacity() const { return buf_.capacity(); }

 private:
  void compact();

  std::vector<std::byte> buf_;
  std::size_t begin_ = 0;
};

}  // namespace rc::transport::tcp
