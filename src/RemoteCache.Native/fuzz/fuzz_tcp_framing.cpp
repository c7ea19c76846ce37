// libFuzzer target for tcp's stream buffers (transport/tcp/framing.h), on a real non-blocking
// AF_UNIX stream pair (FrameReader and Outbox only recv/send on a stream fd, as on a tcp socket):
//
//  - FrameReader: a byte stream made of raw input bytes and synthetic frames (valid headers of
//    any size up to past kMaxFrame, other kinds, bad magic/version) is written into one end in
//    chunk sizes the input picks, while next()/consume() run on the other end as the input says.
//    Every answer is checked against an independent model of the framing rules: a returned frame
//    is exactly the next frame of the stream (same bytes), its header's size equals the span's,
//    at most kMaxFrame; RC_E_BUSY only when no whole frame has arrived; RC_E_PROTOCOL exactly at
//    the first header that is not a frame of the wanted kind (or a Notice when allowed);
//    RC_E_DISCONNECTED only once the sender has shut down and no whole frame is left.
//  - Outbox: chunks of up to 1 MiB are pushed while the peer reads irregular amounts (and
//    sometimes closes). Checked: bytes arrive in order, none lost or repeated; pushed = received +
//    queued in the socket + Outbox::size(); push/flush report a closed peer; and the memory bound
//    that framing.cpp's compaction rule gives (see check_capacity below).
//
// Grammar: fuzz_grammar.h (fuzz-tcp-framing).

#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "transport/tcp/framing.h"

namespace {

using namespace rc::fuzz;
namespace wire = rc::wire;
using rc::transport::tcp::FrameReader;
using rc::transport::tcp::kOutboxKeep;
using rc::transport::tcp::Outbox;

constexpr std::size_t kHeader = sizeof(wire::FrameHeader);

// ---- FrameReader ------------------------------------------------------------------------------

constexpr std::size_t kStreamCap = 4u << 20;
static_assert(kStreamCap <= kPatternBytes);

class ReaderRun {
 public:
  ReaderRun(wire::Kind kind, bool allow_notice, bool small_socket) : kind_(kind), allow_notice_(allow_notice) {
    if (small_socket) SocketPair::set_sndbuf(sp_.a, 4096);
  }

  bool done() const { return done_; }
  bool all_sent() const { return sent_ == stream_.size(); }

  void append(std::span<const uint8_t> bytes) {
    if (stream_.size() + bytes.size() > kStreamCap || shut_) return;
    stream_.insert(stream_.end(), bytes.begin(), bytes.end());
  }

  void append_frame(uint8_t kind, uint32_t bytes_field, uint8_t corruption) {
    const std::size_t length = bytes_field < kHeader ? kHeader : bytes_field;
    if (stream_.size() + length > kStreamCap || shut_) return;
    wire::FrameHeader h{wire::kMagic, wire::kVersion, kind, 0, bytes_field, 1, ++frames_};
    if (corruption == 6) h.magic ^= 0x100;
    if (corruption == 7) h.version = static_cast<uint8_t>(h.version + 1);
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    stream_.insert(stream_.end(), p, p + kHeader);
    const std::size_t at = stream_.size();
    stream_.resize(at + (length - kHeader));
    std::memcpy(stream_.data() + at, pattern() + at, length - kHeader);  // stream_byte(at ...)
  }

  // Sends up to `max` unsent bytes, as many as the socket takes.
  void send(std::size_t max) {
    while (max > 0 && sent_ < stream_.size() && !shut_) {
      const std::size_t n = std::min(max, stream_.size() - sent_);
      const ssize_t w = ::send(sp_.a, stream_.data() + sent_, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        FUZZ_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
        if (errno == EINTR) continue;
        return;
      }
      FUZZ_CHECK(w > 0);
      sent_ += static_cast<std::size_t>(w);
      max -= static_cast<std::size_t>(w);
    }
  }

  void shutdown_sender() {
    if (shut_) return;
    FUZZ_CHECK(::shutdown(sp_.a, SHUT_WR) == 0);
    shut_ = true;
    stream_.resize(sent_);  // never sent now
  }

