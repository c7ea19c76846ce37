#include "server/registry.h"

#include <cerrno>
#include <cstring>
#include <iterator>

#include "common/capability.h"
#include "common/log.h"

namespace rc::server {
namespace {

transport::Grant refuse(Status status, std::string message) {
  transport::Grant g;
  g.status = status;
  g.message = std::move(message);
  return g;
}

std::string cache_name(uint64_t id) { return "cache " + std::to_string(id); }

}  // namespace

std::size_t Registry::KeyHash::operator()(const Key& k) const {
  uint64_t t = 0;
  std::memcpy(&t, k.token.data(), sizeof t);
  return static_cast<std::size_t>((k.id * 0x9E3779B97F4A7C15ull) ^ t);
}

Registry::Registry(uint64_t region_size, uint64_t memory_limit, Admission admission, bool commit_memory)
    : region_size_(region_size), memory_limit_(memory_limit), admission_(std::move(admission)) {
  crypto::random_bytes(token_salt_);
  if (!commit_memory) return;
  committer_ = std::make_unique<MemoryCommitter>(
      region_size_,
      [this] {
        std::lock_guard lock(mutex_);
        return room_for_spare();
      },
      [this](const transport::RegionMemory& region) {
        std::lock_guard lock(mutex_);
        if (!room_for_spare()) return false;
        spare_.push_back(region);
        return true;
      });
}

Registry::~Registry() {
  committer_.reset();
  std::lock_guard lock(mutex_);
  for (auto& [key, cache] : caches_) free_regions(*cache);
  for (const auto& region : spare_) free_region(region);
}

transport::Grant Registry::admit_capability(const wire::ConnectRequest& request) const {
  if (open_mode()) return {};
  if (request.capability_length != sizeof(wire::Capability))
    return refuse(RC_E_AUTH, "this server admits only clients with a capability, and the Connect carries none");
  const capability::Expectation want{request.cache_id, admission_.server_id, request.regions, capability::unix_now_ms()};
  if (capability::verify(request.capability, admission_.key, want) != RC_OK) return refuse(RC_E_AUTH, last_error());
  return {};
}

transport::Grant Registry::attach(const wire::ConnectRequest& request, std::shared_ptr<CacheState>& cache) {
  if (request.token_length > wire::kTokenMax) return refuse(RC_E_INVALID_ARGUMENT, "token too long");
  if ((request.flags & ~(wire::kConnectExclusive | wire::kConnectMigrationSource)) != 0)
    return refuse(RC_E_INVALID_ARGUMENT, "unknown Connect flags");
  if ((request.flags & wire::kConnectMigrationSource) != 0) return attach_migration_source(request, cache);
  if (request.regions == 0 || request.regions > RC_MAX_REGIONS_PER_SERVER)
    return refuse(RC_E_INVALID_ARGUMENT,
                  "a cache asks for 1 to " + std::to_string(RC_MAX_REGIONS_PER_SERVER) + " regions per server");
  if (auto refused = admit_capability(request); refused.status != RC_OK) return refused;

  const Key key{request.cache_id,
                crypto::hmac_sha256(token_salt_, {reinterpret_cast<const uint8_t*>(request.token), request.token_length})};
  std::lock_guard lock(mutex_);
  auto it = caches_.find(key);
  transport::Grant g = it != caches_.end() ? join(*it->second, request) : create(key, request, cache);
  if (g.status != RC_OK) return g;
  if (it != caches_.end()) cache = it->second;
  {
    std::lock_guard cache_lock(cache->mutex);
    ++cache->connections;
  }
  ++connections_;
  g.regions = cache->regions;
  g.region_size = region_size_;
  return g;
}

transport::Grant Registry::attach_migration_source(const wire::ConnectRequest& request,
                                                   std::shared_ptr<CacheState>& cache) {
  if (request.flags != wire::kConnectMigrationSource)
    return refuse(RC_E_INVALID_ARGUMENT, "a migration source cannot open a cache exclusively: it is nobody's client");
  if (request.regions != 0 || request.token_length != 0)
    return refuse(RC_E_INVALID_ARGUMENT, "a migration-source Connect names no regions and no token (it gets every region)");
  if (open_mode())
    return refuse(RC_E_AUTH, "open mode (no admission key): no migration capability can exist for this server");
  if (request.capability_length != sizeof(wire::Capability))
    return refuse(RC_E_AUTH, "a migration source needs a migration capability, and the Connect carries none");
  const capability::Expectation want{request.cache_id, admission_.server_id, 0, capability::unix_now_ms(),
                                     wire::kCapabilityRightMigrationSource};
  if (capability::verify(request.capability, admission_.key, want) != RC_OK) return refuse(RC_E_AUTH, last_error());

  std::lock_guard lock(mutex_);
  transport::Grant g;
  std::shared_ptr<CacheState> live = unique_live(request.cache_id, g);
  if (!live) return g;
  {
    std::lock_guard cache_lock(live->mutex);
    ++live->connections;
  }
  ++connections_;
  cache = live;
  g.regions = cache->regions;
  g.region_size = region_size_;
  g.read_only = true;
  RC_LOG_INFO("%s: a migration source connected (read-only, %zu regions)", cache_name(cache->id).c_str(),
              cache->regions.size());
  return g;
}

std::shared_ptr<CacheState> Registry::unique_live(uint64_t cache_id, transport::Grant& refused) const {
  std::shared_ptr<CacheState> found;
  std::size_t count = 0;
  for (const auto& [key, cache] : caches_) {
    if (cache->id != cache_id) continue;
    found = cache;
    ++count;
  }
  if (count == 1) return found;
  refused = count == 0 ? refuse(RC_E_INVALID_ARGUMENT, "no live cache with id " + std::to_string(cache_id) +
                                                           " on this server")
                       : refuse(RC_E_INVALID_ARGUMENT, std::to_string(count) + " caches share id " +
                                                           std::to_string(cache_id) +
                                                           " on this server: a migration needs exactly one");
  return nullptr;
}

std::shared_ptr<CacheState> Registry::hold(uint64_t cache_id) {
  std::lock_guard lock(mutex_);
  transport::Grant refused;
  std::shared_ptr<CacheState> cache = unique_live(cache_id, refused);
  if (!cache) {
    fail(refused.status, refused.message);
    return nullptr;
  }
  std::lock_guard cache_lock(cache->mutex);
  ++cache->connections;
  return cache;
}

void Registry::release(const std::shared_ptr<CacheState>& cache) {
  std::lock_guard lock(mutex_);
  unref(cache);
}

transport::Grant Registry::join(CacheState& cache, const wire::ConnectRequest& request) {
  if (cache.regions.size() != request.regions)
    return refuse(RC_E_INVALID_ARGUMENT, cache_name(cache.id) + " exists with " + std::to_string(cache.regions.size()) +
                                             " regions on this server, the Connect asks for " +
                                             std::to_string(request.regions));
  if (!cache.has_first_client) {
    // An idle lease-lived cache: nobody is connected, so whoever opened it before has no claim on it.
    std::memcpy(cache.first_client.data(), request.client_id, sizeof request.client_id);
    cache.has_first_client = true;
    cache.shared = false;
    cache.exclusive = (request.flags & wire::kConnectExclusive) != 0;
    RC_LOG_INFO("%s: reopened after being idle%s", cache_name(cache.id).c_str(), cache.exclusive ? ", exclusive" : "");
  } else {
    const bool same_client = std::memcmp(cache.first_client.data(), request.client_id, sizeof request.client_id) == 0;
    if (cache.exclusive && !same_client)
      return refuse(RC_E_IN_USE, cache_name(cache.id) + " is open exclusively by another client");
    if ((request.flags & wire::kConnectExclusive) != 0 && (cache.shared || !same_client))
      return refuse(RC_E_IN_USE,
                    cache_name(cache.id) + " is already open by another client, so it cannot be opened exclusively");
    cache.shared = cache.shared || !same_client;
  }
  if (request.capability_length != 0 && !open_mode())
    cache.lease_end_ms = std::max(cache.lease_end_ms, request.capability.expires_unix_ms);
  return {};
}

transport::Grant Registry::create(const Key& key, const wire::ConnectRequest& request,
                                  std::shared_ptr<CacheState>& cache) {
  if (!open_mode()) {
    const uint64_t held = regions_by_id_.contains(request.cache_id) ? regions_by_id_[request.cache_id] : 0;
    if (held + request.regions > request.capability.regions)
      return refuse(RC_E_AUTH, "the capability for " + cache_name(request.cache_id) + " grants " +
                                   std::to_string(request.capability.regions) + " regions, " + std::to_string(held) +
                                   " of them held by another cache with this id");
  }
  const uint64_t want = uint64_t{request.regions} * region_size_;
  if (!room_for(want))
    return refuse(RC_E_NO_MEMORY, "server memory limit reached (" + std::to_string(in_use_) + " of " +
                                      std::to_string(memory_limit_) + " bytes lent)");
  auto fresh = std::make_shared<CacheState>();
  fresh->id = request.cache_id;
  fresh->serial = next_serial_++;
  fresh->token = key.token;
  fresh->server_threads.store(request.server_threads);
  fresh->thread_base = next_thread_base_++;
  fresh->exclusive = (request.flags & wire::kConnectExclusive) != 0;
  std::memcpy(fresh->first_client.data(), request.client_id, sizeof request.client_id);
  if (!open_mode()) fresh->lease_end_ms = request.capability.expires_unix_ms;
  for (uint32_t r = 0; r < request.regions; ++r) {
    transport::RegionMemory region{};
    if (!spare_.empty()) {
      region = spare_.back();
      spare_.pop_back();
    } else if (!make_region(region_size_, region)) {
      const int err = errno;
      free_regions(*fresh);
      if (committer_) committer_->poke();  // spares taken above were freed
      return refuse(RC_E_NO_MEMORY, std::string("cannot create region: ") + std::strerror(err));
    }
    fresh->regions.push_back(region);
    fresh->views.push_back(RegionView{region.base, region.size});
  }
  in_use_ += want;
  regions_by_id_[request.cache_id] += request.regions;
  caches_.emplace(key, fresh);
  by_serial_.emplace(fresh->serial, fresh);
  cache = fresh;
  RC_LOG_INFO("%s created: %u regions of %llu bytes%s", cache_name(request.cache_id).c_str(), request.regions,
              static_cast<unsigned long long>(region_size_), fresh->exclusive ? ", exclusive" : "");
  return {};
}

void Registry::detach(const std::shared_ptr<CacheState>& cache) {
  std::lock_guard lock(mutex_);
  --connections_;
  unref(cache);
}

void Registry::unref(const std::shared_ptr<CacheState>& cache) {
  {
    std::lock_guard cache_lock(cache->mutex);
    if (--cache->connections > 0) return;
  }
  if (cache->lease_end_ms != 0 && cache->dropped.load(std::memory_order_acquire) == DropCause::None) {
    // Lease-lived: it keeps its memory until expire() or drop() (the header comment), and forgets its
    // clients so that the next one may open it, exclusively or not.
    cache->has_first_client = false;
    cache->first_client = {};
    cache->shared = false;
    cache->exclusive = false;
    RC_LOG_INFO("%s: no connection left; kept until its lease ends", cache_name(cache->id).c_str());
    return;
  }
  free_cache(cache);
}

void Registry::free_cache(const std::shared_ptr<CacheState>& cache) {
  auto it = caches_.find(Key{cache->id, cache->token});
  if (it != caches_.end() && it->second == cache) caches_.erase(it);
  by_serial_.erase(cache->serial);  // a no-op for a dropped cache, which left it then
  in_use_ -= cache->regions.size() * region_size_;
  auto held = regions_by_id_.find(cache->id);
  if (held != regions_by_id_.end() && (held->second -= cache->regions.size()) == 0) regions_by_id_.erase(held);
  free_regions(*cache);
  if (committer_) committer_->poke();
  RC_LOG_INFO("%s freed", cache_name(cache->id).c_str());
}

std::size_t Registry::expire(uint64_t now_unix_ms, uint64_t& next_end_ms) {
  std::lock_guard lock(mutex_);
  std::size_t dropped = 0;
  next_end_ms = 0;
  for (auto it = caches_.begin(); it != caches_.end();) {
    CacheState& c = *it->second;
    if (c.lease_end_ms != 0 && c.lease_end_ms <= now_unix_ms) {
      RC_LOG_WARN("%s: its lease ended; dropping it", cache_name(c.id).c_str());
      const std::shared_ptr<CacheState> cache = it->second;
      it = caches_.erase(it);
      retire(cache, DropCause::LeaseEnded);
      ++dropped;
      continue;
    }
    if (c.lease_end_ms != 0 && (next_end_ms == 0 || c.lease_end_ms < next_end_ms)) next_end_ms = c.lease_end_ms;
    ++it;
  }
  return dropped;
}

std::size_t Registry::drop(uint64_t cache_id, DropCause cause) {
  std::lock_guard lock(mutex_);
  std::size_t dropped = 0;
  for (auto it = caches_.begin(); it != caches_.end();) {
    if (it->second->id != cache_id) {
      ++it;
      continue;
    }
    RC_LOG_WARN("%s: dropped by its %s", cache_name(cache_id).c_str(), cause == DropCause::ByHost ? "host" : "manager");
    const std::shared_ptr<CacheState> cache = it->second;
    it = caches_.erase(it);
    retire(cache, cause);
    ++dropped;
  }
  return dropped;
}

std::size_t Registry::extend_lease(uint64_t cache_id, uint64_t lease_end_unix_ms) {
  std::lock_guard lock(mutex_);
  std::size_t found = 0;
  for (auto& [key, cache] : caches_) {
    // An unmanaged cache (lease_end_ms == 0) has no lease to extend; it cannot exist beside an
    // admission key anyway.
    if (cache->id != cache_id || cache->lease_end_ms == 0) continue;
    cache->lease_end_ms = std::max(cache->lease_end_ms, lease_end_unix_ms);
    ++found;
  }
  if (found > 0)
    RC_LOG_INFO("%s: lease extended to %llu (unix ms) for %zu caches", cache_name(cache_id).c_str(),
                static_cast<unsigned long long>(lease_end_unix_ms), found);
  return found;
}

void Registry::retire(const std::shared_ptr<CacheState>& cache, DropCause cause) {
  cache->dropped.store(cause, std::memory_order_release);
  by_serial_.erase(cache->serial);
  bool idle = false;
  {
    std::lock_guard cache_lock(cache->mutex);
    idle = cache->connections == 0;
  }
  // No connection will detach to free an idle lease-lived cache: free it now.
  if (idle) free_cache(cache);
}

std::vector<CacheInfo> Registry::list(uint64_t after, uint32_t max, uint32_t& more) const {
  std::lock_guard lock(mutex_);
  std::vector<CacheInfo> out;
  auto it = by_serial_.upper_bound(after);
  for (; it != by_serial_.end() && out.size() < max; ++it) {
    CacheState& c = *it->second;
    uint32_t connections = 0;
    {
      std::lock_guard cache_lock(c.mutex);
      connections = c.connections;
    }
    out.push_back(CacheInfo{c.id, c.serial, c.lease_end_ms, static_cast<uint32_t>(c.regions.size()), connections,
                            c.server_threads.load(std::memory_order_relaxed), c.exclusive});
  }
  more = static_cast<uint32_t>(std::distance(it, by_serial_.end()));
  return out;
}

RegistryStats Registry::stats() const {
  std::lock_guard lock(mutex_);
  return RegistryStats{in_use_, static_cast<uint32_t>(caches_.size()), connections_};
}

void Registry::set_memory_limit(uint64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    memory_limit_ = bytes;
    while (!spare_.empty() && in_use_ + spare_.size() * region_size_ > memory_limit_) {
      free_region(spare_.back());
      spare_.pop_back();
    }
  }
  if (committer_) committer_->poke();  // a raised limit leaves room for spares again
}

uint64_t Registry::memory_limit() const {
  std::lock_guard lock(mutex_);
  return memory_limit_;
}

uint64_t Registry::memory_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

uint64_t Registry::memory_committed() const {
  std::lock_guard lock(mutex_);
  return spare_.size() * region_size_;
}

std::size_t Registry::spare_regions() const {
  std::lock_guard lock(mutex_);
  return spare_.size();
}

void Registry::free_regions(CacheState& cache) {
  for (const auto& r : cache.regions) free_region(r);
  cache.regions.clear();
  cache.views.clear();
}

}  // namespace rc::server
