// libFuzzer target for the client's side of a connection: client::Channel (batching, one-sided
// posts, Channel::progress -> take_response, Notice handling, departure, fail_all) over a fake
// transport::ClientConnection whose server is scripted by the input.
//
// The fake server answers each batch honestly (rc::server::execute_batch against two 64 KiB
// regions), or with that answer mutated (a flipped byte, another seq or count, truncated or
// extended, the all-OK flag toggled, an entry's status replaced by any integer), or with raw bytes,
// a Notice, RC_E_BUSY, or a transport error; it completes one-sided operations, or sends a
// completion nobody posted; send_frame can be busy or fail; liveness probes can fail. Ops are
// submitted, flushed and progressed as Session and Worker do, with read buffers that are real heap
// blocks of exactly the op's length, so ASan sees any access outside them.
//
// Checked:
//  - every op completes exactly once, through rc::client::complete, with the op that was
//    submitted, and all of them complete once the fake server answers honestly (or the channel
//    broke);
//  - every batch the channel sends is well formed (seq 1, 2, 3...; entries equal to the ops
//    submitted, in order, write payloads equal to the caller's buffers; batch rules kept) and
//    every one-sided post is the op the channel took last;
//  - an op answered by an honest response completes with that response's status and, for a read,
//    exactly its data, unless the channel broke first, in which case it completes with the
//    channel's failure status;
//  - progress() never reports more completions than happened.
//
// Completions: Channel reports through the free function rc::client::complete(), which the
// library defines in session.cpp to call Session::on_complete(). Building a Session needs a
// client::Cache, which can only be made by connecting to servers, so this target defines
// rc::client::complete itself: channel.cpp's object file needs nothing else from session.cpp,
// so the linker never pulls session.o out of the static library (and would report a duplicate
// definition, not pick one silently, if a change ever made it).
//
// Grammar: fuzz_grammar.h (fuzz-response).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "client/channel.h"
#include "client/op.h"
#include "common/log.h"
#include "common/status.h"
#include "common/wire.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "server/executor.h"
#include "transport/connect_codec.h"
#include "transport/transport.h"

namespace {

using namespace rc::fuzz;
namespace wire = rc::wire;
using rc::Status;
using rc::client::Op;

constexpr uint64_t kRegionBytes = 64 * 1024;
constexpr std::size_t kHeader = sizeof(wire::FrameHeader);

struct OpRecord {
  Op op{};
  std::unique_ptr<uint8_t[]> buffer;  // exactly op.length bytes
  uint32_t completions = 0;
  int32_t status = 0;
  bool sent = false;  // went out in a batch, or was posted one-sided
  // Set when an honest answer covering this op is handed to the channel.
  bool expect = false;
  int32_t expect_status = 0;
  std::vector<uint8_t> expect_data;
};

struct Expectation {
  uint32_t slot;
  int32_t status;
  std::vector<uint8_t> data;  // a read's data
};

// What poll_response hands out next, as scripted.
struct Item {
  enum Kind { Frame, Busy, Error } kind = Frame;
  Status error = RC_OK;
  std::vector<std::byte> frame;
  std::vector<Expectation> expectations;  // an honest answer's
};

struct Sent {
  std::vector<std::byte> frame;
  std::vector<uint32_t> slots;  // the ops of its entries, in order
};

class Harness;
Harness* g_harness = nullptr;

class FakeLink final : public rc::transport::ClientConnection {
 public:
  FakeLink(Harness& h, bool one_sided, bool ring_poll) : h_(h), one_sided_(one_sided), ring_poll_(ring_poll) {
    reply_.region_count = 2;
    reply_.region_size = kRegionBytes;
    reply_.max_frame = wire::kMaxFrame;
    for (std::size_t i = 0; i < 2; ++i) {
      regions_[i].resize(kRegionBytes);
      std::memcpy(regions_[i].data(), pattern_for(i, kRegionBytes), kRegionBytes);
    }
    for (auto& r : regions_) views_.push_back({r.data(), r.size()});
  }

  const wire::ConnectReply& reply() const override { return reply_; }
  bool one_sided() const override { return one_sided_; }
  uint32_t max_inline() const override { return 0; }

