#include "client/channel.h"

#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "transport/connect_codec.h"

namespace rc::client {
namespace {
constexpr uint64_t kProbeEveryNs = 1'000'000;  // liveness probe cadence while responses are overdue

bool is_notice(std::span<const std::byte> frame) {
  return frame.size() >= sizeof(wire::FrameHeader) &&
         wire::read_header(frame.data()).kind == static_cast<uint8_t>(wire::Kind::Notice);
}
}

Channel::Channel(std::unique_ptr<transport::ClientConnection> link)
    : link_(std::move(link)),
      buffer_(std::make_unique<std::byte[]>(wire::kMaxFrame)),
      writer_(buffer_.get()) {}

namespace {
// The link of an unreachable channel: nothing to send to, nothing to wait for.
class NoConnection final : public transport::ClientConnection {
 public:
  explicit NoConnection(Status why) : why_(why) {}
  const wire::ConnectReply& reply() const override { return reply_; }
  bool one_sided() const override { return false; }
  uint32_t max_inline() const override { return 0; }
  Status post_read(uint64_t, uint16_t, uint64_t, void*, uint32_t) override { return why_; }
  Status post_write(uint64_t, uint16_t, uint64_t, const void*, uint32_t) override { return why_; }
  std::size_t poll_completions(transport::WorkCompletion*, std::size_t) override { return 0; }
  Status send_frame(std::span<const std::byte>) override { return why_; }
  Status poll_response(std::span<const std::byte>&) override { return why_; }
  void release_response() override {}
  void arm_wait() override {}
  void disarm_wait() override {}
  void wait_fds(std::vector<int>&) const override {}
  Status check_alive() override { return why_; }

