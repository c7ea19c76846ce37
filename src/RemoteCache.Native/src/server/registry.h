// The caches a server lends memory to. A cache is named by (cache id, token): the same id with
// another token is another cache, so nobody can squat an id, lock its owner out or probe which ids
// exist. A cache is created by its first Connect. How long it keeps its memory depends on how it
// was admitted; this is the one place that states the rule:
//  - Lease-lived (the server has an admission key, so the cache was admitted by a capability and
//    has lease_end_ms != 0): it keeps its regions, their contents and its share of memory_lent until
//    its lease (the latest expiry of the capabilities it was opened with, or of an admin
//    ExtendLease) ends or its manager drops it through the admin interface, whoever is connected.
//    When its last connection (or migration hold) goes it stays, idle, joinable by the same (id,
//    token) and listed with 0 connections: the manager allocated it for a duration (Redy's
//    Create(capacity, SLO, duration)), so a client may fill it, close it and reopen it later.
//  - Unmanaged (open mode, no admission key, lease_end_ms == 0): freed when its last connection
//    closes, since nothing else would ever free it (RemoteCache is a cache: a crashed client must not
//    leak the memory it rented).
// A dropped or expired cache is freed with its last connection, or at once when none is connected.
// When a cache's connections (clients, migration sources and holds) reach 0 it forgets its clients:
// exclusivity (RC_OPEN_EXCLUSIVE) ends, and the next client to connect is its first client again,
// free to open it exclusively.
//
// Admission: with an admission key, a Connect needs a capability signed by it for this server and
// this cache id; the regions of all caches with that id stay within what the capability grants.
//
// Migration sources (wire::kConnectMigrationSource, Redy §6.2): a server pulling a region presents a
// migration capability instead; it joins the one live cache with that id, read-only and with all of
// its regions, without creating anything or counting as one of the cache's clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/crypto.h"
#include "common/wire.h"
#include "server/committer.h"
#include "server/executor.h"
#include "transport/transport.h"

namespace rc::server {

// Why a cache was dropped (its lease ended, or its manager dropped it): its connections then close
// with a Notice that says so (RC_E_EXPIRED either way).
enum class DropCause : uint8_t { None, LeaseEnded, ByManager, ByHost };

struct CacheState {
  uint64_t id = 0;
  uint64_t serial = 0;     // creation order on this server, from 1 (the admin listing's cursor)
  crypto::Digest token{};  // keyed digest of the token, never the token itself
  std::vector<transport::RegionMemory> regions;
  std::vector<RegionView> views;
  uint32_t thread_base = 0;                 // first server thread this cache's connections go to
  std::atomic<uint32_t> server_threads{0};  // s; connections follow it to their threads
  // None while the cache lives; once dropped its connections close.
  std::atomic<DropCause> dropped{DropCause::None};
  std::mutex mutex;  // guards the counters below
  uint32_t connections = 0;
  uint32_t next_connection_index = 0;
  // Guarded by the registry's mutex. Reset when the connections reach 0 (an idle lease-lived cache):
  // the next client to connect is then its first client again.
  bool exclusive = false;
  std::array<uint8_t, 16> first_client{};  // the client id of the first connection
  bool shared = false;                      // another client id has connected too
  bool has_first_client = true;             // false while idle: the next Connect becomes first_client
  uint64_t lease_end_ms = 0;                // 0: no lease (open mode)
};

// What the admin interface reports of a cache.
struct CacheInfo {
  uint64_t id;
  uint64_t serial;
  uint64_t lease_end_ms;
  uint32_t regions;
  uint32_t connections;
  uint32_t server_threads;
  bool exclusive;
};

// What the admin interface reports of the registry as a whole, as one snapshot.
struct RegistryStats {
  uint64_t memory_lent;   // idle lease-lived caches included; dropped ones until their last connection closes
  uint32_t caches;        // live ones (joinable: not dropped), idle lease-lived ones included
  uint32_t connections;   // attached connections of every cache, dropped ones included
};

struct Admission {
  std::vector<uint8_t> key;  // empty: open mode
  std::string server_id;
};

class Registry {
 public:
  // commit_memory: keep committed spare regions for new caches (MemoryCommitter).
  Registry(uint64_t region_size, uint64_t memory_limit, Admission admission, bool commit_memory);
  ~Registry();

  // Admits a connection: checks its capability, then creates its cache or joins the existing one.
  transport::Grant attach(const wire::ConnectRequest& request, std::shared_ptr<CacheState>& cache);
  // Called once per attached connection when it closes (the cache's lifetime rule: the header comment).
  void detach(const std::shared_ptr<CacheState>& cache);

