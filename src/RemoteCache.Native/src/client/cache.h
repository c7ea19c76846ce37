// The client's view of one cache: its servers, region table, configuration and client threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <remotecache/remotecache.h>

#include "client/channel.h"
#include "client/op.h"
#include "client/region_table.h"
#include "client/seal.h"
#include "common/endpoint.h"
#include "common/mpsc_queue.h"
#include "common/notifier.h"

namespace rc::client {

class Cache;
class Session;

// A client thread: drains its sessions' ring into its channels (one per server), sends batches
// when full or when the ring runs dry, and reaps responses. Backs off to sleep when idle.
class Worker {
 public:
  Worker(Cache& cache, std::vector<std::unique_ptr<Channel>> channels);
  ~Worker();
  void push(const Op& op);  // from any session thread

 private:
  void run();
  bool step(const Knobs& k);
  void sleep(const Knobs& k);

  Cache& cache_;
  std::vector<std::unique_ptr<Channel>> channels_;
  MpscQueue<Op> inbox_;
  std::atomic<uint32_t> sleeping_{0};
  EventFd wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The client threads of one configuration; sessions hold it until they move on.
class WorkerSet {
 public:
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<uint32_t> next{0};
};

class Cache {
 public:
  static std::unique_ptr<Cache> open(const std::vector<std::string>& endpoints, const rc_cache_options& options,
                                     Status& status);
  ~Cache();

  // The servers' address space: a sealed cache's blocks with their trailers.
  uint64_t capacity() const { return capacity_.load(std::memory_order_acquire); }
  // What the client sees (rc_cache_capacity): a sealed cache's whole blocks.
  uint64_t client_capacity() const;
  std::size_t server_count() const;
  uint32_t session_capacity() const {
    return options_.session_capacity == 0 ? RC_DEFAULT_SESSION_CAPACITY : options_.session_capacity;
  }
  rc_config config() const;
  Knobs knobs() const;
  Status reconfigure(const rc_config& config);
  // Presents new capabilities (one per server): new control connections carry them, extending the
  // caches' leases, and later connections use them.
  Status renew(const char* const* capabilities);
  // Appends servers (Redy §3.3's grow): their regions extend the address space past the current
  // capacity. All or nothing. Sessions see the new layout at their next submission.
  Status grow(const std::vector<std::string>& endpoints, const char* const* capabilities);
  // Keeps the first `servers` shares (a share: the regions_per_server regions a server lent when it
  // joined, wherever they live now) and drops the rest of the address space.
  Status shrink(std::size_t servers);

  // ---- migration (Redy §6.2) ----
  // Servers the cache has connected to, in the order they joined (a holder's index never changes;
  // one that holds no region any more keeps its index, without a connection).
  std::size_t holder_count() const;
  Status holder_endpoint(std::size_t holder, std::string& out) const;
  // RC_OK while the holder's server is connected, why it is not once it is gone, RC_E_CLOSED once let go.
  Status holder_status(std::size_t holder);
  // Where address-space region `region` lives now.
  struct Placement {
    uint16_t holder;
    uint16_t region;  // among the regions the holder lent this cache
    uint64_t size;
    bool moving;
    bool reads_wait;  // moving without unpaused reads (RC_MIGRATION_PAUSE_READS)
  };
  std::size_t region_count() const;
  Status region_placement(std::size_t region, Placement& out) const;
  // Connects a server that lends `regions` regions to this cache but holds none of its address space
  // yet: migrations move regions onto it. `holder` is its index.
  Status add_holder(const std::string& endpoint, const char* capability, uint32_t regions, std::size_t& holder);
  // Marks a region moving (writes to it wait in the sessions; with RC_MIGRATION_PAUSE_READS its reads
  // too), then waits up to timeout_ms until no request sent before can still reach it. On timeout the
  // region is not moving any more.
  Status migration_begin(std::size_t first, std::size_t count, uint32_t flags, uint32_t timeout_ms);
  // The region lives at (holder, holder_region) from now on; waiting requests go there. A holder left
  // with no region is let go (its connections close, so its server frees its share).
  Status migration_commit(std::size_t region, std::size_t holder, uint32_t holder_region);
  // Maps region holder_region of a holder into this process now (see ClientConnection::map_ahead),
  // without holding the cache's lock while it does.
  Status map_region_ahead(std::size_t holder, uint32_t holder_region);
  // The region stays where it was; waiting requests go there.
  Status migration_abort(std::size_t region);
  // Lets go of a holder that holds no region (a migration's target after an abort).
  Status remove_holder(std::size_t holder);

  // ---- sealing (rc_cache_options.seal_key; client/seal.h) ----
  // Null for a plain cache.
  const seal::Layout* seal_layout() const { return sealing_ ? &sealing_->layout : nullptr; }
  // A sealer for one thread of a session (throws std::runtime_error when libcrypto cannot set the key up).
  std::unique_ptr<seal::Sealer> make_sealer() const;
  // What this client last wrote to each block: only with RC_OPEN_EXCLUSIVE (else null).
  seal::PinTable* pins() const { return sealing_ ? sealing_->pins.get() : nullptr; }

