#include "server/registry.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/log.h"

namespace rc::server {
namespace {

// Constant-time comparison: a token check must not leak how many leading bytes matched.
bool same_token(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = static_cast<unsigned char>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

// A memfd so that shm clients can map the very same pages; the kernel hands out zeroed pages, which
// is what "zeroed before first use" needs, lazily and without touching the memory up front.
bool make_region(uint64_t size, transport::RegionMemory& out) {
  const int fd = memfd_create("remotecache-region", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return false;
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    return false;
  }
  // Random access over a large region is TLB-bound on 4 KiB pages; where the administrator allows
  // shmem huge pages (transparent_hugepage/shmem_enabled = advise), this gets 2 MiB ones.
  madvise(base, size, MADV_HUGEPAGE);
  out = transport::RegionMemory{fd, static_cast<std::byte*>(base), size};
  return true;
}

transport::Grant refuse(Status status, std::string message) {
  transport::Grant g;
  g.status = status;
  g.message = std::move(message);
  return g;
}

}  // namespace

Registry::Registry(uint64_t region_size, uint64_t memory_limit)
    : region_size_(region_size), memory_limit_(memory_limit) {}

Registry::~Registry() {
  std::lock_guard lock(mutex_);
  for (auto& [id, cache] : caches_) free_regions(*cache);
}

transport::Grant Registry::attach(const wire::ConnectRequest& request,
                                  std::shared_ptr<CacheState>& cache) {
  if (request.token_length > wire::kTokenMax) return refuse(RC_E_INVALID_ARGUMENT, "token too long");
  const std::string_view token(request.token, request.token_length);
  if (request.regions == 0 || request.regions > 250)
    return refuse(RC_E_INVALID_ARGUMENT, "a cache asks for 1 to 250 regions per server");

  std::lock_guard lock(mutex_);
  auto it = caches_.find(request.cache_id);
  if (it != caches_.end()) {
    CacheState& existing = *it->second;
    if (!same_token(existing.token, token)) return refuse(RC_E_AUTH, "wrong token for this cache");
    if (existing.regions.size() != request.regions)
      return refuse(RC_E_INVALID_ARGUMENT, "cache exists with a different region count");
    cache = it->second;
  } else {
    const uint64_t want = uint64_t{request.regions} * region_size_;
    if (want > memory_limit_ - in_use_)
      return refuse(RC_E_NO_MEMORY, "server memory limit reached (" + std::to_string(in_use_) + " of " +
                                        std::to_string(memory_limit_) + " bytes lent)");
    auto fresh = std::make_shared<CacheState>();
    fresh->id = request.cache_id;
    fresh->token = std::string(token);
    fresh->server_threads.store(request.server_threads);
    fresh->thread_base = next_thread_base_++;
    for (uint32_t r = 0; r < request.regions; ++r) {
      transport::RegionMemory region{};
      if (!make_region(region_size_, region)) {
        const int err = errno;
        free_regions(*fresh);
        return refuse(RC_E_NO_MEMORY, std::string("cannot create region: ") + std::strerror(err));
      }
      fresh->regions.push_back(region);
      fresh->views.push_back(RegionView{region.base, region.size});
    }
    in_use_ += want;
    caches_.emplace(request.cache_id, fresh);
    cache = fresh;
    RC_LOG_INFO("cache %llu created: %u regions of %llu bytes",
                static_cast<unsigned long long>(request.cache_id), request.regions,
                static_cast<unsigned long long>(region_size_));
  }
  {
    std::lock_guard cache_lock(cache->mutex);
    ++cache->connections;
  }
  transport::Grant g;
  g.regions = cache->regions;
  g.region_size = region_size_;
  return g;
}

void Registry::detach(const std::shared_ptr<CacheState>& cache) {
  std::lock_guard lock(mutex_);
  {
    std::lock_guard cache_lock(cache->mutex);
    if (--cache->connections > 0) return;
  }
  auto it = caches_.find(cache->id);
  if (it == caches_.end() || it->second != cache) return;
  in_use_ -= cache->regions.size() * region_size_;
  free_regions(*cache);
  caches_.erase(it);
  RC_LOG_INFO("cache %llu freed", static_cast<unsigned long long>(cache->id));
}

uint64_t Registry::memory_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

void Registry::free_regions(CacheState& cache) {
  for (auto& r : cache.regions) {
    munmap(r.base, r.size);
    close(r.fd);
  }
  cache.regions.clear();
  cache.views.clear();
}

}  // namespace rc::server