  // Keeps the one live cache with this id from being freed while a region pull writes into it (as a
  // connection would), or refuses (RC_E_INVALID_ARGUMENT: none, or several, the reason as the last
  // error). Every hold is released once.
  std::shared_ptr<CacheState> hold(uint64_t cache_id);
  void release(const std::shared_ptr<CacheState>& cache);

  // Drops every cache whose lease has ended by `now_unix_ms`, idle ones included (marks it, so its
  // connections close; its memory is freed with the last of them, or now when none is connected).
  // Returns how many, and the next lease end (or 0).
  std::size_t expire(uint64_t now_unix_ms, uint64_t& next_end_ms);

  // Drops every live cache with this id, as expire() does for ended leases. Returns how many.
  std::size_t drop(uint64_t cache_id, DropCause cause = DropCause::ByManager);
  // Lends at most `bytes` from now on: new caches beyond it are refused (RC_E_NO_MEMORY); caches already
  // lent keep their memory, and spare regions beyond it are freed now.
  void set_memory_limit(uint64_t bytes);
  // Moves the lease end of every live lease-lived cache with this id to `lease_end_unix_ms` when that
  // is later (a lease is only ever extended here, never shortened). Returns how many caches have the
  // id, so a shorter request counts the caches whose later lease it kept.
  std::size_t extend_lease(uint64_t cache_id, uint64_t lease_end_unix_ms);
  // Up to `max` live caches created after the one with serial `after`, in creation order; `more`:
  // how many live caches come after the last of them.
  std::vector<CacheInfo> list(uint64_t after, uint32_t max, uint32_t& more) const;
  RegistryStats stats() const;

  bool open_mode() const { return admission_.key.empty(); }
  const std::string& server_id() const { return admission_.server_id; }
  uint64_t region_size() const { return region_size_; }
  uint64_t memory_limit() const;
  uint64_t memory_in_use() const;
  uint64_t memory_committed() const;
  // Committed regions waiting for a cache (commit_memory).
  std::size_t spare_regions() const;

 private:
  struct Key {
    uint64_t id;
    crypto::Digest token;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };

  transport::Grant admit_capability(const wire::ConnectRequest& request) const;
  transport::Grant attach_migration_source(const wire::ConnectRequest& request, std::shared_ptr<CacheState>& cache);
  // The one live cache with this id, or null with the refusal in `refused`. Called with mutex_ held.
  std::shared_ptr<CacheState> unique_live(uint64_t cache_id, transport::Grant& refused) const;
  // Takes one reference (connection or hold) off a cache; with the last it frees an unmanaged or
  // dropped cache and leaves a lease-lived one idle (the header comment). Called with mutex_ held.
  void unref(const std::shared_ptr<CacheState>& cache);
  // Gives a cache's memory back and forgets it. Called with mutex_ held, once nothing is connected.
  void free_cache(const std::shared_ptr<CacheState>& cache);
  transport::Grant join(CacheState& cache, const wire::ConnectRequest& request);
  transport::Grant create(const Key& key, const wire::ConnectRequest& request, std::shared_ptr<CacheState>& cache);
  static void free_regions(CacheState& cache);
  // Marks a live cache dropped (its connections close) and takes it out of the listing; the caller,
  // which iterates caches_, takes it out of there (before this call) so that no Connect joins it. Its
  // memory goes with its last connection, or here when none is connected (an idle lease-lived
  // cache). Called with mutex_ held.
  void retire(const std::shared_ptr<CacheState>& cache, DropCause cause);

  const uint64_t region_size_;
  uint64_t memory_limit_;  // under mutex_: a joined server's host may take memory back (set_memory_limit)
  const Admission admission_;
  std::array<uint8_t, 32> token_salt_{};  // keys the token digests, so they say nothing outside
  mutable std::mutex mutex_;
  uint64_t in_use_ = 0;
  uint32_t next_thread_base_ = 0;
  uint64_t next_serial_ = 1;
  uint32_t connections_ = 0;
  // The live caches, by name and in creation order.
  std::unordered_map<Key, std::shared_ptr<CacheState>, KeyHash> caches_;
  std::map<uint64_t, std::shared_ptr<CacheState>> by_serial_;
  std::unordered_map<uint64_t, uint64_t> regions_by_id_;  // regions held by all caches of an id
  // Committed regions no client has seen; they fit under the limit beside the lent ones.
  std::vector<transport::RegionMemory> spare_;
  bool room_for_spare() const { return in_use_ + (spare_.size() + 1) * region_size_ <= memory_limit_; }
  // Whether `bytes` more fit under the limit (which may have fallen below what is lent). Called with mutex_ held.
  bool room_for(uint64_t bytes) const { return in_use_ <= memory_limit_ && bytes <= memory_limit_ - in_use_; }
  std::unique_ptr<MemoryCommitter> committer_;  // last: its thread uses the members above
};

}  // namespace rc::server