 private:
  Status why_;
  wire::ConnectReply reply_{};
};
}  // namespace

std::unique_ptr<Channel> Channel::unreachable(Status why) {
  auto channel = std::make_unique<Channel>(std::make_unique<NoConnection>(why));
  channel->broken_ = why;
  return channel;
}

void Channel::submit(const Op& op, const Knobs& k) {
  if (broken_ != RC_OK) {
    complete(op, broken_);
    return;
  }
  const auto kind = static_cast<wire::Op>(op.kind);
  if (k.prefer_one_sided && link_->one_sided() && batches_.empty() && writer_.count() == 0) {
    post_one_sided(op, k);
    return;
  }
  if (!writer_.fits(kind, op.length, k.batch)) send_open(k);
  if (broken_ != RC_OK) {
    complete(op, broken_);
    return;
  }
  writer_.add(kind, op.region, op.offset, op.length, op.buffer);
  ops_.push(op);
  if (writer_.count() >= k.batch) send_open(k);
}

void Channel::flush(const Knobs& k) {
  if (writer_.count() == 0 || broken_ != RC_OK) return;
  if (writer_.count() == 1 && batches_.empty() && link_->one_sided()) {
    // A lone request: one-sided is cheaper than a one-entry batch (Redy §4.3).
    const Op op = ops_.pop_back();
    writer_.reset();
    post_one_sided(op, k);
    return;
  }
  if (batches_.size() < k.depth) {
    send_open(k);
  } else {
    flush_wanted_ = true;
  }
}

void Channel::post_one_sided(const Op& op, const Knobs& k) {
  wait_for_slot(k, true);
  if (broken_ != RC_OK) {
    complete(op, broken_);
    return;
  }
  const uint64_t wr_id = next_wr_id_++;
  const Status st = op.kind == static_cast<uint8_t>(wire::Op::Read)
                        ? link_->post_read(wr_id, op.region, op.offset, op.buffer, op.length)
                        : link_->post_write(wr_id, op.region, op.offset, op.buffer, op.length);
  if (st == RC_E_DISCONNECTED) {  // the connection is gone, not just this op
    fail_all(st);
    complete(op, broken_);
    return;
  }
  if (st != RC_OK) {
    complete(op, st);
    return;
  }
  one_sided_.push(Posted{op, coarse_now_ns() + k.timeout_ns});  // ms precision is plenty for a timeout
}

void Channel::send_open(const Knobs& k) {
  flush_wanted_ = false;  // this send satisfies any pending flush; progress() must not recurse here
  if (writer_.count() == 0) return;
  wait_for_slot(k, false);
  if (broken_ != RC_OK) return;  // fail_all has completed the open batch's ops
  const auto frame = writer_.finish(next_seq_);
  for (;;) {
    const Status st = link_->send_frame(frame);
    if (st == RC_OK) break;
    if (st != RC_E_BUSY) {
      fail_all(st);
      return;
    }
    progress(k);  // the ring is full of responses we have not consumed yet
    if (broken_ != RC_OK) return;
  }
  ++next_seq_;
  batches_.push(Batch{writer_.count(), coarse_now_ns() + k.timeout_ns});
  writer_.reset();
}

// q bounds the work requests in flight on this connection: batches plus one-sided operations.
void Channel::wait_for_slot(const Knobs& k, bool one_sided) {
  for (;;) {
    const std::size_t in_flight = batches_.size() + one_sided_.size();
    if (in_flight < k.depth && (!one_sided || batches_.empty())) return;
    if (broken_ != RC_OK) return;
    if (progress(k) == 0) cpu_relax();
  }
}

std::size_t Channel::progress(const Knobs& k) {
  if (broken_ != RC_OK) return 0;
  std::size_t done = 0;
  transport::WorkCompletion wcs[32];
  for (std::size_t n; (n = link_->poll_completions(wcs, 32)) > 0;) {
    for (std::size_t i = 0; i < n; ++i) {
      if (one_sided_.empty()) {
        fail_all(fail(RC_E_PROTOCOL, "a one-sided completion nobody posted"));
        return done;
      }
      complete(one_sided_.front().op, wcs[i].status);
      one_sided_.pop();
      ++done;
    }
  }
  for (;;) {
    std::span<const std::byte> frame;
    const Status st = link_->poll_response(frame);
    if (st == RC_E_BUSY) break;
    if (st != RC_OK) {
      fail_all(st);
      return done;
    }
    if (is_notice(frame)) {
      fail_all(transport::decode_notice(frame));
      return done;
    }
    const std::size_t count = batches_.empty() ? 0 : batches_.front().count;
    if (!take_response(frame)) {
      fail_all(fail(RC_E_PROTOCOL, "the server sent a response that does not match its batch"));
      return done;
    }
    link_->release_response();
    done += count;
  }
  if (flush_wanted_ && writer_.count() > 0 && batches_.size() < k.depth) send_open(k);

  // Deadlines and liveness: only when something is overdue or waiting. The coarse clock: this runs on
  // every empty poll, and a timeout or a probe a tick late does not matter.
  if (done == 0 && !idle()) {
    const uint64_t now = coarse_now_ns();
    const uint64_t oldest = !batches_.empty() ? batches_.front().deadline
                            : !one_sided_.empty() ? one_sided_.front().deadline
                                                  : UINT64_MAX;
    if (now > oldest) {
      fail_all(fail(RC_E_TIMEOUT, "the server did not answer within the operation timeout"));
    } else if (now - last_probe_ns_ > kProbeEveryNs) {
      last_probe_ns_ = now;
      const Status alive = link_->check_alive();
      if (alive != RC_OK) fail_all(alive == RC_E_DISCONNECTED ? fail(alive, "the cache server is gone") : alive);
    }
  }
  return done;
}

bool Channel::take_response(std::span<const std::byte> frame) {
  if (batches_.empty() || frame.size() < sizeof(wire::FrameHeader)) return false;
  const auto h = wire::read_header(frame.data());
  const Batch batch = batches_.front();
  if (!wire::header_ok(h, wire::Kind::Response, frame.size()) || h.bytes != frame.size() ||
      h.seq != next_response_seq_ || h.count != batch.count)
    return false;
  if ((h.flags & wire::kFlagAllOk) != 0) {
    for (uint32_t i = 0; i < batch.count; ++i) {
      if (ops_.front().kind == static_cast<uint8_t>(wire::Op::Read)) return false;
      complete(ops_.front(), RC_OK);
      ops_.pop();
    }
  } else {
    uint32_t pos = sizeof h;
    for (uint32_t i = 0; i < batch.count; ++i) {
      const Op& op = ops_.front();
      wire::ResponseEntry e;
      if (frame.size() - pos < sizeof e) return false;
      std::memcpy(&e, frame.data() + pos, sizeof e);
      pos += sizeof e;
      if (op.kind == static_cast<uint8_t>(wire::Op::Read)) {
        const uint32_t padded = wire::pad8(op.length);
        if (frame.size() - pos < padded) return false;
        if (e.status == RC_OK) std::memcpy(op.buffer, frame.data() + pos, op.length);
        pos += padded;
      }
      if (e.status == RC_E_OUT_OF_RANGE)
        set_last_error("the server refused a range outside the regions it granted");
      // Range-check the server's integer before it becomes an rc_status the application sees.
      complete(op, is_known_status(e.status) ? static_cast<Status>(e.status) : RC_E_PROTOCOL);
      ops_.pop();
    }
  }
  batches_.pop();
  ++next_response_seq_;
  return true;
}

// A server that closes a connection on purpose says why in a last Notice, which may still be
// buffered behind responses nobody will read now.
Status Channel::departure(Status status) {
  for (;;) {
    std::span<const std::byte> frame;
    if (link_->poll_response(frame) != RC_OK) return status;
    const bool notice = is_notice(frame);
    const Status why = notice ? transport::decode_notice(frame) : status;
    link_->release_response();
    if (notice) return why;
  }
}

void Channel::fail_all(Status status) {
  if (status == RC_E_DISCONNECTED && broken_ == RC_OK) status = departure(status);
  if (broken_ == RC_OK) RC_LOG_WARN("connection failed: %s (%s)", status_name(status), last_error());
  broken_ = status;
  while (!one_sided_.empty()) {
    complete(one_sided_.front().op, status);
    one_sided_.pop();
  }
  while (!ops_.empty()) {
    complete(ops_.front(), status);
    ops_.pop();
  }
  while (!batches_.empty()) batches_.pop();
  writer_.reset();
  flush_wanted_ = false;
}

}  // namespace rc::client
