// Shared by the fuzz targets and the seed generator:
//  - FUZZ_CHECK, which abort()s (assert() would vanish under NDEBUG) so libFuzzer reports a crash;
//  - Script / ScriptWriter: the byte format the structured targets read their steps from. A target
//    reads its input front to back as small integers and byte strings; past the end everything
//    reads as zero, so every input is a valid script. fuzz-seeds writes seeds with ScriptWriter
//    using the same calls, so a seed is a meaningful script and mutations stay close to one;
//  - SocketPair: a non-blocking AF_UNIX stream pair, the stand-in for a tcp connection (FrameReader
//    and Outbox only ever recv/send on a stream fd).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "common/wire.h"

#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace rc::fuzz {

// Reads a script front to back; everything past the end reads as zero.
class Script {
 public:
  Script(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  std::size_t remaining() const { return empty() ? 0 : size_ - pos_; }

  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  bool flag() { return (u8() & 1) != 0; }

  // A value in [0, max], read with as few bytes as max needs (1, 2 or 4).
  uint32_t upto(uint32_t max) {
    if (max == 0) return 0;
    const uint32_t v = max < 0x100u ? u8() : max < 0x10000u ? u16() : u32();
    return max == UINT32_MAX ? v : v % (max + 1);
  }

  // Up to n bytes (fewer at the end of the input).
  std::span<const uint8_t> bytes(std::size_t n) {
    const std::size_t take = n < remaining() ? n : remaining();
    std::span<const uint8_t> out(data_ + pos_, take);
    pos_ += take;
    return out;
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Writes what Script reads: the same call with the value read gives back that value.
class ScriptWriter {
 public:
  ScriptWriter& u8(uint8_t v) {
    out_.push_back(v);
    return *this;
  }
  ScriptWriter& u16(uint16_t v) { return u8(static_cast<uint8_t>(v)).u8(static_cast<uint8_t>(v >> 8)); }
  ScriptWriter& u32(uint32_t v) { return u16(static_cast<uint16_t>(v)).u16(static_cast<uint16_t>(v >> 16)); }
  ScriptWriter& u64(uint64_t v) { return u32(static_cast<uint32_t>(v)).u32(static_cast<uint32_t>(v >> 32)); }
  ScriptWriter& flag(bool v) { return u8(v ? 1 : 0); }
  ScriptWriter& upto(uint32_t v, uint32_t max) {
    if (max == 0) return *this;
    if (max < 0x100u) return u8(static_cast<uint8_t>(v));
    if (max < 0x10000u) return u16(static_cast<uint16_t>(v));
    return u32(v);
  }
  ScriptWriter& bytes(std::span<const uint8_t> b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  ScriptWriter& bytes(std::span<const std::byte> b) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data());
    out_.insert(out_.end(), p, p + b.size());
    return *this;
  }
  const std::vector<uint8_t>& data() const { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// A connected, non-blocking AF_UNIX stream pair; both ends closed on destruction.
struct SocketPair {
  int a = -1;
  int b = -1;

  SocketPair() {
    int fds[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;

  // Caps what may sit unread in the socket, sent from `fd` (the kernel doubles and rounds it up).
  static void set_sndbuf(int fd, int bytes) { setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes); }
};

// The byte at position `at` of a test stream: a pattern that does not repeat within any length a
// test uses, so lost, repeated or reordered bytes show.
inline uint8_t stream_byte(uint64_t at) {
  uint64_t x = at * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 17));
}

// stream_byte(0 .. kPatternBytes-1), computed once: targets fill and compare buffers with memcpy and
// memcmp from here instead of byte loops (which the fuzzer's comparison tracing makes slow).
inline constexpr std::size_t kPatternBytes = 9u << 20;

inline const uint8_t* pattern() {
  static const uint8_t* const bytes = [] {
    auto* b = new uint8_t[kPatternBytes];  // never freed: libFuzzer may exit from any thread
    for (std::size_t i = 0; i < kPatternBytes; ++i) b[i] = stream_byte(i);
    return b;
  }();
  return bytes;
}

// `n` pattern bytes starting at a position derived from `key` (for buffers that need distinct
// contents, not a stream position).
inline const uint8_t* pattern_for(uint64_t key, std::size_t n) {
  FUZZ_CHECK(n <= kPatternBytes / 2);
  return pattern() + (key * 4099) % (kPatternBytes - n);
}

// The model of tcp::FrameReader::next shared by the harnesses: what it must answer for the bytes
// sent and not yet consumed. Incomplete is Busy, or end of stream once the sender has shut down.
enum class Framing { Frame, Protocol, Incomplete };
inline Framing expected_framing(std::span<const uint8_t> unread, wire::Kind kind, bool allow_notice,
                                std::size_t& length) {
  if (unread.size() < sizeof(wire::FrameHeader)) return Framing::Incomplete;
  wire::FrameHeader h;
  std::memcpy(&h, unread.data(), sizeof h);
  const bool kind_ok = h.kind == static_cast<uint8_t>(kind) ||
                       (allow_notice && h.kind == static_cast<uint8_t>(wire::Kind::Notice));
  if (h.magic != wire::kMagic || h.version != wire::kVersion || !kind_ok || h.bytes < sizeof h ||
      h.bytes > wire::kMaxFrame)
    return Framing::Protocol;
  if (unread.size() < h.bytes) return Framing::Incomplete;
  length = h.bytes;
  return Framing::Frame;
}

}  // namespace rc::fuzz
