// libFuzzer target for sequences of frames on one connection, end to end through the real tcp
// stream code: a client writes a stream of Batch frames into a non-blocking AF_UNIX stream pair
// in chunk sizes the input picks; the server end cuts it into frames with tcp::FrameReader,
// executes them in order with server::execute_batch, tracking the expected sequence number
// exactly as ServerThread::serve does (at most 8 batches per pass; stop reading while more than
// 1 MiB of responses is unsent, as TcpServerConnection::next_request does; stop for good at the
// first frame that does not parse, is malformed or out of sequence: the server closes the
// connection), and queues the responses in a tcp::Outbox; the client reads them back with a
// FrameReader (Kind::Response, Notices allowed).
//
// The stream is built from the input: batches built with wire::BatchWriter (reads, writes,
// SetServerThreads, unknown ops, any region, offsets and lengths in and out of range, the
// sequence number the server expects or a wrong one), raw frames with or without a valid header
// in front, built batches with a byte flipped, and lone SetServerThreads batches.
//
// Checked against an independent model of the wire rules that keeps a shadow copy of the three
// regions: each frame the server gets is the next frame of the stream; it is executed iff the
// model accepts it (structure, size rules, seq); its response is byte for byte the model's; a
// SetServerThreads entry reports the s the model expects; the regions equal the shadow at the end
// (nothing after the first bad frame ran, nothing of a bad frame was applied); the client receives
// every response, in order, and nothing else.
//
// Grammar: fuzz_grammar.h (fuzz-sequence).

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "server/executor.h"
#include "transport/tcp/framing.h"