  Status post_read(uint64_t wr_id, uint16_t region, uint64_t offset, void* dst, uint32_t length) override {
    return post(wr_id, wire::Op::Read, region, offset, dst, length);
  }
  Status post_write(uint64_t wr_id, uint16_t region, uint64_t offset, const void* src, uint32_t length) override {
    return post(wr_id, wire::Op::Write, region, offset, src, length);
  }
  std::size_t poll_completions(rc::transport::WorkCompletion* out, std::size_t max) override;

  Status send_frame(std::span<const std::byte> frame) override;
  Status poll_response(std::span<const std::byte>& frame) override;
  void release_response() override { current_.reset(); }

  void arm_wait() override {}
  void disarm_wait() override {}
  void wait_fds(std::vector<int>&) const override {}
  Status check_alive() override {
    if (alive_fail_) {
      alive_fail_ = false;
      return rc::fail(RC_E_DISCONNECTED, "fake: the server is gone");
    }
    return RC_OK;
  }

  // Script controls.
  void queue(Item item) { items_.push_back(std::move(item)); }
  void queue_completions(uint32_t n, Status status) { completions_.push_back({n, status}); }
  void fail_next_probe() { alive_fail_ = true; }
  void busy_sends(uint32_t n, bool then_fail) {
    send_busy_ = n;
    send_fail_ = then_fail;
  }
  void fail_next_post(Status st) { post_fail_ = st; }

  // An answer to the oldest unanswered batch, as the server would send it; expectations for its
  // ops unless `honest` is false.
  bool answer(Item& item, bool honest);
  bool has_unanswered() const { return answered_ < sent_.size(); }
  uint64_t answered() const { return answered_; }
  uint32_t next_count() const {
    return has_unanswered() ? static_cast<uint32_t>(sent_[answered_].slots.size()) : 1;
  }

 private:
  Status post(uint64_t wr_id, wire::Op kind, uint16_t region, uint64_t offset, const void* buffer, uint32_t length);

  struct Posted {
    uint32_t slot;
    uint64_t wr_id;
  };
  struct CompletionBatch {
    uint32_t n;
    Status status;
  };

  Harness& h_;
  const bool one_sided_;
  const bool ring_poll_;
  wire::ConnectReply reply_{};
  std::vector<std::byte> regions_[2];
  std::vector<rc::server::RegionView> views_;

  std::deque<Item> items_;
  std::unique_ptr<std::byte[]> current_;  // the frame handed out, exactly its size
  std::size_t current_size_ = 0;
  std::vector<Sent> sent_;
  std::size_t answered_ = 0;
  uint64_t sent_seq_ = 0;
  std::deque<Posted> posted_;
  std::deque<CompletionBatch> completions_;
  bool alive_fail_ = false;
  uint32_t send_busy_ = 0;
  bool send_fail_ = false;
  Status post_fail_ = RC_OK;
  uint64_t polls_ = 0;
};

class Harness {
 public:
  Harness(uint8_t config, uint32_t batch, uint32_t depth) {
    knobs_.batch = batch;
    knobs_.depth = depth;
    knobs_.prefer_one_sided = (config & kRsPreferOneSided) != 0;
    knobs_.timeout_ns = (config & kRsZeroTimeout) == kRsZeroTimeout ? 0 : 10'000'000'000ull;
    auto link = std::make_unique<FakeLink>(*this, (config & kRsOneSided) != 0, (config & kRsRingPoll) != 0);
    link_ = link.get();
    channel_ = std::make_unique<rc::client::Channel>(std::move(link));
    ops_.reserve(kRsMaxOps);
    g_harness = this;
  }
  ~Harness() { g_harness = nullptr; }

  FakeLink& link() { return *link_; }
  const rc::client::Knobs& knobs() const { return knobs_; }
  std::vector<OpRecord>& ops() { return ops_; }
  std::deque<uint32_t>& unsent() { return unsent_; }

  void submit(bool read, uint16_t region, uint64_t offset, uint32_t length) {
    if (ops_.size() >= kRsMaxOps) return;
    const auto slot = static_cast<uint32_t>(ops_.size());
    OpRecord& r = ops_.emplace_back();
    r.buffer = std::make_unique<uint8_t[]>(length);
    if (read) {
      std::memset(r.buffer.get(), 0xcc, length);
    } else {
      std::memcpy(r.buffer.get(), pattern_for(slot + 2, length), length);
    }
    r.op = Op{nullptr, r.buffer.get(), offset, length, slot, 0, region,
              static_cast<uint8_t>(read ? wire::Op::Read : wire::Op::Write)};
    unsent_.push_back(slot);
    channel_->submit(r.op, knobs_);
    // Completed at once without going out (the channel had broken): it is not in any batch.
    if (r.completions > 0 && !r.sent) {
      FUZZ_CHECK(!unsent_.empty() && unsent_.back() == slot);
      unsent_.pop_back();
    }
  }

