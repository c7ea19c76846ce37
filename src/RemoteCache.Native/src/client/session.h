// A session is one application thread's handle (Redy §4.2): it splits requests into slices, keeps
// their program order, and collects their completions in a ring the thread polls.
//
// Two modes, chosen by c: with c = 0 the session owns one channel per server and the application
// thread does the client work itself inside rc_read/rc_write/rc_poll (no hand-off, which is what
// fits a 2-core machine); with c > 0 slices go through a lock-free ring to one client thread.
// After a reconfiguration that changes c, a session moves to the new mode at its next submission,
// once its own in-flight work has completed, so no request can overtake an earlier one.
//
// While a region migrates (Redy §6.2), a request that touches it waits in the session if it is a
// write, or if it comes after a waiting request (so that a read after a waiting write to the same
// bytes sees that write); other reads go to the source. Waiting requests go out, in order, once the
// session sees the region's new home (at its next submission or poll), or fail with RC_E_TIMEOUT
// after op_timeout_ms.
//
// In a sealed cache (rc_cache_options.seal_key) a request names the client's address space; the session turns it
// into the range of whole sealed blocks the servers hold, carried in a buffer of its own per slot: a write is
// sealed there when it is submitted, a read is opened from there into the caller's buffer when it completes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <remotecache/remotecache.h>

#include "client/channel.h"
#include "client/op.h"
#include "client/region_table.h"
#include "client/seal.h"
#include "common/mpsc_queue.h"
#include "common/notifier.h"

namespace rc::client {

class Cache;
class Worker;
class WorkerSet;

class Session {
 public:
  // Servers: a session that addresses the servers' space as it is, past any sealing (the key check's).
  enum class View { Client, Servers };
  Session(Cache& cache, uint32_t capacity, View view = View::Client);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Status open();  // binds to the cache's current mode (may connect)
  Status read(uint64_t address, void* dst, uint64_t length, uint64_t tag);
  Status write(uint64_t address, const void* src, uint64_t length, uint64_t tag);
  Status flush();
  int32_t poll(rc_completion* out, uint32_t max);
  int32_t wait(rc_completion* out, uint32_t max, int32_t timeout_ms);
  void wake();  // any thread
  uint32_t outstanding() const { return capacity_ - static_cast<uint32_t>(free_slots_.size()); }
  Status close();

  // For a migration that began at `epoch` (any thread): whether no request this session sent before
  // that epoch is still in flight, so that none of its writes can reach the moving region's source.
  // Sound together with the cache's membarrier: the session's own path uses no locked instruction.
  bool quiescent_since(uint64_t epoch) const;

  // Called by whoever does the client work (this thread or a client thread).
  void on_complete(uint32_t slot, Status status);

 private:
  struct Request {
    uint64_t tag;
    uint32_t remaining;
    int32_t status;
  };

  // The caller's side of a request to a sealed cache; its sealed form travels in bounce_[slot].
  struct SealedRequest {
    std::byte* plain = nullptr;
    uint64_t address = 0;
    uint64_t length = 0;
    wire::Op kind = wire::Op::Read;
    bool active = false;
  };

  // A request waiting for its region's migration to end.
  struct Held {
    wire::Op kind;
    uint64_t address;
    void* buffer;
    uint64_t length;
    uint32_t slot;
    uint64_t since_ns;
  };

  Status submit(wire::Op kind, uint64_t address, void* buffer, uint64_t length, uint64_t tag);
  // Whether a request must wait for a migration (see the header comment).
  bool must_wait(const RegionTable& table, wire::Op kind, uint64_t address, uint64_t length) const;
  // Splits requests_[slot] into slices and hands them to the data path.
  [[gnu::always_inline]] inline void start(wire::Op kind, uint64_t address, std::byte* buffer, uint64_t length, uint32_t slot);
  // For a sealed cache: checks what the blocks cannot take (a write of part of a block).
  Status check_sealed(wire::Op kind, uint64_t address, uint64_t length) const;
  // Turns a request into its sealed blocks' range in bounce_[slot] (a write is sealed there now).
  void seal_request(wire::Op kind, uint64_t& address, std::byte*& buffer, uint64_t& length, uint32_t slot);
  // When a sealed request finished: a read's blocks opened into the caller's buffer (RC_E_INTEGRITY and zeros if
  // one does not authenticate), a write's blocks pinned. Returns the request's status.
  Status finish_sealed(uint32_t slot, Status status);
  // Sends the waiting requests whose regions have arrived, in order; fails those waiting too long.
  void release_held();
  // Rebinds if the cache changed, then release_held.
  void resume_held();
  Status rebind_if_needed();
  Status bind();
  void drive(const Knobs& k);
  bool in_flight() const;  // requests handed to the data path and not finished (waiting ones excluded)
  void wait_idle(int timeout_ms);

  Cache& cache_;
  const uint32_t capacity_;
  std::vector<Request> requests_;
  std::vector<uint32_t> free_slots_;  // touched by the owning thread only
  SpscQueue<uint32_t> completions_;   // finished slots
  // Requests accepted (waiting ones included) and finished. Atomic for quiescent_since (plain stores:
  // one thread writes each).
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
  std::deque<Held> held_;
  std::atomic<uint64_t> held_count_{0};       // held_.size(), for quiescent_since
  std::atomic<uint32_t> submitting_{0};       // 1 from before a submission reads the epoch until it is counted
  std::atomic<uint64_t> bound_epoch_{0};      // epoch_, for quiescent_since
  bool registered_ = false;                   // with the cache, for migrations

  uint64_t epoch_ = 0;  // of the cache configuration this session is bound to
  std::shared_ptr<const RegionTable> table_;        // the layout of that epoch
  std::vector<std::unique_ptr<Channel>> channels_;  // c = 0
  std::shared_ptr<WorkerSet> workers_;              // c > 0
  Worker* worker_ = nullptr;

  // Sealing (null / empty for a plain cache, or a View::Servers session).
  View view_;
  const seal::Layout* seal_ = nullptr;
  std::unique_ptr<seal::Sealer> sealer_;  // writes: the owning thread, at submission
  std::unique_ptr<seal::Sealer> opener_;  // reads: whichever thread completes them
  std::vector<SealedRequest> sealed_;     // per slot
  std::vector<std::vector<std::byte>> bounce_;  // per slot, grown to the largest request it carried
  std::vector<std::byte> edge_;           // a read's block that its range covers in part (the opener's thread)

  std::atomic<uint32_t> sleeping_{0};
  std::atomic<bool> woken_{false};  // rc_wake was called: the next or current wait returns
  EventFd wake_;
};

}  // namespace rc::client
