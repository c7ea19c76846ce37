// Commits a server's memory ahead of demand (rc_server_options.commit_memory): keeps regions whose
// pages are already allocated, zeroed and mapped, ready for the next cache.
//
// A region's memfd pages otherwise come into existence on their first write: each 4 KiB page faults
// and is zeroed inside that write, so filling a new cache runs at the page-fault rate, not the
// transport's (a 512 MiB copy into fresh pages ran 4-20x slower than into present ones here), and
// the host's memory is overcommitted until then. Committing inside the Connect that creates a cache
// would make Connect take ~0.3 s per GiB; committing behind it competes with the fill for the same
// cores. So the committer fills a pool of spare regions while the server has room under its memory
// limit and the host has memory to spare (an eighth of it stays available), at the lowest CPU
// priority, and a new cache takes its regions from the pool first.
//
// Every spare region is a fresh memfd that no client has ever mapped: a region is never handed to a
// second cache (an shm client keeps its mapping of a freed cache's memfd), so committed memory is
// recycled only through the kernel, zeroed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "transport/transport.h"

namespace rc::server {

class MemoryCommitter {
 public:
  // `room` says, under the caller's lock, whether one more spare region fits under the memory limit;
  // `offer` hands a committed region over and returns false when it no longer fits (it is freed).
  // Both are called on the committer's thread.
  MemoryCommitter(uint64_t region_size, std::function<bool()> room,
                  std::function<bool(const transport::RegionMemory&)> offer);
  ~MemoryCommitter();
  MemoryCommitter(const MemoryCommitter&) = delete;
  MemoryCommitter& operator=(const MemoryCommitter&) = delete;

  // Memory was freed or a spare was taken: look again for room.
  void poke();

  // Bytes per step of committing: the thread checks for a stop between steps.
  static constexpr uint64_t kStep = uint64_t{2} << 20;

 private:
  void run();
  // A new region with all its pages allocated and mapped, or nullopt (stopping, or the system has
  // no memory for it).
  std::optional<transport::RegionMemory> commit_region();

  const uint64_t region_size_;
  const std::function<bool()> room_;
  const std::function<bool(const transport::RegionMemory&)> offer_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool poked_ = true;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A region for a cache: a memfd mapped into the server (lazy: pages come with their first write).
bool make_region(uint64_t size, transport::RegionMemory& out);
void free_region(const transport::RegionMemory& region);

}  // namespace rc::server
