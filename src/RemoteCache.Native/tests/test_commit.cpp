// Committed memory (rc_server_options.commit_memory, remotecache-server --commit-memory): the server
// keeps spare regions whose pages exist, new caches take them first, the pool refills when memory
// is freed, lent plus spare memory never passes the limit, and a spare region is always a fresh one
// (zeroed, never a freed cache's). Without the option nothing is committed ahead of a write.
#include <sys/stat.h>

#include <thread>

#include "harness.h"
#include "server/registry.h"

namespace {

using namespace rctest;
namespace wire = rc::wire;

constexpr uint64_t kRegion = 1 * MiB;
constexpr uint32_t kLimitRegions = 4;

// Bytes of the region's memfd that have pages (st_blocks counts 512-byte units).
uint64_t allocated_bytes(const rc::transport::RegionMemory& region) {
  struct stat st {};
  EXPECT_EQ(fstat(region.fd, &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

bool wait_for(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + hang_limit();
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(ms(5));
  }
  return true;
}

class CommitRegistry {
 public:
  explicit CommitRegistry(bool commit)
      : registry_(kRegion, kLimitRegions * kRegion, rc::server::Admission{{}, "commit"}, commit) {}

  std::shared_ptr<rc::server::CacheState> attach(uint64_t id, uint32_t regions) {
    wire::ConnectRequest r{};
    r.cache_id = id;
    r.regions = regions;
    r.server_threads = 1;
    std::shared_ptr<rc::server::CacheState> cache;
    const auto grant = registry_.attach(r, cache);
    EXPECT_EQ(grant.status, RC_OK) << grant.message;
    return cache;
  }

  // Lent and spare memory together stay within the limit.
  ::testing::AssertionResult within_limit() const {
    const uint64_t held = registry_.memory_in_use() + registry_.spare_regions() * kRegion;
    if (held <= kLimitRegions * kRegion) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << held << " bytes lent or spare, over the limit of " << kLimitRegions * kRegion;
  }

  rc::server::Registry registry_;
};

TEST(CommitMemory, SpareRegionsFillTheLimitAndNewCachesTakeThem) {
  CommitRegistry r(true);
  ASSERT_TRUE(wait_for([&] { return r.registry_.spare_regions() == kLimitRegions; }))
      << "spare regions: " << r.registry_.spare_regions();
  EXPECT_EQ(r.registry_.memory_in_use(), 0u) << "spare memory is not lent";
  EXPECT_TRUE(r.within_limit());

  auto a = r.attach(1, 3);
  ASSERT_EQ(a->regions.size(), 3u);
  for (const auto& region : a->regions) EXPECT_EQ(allocated_bytes(region), kRegion) << "a new cache got an uncommitted region";
  EXPECT_EQ(r.registry_.spare_regions(), 1u);
  EXPECT_TRUE(r.within_limit());

  r.registry_.detach(a);
  ASSERT_TRUE(wait_for([&] { return r.registry_.spare_regions() == kLimitRegions; }))
      << "the pool did not refill after a free: " << r.registry_.spare_regions();
  EXPECT_TRUE(r.within_limit());
}

// Spare regions are fresh memfds: what a freed cache held never reaches the next cache.
TEST(CommitMemory, ANewCacheNeverSeesAFreedCachesBytes) {
  CommitRegistry r(true);
  ASSERT_TRUE(wait_for([&] { return r.registry_.spare_regions() == kLimitRegions; }));
  auto a = r.attach(1, kLimitRegions);
  std::vector<int> old_fds;
  for (const auto& region : a->regions) {
    std::memset(region.base, 0xA5, region.size);
    old_fds.push_back(region.fd);
  }
  r.registry_.detach(a);
  a.reset();
  ASSERT_TRUE(wait_for([&] { return r.registry_.spare_regions() == kLimitRegions; }));
  auto b = r.attach(2, kLimitRegions);
  for (const auto& region : b->regions) {
    const auto* p = reinterpret_cast<const uint8_t*>(region.base);
    EXPECT_TRUE(std::all_of(p, p + region.size, [](uint8_t v) { return v == 0; })) << "a new cache's region is not zero";
  }
  r.registry_.detach(b);
}

// With more caches than spares, the rest are made as before (pages with their first write), and the
// pool never grows past what the limit leaves.
TEST(CommitMemory, BeyondTheSparesRegionsAreLazyAndTheLimitHolds) {
  CommitRegistry r(true);
  ASSERT_TRUE(wait_for([&] { return r.registry_.spare_regions() == kLimitRegions; }));
  auto a = r.attach(1, 2);
  auto b = r.attach(2, 2);  // the last two spares
  EXPECT_EQ(r.registry_.spare_regions(), 0u);
  r.registry_.detach(a);
  auto c = r.attach(3, 2);  // races the refill: spare or lazy, both fine
  EXPECT_EQ(c->regions.size(), 2u);
  std::this_thread::sleep_for(ms(200));
  EXPECT_TRUE(r.within_limit());
  EXPECT_EQ(r.registry_.spare_regions(), 0u) << "spares beyond what the limit leaves";
  r.registry_.detach(b);
  r.registry_.detach(c);
}

TEST(CommitMemory, OffMeansNothingIsCommittedAhead) {
  CommitRegistry r(false);
  std::this_thread::sleep_for(ms(100));
  EXPECT_EQ(r.registry_.spare_regions(), 0u);
  auto a = r.attach(1, 2);
  for (const auto& region : a->regions) EXPECT_EQ(allocated_bytes(region), 0u);
  r.registry_.detach(a);
}

// Through the C API and the data path: an embedded server with commit_memory serves tcp and shm
// caches as any other, rc_server_memory_committed counts its spares as they are lent and come back;
// a value other than 0 or 1 is refused by name.
TEST(CommitMemory, ServerWithCommittedMemoryServesCaches) {
  const std::string shm = "shm:@rc-commit-" + std::to_string(getpid());
  const char* listen[] = {"tcp:127.0.0.1:0", shm.c_str()};
  rc_server_options so{};
  so.listen = listen;
  so.listen_count = 2;
  so.region_size = kRegion;
  so.memory_limit = kLimitRegions * kRegion;
  so.max_threads = 1;
  so.commit_memory = 2;
  rc_server* server = nullptr;
  ASSERT_EQ(rc_server_start(&so, &server), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "commit_memory")) << last_error();

  so.commit_memory = 1;
  ASSERT_EQ(rc_server_start(&so, &server), RC_OK) << last_error();
  const auto all_committed = [&] { return rc_server_memory_committed(server) == kLimitRegions * kRegion; };
  ASSERT_TRUE(wait_for(all_committed)) << "committed: " << rc_server_memory_committed(server);
  for (size_t i = 0; i < 2; ++i) {
    rc_cache* cache = nullptr;
    ASSERT_EQ(open_cache({rc_server_endpoint(server, i)}, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 2), &cache),
              RC_OK)
        << last_error();
    EXPECT_EQ(rc_server_memory_committed(server) + rc_server_memory_in_use(server), kLimitRegions * kRegion)
        << "the cache's regions are the spares, lent";
    EXPECT_TRUE(cache_works(cache, kRegion - 1000, 7 + i)) << rc_server_endpoint(server, i);  // across the regions' boundary
    EXPECT_EQ(rc_cache_close(cache), RC_OK);
    ASSERT_TRUE(wait_for(all_committed)) << "the spares did not come back: " << rc_server_memory_committed(server);
  }
  EXPECT_EQ(rc_server_stop(server), RC_OK);
  EXPECT_EQ(rc_server_memory_committed(nullptr), 0u);
}

// A host taking memory back (rc_server_set_memory_limit, rc_server_drop_cache): a limit below what is
// lent refuses new caches by name and leaves the lent ones serving, frees committed spares beyond it at
// once; a drop tells the cache's clients the host took it back and frees its memory; a limit raised
// again lends again.
TEST(CommitMemory, AHostTakesMemoryBackByLimitAndByDrop) {
  const char* listen[] = {"tcp:127.0.0.1:0"};
  rc_server_options so{};
  so.listen = listen;
  so.listen_count = 1;
  so.region_size = kRegion;
  so.memory_limit = kLimitRegions * kRegion;
  so.max_threads = 1;
  so.commit_memory = 1;
  rc_server* server = nullptr;
  ASSERT_EQ(rc_server_start(&so, &server), RC_OK) << last_error();
  ASSERT_TRUE(wait_for([&] { return rc_server_memory_committed(server) == kLimitRegions * kRegion; }));
  const char* endpoint = rc_server_endpoint(server, 0);
  const uint64_t id = fresh_cache_id();
  rc_cache* kept = nullptr;
  ASSERT_EQ(open_cache({endpoint}, make_options(id, rc_config{0, 1, 1, 1}, 2), &kept), RC_OK) << last_error();
  rc_session* session = nullptr;
  ASSERT_EQ(rc_session_open(kept, &session), RC_OK);

  // Below what is lent: spares go at once, the lent cache serves on, a new one is refused by name.
  ASSERT_EQ(rc_server_set_memory_limit(server, 1 * kRegion), RC_OK);
  EXPECT_EQ(rc_server_memory_limit(server), 1 * kRegion);
  EXPECT_EQ(rc_server_memory_committed(server), 0u);
  EXPECT_TRUE(cache_works(kept, 100, 3));
  rc_cache* refused = nullptr;
  EXPECT_EQ(open_cache({endpoint}, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 1), &refused), RC_E_NO_MEMORY);
  EXPECT_TRUE(contains(last_error(), "memory limit")) << last_error();