  void flush() { channel_->flush(knobs_); }

  void progress() {
    const uint64_t before = completed_;
    const std::size_t done = channel_->progress(knobs_);
    FUZZ_CHECK(done <= completed_ - before);
  }

  void on_complete(const Op& op, int32_t status) {
    // What reaches the application (rc_completion.status) is an rc_status, whatever the server
    // sent: a status the client does not know must not pass through as it is.
    FUZZ_CHECK(rc::is_known_status(status));
    FUZZ_CHECK(op.slot < ops_.size());
    OpRecord& r = ops_[op.slot];
    FUZZ_CHECK(op.buffer == r.op.buffer && op.length == r.op.length && op.offset == r.op.offset &&
               op.region == r.op.region && op.kind == r.op.kind && op.session == nullptr);
    FUZZ_CHECK(r.completions == 0);  // exactly once
    ++r.completions;
    ++completed_;
    r.status = status;
    const int32_t broken = channel_->broken();
    if (!r.sent) {
      // Never went out: only a broken channel completes it (fail_all sets broken_ first).
      FUZZ_CHECK(broken != RC_OK && status == broken);
      return;
    }
    if (!r.expect) return;
    if (broken != RC_OK) {
      FUZZ_CHECK(status == broken);
      return;
    }
    FUZZ_CHECK(r.status == r.expect_status);
    if (r.op.kind == static_cast<uint8_t>(wire::Op::Read) && status == RC_OK)
      FUZZ_CHECK(std::memcmp(r.buffer.get(), r.expect_data.data(), r.op.length) == 0);
  }

  void apply(const std::vector<Expectation>& expectations) {
    for (const auto& e : expectations) {
      OpRecord& r = ops_[e.slot];
      r.expect = true;
      r.expect_status = e.status;
      r.expect_data = e.data;
    }
  }

  // The script is over: what it queued is handed out first, then the fake server answers honestly
  // (FakeLink answers every batch once nothing is queued); every op must complete.
  void finish() {
    for (int i = 0; i < 10'000 && !all_completed(); ++i) {
      channel_->flush(knobs_);
      progress();
    }
    FUZZ_CHECK(all_completed());
    for (const auto& r : ops_) FUZZ_CHECK(r.completions == 1);
    FUZZ_CHECK(channel_->idle() || channel_->broken() != RC_OK);
  }

 private:
  bool all_completed() const { return completed_ == ops_.size(); }

