// The cache server: listeners admit connections into the registry; server threads poll the
// connections of the caches placed on them and execute their batches in order.
//
// Placement follows each cache's s: connection j of a cache runs on pool thread
// (cache.thread_base + j mod s) mod pool size. With s = 0 its connections go to the event-driven
// housekeeping thread, which never spins: it only wakes for a doorbell or a hang-up, so one-sided
// clients cost no server CPU, and a straggling batch is still served.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rc::server {

struct ServerOptions {
  std::vector<std::string> listen;
  uint64_t region_size = RC_DEFAULT_REGION_SIZE;
  uint64_t memory_limit = RC_DEFAULT_MEMORY_LIMIT;
  uint32_t max_threads = 0;  // 0 = hardware threads
  uint32_t max_connections = RC_DEFAULT_MAX_CONNECTIONS;
  uint32_t max_connections_per_peer = RC_DEFAULT_MAX_CONNECTIONS_PER_PEER;
  uint32_t shm_socket_mode = RC_DEFAULT_SHM_SOCKET_MODE;
  std::vector<uint32_t> allowed_uids;  // abstract shm endpoints, besides the server's own uid
  std::vector<uint8_t> admission_key;  // empty: open mode
  std::string server_id;               // empty: the first endpoint as bound
  bool commit_memory = false;          // rc_server_options.commit_memory
};

class Server {
 public:
  static std::unique_ptr<Server> start(const ServerOptions& options, Status& status);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::vector<std::string>& endpoints() const;
  const std::string& server_id() const;
  uint64_t memory_in_use() const;
  // Bytes of spare regions committed ahead (commit_memory) and not lent yet.
  uint64_t memory_committed() const;
  uint64_t memory_limit() const;
  void set_memory_limit(uint64_t bytes);
  // Drops every cache with this id, its memory freed as its connections close (the host takes it back).
  std::size_t drop_cache(uint64_t cache_id);
  void stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rc::server
