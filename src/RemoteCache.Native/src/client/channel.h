// A channel is the client end of one connection plus its batching state (Redy §4.2-4.3): ops are
// appended to an open batch that is sent when full (b entries or 4 KiB) or when flushed, with at
// most q batches in flight; a lone op goes one-sided when the transport allows it and no batch is
// in flight (so it cannot overtake a batched write the server has not executed yet). Responses
// arrive in order, so in-flight ops are a FIFO. A channel belongs to one thread at a time.
#pragma once

#include <memory>
#include <vector>

#include "client/op.h"
#include "common/wire.h"
#include "transport/transport.h"

namespace rc::client {

template <typename T>
class Fifo {
 public:
  void push(const T& v) {
    if (size() == items_.size()) grow();
    items_[tail_++ & (items_.size() - 1)] = v;
  }
  T& front() { return items_[head_ & (items_.size() - 1)]; }
  T& at(std::size_t i) { return items_[(head_ + i) & (items_.size() - 1)]; }
  void pop() { ++head_; }
  T pop_back() { return items_[--tail_ & (items_.size() - 1)]; }
  std::size_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }

 private:
  void grow() {
    std::vector<T> bigger(items_.empty() ? 64 : items_.size() * 2);
    for (std::size_t i = 0; i < size(); ++i) bigger[i] = at(i);
    tail_ = size();
    head_ = 0;
    items_.swap(bigger);
  }
  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

class Channel {
 public:
  explicit Channel(std::unique_ptr<transport::ClientConnection> link);
  // A channel to a server that could not be reached: every op on it completes at once with `why`. It stands in
  // for a holder that failed, so that the regions of the others keep working.
  static std::unique_ptr<Channel> unreachable(Status why);

  // Takes an op; may send, and may wait (driving this channel) for a free slot.
  void submit(const Op& op, const Knobs& k);
  // Sends the open batch as soon as a slot is free.
  void flush(const Knobs& k);
  // Reaps completions and responses and enforces deadlines; returns ops completed.
  std::size_t progress(const Knobs& k);

  bool idle() const { return ops_.empty() && one_sided_.empty(); }
  Status broken() const { return broken_; }
  transport::ClientConnection& link() { return *link_; }

 private:
  struct Batch {
    uint32_t count;
    uint64_t deadline;
  };
  struct Posted {
    Op op;
    uint64_t deadline;
  };

  void post_one_sided(const Op& op, const Knobs& k);
  void send_open(const Knobs& k);
  void wait_for_slot(const Knobs& k, bool one_sided);
  bool take_response(std::span<const std::byte> frame);
  Status departure(Status status);
  void fail_all(Status status);

  std::unique_ptr<transport::ClientConnection> link_;
  std::unique_ptr<std::byte[]> buffer_;
  wire::BatchWriter writer_;
  Fifo<Op> ops_;          // in-flight batches' ops, in order, then the open batch's
  Fifo<Batch> batches_;   // in flight
  Fifo<Posted> one_sided_;
  uint64_t next_seq_ = 1;
  uint64_t next_response_seq_ = 1;
  uint64_t next_wr_id_ = 0;
  uint64_t last_probe_ns_ = 0;
  bool flush_wanted_ = false;
  Status broken_ = RC_OK;
};

}  // namespace rc::client