  rc::client::Knobs knobs_;
  FakeLink* link_;
  std::unique_ptr<rc::client::Channel> channel_;
  std::vector<OpRecord> ops_;
  std::deque<uint32_t> unsent_;  // submitted ops not yet in a sent batch or posted, in order
  uint64_t completed_ = 0;
};

Status FakeLink::post(uint64_t wr_id, wire::Op kind, uint16_t region, uint64_t offset, const void* buffer,
                      uint32_t length) {
  FUZZ_CHECK(one_sided_);
  // The op the channel posts is the one it took last (a fresh submit, or flush()'s lone op).
  auto& unsent = h_.unsent();
  FUZZ_CHECK(!unsent.empty());
  const uint32_t slot = unsent.back();
  unsent.pop_back();
  OpRecord& r = h_.ops()[slot];
  FUZZ_CHECK(r.op.buffer == buffer && r.op.kind == static_cast<uint8_t>(kind) && r.op.region == region &&
             r.op.offset == offset && r.op.length == length && !r.sent);
  r.sent = true;
  if (post_fail_ != RC_OK) {
    const Status st = post_fail_;
    post_fail_ = RC_OK;
    return rc::fail(st, "fake: post failed");
  }
  posted_.push_back({slot, wr_id});
  return RC_OK;
}

std::size_t FakeLink::poll_completions(rc::transport::WorkCompletion* out, std::size_t max) {
  std::size_t n = posted_.size();
  Status status = RC_OK;
  if (!completions_.empty()) {
    const CompletionBatch b = completions_.front();
    completions_.pop_front();
    if (posted_.empty() && b.n > 0) {  // a completion nobody posted
      out[0] = rc::transport::WorkCompletion{~0ull, b.status};
      return 1;
    }
    n = std::min<std::size_t>(n, b.n);
    status = b.status;
  }
  n = std::min(n, max);
  std::vector<Expectation> expectations;
  for (std::size_t i = 0; i < n; ++i) {
    const Posted p = posted_.front();
    posted_.pop_front();
    OpRecord& r = h_.ops()[p.slot];
    Status st = status;
    const bool in_range = r.op.region < 2 && r.op.offset <= kRegionBytes && r.op.length <= kRegionBytes - r.op.offset;
    if (st == RC_OK && !in_range) st = RC_E_OUT_OF_RANGE;
    if (st == RC_OK) {
      std::byte* at = regions_[r.op.region].data() + r.op.offset;
      if (r.op.kind == static_cast<uint8_t>(wire::Op::Read)) {
        std::memcpy(r.buffer.get(), at, r.op.length);
      } else {
        std::memcpy(at, r.buffer.get(), r.op.length);
      }
    }
    Expectation e{p.slot, st, {}};
    if (r.op.kind == static_cast<uint8_t>(wire::Op::Read) && st == RC_OK)
      e.data.assign(r.buffer.get(), r.buffer.get() + r.op.length);
    expectations.push_back(std::move(e));
    out[i] = rc::transport::WorkCompletion{p.wr_id, st};
  }
  h_.apply(expectations);
  return n;
}

Status FakeLink::send_frame(std::span<const std::byte> frame) {
  if (send_busy_ > 0) {
    --send_busy_;
    return RC_E_BUSY;
  }
  if (send_fail_) {
    send_fail_ = false;
    return rc::fail(RC_E_DISCONNECTED, "fake: send failed");
  }
  // A well-formed batch of the ops the channel took, in order.
  FUZZ_CHECK(frame.size() >= kHeader && frame.size() <= wire::kMaxFrame);
  const auto hd = wire::read_header(frame.data());
  FUZZ_CHECK(wire::header_ok(hd, wire::Kind::Batch, frame.size()) && hd.bytes == frame.size());
  FUZZ_CHECK(hd.seq == ++sent_seq_);
  FUZZ_CHECK(hd.count >= 1 && hd.count <= h_.knobs().batch && hd.count <= wire::kMaxBatchEntries);
  Sent s;
  s.frame.assign(frame.begin(), frame.end());
  std::size_t pos = kHeader;
  uint32_t response_bytes = kHeader;
  auto& unsent = h_.unsent();
  for (uint32_t i = 0; i < hd.count; ++i) {
    FUZZ_CHECK(frame.size() - pos >= sizeof(wire::RequestEntry));
    wire::RequestEntry e;
    std::memcpy(&e, frame.data() + pos, sizeof e);
    pos += sizeof e;
    FUZZ_CHECK(!unsent.empty());
    const uint32_t slot = unsent.front();
    unsent.pop_front();
    OpRecord& r = h_.ops()[slot];
    FUZZ_CHECK(!r.sent && r.completions == 0);
    FUZZ_CHECK(e.op == r.op.kind && e.region == r.op.region && e.offset == r.op.offset && e.length == r.op.length);
    if (e.op == static_cast<uint8_t>(wire::Op::Write)) {
      const uint32_t padded = wire::pad8(e.length);
      FUZZ_CHECK(frame.size() - pos >= padded);
      FUZZ_CHECK(std::memcmp(frame.data() + pos, r.buffer.get(), e.length) == 0);
      for (uint32_t k = e.length; k < padded; ++k) FUZZ_CHECK(frame[pos + k] == std::byte{0});
      pos += padded;
    }
    response_bytes += wire::response_cost(static_cast<wire::Op>(e.op), e.length);
    r.sent = true;
    s.slots.push_back(slot);
  }
  FUZZ_CHECK(pos == frame.size());
  if (hd.count > 1)
    FUZZ_CHECK(frame.size() <= kHeader + wire::kBatchBytes && response_bytes <= kHeader + wire::kBatchBytes);
  sent_.push_back(std::move(s));
  return RC_OK;
}

bool FakeLink::answer(Item& item, bool honest) {
  if (!has_unanswered()) return false;
  const Sent& s = sent_[answered_++];
  std::vector<std::byte> out(wire::kMaxFrame);
  const auto h = wire::read_header(s.frame.data());
  const rc::server::ExecResult r = rc::server::execute_batch(s.frame, views_, h.seq, out.data());
  FUZZ_CHECK(!r.malformed);  // the channel only sends batches the server accepts
  out.resize(r.response_bytes);
  item.kind = Item::Frame;
  item.frame = std::move(out);
  item.expectations.clear();
  if (!honest) return true;
  const auto rh = wire::read_header(item.frame.data());
  std::size_t pos = kHeader;
  for (const uint32_t slot : s.slots) {
    const OpRecord& op = h_.ops()[slot];
    Expectation e{slot, RC_OK, {}};
    if ((rh.flags & wire::kFlagAllOk) == 0) {
      wire::ResponseEntry re;
      std::memcpy(&re, item.frame.data() + pos, sizeof re);
      pos += sizeof re;
      e.status = re.status;
      if (op.op.kind == static_cast<uint8_t>(wire::Op::Read)) {
        const auto* p = reinterpret_cast<const uint8_t*>(item.frame.data() + pos);
        if (re.status == RC_OK) e.data.assign(p, p + op.op.length);
        pos += wire::pad8(op.op.length);
      }
    }
    item.expectations.push_back(std::move(e));
  }
  return true;
}

Status FakeLink::poll_response(std::span<const std::byte>& frame) {
  FUZZ_CHECK(++polls_ < 1'000'000);  // the channel keeps polling without making progress
  if (current_ != nullptr) {
    if (ring_poll_) {  // like a ring: the same frame until it is released
      frame = {current_.get(), current_size_};
      return RC_OK;
    }
    current_.reset();  // like tcp's FrameReader: asking again consumes it
  }
  Item item;
  if (!items_.empty()) {
    item = std::move(items_.front());
    items_.pop_front();
  } else if (!answer(item, true)) {
    return RC_E_BUSY;
  }
  if (item.kind == Item::Busy) return RC_E_BUSY;
  if (item.kind == Item::Error) return rc::fail(item.error, "fake: connection failed");
  current_size_ = item.frame.size();
  current_ = std::make_unique<std::byte[]>(current_size_);
  if (current_size_ > 0) std::memcpy(current_.get(), item.frame.data(), current_size_);
  h_.apply(item.expectations);
  frame = {current_.get(), current_size_};
  return RC_OK;
}

void mutate(Item& item, Script& in) {
  auto& f = item.frame;
  auto header = [&](auto&& change) {
    if (f.size() < kHeader) return;
    wire::FrameHeader h = wire::read_header(f.data());
    change(h);
    std::memcpy(f.data(), &h, sizeof h);
  };
  switch (in.u8() % 8) {
    case 0: {
      const uint32_t at = in.upto(0xffff);
      const uint8_t x = static_cast<uint8_t>(in.u8() | 1);
      if (!f.empty()) f[at % f.size()] ^= static_cast<std::byte>(x);
      break;
    }
    case 1: header([](wire::FrameHeader& h) { ++h.seq; }); break;
    case 2: header([](wire::FrameHeader& h) { ++h.count; }); break;
    case 3: header([](wire::FrameHeader& h) { --h.count; }); break;
    case 4: {
      const uint32_t to = in.upto(0xffff);
      if (!f.empty()) f.resize(to % f.size());
      break;
    }
    case 5: {  // trailing bytes, with the header's size saying so or not
      const uint32_t more = in.upto(63) + 1;
      const bool patch = in.flag();
      f.resize(f.size() + more);
      if (patch) header([&](wire::FrameHeader& h) { h.bytes = static_cast<uint32_t>(f.size()); });
      break;
    }
    case 6: header([](wire::FrameHeader& h) { h.flags ^= wire::kFlagAllOk; }); break;
    case 7: {
      const uint32_t status = in.u32();
      if (f.size() >= kHeader + sizeof(wire::ResponseEntry)) std::memcpy(f.data() + kHeader, &status, sizeof status);
      break;
    }
  }
}

void respond(Harness& h, Script& in) {
  FakeLink& link = h.link();
  Item item;
  switch (in.u8() % 8) {
    case 0:
    case 1:
    case 2:
      if (link.answer(item, true)) link.queue(std::move(item));
      break;
    case 3:
      if (link.answer(item, false)) {
        mutate(item, in);
        link.queue(std::move(item));
      }
      break;
    case 4: {
      const uint32_t n = in.upto(0x1ff);
      const bool patch = in.flag();
      const auto body = in.bytes(n);
      if (patch) {
        const wire::FrameHeader hd{wire::kMagic, wire::kVersion, static_cast<uint8_t>(wire::Kind::Response), 0,
                                   static_cast<uint32_t>(kHeader + body.size()), link.next_count(),
                                   link.answered() + 1};
        const auto* p = reinterpret_cast<const std::byte*>(&hd);
        item.frame.assign(p, p + kHeader);
      }
      const auto* b = reinterpret_cast<const std::byte*>(body.data());
      item.frame.insert(item.frame.end(), b, b + body.size());
      link.queue(std::move(item));
      break;
    }
    case 5: {
      const auto status = static_cast<Status>(-static_cast<int32_t>(in.upto(15)));
      const auto text = in.bytes(in.upto(127));
      item.frame = rc::transport::encode_notice(status, {reinterpret_cast<const char*>(text.data()), text.size()});
      link.queue(std::move(item));
      break;
    }
    case 6:
      item.kind = Item::Busy;
      link.queue(std::move(item));
      break;
    case 7: {
      static constexpr Status kErrors[] = {RC_E_DISCONNECTED, RC_E_PROTOCOL, RC_E_TIMEOUT};
      item.kind = Item::Error;
      item.error = kErrors[in.upto(2)];
      link.queue(std::move(item));
      break;
    }
  }
}

}  // namespace