  // Dropped: the client hears why, the memory goes back to the host.
  size_t dropped = 0;
  ASSERT_EQ(rc_server_drop_cache(server, id, &dropped), RC_OK);
  EXPECT_EQ(dropped, 1u);
  uint8_t buf[64];
  int32_t after = RC_OK;
  std::string why;
  for (int i = 0; i < 500 && after == RC_OK; ++i) {
    after = sync_read(session, 0, buf, sizeof buf);
    why = last_error();
    if (after == RC_OK) std::this_thread::sleep_for(ms(10));
  }
  EXPECT_EQ(after, RC_E_EXPIRED) << why;
  EXPECT_TRUE(contains(why, "host needed its memory back")) << why;
  EXPECT_EQ(rc_session_close(session), RC_OK);
  EXPECT_EQ(rc_cache_close(kept), RC_OK);
  EXPECT_TRUE(wait_for([&] { return rc_server_memory_in_use(server) == 0; })) << rc_server_memory_in_use(server);
  EXPECT_EQ(rc_server_drop_cache(server, id, &dropped), RC_OK);
  EXPECT_EQ(dropped, 0u);

  // The host has memory to spare again: the server lends again.
  ASSERT_EQ(rc_server_set_memory_limit(server, kLimitRegions * kRegion), RC_OK);
  rc_cache* again = nullptr;
  ASSERT_EQ(open_cache({endpoint}, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 2), &again), RC_OK) << last_error();
  EXPECT_TRUE(cache_works(again, kRegion - 10, 9));
  EXPECT_EQ(rc_cache_close(again), RC_OK);
  EXPECT_EQ(rc_server_set_memory_limit(nullptr, 1), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_server_drop_cache(nullptr, 1, nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_server_stop(server), RC_OK);
}

}  // namespace
