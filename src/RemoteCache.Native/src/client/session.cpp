#include "client/session.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "client/cache.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace rc::client {
namespace {
constexpr uint64_t kSpinNs = 20'000;  // poll this long before blocking in rc_wait
constexpr int kMaxBlockMs = 10;       // block at most this long between liveness checks
}  // namespace

void complete(const Op& op, Status status) { op.session->on_complete(op.slot, status); }

Session::Session(Cache& cache, uint32_t capacity, View view)
    : cache_(cache), capacity_(capacity), requests_(capacity), completions_(capacity), view_(view) {
  free_slots_.reserve(capacity);
  for (uint32_t i = capacity; i > 0; --i) free_slots_.push_back(i - 1);
}

Session::~Session() {
  if (registered_) cache_.remove_session(this);
}

Status Session::open() {
  if (const seal::Layout* layout = cache_.seal_layout(); layout != nullptr && view_ == View::Client) {
    try {
      sealer_ = cache_.make_sealer();
      opener_ = cache_.make_sealer();
    } catch (const std::exception& e) {
      return fail(RC_E_INTERNAL, std::string("cannot set the sealing key up: ") + e.what());
    }
    seal_ = layout;
    sealed_.resize(capacity_);
    bounce_.resize(capacity_);
    edge_.resize(layout->block);
  }
  const Status st = bind();
  if (st != RC_OK) return st;
  cache_.add_session(this);
  registered_ = true;
  return RC_OK;
}

Status Session::bind() {
  const Status st = cache_.bind(epoch_, table_, channels_, workers_, worker_);
  bound_epoch_.store(epoch_, std::memory_order_release);
  return st;
}

bool Session::quiescent_since(uint64_t epoch) const {
  if (bound_epoch_.load(std::memory_order_acquire) >= epoch) return true;  // it waited for its earlier work
  if (submitting_.load(std::memory_order_acquire) != 0) return false;
  // Bound to an earlier epoch and not submitting: its next submission sees the new epoch (the cache's
  // membarrier) and rebinds first, so what it has in flight now is all it can send to the source.
  return submitted_.load(std::memory_order_acquire) - held_count_.load(std::memory_order_acquire) ==
         completed_.load(std::memory_order_acquire);
}

Status Session::read(uint64_t address, void* dst, uint64_t length, uint64_t tag) {
  return submit(wire::Op::Read, address, dst, length, tag);
}

Status Session::write(uint64_t address, const void* src, uint64_t length, uint64_t tag) {
  return submit(wire::Op::Write, address, const_cast<void*>(src), length, tag);
}