// Where Channel reports finished ops (see the comment at the top).
// The status is taken as the integer it holds: an rc_status variable holding a value outside the
// enumeration is undefined behaviour the moment it is read, and UBSan would report it here, in the
// harness, instead of saying what is wrong (on_complete checks it).
namespace rc::client {
void complete(const Op& op, Status status) {
  FUZZ_CHECK(g_harness != nullptr);
  int32_t value;
  std::memcpy(&value, &status, sizeof value);
  g_harness->on_complete(op, value);
}
}  // namespace rc::client

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rc::set_log_level(rc::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Script in(data, size);
  const uint8_t config = in.u8();
  const uint32_t batch = in.upto(15) + 1;
  const uint32_t depth = in.upto(7) + 1;
  Harness h(config, batch, depth);
  for (int step = 0; step < kRsMaxSteps && !in.empty(); ++step) {
    switch (in.u8() % kRsCount) {
      case kRsSubmit:
      case kRsSubmit2:
      case kRsSubmit3: {
        const bool read = in.flag();
        const auto region = static_cast<uint16_t>(in.upto(2));
        uint64_t offset = 0;
        switch (in.u8() % 4) {
          case 0: offset = in.upto(4095); break;
          case 1: offset = kRegionBytes - in.upto(255); break;
          case 2: offset = in.u64(); break;
          case 3: offset = in.upto(0xffff); break;
        }
        uint32_t length = 0;
        switch (in.u8() % 3) {
          case 0: length = in.upto(63) + 1; break;
          case 1: length = in.upto(wire::kMaxChunk - 1) + 1; break;
          case 2: length = wire::kMaxChunk; break;
        }
        h.submit(read, region, offset, length);
        break;
      }
      case kRsFlush:
        h.flush();
        break;
      case kRsProgress:
      case kRsProgress2:
        h.progress();
        break;
      case kRsRespond:
      case kRsRespond2:
        respond(h, in);
        break;
      case kRsComplete: {
        const uint32_t n = in.upto(3);
        static constexpr Status kStatus[] = {RC_OK, RC_OK, RC_E_OUT_OF_RANGE, RC_E_DISCONNECTED};
        h.link().queue_completions(n, kStatus[in.u8() % 4]);
        break;
      }
      case kRsAlive:
        if (in.flag()) h.link().fail_next_probe();
        break;
      case kRsSendBusy: {
        const uint32_t n = in.upto(3);
        h.link().busy_sends(n, in.flag());
        break;
      }
      case kRsPostFail:
        h.link().fail_next_post(in.flag() ? RC_E_DISCONNECTED : RC_E_OUT_OF_RANGE);
        break;
    }
  }
  h.finish();
  return 0;
}