  void next(bool consume_after) {
    if (done_) return;
    std::size_t want_len = 0;
    const Want want = model(want_len);
    std::span<const std::byte> frame;
    const rc::Status st = reader_.next(sp_.b, kind_, frame, allow_notice_);
    // next() consumes the frame it handed out before.
    pos_ += pending_;
    pending_ = 0;
    switch (want) {
      case Want::Frame: {
        FUZZ_CHECK(st == RC_OK);
        FUZZ_CHECK(frame.size() == want_len);
        FUZZ_CHECK(frame.size() >= kHeader && frame.size() <= wire::kMaxFrame);
        const auto h = wire::read_header(frame.data());
        FUZZ_CHECK(h.bytes == frame.size());
        FUZZ_CHECK(h.kind == static_cast<uint8_t>(kind_) ||
                   (allow_notice_ && h.kind == static_cast<uint8_t>(wire::Kind::Notice)));
        FUZZ_CHECK(std::memcmp(frame.data(), stream_.data() + pos_, frame.size()) == 0);
        pending_ = frame.size();
        if (consume_after) consume();
        break;
      }
      case Want::Busy:
        FUZZ_CHECK(st == RC_E_BUSY);
        break;
      case Want::Protocol:
        FUZZ_CHECK(st == RC_E_PROTOCOL);
        // The caller closes the connection; the reader keeps saying so if asked again.
        FUZZ_CHECK(reader_.next(sp_.b, kind_, frame, allow_notice_) == RC_E_PROTOCOL);
        done_ = true;
        break;
      case Want::Eof:
        FUZZ_CHECK(st == RC_E_DISCONNECTED);
        done_ = true;
        break;
    }
  }

  void consume() {
    reader_.consume();
    pos_ += pending_;
    pending_ = 0;
  }

  // Sends the rest, shuts the sender down and reads until the stream ends.
  void finish() {
    for (int guard = 0; !done_; ++guard) {
      FUZZ_CHECK(guard < 1'000'000);
      if (!shut_) {
        send(SIZE_MAX);
        if (all_sent()) shutdown_sender();
      }
      next(false);
    }
  }

 private:
  enum class Want { Frame, Busy, Protocol, Eof };

  // What next() must answer, from the bytes sent so far alone.
  Want model(std::size_t& length) const {
    const std::size_t at = pos_ + pending_;
    switch (expected_framing({stream_.data() + at, sent_ - at}, kind_, allow_notice_, length)) {
      case Framing::Frame: return Want::Frame;
      case Framing::Protocol: return Want::Protocol;
      case Framing::Incomplete: break;
    }
    return shut_ ? Want::Eof : Want::Busy;
  }

  SocketPair sp_;  // a: sender, b: the FrameReader's end
  FrameReader reader_;
  const wire::Kind kind_;
  const bool allow_notice_;
  std::vector<uint8_t> stream_;  // everything appended
  std::size_t sent_ = 0;         // stream_[0, sent_) went into the socket
  std::size_t pos_ = 0;          // where the next frame starts (after the consumed ones)
  std::size_t pending_ = 0;      // a frame handed out and not consumed yet
  uint64_t frames_ = 0;
  bool shut_ = false;
  bool done_ = false;
};

void fuzz_reader(Script& in) {
  const uint8_t config = in.u8();
  ReaderRun run((config & kRdResponse) ? wire::Kind::Response : wire::Kind::Batch, (config & kRdAllowNotice) != 0,
                (config & kRdSmallSocket) != 0);
  static constexpr uint8_t kKinds[] = {
      static_cast<uint8_t>(wire::Kind::Batch),   static_cast<uint8_t>(wire::Kind::Response),
      static_cast<uint8_t>(wire::Kind::Notice),  static_cast<uint8_t>(wire::Kind::Connect),
      static_cast<uint8_t>(wire::Kind::ConnectReply)};
  for (int step = 0; step < kRdMaxSteps && !in.empty() && !run.done(); ++step) {
    switch (in.u8() % kRdCount) {
      case kRdAppendRaw:
        run.append(in.bytes(in.upto(255)));
        break;
      case kRdAppendFrame: {
        const uint8_t sel = in.u8() % 6;
        const uint8_t kind = sel < 5 ? kKinds[sel] : in.u8();
        const uint32_t bytes_field = in.upto(wire::kMaxFrame + 64);
        const uint8_t corruption = in.u8() % 8;
        run.append_frame(kind, bytes_field, corruption);
        break;
      }
      case kRdSend:
        run.send(std::size_t{in.upto(0xffff)} + 1);
        break;
      case kRdSendAll:
        run.send(SIZE_MAX);
        break;
      case kRdNext:
        run.next(in.flag());
        break;
      case kRdConsume:
        run.consume();
        break;
      case kRdShutdown:
        run.shutdown_sender();
        break;
    }
  }
  run.finish();
}

// ---- Outbox -----------------------------------------------------------------------------------

// Pushes stop at this much (keeps a run's memory small).
constexpr uint64_t kPushCap = 4u << 20;
static_assert(kPushCap <= kPatternBytes);

class OutboxRun {
 public:
  explicit OutboxRun(int sndbuf) {
    if (sndbuf > 0) SocketPair::set_sndbuf(sp_.a, sndbuf);
  }

  bool peer_closed() const { return sp_.b < 0; }

