#include "server/committer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/memfd.h"

namespace rc::server {

// A memfd so that shm clients can map the very same pages; the kernel hands out zeroed pages, which
// is what "zeroed before first use" needs.
bool make_region(uint64_t size, transport::RegionMemory& out) {
  const int fd = sealed_memfd("remotecache-region", size);
  if (fd < 0) return false;
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    errno = err;
    return false;
  }
  // Random access over a large region is TLB-bound on 4 KiB pages; where the administrator allows
  // shmem huge pages (transparent_hugepage/shmem_enabled = advise), this gets 2 MiB ones.
  madvise(base, size, MADV_HUGEPAGE);
  out = transport::RegionMemory{fd, static_cast<std::byte*>(base), size};
  return true;
}

void free_region(const transport::RegionMemory& region) {
  transport::region_released(region);
  release_pages(region.base, region.size);
  munmap(region.base, region.size);
  close(region.fd);
}

namespace {

// After the system refused memory or had too little, the committer waits this long (or for memory
// to be freed here).
constexpr auto kRetryAfterRefusal = std::chrono::seconds(10);

// Spares are memory no cache uses yet: they never take the host below this share of its memory
// available (page cache included), so that committing ahead cannot push the host into reclaim or OOM.
constexpr uint64_t kHostReserveDivisor = 8;

// MemAvailable and MemTotal of /proc/meminfo, in bytes; false when it cannot be read.
bool host_memory(uint64_t& available, uint64_t& total) {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long kib = 0;
  available = total = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemTotal: %llu kB", &kib) == 1) total = kib * 1024;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available = kib * 1024;
  }
  std::fclose(f);
  return total != 0 && available != 0;
}

bool host_has_room(uint64_t bytes) {
  uint64_t available = 0, total = 0;
  if (!host_memory(available, total)) return true;  // no /proc: the memory limit alone decides
  return available >= bytes + total / kHostReserveDivisor;
}

}  // namespace

MemoryCommitter::MemoryCommitter(uint64_t region_size, std::function<bool()> room,
                                 std::function<bool(const transport::RegionMemory&)> offer)
    : region_size_(region_size), room_(std::move(room)), offer_(std::move(offer)), thread_([this] { run(); }) {}

MemoryCommitter::~MemoryCommitter() {
  stopping_.store(true);
  poke();
  thread_.join();
}

void MemoryCommitter::poke() {
  {
    std::lock_guard lock(mutex_);
    poked_ = true;
  }
  wake_.notify_one();
}

void MemoryCommitter::run() {
  // The data path's threads come first: this work only moves page faults out of their way.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  bool refused = false;
  while (!stopping_.load()) {
    {
      std::unique_lock lock(mutex_);
      if (refused)
        wake_.wait_for(lock, kRetryAfterRefusal, [this] { return poked_; });
      else
        wake_.wait(lock, [this] { return poked_; });
      poked_ = false;
    }
    refused = false;
    while (!stopping_.load() && room_()) {
      if (!host_has_room(region_size_)) {
        refused = true;
        break;
      }
      std::optional<transport::RegionMemory> region = commit_region();
      if (!region) {
        refused = !stopping_.load();
        break;
      }
      if (!offer_(*region)) free_region(*region);
    }
  }
}

std::optional<transport::RegionMemory> MemoryCommitter::commit_region() {
  transport::RegionMemory region{};
  if (!make_region(region_size_, region)) {
    RC_LOG_WARN("cannot make a spare region: %s; new caches' memory is taken as it is written", std::strerror(errno));
    return std::nullopt;
  }
  for (uint64_t offset = 0; offset < region.size; offset += kStep) {
    if (stopping_.load()) {
      free_region(region);
      return std::nullopt;
    }
    const uint64_t n = std::min(kStep, region.size - offset);
    // MADV_POPULATE_WRITE allocates, zeroes and maps the pages through the server's view, so they come as 2 MiB pages
    // where shmem huge pages are allowed (make_region asks; fallocate, with no mapping to go by, gives 4 KiB ones).
    // Kernels before 5.14 lack it (EINVAL): fallocate allocates and zeroes them, and the first write to each page
    // takes a minor fault.
    if (madvise(region.base + offset, n, MADV_POPULATE_WRITE) != 0 &&
        (errno != EINVAL || fallocate(region.fd, 0, static_cast<off_t>(offset), static_cast<off_t>(n)) != 0)) {
      RC_LOG_WARN("cannot commit a spare region: %s; new caches' memory is taken as it is written",
                  std::strerror(errno));
      free_region(region);
      return std::nullopt;
    }
  }
  transport::region_committed(region);
  return region;
}

}  // namespace rc::server
