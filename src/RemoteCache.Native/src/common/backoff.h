// The idle policy of every polling loop (server threads, client threads, a session waiting for its
// completions): after the last piece of work, spin for a while (new work usually follows within
// microseconds and a blocked thread takes tens of them to wake), then yield the core for a while
// (another runnable thread may be the one producing our work), then block.
#pragma once

#include <sched.h>

#include <cstdint>

#include "common/clock.h"

namespace rc {

class Backoff {
 public:
  Backoff(uint64_t spin_ns, uint64_t yield_ns) : spin_ns_(spin_ns), yield_ns_(yield_ns) {}

  // The loop did some work: start over.
  void worked() { idle_since_ = 0; }

  // The loop found nothing to do: spins or yields once and returns false, or returns true when it
  // is time to block (then call worked() after waking). The clock is read only while idle.
  bool idle() { return idle(now_ns()); }
  // The same, for a loop that has just read the clock anyway.
  bool idle(uint64_t now) {
    if (idle_since_ == 0) idle_since_ = now;
    const uint64_t idle = now - idle_since_;
    if (idle < spin_ns_) {
      cpu_relax();
      return false;
    }
    if (idle < spin_ns_ + yield_ns_) {
      sched_yield();
      return false;
    }
    return true;
  }

 private:
  const uint64_t spin_ns_;
  const uint64_t yield_ns_;
  uint64_t idle_since_ = 0;
};

}  // namespace rc