  // Sessions register so that a migration can wait for what they have in flight.
  void add_session(const Session* session);
  void remove_session(const Session* session);

  // Epoch of the data path's shape (bumped when c or the servers change) and what a session binds to
  // for it. With c = 0 the session's channels to servers still in the cache are kept and only the
  // missing ones connected (servers are only ever appended or cut from the end).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  Status bind(uint64_t& epoch, std::shared_ptr<const RegionTable>& table,
              std::vector<std::unique_ptr<Channel>>& channels, std::shared_ptr<WorkerSet>& workers,
              Worker*& worker);

 private:
  Cache() = default;
  // Connects to endpoints_[first, end) in order (end kToLast: up to the last), appending to `out` (null
  // for a holder let go).
  static constexpr std::size_t kToLast = SIZE_MAX;
  Status connect_links(uint32_t server_threads, std::vector<std::unique_ptr<transport::ClientConnection>>& out,
                       std::size_t first = 0, std::size_t end = kToLast);
  // One capability per endpoint in `endpoints` from their text forms.
  static Status parse_capabilities(const std::vector<Endpoint>& endpoints, const char* const* texts,
                                   std::vector<wire::Capability>& out);
  // lost_ok: a holder that cannot be reached gets an unreachable channel instead of failing the call.
  Status connect_all(uint32_t server_threads, std::vector<std::unique_ptr<Channel>>& out, bool lost_ok, std::size_t first = 0,
                     std::size_t end = kToLast);
  // Whether the servers behind `links` (endpoints_[first..]) granted the regions asked for.
  Status check_grants(const std::vector<std::unique_ptr<transport::ClientConnection>>& links, std::size_t first) const;
  // Appends the regions the control connections of holders [first, ...) lent, in their order.
  void place_regions(std::size_t first);
  // A sealed cache's key check (client/seal.h): refuses a key or block size other than the cache's; writes the
  // check into a fresh cache.
  Status check_key();
  // Publishes the region table of layout_.
  void publish_layout();
  // After layout_ changed: lets go of holders that hold no region (dropping trailing ones altogether),
  // publishes the table, gives the client threads (c > 0) channels to exactly the holders in use, and
  // bumps the epoch. Called with mutex_ held.
  Status relayout();
  bool retired(std::size_t holder) const { return control_[holder] == nullptr; }
  // RC_OK when `holder` is connected and lends this cache a region `holder_region`; else the refusal. Under mutex_.
  Status check_holder_region(std::size_t holder, uint32_t holder_region) const;
  // Unmarks a moving region and publishes. Called with mutex_ held.
  void stop_moving(std::size_t region);
  // `count` client threads, each connected to every holder still in use (lost_ok: as connect_all).
  Status make_workers(uint32_t count, std::shared_ptr<WorkerSet>& out, bool lost_ok = false);
  Status set_server_threads(uint32_t s);
  static Status validate(const rc_config& config);

  std::vector<Endpoint> endpoints_;  // per holder, as are capabilities_, control_, control_seq_, joined_, asked_
  std::vector<uint32_t> asked_;       // regions each holder was asked to lend
  std::vector<bool> awaiting_;        // added for a migration that has not placed a region on it yet
  std::vector<Placement> layout_;     // per address-space region
  std::vector<bool> in_use_;          // per holder: holds a region of layout_ (sessions connect to those)
  std::size_t shares_ = 0;
  rc_cache_options options_{};
  std::string token_;
  std::array<uint8_t, 16> client_id_{};      // tells the servers this client's connections apart
  std::vector<wire::Capability> capabilities_;  // one per endpoint, or none
  std::shared_ptr<const RegionTable> table_;  // replaced, never changed: sessions keep their own reference
  std::atomic<uint64_t> capacity_{0};
  std::vector<std::unique_ptr<transport::ClientConnection>> control_;  // one per server
  std::vector<uint64_t> control_seq_;
  // Per server slot: the epoch from which it holds its current server. A session's channel to a slot that was cut
  // and filled again since the session bound belongs to the old server's share (perhaps dropped): it is not kept.
  std::vector<uint64_t> joined_;

  mutable std::mutex mutex_;  // reconfiguration, growth and binding; guards the servers and the table
  std::atomic<uint32_t> c_{0}, s_{0}, b_{1}, q_{1};
  std::atomic<uint64_t> epoch_{1};
  std::shared_ptr<WorkerSet> workers_;
  uint64_t timeout_ns_ = 0;

  mutable std::mutex sessions_mutex_;
  std::vector<const Session*> sessions_;

  struct Sealing {
    seal::Layout layout;
    std::array<uint8_t, seal::kKeyBytes> key{};
    std::unique_ptr<seal::PinTable> pins;
    Sealing() = default;
    Sealing(const Sealing&) = delete;
    Sealing& operator=(const Sealing&) = delete;
    ~Sealing();
  };
  std::unique_ptr<Sealing> sealing_;
};

}  // namespace rc::client