namespace {
// Marks a submission in progress for Session::quiescent_since, from before it reads the cache's epoch
// until it is counted. Plain stores: the migrating thread's membarrier orders them against its own.
class Submitting {
 public:
  explicit Submitting(std::atomic<uint32_t>& flag) : flag_(flag) {
    flag_.store(1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~Submitting() { flag_.store(0, std::memory_order_release); }
  Submitting(const Submitting&) = delete;
  Submitting& operator=(const Submitting&) = delete;

 private:
  std::atomic<uint32_t>& flag_;
};
}  // namespace

Status Session::submit(wire::Op kind, uint64_t address, void* buffer, uint64_t length, uint64_t tag) {
  if (length > 0 && buffer == nullptr) return fail(RC_E_INVALID_ARGUMENT, "null buffer");
  if (free_slots_.empty())
    return fail(RC_E_BUSY, "the session has " + std::to_string(capacity_) + " operations outstanding");
  const Submitting submitting(submitting_);
  // Before the range check: a cache that grew or shrank is checked against its new layout.
  if (const Status st = rebind_if_needed(); st != RC_OK) return st;
  const RegionTable& table = *table_;
  const uint64_t capacity = seal_ != nullptr ? seal_->capacity(table.capacity()) : table.capacity();
  if (address > capacity || length > capacity - address)
    return fail(RC_E_OUT_OF_RANGE, "[" + std::to_string(address) + ", +" + std::to_string(length) +
                                       ") is outside the cache's " + std::to_string(capacity) + " bytes");

  const uint32_t slot = free_slots_.back();
  auto* bytes = static_cast<std::byte*>(buffer);
  if (seal_ != nullptr && length > 0) {
    if (const Status st = check_sealed(kind, address, length); st != RC_OK) return st;
    seal_request(kind, address, bytes, length, slot);  // may throw (memory): the slot is still free
  }
  free_slots_.pop_back();
  submitted_.store(submitted_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  requests_[slot].tag = tag;
  if (table.any_moving() && must_wait(table, kind, address, length)) {
    requests_[slot].remaining = 1;
    requests_[slot].status = RC_OK;
    held_.push_back(Held{kind, address, bytes, length, slot, now_ns()});
    held_count_.store(held_.size(), std::memory_order_relaxed);
    return RC_OK;
  }
  start(kind, address, bytes, length, slot);
  return RC_OK;
}

Status Session::check_sealed(wire::Op kind, uint64_t address, uint64_t length) const {
  if (kind != wire::Op::Write || seal_->aligned(address, length)) return RC_OK;
  return fail(RC_E_INVALID_ARGUMENT, "a write to a sealed cache covers whole blocks of " + std::to_string(seal_->block) +
                                         " bytes: [" + std::to_string(address) + ", +" + std::to_string(length) +
                                         ") does not");
}

void Session::seal_request(wire::Op kind, uint64_t& address, std::byte*& buffer, uint64_t& length, uint32_t slot) {
  const uint64_t first = seal_->first_block(address);
  const uint64_t blocks = seal_->block_count(address, length);
  std::vector<std::byte>& sealed = bounce_[slot];
  if (sealed.size() < blocks * seal_->stride()) sealed.resize(blocks * seal_->stride());
  sealed_[slot] = SealedRequest{buffer, address, length, kind, true};
  if (kind == wire::Op::Write) {
    for (uint64_t i = 0; i < blocks; ++i)
      sealer_->seal(first + i, buffer + i * seal_->block, sealed.data() + i * seal_->stride());
    if (seal::PinTable* pins = cache_.pins(); pins != nullptr)
      for (uint64_t i = 0; i < blocks; ++i) pins->write_started(first + i);
  }
  address = seal_->physical(first);
  length = blocks * seal_->stride();
  buffer = sealed.data();
}

Status Session::finish_sealed(uint32_t slot, Status status) {
  SealedRequest& q = sealed_[slot];
  q.active = false;
  const uint64_t block = seal_->block;
  const uint64_t first = seal_->first_block(q.address);
  const uint64_t blocks = seal_->block_count(q.address, q.length);
  const std::byte* sealed = bounce_[slot].data();
  seal::PinTable* pins = cache_.pins();
  if (q.kind == wire::Op::Write) {
    if (pins != nullptr)
      for (uint64_t i = 0; i < blocks; ++i)
        pins->write_finished(first + i, status == RC_OK ? opener_->pin(sealed + i * seal_->stride()) : 0);
    return status;
  }
  if (status != RC_OK) return status;
  for (uint64_t i = 0; i < blocks; ++i) {
    const std::byte* in = sealed + i * seal_->stride();
    const uint64_t start = (first + i) * block;
    const uint64_t from = std::max(start, q.address);
    const uint64_t to = std::min(start + block, q.address + q.length);
    const bool whole = from == start && to == start + block;
    std::byte* out = whole ? q.plain + (start - q.address) : edge_.data();
    if (!opener_->open(first + i, in, out) || (pins != nullptr && !pins->matches(first + i, opener_->pin(in)))) {
      // Nothing of the request may be used: the blocks opened before this one are wiped too.
      std::memset(q.plain, 0, q.length);
      return RC_E_INTEGRITY;
    }
    if (!whole) std::memcpy(q.plain + (from - q.address), edge_.data() + (from - start), to - from);
  }
  return RC_OK;
}

bool Session::must_wait(const RegionTable& table, wire::Op kind, uint64_t address, uint64_t length) const {
  return table.waits(address, length, kind == wire::Op::Write || !held_.empty());
}

void Session::start(wire::Op kind, uint64_t address, std::byte* bytes, uint64_t length, uint32_t slot) {
  const RegionTable& table = *table_;
  const uint64_t tag = requests_[slot].tag;
  const auto dispatch = [&](const RegionSlice& s, const Knobs& k) {
    const Op op{this, bytes + s.buffer_offset, s.offset, s.length, slot, s.server, s.region,
                static_cast<uint8_t>(kind)};
    if (worker_ != nullptr) {
      worker_->push(op);
    } else {
      channels_[s.server]->submit(op, k);
    }
  };
  RegionSlice one{};
  if (table.single(address, length, wire::kMaxChunk, one)) {
    requests_[slot] = Request{tag, 1, RC_OK};
    dispatch(one, cache_.knobs());
    return;
  }
  // The slice count must be known before the first slice goes out: it may complete at once.
  uint32_t slices = 0;
  table.split(address, length, wire::kMaxChunk, [&](const RegionSlice&) { ++slices; });
  requests_[slot] = Request{tag, slices == 0 ? 1 : slices, RC_OK};
  if (slices == 0) {
    on_complete(slot, RC_OK);
    return;
  }
  const Knobs k = cache_.knobs();
  table.split(address, length, wire::kMaxChunk, [&](const RegionSlice& s) { dispatch(s, k); });
}

void Session::resume_held() {
  // Sends like a submission, so a migration that begins meanwhile waits for it (quiescent_since).
  const Submitting submitting(submitting_);
  if (rebind_if_needed() == RC_OK) release_held();
}

void Session::release_held() {
  if (held_.empty()) return;
  std::deque<Held> waiting;
  waiting.swap(held_);
  const uint64_t now = now_ns();
  const uint64_t limit = cache_.knobs().timeout_ns;
  for (const Held& h : waiting) {
    if (must_wait(*table_, h.kind, h.address, h.length)) {
      if (now - h.since_ns < limit) {
        held_.push_back(h);
        continue;
      }
      // Its region has been moving for longer than an operation may take: the caller hears of it.
      fail(RC_E_TIMEOUT, "a request waited op_timeout_ms for its region's migration to end");
      on_complete(h.slot, RC_E_TIMEOUT);
      continue;
    }
    start(h.kind, h.address, static_cast<std::byte*>(h.buffer), h.length, h.slot);
  }
  held_count_.store(held_.size(), std::memory_order_relaxed);
}

void Session::on_complete(uint32_t slot, Status status) {
  Request& r = requests_[slot];
  if (status != RC_OK && r.status == RC_OK) r.status = status;
  if (--r.remaining != 0) return;
  if (seal_ != nullptr && sealed_[slot].active) r.status = finish_sealed(slot, static_cast<Status>(r.status));
  completions_.try_push(slot);  // cannot fail: it holds as many entries as there are slots
  if (worker_ != nullptr) wake_if_sleeping(sleeping_, wake_);
  // Last touch: once completed_ catches up with submitted_, the owning thread may rebind or free
  // this session, so nothing may read a member after this line.
  // Single writer (whichever thread does this session's client work), so no locked RMW is needed.
  completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void Session::drive(const Knobs& k) {
  for (auto& ch : channels_) {
    if (!ch) continue;  // a server that holds none of the cache's regions now
    ch->flush(k);
    ch->progress(k);
  }
}

Status Session::flush() {
  drive(cache_.knobs());
  return RC_OK;
}

int32_t Session::poll(rc_completion* out, uint32_t max) {
  // A caller waiting for a held write only polls: this is where it learns that the region arrived.
  if (!held_.empty()) resume_held();
  if (!channels_.empty()) drive(cache_.knobs());
  uint32_t slots[64];
  uint32_t total = 0;
  while (total < max) {
    const std::size_t n = completions_.pop_many(slots, std::min<std::size_t>(64, max - total));
    if (n == 0) break;
    for (std::size_t i = 0; i < n; ++i) {
      const Request& r = requests_[slots[i]];
      out[total++] = rc_completion{r.tag, r.status, 0};
      free_slots_.push_back(slots[i]);
    }
  }
  return static_cast<int32_t>(total);
}

int32_t Session::wait(rc_completion* out, uint32_t max, int32_t timeout_ms) {
  const uint64_t start = now_ns();
  const uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + uint64_t(timeout_ms) * 1'000'000;
  std::vector<pollfd> fds;
  std::vector<int> raw;
  // With c = 0 this thread is the one moving the data, so it spins; with c > 0 a client thread is,
  // and a spinning caller would take the core it needs (three busy threads do not fit two cores).
  Backoff backoff(worker_ != nullptr ? 0 : kSpinNs, worker_ != nullptr ? kSpinNs : 0);
  for (;;) {
    const int32_t n = poll(out, max);
    if (n != 0 || outstanding() == 0) return n;
    if (woken_.exchange(false, std::memory_order_acq_rel)) return 0;
    const uint64_t now = now_ns();
    if (now >= deadline) return 0;
    if (!backoff.idle(now)) continue;
    // Block until the data path signals: our channels' fds (c = 0) or our eventfd (c > 0).
    raw.clear();
    raw.push_back(wake_.fd());  // rc_wake, and with c > 0 also the client thread's completions
    if (worker_ != nullptr) {
      sleeping_.store(1, std::memory_order_seq_cst);
    } else {
      for (auto& ch : channels_) {
        if (!ch) continue;
        ch->link().arm_wait();
        if (ch->broken() == RC_OK) ch->link().wait_fds(raw);  // a broken one's fds stay readable
      }
    }
    const int32_t again = poll(out, max);
    if (again == 0 && !woken_.load(std::memory_order_acquire)) {
      fds.clear();
      for (int fd : raw) fds.push_back(pollfd{fd, POLLIN, 0});
      const uint64_t left_ms = deadline == UINT64_MAX ? kMaxBlockMs : (deadline - now_ns()) / 1'000'000 + 1;
      ::poll(fds.data(), fds.size(), static_cast<int>(std::min<uint64_t>(left_ms, kMaxBlockMs)));
    }
    wake_.drain();
    if (worker_ != nullptr) {
      sleeping_.store(0, std::memory_order_relaxed);
    } else {
      for (auto& ch : channels_)
        if (ch) ch->link().disarm_wait();
    }
    if (again != 0) return again;
  }
}

void Session::wake() {
  woken_.store(true, std::memory_order_release);
  wake_.signal();
}

bool Session::in_flight() const {
  return submitted_.load(std::memory_order_relaxed) - held_.size() != completed_.load(std::memory_order_acquire);
}

// Drives this session's own channels (c = 0) or waits for its client thread until every request
// handed to the data path has completed (their completions stay queued for rc_poll).
void Session::wait_idle(int timeout_ms) {
  const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1'000'000;
  while (in_flight() && now_ns() < deadline) {
    if (!channels_.empty()) {
      drive(cache_.knobs());
    } else {
      sched_yield();
    }
  }
}

Status Session::rebind_if_needed() {
  if (cache_.epoch() == epoch_) return RC_OK;
  // Everything already submitted must finish on the old path first, or a later request could
  // overtake it on the new one.
  wait_idle(INT32_MAX / 2);
  // With c = 0 the channels to servers still in the cache are kept: bind cuts or extends them.
  workers_.reset();
  worker_ = nullptr;
  const Status st = bind();
  if (st == RC_OK) release_held();
  return st;
}

Status Session::close() {
  // Operations time out on their own (op_timeout_ms), so this wait ends even on a dead server; so do
  // requests waiting for a migration.
  wait_idle(INT32_MAX / 2);
  while (!held_.empty()) {
    resume_held();
    wait_idle(INT32_MAX / 2);
    if (!held_.empty()) sched_yield();
  }
  uint32_t discarded[64];
  while (completions_.pop_many(discarded, 64) > 0) {
  }
  channels_.clear();
  workers_.reset();
  worker_ = nullptr;
  return RC_OK;
}

}  // namespace rc::client