  void push(std::size_t n) {
    if (pushed_ + n > kPushCap) return;
    const std::span<const std::byte> data(reinterpret_cast<const std::byte*>(pattern()) + pushed_, n);
    const bool was_empty = box_.empty();
    const bool ok = box_.push(sp_.a, data);
    pushed_ += n;
    if (peer_closed()) {
      // An empty outbox tries to send at once and learns that the peer is gone; a non-empty one
      // only queues (flush() will tell).
      if (was_empty) FUZZ_CHECK(!ok);
      return;
    }
    FUZZ_CHECK(ok);
    peak_ = std::max(peak_, box_.size());
    check();
  }

  void flush() {
    const bool ok = box_.flush(sp_.a);
    if (peer_closed()) {
      if (!box_.empty()) FUZZ_CHECK(!ok);
      return;
    }
    FUZZ_CHECK(ok);
    check();
  }

  // The peer reads up to `max` bytes; every byte must be the next one pushed.
  void read(std::size_t max) {
    if (peer_closed()) return;
    static std::vector<uint8_t> buf(256 * 1024);
    while (max > 0) {
      const ssize_t n = recv(sp_.b, buf.data(), std::min(max, buf.size()), MSG_DONTWAIT);
      if (n < 0) {
        FUZZ_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
        if (errno == EINTR) continue;
        break;
      }
      FUZZ_CHECK(n > 0);  // the outbox's end never shuts down
      FUZZ_CHECK(std::memcmp(buf.data(), pattern() + received_, static_cast<std::size_t>(n)) == 0);
      received_ += static_cast<uint64_t>(n);
      max -= static_cast<std::size_t>(n);
    }
    check();
  }

  void close_peer() {
    close(sp_.b);
    sp_.b = -1;
  }

  // The peer drains while the outbox flushes: everything pushed arrives, in order.
  void finish() {
    if (peer_closed()) {
      if (!box_.empty()) FUZZ_CHECK(!box_.flush(sp_.a));
      return;
    }
    for (int guard = 0; !box_.empty() || queued() > 0; ++guard) {
      FUZZ_CHECK(guard < 100'000);
      flush();
      read(SIZE_MAX);
    }
    FUZZ_CHECK(received_ == pushed_);
    FUZZ_CHECK(box_.size() == 0);
    FUZZ_CHECK(box_.capacity() <= kOutboxKeep);
  }

 private:
  std::size_t queued() const {
    int n = 0;
    FUZZ_CHECK(ioctl(sp_.b, FIONREAD, &n) == 0);
    return static_cast<std::size_t>(n);
  }

  void check() {
    FUZZ_CHECK(pushed_ == received_ + queued() + box_.size());
    check_capacity();
    if (box_.empty()) peak_ = 0;
  }

  // What framing.h promises. The buffer only grows in push, after the sent prefix was dropped, to at
  // most twice its unsent bytes (std::vector's geometric growth); it never shrinks except when it
  // drains (to at most kOutboxKeep). So capacity <= 2 x peak unsent since it was last empty, plus the
  // keep threshold, plus a frame of slack.
  void check_capacity() {
    const std::size_t cap = box_.capacity();
    if (box_.empty()) {
      FUZZ_CHECK(cap <= kOutboxKeep);
      return;
    }
    FUZZ_CHECK(cap <= 2 * peak_ + wire::kMaxFrame + kOutboxKeep);
  }

  SocketPair sp_;  // a: the outbox's end, b: the peer
  Outbox box_;
  uint64_t pushed_ = 0;
  uint64_t received_ = 0;
  std::size_t peak_ = 0;  // most unsent bytes since the outbox was last empty
};

void fuzz_outbox(Script& in) {
  static constexpr int kSndbuf[] = {0, 4096, 32 * 1024, 256 * 1024};
  OutboxRun run(kSndbuf[in.u8() % 4]);
  for (int step = 0; step < kObMaxSteps && !in.empty(); ++step) {
    const uint8_t op = in.u8() % kObCount;
    if (op == kObClosePeer) {
      run.close_peer();
      // What a server does next with a gone peer: it flushes, or pushes a response.
      run.flush();
      run.push(std::size_t{in.upto(255)} + 1);
      break;
    }
    switch (op) {
      case kObPushSmall:
        run.push(std::size_t{in.upto(255)} + 1);
        break;
      case kObPushFrame:
        run.push(std::size_t{in.upto(0xffff)} + 1);
        break;
      case kObPushBig:
        run.push((std::size_t{in.upto(255)} + 1) * 4096);
        break;
      case kObFlush:
        run.flush();
        break;
      case kObRead:
      case kObRead2:
        run.read(std::size_t{in.upto(0xffff)} + 1);
        break;
      case kObReadAll:
        run.read(SIZE_MAX);
        break;
    }
  }
  run.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Script in(data, size);
  if (in.u8() % 2 == 0) {
    fuzz_reader(in);
  } else {
    fuzz_outbox(in);
  }
  return 0;
}