namespace {

using namespace rc::fuzz;
namespace wire = rc::wire;
using rc::server::RegionView;
using rc::transport::tcp::FrameReader;
using rc::transport::tcp::kOutboxLimit;
using rc::transport::tcp::Outbox;

constexpr std::size_t kHeader = sizeof(wire::FrameHeader);
// Three regions, one of odd size; each a heap block of exactly its size so ASan sees any overrun.
constexpr uint64_t kRegionSizes[3] = {64 * 1024, 64 * 1024 - 15, 4 * 1024};
constexpr std::size_t kStreamCap = 2u << 20;
constexpr int kMaxFrames = 128;

// The model: does `frame` execute as batch number `seq`, and if so, what does it do to the
// regions and what must the response be? Written from the wire rules (wire.h, executor.h), not
// from the executor.
struct ModelResult {
  bool ok = false;
  std::vector<std::byte> response;
  std::optional<uint32_t> threads;
};

ModelResult model_execute(std::span<const std::byte> frame, uint64_t seq, std::vector<std::vector<std::byte>>& shadow) {
  ModelResult res;
  if (frame.size() < kHeader) return res;
  wire::FrameHeader h;
  std::memcpy(&h, frame.data(), sizeof h);
  if (h.magic != wire::kMagic || h.version != wire::kVersion || h.kind != static_cast<uint8_t>(wire::Kind::Batch) ||
      h.bytes != frame.size() || h.bytes > wire::kMaxFrame || h.count == 0 || h.count > wire::kMaxBatchEntries ||
      h.seq != seq)
    return res;
  struct Parsed {
    wire::RequestEntry e;
    std::size_t payload;
  };
  std::vector<Parsed> entries;
  std::size_t pos = kHeader;
  uint64_t response_bytes = kHeader;
  for (uint32_t i = 0; i < h.count; ++i) {
    if (frame.size() - pos < sizeof(wire::RequestEntry)) return res;
    Parsed p{};
    std::memcpy(&p.e, frame.data() + pos, sizeof p.e);
    pos += sizeof p.e;
    const uint64_t padded = (uint64_t{p.e.length} + 7) & ~uint64_t{7};
    switch (static_cast<wire::Op>(p.e.op)) {
      case wire::Op::Write:
        if (p.e.length > wire::kMaxChunk || frame.size() - pos < padded) return res;
        p.payload = pos;
        pos += padded;
        response_bytes += sizeof(wire::ResponseEntry);
        break;
      case wire::Op::Read:
        if (p.e.length > wire::kMaxChunk) return res;
        response_bytes += sizeof(wire::ResponseEntry) + padded;
        break;
      case wire::Op::SetServerThreads:
        if (p.e.length != 0) return res;
        response_bytes += sizeof(wire::ResponseEntry);
        break;
      default:
        return res;
    }
    entries.push_back(p);
  }
  if (pos != frame.size()) return res;
  if (h.count > 1 && (frame.size() > kHeader + wire::kBatchBytes || response_bytes > kHeader + wire::kBatchBytes))
    return res;

  res.ok = true;
  res.response.resize(kHeader);
  bool all_ok = true, any_read = false;
  for (const Parsed& p : entries) {
    const auto op = static_cast<wire::Op>(p.e.op);
    wire::ResponseEntry re{RC_OK, 0};
    bool in_range = false;
    if (op != wire::Op::SetServerThreads && p.e.region < 3) {
      const uint64_t size = kRegionSizes[p.e.region];
      in_range = p.e.offset <= size && p.e.length <= size - p.e.offset;
    }
    if (op == wire::Op::SetServerThreads) {
      res.threads = static_cast<uint32_t>(std::min<uint64_t>(p.e.offset, 0xffff));
    } else if (!in_range) {
      re.status = RC_E_OUT_OF_RANGE;
      all_ok = false;
    } else if (op == wire::Op::Write) {
      std::copy_n(frame.begin() + static_cast<std::ptrdiff_t>(p.payload), p.e.length,
                  shadow[p.e.region].begin() + static_cast<std::ptrdiff_t>(p.e.offset));
    }
    if (op == wire::Op::Read) {
      any_read = true;
      if (re.status == RC_OK) re.length = p.e.length;
    }
    const auto* rb = reinterpret_cast<const std::byte*>(&re);
    res.response.insert(res.response.end(), rb, rb + sizeof re);
    if (op == wire::Op::Read) {
      const std::size_t at = res.response.size();
      res.response.resize(at + ((p.e.length + 7u) & ~7u));  // zero padding, and zeros for a failed read
      if (re.status == RC_OK)
        std::copy_n(shadow[p.e.region].begin() + static_cast<std::ptrdiff_t>(p.e.offset), p.e.length,
                    res.response.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  wire::FrameHeader rh{wire::kMagic, wire::kVersion, static_cast<uint8_t>(wire::Kind::Response), 0,
                       static_cast<uint32_t>(res.response.size()), h.count, h.seq};
  if (all_ok && !any_read) {
    rh.flags = wire::kFlagAllOk;
    rh.bytes = kHeader;
    res.response.resize(kHeader);
  }
  std::memcpy(res.response.data(), &rh, sizeof rh);
  return res;
}

class SequenceRun {
 public:
  explicit SequenceRun(bool small_socket) : out_(wire::kMaxFrame) {
    if (small_socket) {
      SocketPair::set_sndbuf(sp_.a, 4096);
      SocketPair::set_sndbuf(sp_.b, 4096);
    }
    for (std::size_t r = 0; r < 3; ++r) {
      regions_.emplace_back(kRegionSizes[r]);
      std::memcpy(regions_[r].data(), pattern_for(r, kRegionSizes[r]), kRegionSizes[r]);
      views_.push_back({regions_[r].data(), regions_[r].size()});
    }
    shadow_ = regions_;
  }

  uint64_t builder_seq() const { return frames_ + 1; }

  void append(std::span<const std::byte> frame) {
    if (stream_.size() + frame.size() > kStreamCap || frames_ >= kMaxFrames || client_shut_) return;
    const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
    stream_.insert(stream_.end(), p, p + frame.size());
    ++frames_;
  }

  void send(std::size_t max) {
    while (max > 0 && sent_ < stream_.size()) {
      const ssize_t w = ::send(sp_.a, stream_.data() + sent_, std::min(max, stream_.size() - sent_),
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        FUZZ_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
        if (errno == EINTR) continue;
        return;
      }
      sent_ += static_cast<std::size_t>(w);
      max -= static_cast<std::size_t>(w);
    }
  }

  // One ServerThread::serve pass over this connection.
  void serve() {
    if (closed_) return;
    for (int n = 0; n < 8; ++n) {
      // TcpServerConnection::next_request
      if (!outbox_.empty()) FUZZ_CHECK(outbox_.flush(sp_.b));  // the client never goes away here
      if (outbox_.size() > kOutboxLimit) break;
      std::size_t want_len = 0;
      const Want want = framing(want_len);
      std::span<const std::byte> frame;
      const rc::Status st = reader_.next(sp_.b, wire::Kind::Batch, frame);
      pos_ += pending_;
      pending_ = 0;
      if (want == Want::Busy) {
        FUZZ_CHECK(st == RC_E_BUSY);
        break;
      }
      if (want == Want::Protocol || want == Want::Eof) {
        FUZZ_CHECK(st == (want == Want::Protocol ? RC_E_PROTOCOL : RC_E_DISCONNECTED));
        closed_ = true;  // the server closes the connection
        return;
      }
      FUZZ_CHECK(st == RC_OK && frame.size() == want_len);
      FUZZ_CHECK(std::memcmp(frame.data(), stream_.data() + pos_, frame.size()) == 0);
      pending_ = frame.size();

      ModelResult model = model_execute(frame, next_seq_, shadow_);
      const rc::server::ExecResult r = rc::server::execute_batch(frame, views_, next_seq_, out_.data());
      FUZZ_CHECK(r.malformed == !model.ok);
      if (r.malformed) {
        FUZZ_CHECK(r.reason != nullptr);
        closed_ = true;  // the server closes the connection: nothing after this frame runs
        return;
      }
      FUZZ_CHECK(r.response_bytes == model.response.size());
      FUZZ_CHECK(std::memcmp(out_.data(), model.response.data(), model.response.size()) == 0);
      FUZZ_CHECK(r.server_threads == model.threads);
      ++next_seq_;
      FUZZ_CHECK(outbox_.push(sp_.b, {out_.data(), r.response_bytes}));  // send_response
      responses_.push_back(std::move(model.response));
      if (r.server_threads) threads_ = *r.server_threads;
    }
    FUZZ_CHECK(outbox_.flush(sp_.b));
  }

  // The client reads up to `max` responses: each the next one the model expects.
  void client_read(std::size_t max) {
    for (std::size_t i = 0; i < max; ++i) {
      std::span<const std::byte> frame;
      const rc::Status st = client_.next(sp_.a, wire::Kind::Response, frame, true);
      if (st == RC_E_BUSY) return;
      FUZZ_CHECK(st == RC_OK);
      FUZZ_CHECK(!responses_.empty());
      FUZZ_CHECK(frame.size() == responses_.front().size());
      FUZZ_CHECK(std::memcmp(frame.data(), responses_.front().data(), frame.size()) == 0);
      responses_.pop_front();
    }
  }

  void finish() {
    for (int guard = 0;; ++guard) {
      FUZZ_CHECK(guard < 1'000'000);
      send(SIZE_MAX);
      if (sent_ == stream_.size() && !client_shut_) {
        FUZZ_CHECK(::shutdown(sp_.a, SHUT_WR) == 0);
        client_shut_ = true;
      }
      serve();
      // After closing, the real server drops what it had queued; delivering it here lets the
      // client check every response the server produced.
      if (closed_ && !outbox_.empty()) FUZZ_CHECK(outbox_.flush(sp_.b));
      client_read(SIZE_MAX);
      if (closed_ && outbox_.empty() && responses_.empty()) break;
    }
    for (std::size_t r = 0; r < 3; ++r) FUZZ_CHECK(std::memcmp(regions_[r].data(), shadow_[r].data(), kRegionSizes[r]) == 0);
    // Nothing else arrives.
    std::span<const std::byte> frame;
    FUZZ_CHECK(client_.next(sp_.a, wire::Kind::Response, frame, true) == RC_E_BUSY);
  }

 private:
  enum class Want { Frame, Busy, Protocol, Eof };

  // What FrameReader::next must answer on the server end, from the bytes sent so far.
  Want framing(std::size_t& length) const {
    const std::size_t at = pos_ + pending_;
    switch (expected_framing({stream_.data() + at, sent_ - at}, wire::Kind::Batch, false, length)) {
      case Framing::Frame: return Want::Frame;
      case Framing::Protocol: return Want::Protocol;
      case Framing::Incomplete: break;
    }
    return client_shut_ && sent_ == stream_.size() ? Want::Eof : Want::Busy;
  }

  SocketPair sp_;  // a: the client, b: the server
  std::vector<std::vector<std::byte>> regions_;
  std::vector<std::vector<std::byte>> shadow_;
  std::vector<RegionView> views_;
  std::vector<std::byte> out_;
  std::vector<uint8_t> stream_;
  std::size_t sent_ = 0;
  int frames_ = 0;
  bool client_shut_ = false;

  // The server end.
  FrameReader reader_;
  Outbox outbox_;
  uint64_t next_seq_ = 1;
  std::size_t pos_ = 0;      // stream offset of the next frame for the server
  std::size_t pending_ = 0;  // the frame the reader handed out last
  bool closed_ = false;
  uint32_t threads_ = 0;

  // The client end.
  FrameReader client_;
  std::deque<std::vector<std::byte>> responses_;  // sent by the server, not yet read by the client
};

uint64_t scripted_seq(Script& in, uint64_t expected) {
  const uint8_t sel = in.u8();
  if (sel < 240) return expected;
  if (sel < 248) return expected + 1;
  if (sel < 252) return expected - 1;
  if (sel < 254) return 0;
  return in.u64();
}

std::vector<std::byte> built_batch(Script& in, uint64_t expected_seq) {
  std::vector<std::byte> buf(wire::kMaxFrame);
  wire::BatchWriter w(buf.data());
  std::vector<std::byte> payload;
  const uint32_t n = in.upto(15) + 1;
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t sel = in.u8() % 16;
    const auto op = sel < 7 ? wire::Op::Read : sel < 14 ? wire::Op::Write : sel == 14 ? wire::Op::SetServerThreads
                                                                                      : static_cast<wire::Op>(in.u8());
    const auto region = static_cast<uint16_t>(in.upto(3));
    uint64_t offset = 0;
    uint32_t length = 0;
    if (op == wire::Op::SetServerThreads) {
      offset = in.u16();
    } else {
      const uint64_t size = region < 3 ? kRegionSizes[region] : 4096;
      switch (in.u8() % 4) {
        case 0: offset = in.upto(4095); break;
        case 1: offset = size - in.upto(255); break;
        case 2: offset = in.u64(); break;
        case 3: offset = in.upto(0xffff); break;
      }
      switch (in.u8() % 4) {
        case 0: length = in.upto(64); break;
        case 1: length = in.upto(wire::kMaxChunk); break;
        case 2: length = wire::kMaxChunk; break;
        case 3: length = in.upto(wire::kMaxChunk + 100); break;
      }
    }
    if (!w.fits(op, length, wire::kMaxBatchEntries)) break;
    payload.resize(std::max<uint32_t>(length, 1));  // never a null source, even for 0 bytes
    std::memcpy(payload.data(), pattern_for(expected_seq * 1000003 + i + 3, length), length);
    w.add(op, region, offset, length, payload.data());
  }
  const auto frame = w.finish(scripted_seq(in, expected_seq));
  return {frame.begin(), frame.end()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Script in(data, size);
  SequenceRun run((in.u8() & kSqSmallSocket) != 0);
  for (int step = 0; step < kSqMaxSteps && !in.empty(); ++step) {
    switch (in.u8() % kSqCount) {
      case kSqBuilt:
      case kSqBuilt2:
        run.append(built_batch(in, run.builder_seq()));
        break;
      case kSqRaw: {
        const uint32_t n = in.upto(0xffff);
        std::vector<std::byte> frame;
        if (in.flag()) {
          const wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(wire::Kind::Batch), 0,
                                    static_cast<uint32_t>(kHeader + n), in.upto(255) + 1, run.builder_seq()};
          const auto* p = reinterpret_cast<const std::byte*>(&h);
          frame.assign(p, p + kHeader);
        }
        const auto body = in.bytes(n);
        const auto* b = reinterpret_cast<const std::byte*>(body.data());
        frame.insert(frame.end(), b, b + body.size());
        run.append(frame);
        break;
      }
      case kSqCorrupt: {
        auto frame = built_batch(in, run.builder_seq());
        const uint32_t at = in.upto(0xffff);
        frame[at % frame.size()] ^= static_cast<std::byte>(in.u8() | 1);
        run.append(frame);
        break;
      }
      case kSqSend:
        run.send(std::size_t{in.upto(0xffff)} + 1);
        break;
      case kSqServe:
        run.serve();
        break;
      case kSqClientRead:
        run.client_read(std::size_t{in.upto(7)} + 1);
        break;
      case kSqSetThreads: {
        const uint16_t s = in.u16();
        const uint8_t sel = in.u8();
        const uint32_t length = sel < 250 ? 0 : in.u8();
        std::vector<std::byte> buf(wire::kMaxFrame);
        wire::BatchWriter w(buf.data());
        w.add(wire::Op::SetServerThreads, 0, s, length, nullptr);
        const auto frame = w.finish(run.builder_seq());
        run.append(frame);
        break;
      }
    }
  }
  run.finish();
  return 0;
}
