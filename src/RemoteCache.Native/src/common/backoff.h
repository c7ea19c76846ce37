// The idle policy of every polling loop (server threads, client threads, a session waiting for its
// completions): after the last piece of work, spin for a while (new work usually follows within
// microseconds and a blocked thread takes tens of them to wake), then yield the core for a while
// (another runnable thread may be the one producing our work), then block.
//
// Spinning pays only on a core nobody else wants. A loop that finds it lost its core between two
// looks (the scheduler preempted it: more runnable threads than cores, as on a host whose cores are
// rented out) spins only briefly for a while and then blocks: a spinning or yielding thread is never
// woken early, so a request that lands while it waits for the core waits out someone else's time
// slice (milliseconds), and its spin keeps the core from the thread producing the next request; a
// blocked thread is woken ahead of others in microseconds. The brief spin still catches a pipelined
// client's next batch, which follows within microseconds (docs/performance.md, "Under CPU
// contention").
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdint>

#include "common/clock.h"

namespace rc {

class Backoff {
 public:
  // A gap between two looks longer than this is a preemption, not a slow pass: a pass without
  // work takes microseconds, and the scheduler's time slices are milliseconds.
  static constexpr uint64_t kPreemptedNs = 200'000;
  // How long after a preemption a loop keeps its spins brief.
  static constexpr uint64_t kContendedNs = 50'000'000;
  // The brief spin: long enough for a pipelined client's next batch, short enough to be rarely
  // preempted itself.
  static constexpr uint64_t kContendedSpinNs = 5'000;

  Backoff(uint64_t spin_ns, uint64_t yield_ns) : spin_ns_(spin_ns), yield_ns_(yield_ns) {}

  // The loop did some work (or woke from blocking): start over.
  void worked() {
    if (spin_ns_ + yield_ns_ != 0) worked(now_ns());
  }
  void worked(uint64_t now) {
    idle_since_ = 0;
    look(now);
  }

  // The loop found nothing to do: spins or yields once and returns false, or returns true when it
  // is time to block (then call worked() after waking).
  bool idle() { return idle(now_ns()); }
  // The same, for a loop that has just read the clock anyway.
  bool idle(uint64_t now) {
    if (spin_ns_ + yield_ns_ == 0) return true;
    look(now);
    if (idle_since_ == 0) idle_since_ = now;
    const uint64_t idle = now - idle_since_;
    if (idle >= (contended(now) ? std::min(spin_ns_, kContendedSpinNs) : spin_ns_ + yield_ns_)) {
      last_look_ = 0;  // the time spent blocked is not a preemption
      return true;
    }
    if (idle < spin_ns_) {
      cpu_relax();
    } else {
      sched_yield();
    }
    return false;
  }

  // True while the loop's spins are brief because it was recently preempted.
  bool contended(uint64_t now) const { return now < contended_until_; }

 private:
  void look(uint64_t now) {
    if (last_look_ != 0 && now - last_look_ > kPreemptedNs) contended_until_ = now + kContendedNs;
    last_look_ = now;
  }

  const uint64_t spin_ns_;
  const uint64_t yield_ns_;
  uint64_t idle_since_ = 0;
  uint64_t last_look_ = 0;
  uint64_t contended_until_ = 0;
};

}  // namespace rc
