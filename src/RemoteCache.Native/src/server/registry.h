// The caches a server lends memory to. A cache is created by its first Connect (which fixes its
// token and region count) and freed when its last connection closes: RemoteCache is a cache, and
// a crashed client must not leak the memory it rented.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/wire.h"
#include "server/executor.h"
#include "transport/transport.h"

namespace rc::server {

struct CacheState {
  uint64_t id = 0;
  std::string token;
  std::vector<transport::RegionMemory> regions;
  std::vector<RegionView> views;
  uint32_t thread_base = 0;  // first server thread this cache's connections go to
  std::atomic<uint32_t> server_threads{0};  // s; connections follow it to their threads
  std::mutex mutex;                          // guards the counters below
  uint32_t connections = 0;
  uint32_t next_connection_index = 0;
};

class Registry {
 public:
  Registry(uint64_t region_size, uint64_t memory_limit);
  ~Registry();

  // Admits a connection: creates the cache or checks the token of the existing one.
  transport::Grant attach(const wire::ConnectRequest& request, std::shared_ptr<CacheState>& cache);
  // Called once per attached connection when it closes.
  void detach(const std::shared_ptr<CacheState>& cache);

  uint64_t region_size() const { return region_size_; }
  uint64_t memory_in_use() const;

 private:
  static void free_regions(CacheState& cache);

  const uint64_t region_size_;
  const uint64_t memory_limit_;
  mutable std::mutex mutex_;
  uint64_t in_use_ = 0;
  uint32_t next_thread_base_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<CacheState>> caches_;
};

}  // namespace rc::server
