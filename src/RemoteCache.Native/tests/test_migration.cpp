// Region migration on the client (remotecache.h's migration section, Redy §6.2): while a region moves,
// reads go to its source, writes to it wait in their sessions and keep program order, other regions
// are untouched, and a commit makes the region live on its new holder. Verified traffic from several
// threads runs through every move: each thread owns its words, so it knows what every read must return.
//
// The copy between the servers is done here by plain clients sharing the cache (same id and token),
// so these tests cover the client's part alone; the servers' own pull is tested in test_migration_pull.cpp.
#include <gtest/gtest.h>

#include <remotecache/remotecache.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

constexpr uint64_t kRegion = 1 << 20;
constexpr uint32_t kRegions = 3;
constexpr uint64_t kCacheId = 77;
constexpr const char* kToken = "migration-test";

std::string last_error() { return rc_last_error(); }

struct Server {
  rc_server* handle = nullptr;
  std::string endpoint;

  explicit Server(const std::string& listen) {
    const char* endpoints[] = {listen.c_str()};
    rc_server_options so{};
    so.listen = endpoints;
    so.listen_count = 1;
    so.region_size = kRegion;
    so.memory_limit = 64 * kRegion;
    so.max_threads = 1;
    if (rc_server_start(&so, &handle) != RC_OK) throw std::runtime_error("server: " + last_error());
    endpoint = rc_server_endpoint(handle, 0);
  }
  ~Server() { rc_server_stop(handle); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
};

std::string listen_for(const std::string& transport, int n) {
  if (transport == "tcp") return "tcp:127.0.0.1:0";
  return "shm:/tmp/rc-migration-" + std::to_string(::getpid()) + "-" + std::to_string(n) + ".sock";
}

rc_cache* open_cache(const std::vector<std::string>& endpoints, uint32_t regions, uint32_t c = 0) {
  std::vector<const char*> list;
  for (const auto& e : endpoints) list.push_back(e.c_str());
  rc_cache_options o{};
  o.cache_id = kCacheId;
  o.token = kToken;
  o.regions_per_server = regions;
  o.config = rc_config{c, 1, 8, 4};
  rc_cache* cache = nullptr;
  if (rc_cache_open(list.data(), list.size(), &o, &cache) != RC_OK) throw std::runtime_error("open: " + last_error());
  return cache;
}

// Waits for `count` completions on a session; returns them.
std::vector<rc_completion> wait_for(rc_session* s, size_t count) {
  std::vector<rc_completion> done;
  rc_completion buf[16];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (done.size() < count) {
    const int32_t n = rc_wait(s, buf, 16, 10);
    if (n < 0) throw std::runtime_error("wait: " + last_error());
    done.insert(done.end(), buf, buf + n);
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no completion in 30 s");
  }
  return done;
}

void sync_io(rc_session* s, bool write, uint64_t address, void* buffer, uint64_t length) {
  const rc_status st = write ? rc_write(s, address, buffer, length, 1) : rc_read(s, address, buffer, length, 1);
  if (st != RC_OK) throw std::runtime_error("submit: " + last_error());
  const auto done = wait_for(s, 1);
  if (done[0].status != RC_OK) throw std::runtime_error(std::string("io: ") + rc_status_name(done[0].status));
}

// Copies region `region` (of the moving cache) from the source holder to the target holder's
// `target_region`, through clients that share the cache: what a server's pull does.
void copy_region(const std::string& source, uint32_t source_regions, uint32_t source_region, const std::string& target,
                 uint32_t target_regions, uint32_t target_region) {
  std::vector<std::byte> bytes(kRegion);
  rc_cache* from = open_cache({source}, source_regions);
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(from, &s), RC_OK) << last_error();
  sync_io(s, false, source_region * kRegion, bytes.data(), kRegion);
  rc_session_close(s);
  rc_cache_close(from);
  rc_cache* to = open_cache({target}, target_regions);
  ASSERT_EQ(rc_session_open(to, &s), RC_OK) << last_error();
  sync_io(s, true, target_region * kRegion, bytes.data(), kRegion);
  rc_session_close(s);
  rc_cache_close(to);
}

// Threads that each own every word w with w % threads == t: a write then, in the same session and
// before its completion, a read of the same word (which must see it), then a read of an older word.
class VerifiedTraffic {
 public:
  VerifiedTraffic(rc_cache* cache, int threads) : cache_(cache) {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this, t, threads] { run(t, threads); });
  }
  ~VerifiedTraffic() { stop(); }

  void stop() {
    stop_ = true;
    for (auto& w : workers_)
      if (w.joinable()) w.join();
  }
  uint64_t ops() const { return ops_.load(); }
  uint64_t wrong() const { return wrong_.load(); }
  uint64_t failed() const { return failed_.load(); }
  std::string first_problem() const {
    std::lock_guard lock(mutex_);
    return problem_;
  }

 private:
  void note(std::atomic<uint64_t>& counter, const std::string& what) {
    if (counter.fetch_add(1) == 0) {
      std::lock_guard lock(mutex_);
      if (problem_.empty()) problem_ = what;
    }
  }

  void run(int t, int threads) {
    rc_session* s = nullptr;
    if (rc_session_open(cache_, &s) != RC_OK) {
      note(failed_, "session: " + last_error());
      return;
    }
    const uint64_t words = kRegions * kRegion / 8;
    std::vector<uint64_t> written;  // value written to each owned word (0: never)
    written.assign(words / threads + 1, 0);
    std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
    uint64_t seq = 1;
    while (!stop_) {
      const uint64_t i = rng() % written.size();
      const uint64_t word = i * threads + t;
      if (word >= words) continue;
      const uint64_t value = (uint64_t(t + 1) << 48) | seq++;
      uint64_t read_back = 0, other = 0;
      const uint64_t j = rng() % written.size();
      const uint64_t other_word = j * threads + t;
      if (rc_write(s, word * 8, &value, 8, 1) != RC_OK || rc_read(s, word * 8, &read_back, 8, 2) != RC_OK ||
          (other_word < words && rc_read(s, other_word * 8, &other, 8, 3) != RC_OK)) {
        note(failed_, "submit: " + last_error());
        break;
      }
      std::vector<rc_completion> done;
      try {
        done = wait_for(s, other_word < words ? 3 : 2);
      } catch (const std::exception& e) {
        note(failed_, e.what());
        break;
      }
      bool ok = true;
      for (const auto& c : done)
        if (c.status != RC_OK) {
          note(failed_, std::string("operation ") + std::to_string(c.tag) + ": " + rc_status_name(c.status));
          ok = false;
        }
      if (!ok) break;
      written[i] = value;
      if (read_back != value)
        note(wrong_, "word " + std::to_string(word) + " read " + std::to_string(read_back) + " right after writing " +
                         std::to_string(value));
      if (other_word < words && j != i && other != written[j])
        note(wrong_, "word " + std::to_string(other_word) + " read " + std::to_string(other) + ", last written " +
                         std::to_string(written[j]));
      ops_ += done.size();
    }
    rc_session_close(s);
  }

  rc_cache* cache_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ops_{0}, wrong_{0}, failed_{0};
  mutable std::mutex mutex_;
  std::string problem_;
};

void wait_for_ops(const VerifiedTraffic& traffic, uint64_t more) {
  const uint64_t target = traffic.ops() + more;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (traffic.ops() < target && traffic.failed() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

class Migration : public ::testing::TestWithParam<std::tuple<std::string, uint32_t>> {
 protected:
  std::string transport() const { return std::get<0>(GetParam()); }
  uint32_t client_threads() const { return std::get<1>(GetParam()); }
};

TEST_P(Migration, RegionsMoveUnderVerifiedTrafficAndTheEmptiedServerIsLetGo) {
  Server a(listen_for(transport(), 1)), b(listen_for(transport(), 2));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  ASSERT_EQ(rc_cache_region_count(cache), kRegions);
  uint32_t holder = 99;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, kRegions, &holder), RC_OK) << last_error();
  EXPECT_EQ(holder, 1u);
  EXPECT_EQ(rc_cache_holder_count(cache), 2u);
  EXPECT_EQ(rc_cache_server_count(cache), 1u);  // the shares of the address space: B holds none yet

  {
    VerifiedTraffic traffic(cache, 3);
    wait_for_ops(traffic, rctest::scaled(20000));
    // Every region of A moves to B, one by one, each under traffic; the middle one to B's last slot.
    const uint32_t order[] = {1, 0, 2};
    const uint32_t to[] = {2, 0, 1};
    for (int k = 0; k < 3; ++k) {
      const uint32_t r = order[k];
      ASSERT_EQ(rc_cache_migration_begin(cache, r, 1, 0, 5000), RC_OK) << last_error();
      rc_region_info info{};
      ASSERT_EQ(rc_cache_region_info(cache, r, &info), RC_OK);
      EXPECT_EQ(info.holder, 0u);
      EXPECT_EQ(info.moving, 1u);
      // Writes to the region wait (each thread soon waits for one); reads of it still go to the source.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      copy_region(a.endpoint, kRegions, info.holder_region, b.endpoint, kRegions, to[k]);
      ASSERT_EQ(rc_cache_migration_commit(cache, r, holder, to[k]), RC_OK) << last_error();
      ASSERT_EQ(rc_cache_region_info(cache, r, &info), RC_OK);
      EXPECT_EQ(info.holder, holder);
      EXPECT_EQ(info.holder_region, to[k]);
      EXPECT_EQ(info.moving, 0u);
      wait_for_ops(traffic, rctest::scaled(10000));
    }
    traffic.stop();
    EXPECT_EQ(traffic.failed(), 0u) << traffic.first_problem();
    EXPECT_EQ(traffic.wrong(), 0u) << traffic.first_problem();
    EXPECT_GE(traffic.ops(), rctest::scaled(20000) + 3 * rctest::scaled(10000));
  }
  // A holds nothing: the cache let it go, and with its sessions gone A frees its share.
  EXPECT_EQ(rc_cache_server_count(cache), 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rc_server_memory_in_use(a.handle) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(rc_server_memory_in_use(a.handle), 0u);
  EXPECT_EQ(rc_server_memory_in_use(b.handle), kRegions * kRegion);
  rc_cache_close(cache);
}

// A batch: every region begins moving in one call (one wait for what the sessions had in flight), then each is
// copied and committed on its own while writes to the others still wait.
TEST_P(Migration, RegionsBegunTogetherMoveUnderVerifiedTraffic) {
  Server a(listen_for(transport(), 21)), b(listen_for(transport(), 22));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, kRegions, &holder), RC_OK) << last_error();
  {
    VerifiedTraffic traffic(cache, 3);
    wait_for_ops(traffic, rctest::scaled(20000));
    ASSERT_EQ(rc_cache_migration_begin(cache, 0, kRegions, 0, 5000), RC_OK) << last_error();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (uint32_t r = 0; r < kRegions; ++r) {
      rc_region_info info{};
      ASSERT_EQ(rc_cache_region_info(cache, r, &info), RC_OK);
      EXPECT_EQ(info.moving, 1u) << "region " << r;
      copy_region(a.endpoint, kRegions, info.holder_region, b.endpoint, kRegions, r);
      ASSERT_EQ(rc_cache_migration_commit(cache, r, holder, r), RC_OK) << last_error();
    }
    wait_for_ops(traffic, rctest::scaled(10000));
    traffic.stop();
    EXPECT_EQ(traffic.failed(), 0u) << traffic.first_problem();
    EXPECT_EQ(traffic.wrong(), 0u) << traffic.first_problem();
  }
  for (uint32_t r = 0; r < kRegions; ++r) {
    rc_region_info info{};
    ASSERT_EQ(rc_cache_region_info(cache, r, &info), RC_OK);
    EXPECT_EQ(info.holder, holder);
    EXPECT_EQ(info.moving, 0u);
  }
  rc_cache_close(cache);
}

TEST_P(Migration, AWaitingWriteIsSeenByTheReadAfterItAndGoesToTheNewHolder) {
  Server a(listen_for(transport(), 3)), b(listen_for(transport(), 4));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, 1, &holder), RC_OK) << last_error();
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t old_value = 0x1111, new_value = 0x2222, other = 0x3333, seen = 0, seen_other = 0;
  const uint64_t address = 2 * kRegion + 4096;
  sync_io(s, true, address, &old_value, 8);
  ASSERT_EQ(rc_cache_migration_begin(cache, 2, 1, 0, 5000), RC_OK) << last_error();
  // A read of the moving region before any waiting write goes to the source at once.
  sync_io(s, false, address, &seen, 8);
  EXPECT_EQ(seen, old_value);
  // The write waits; the read after it waits behind it; a write to another region goes out at once.
  ASSERT_EQ(rc_write(s, address, &new_value, 8, 10), RC_OK);
  ASSERT_EQ(rc_read(s, address, &seen, 8, 11), RC_OK);
  ASSERT_EQ(rc_write(s, 8, &other, 8, 12), RC_OK);
  auto done = wait_for(s, 1);
  EXPECT_EQ(done[0].tag, 12u);
  rc_completion none[4];
  EXPECT_EQ(rc_wait(s, none, 4, 50), 0);  // still waiting for the region
  copy_region(a.endpoint, kRegions, 2, b.endpoint, 1, 0);
  ASSERT_EQ(rc_cache_migration_commit(cache, 2, holder, 0), RC_OK) << last_error();
  done = wait_for(s, 2);
  EXPECT_EQ(done[0].tag, 10u);
  EXPECT_EQ(done[1].tag, 11u);
  EXPECT_EQ(seen, new_value);
  // The write landed on B, not A: a client of A alone sees the old value.
  rc_cache* direct = open_cache({a.endpoint}, kRegions);
  rc_session* ds = nullptr;
  ASSERT_EQ(rc_session_open(direct, &ds), RC_OK);
  sync_io(ds, false, address, &seen, 8);
  EXPECT_EQ(seen, old_value);
  sync_io(ds, false, 8, &seen_other, 8);
  EXPECT_EQ(seen_other, other);
  rc_session_close(ds);
  rc_cache_close(direct);
  rc_session_close(s);
  rc_cache_close(cache);
}

TEST_P(Migration, TwoRegionsMoveAtOnceAndAnAbortLeavesTheRegionWhereItWas) {
  Server a(listen_for(transport(), 5)), b(listen_for(transport(), 6));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, 2, &holder), RC_OK) << last_error();
  {
    VerifiedTraffic traffic(cache, 2);
    wait_for_ops(traffic, rctest::scaled(2000));
    ASSERT_EQ(rc_cache_migration_begin(cache, 0, 1, 0, 5000), RC_OK) << last_error();
    ASSERT_EQ(rc_cache_migration_begin(cache, 2, 1, 0, 5000), RC_OK) << last_error();
    EXPECT_EQ(rc_cache_migration_begin(cache, 2, 1, 0, 5000), RC_E_INVALID_ARGUMENT);  // already moving
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    copy_region(a.endpoint, kRegions, 0, b.endpoint, 2, 1);
    ASSERT_EQ(rc_cache_migration_commit(cache, 0, holder, 1), RC_OK) << last_error();
    // Region 2 goes nowhere: its waiting writes go to A after all.
    ASSERT_EQ(rc_cache_migration_abort(cache, 2), RC_OK) << last_error();
    wait_for_ops(traffic, rctest::scaled(2000));
    traffic.stop();
    EXPECT_EQ(traffic.failed(), 0u) << traffic.first_problem();
    EXPECT_EQ(traffic.wrong(), 0u) << traffic.first_problem();
  }
  rc_region_info info{};
  ASSERT_EQ(rc_cache_region_info(cache, 2, &info), RC_OK);
  EXPECT_EQ(info.holder, 0u);
  EXPECT_EQ(info.holder_region, 2u);
  EXPECT_EQ(info.moving, 0u);
  rc_cache_close(cache);
}

TEST_P(Migration, RefusalsNameWhatAndWhy) {
  Server a(listen_for(transport(), 7)), b(listen_for(transport(), 8));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, 1, &holder), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_migration_begin(cache, kRegions, 1, 0, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("has 3 regions"), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_migration_begin(cache, 2, 2, 0, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("regions 2..+2: the cache has 3 regions"), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_migration_begin(cache, 0, 0, 0, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not 0"), std::string::npos) << last_error();
  // Several at once: all or none of them move.
  ASSERT_EQ(rc_cache_migration_begin(cache, 1, 2, 0, 0), RC_OK) << last_error();
  for (uint32_t r = 1; r < 3; ++r) {
    rc_region_info info{};
    ASSERT_EQ(rc_cache_region_info(cache, r, &info), RC_OK);
    EXPECT_EQ(info.moving, 1u) << "region " << r;
  }
  EXPECT_EQ(rc_cache_migration_begin(cache, 0, 2, 0, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("region 1 is already moving"), std::string::npos) << last_error();
  rc_region_info first{};
  ASSERT_EQ(rc_cache_region_info(cache, 0, &first), RC_OK);
  EXPECT_EQ(first.moving, 0u) << "a refused range leaves its other regions alone";
  ASSERT_EQ(rc_cache_migration_abort(cache, 1), RC_OK);
  ASSERT_EQ(rc_cache_migration_abort(cache, 2), RC_OK);
  EXPECT_EQ(rc_cache_migration_commit(cache, 1, holder, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not moving"), std::string::npos) << last_error();
  ASSERT_EQ(rc_cache_migration_begin(cache, 1, 1, 0, 0), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_migration_commit(cache, 1, holder, 1), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no region 1"), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_migration_commit(cache, 1, 0, 0), RC_E_INVALID_ARGUMENT);  // A's region 0 holds region 0
  EXPECT_NE(last_error().find("already holds region 0"), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_migration_commit(cache, 1, 5, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_shrink(cache, 1), RC_OK);  // one share: nothing cut
  EXPECT_EQ(rc_cache_remove_holder(cache, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("still holds region"), std::string::npos) << last_error();
  ASSERT_EQ(rc_cache_migration_abort(cache, 1), RC_OK);
  EXPECT_EQ(rc_cache_migration_abort(cache, 1), RC_E_INVALID_ARGUMENT);
  // The unused target goes; its server frees what it set aside.
  ASSERT_EQ(rc_cache_remove_holder(cache, holder), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_holder_count(cache), 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rc_server_memory_in_use(b.handle) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(rc_server_memory_in_use(b.handle), 0u);
  char text[8];
  EXPECT_EQ(rc_cache_holder_endpoint(cache, 0, text, sizeof text), RC_E_INVALID_ARGUMENT);  // too small
  rc_cache_close(cache);
}

// Without unpaused reads (RC_MIGRATION_PAUSE_READS, for comparisons): reads of the moving region wait
// too and see the region's content on its new holder; reads elsewhere do not wait.
TEST_P(Migration, PausedReadsWaitForTheCommit) {
  Server a(listen_for(transport(), 11)), b(listen_for(transport(), 12));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, 1, &holder), RC_OK) << last_error();
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t value = 0x4444, seen = 0, elsewhere = 0;
  sync_io(s, true, kRegion, &value, 8);
  EXPECT_EQ(rc_cache_migration_begin(cache, 1, 1, 0x80, 0), RC_E_INVALID_ARGUMENT);
  ASSERT_EQ(rc_cache_migration_begin(cache, 1, 1, RC_MIGRATION_PAUSE_READS, 5000), RC_OK) << last_error();
  ASSERT_EQ(rc_read(s, kRegion, &seen, 8, 20), RC_OK);
  ASSERT_EQ(rc_read(s, 0, &elsewhere, 8, 21), RC_OK);
  auto done = wait_for(s, 1);
  EXPECT_EQ(done[0].tag, 21u);
  rc_completion none[4];
  EXPECT_EQ(rc_wait(s, none, 4, 50), 0);
  copy_region(a.endpoint, kRegions, 1, b.endpoint, 1, 0);
  ASSERT_EQ(rc_cache_migration_commit(cache, 1, holder, 0), RC_OK) << last_error();
  done = wait_for(s, 1);
  EXPECT_EQ(done[0].tag, 20u);
  EXPECT_EQ(seen, value);
  rc_session_close(s);
  rc_cache_close(cache);
}

// A source server lost in the middle of a move (what a failure looks like to the driver): the region is
// placed on the target without a copy (it reads as zeros), the write that waited lands there, and the
// regions left on the lost server fail with RC_E_DISCONNECTED instead of hanging.
TEST_P(Migration, ASourceLostMidMoveIsReplacedWithoutItsContent) {
  auto a = std::make_unique<Server>(listen_for(transport(), 13));
  Server b(listen_for(transport(), 14));
  rc_cache* cache = open_cache({a->endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, 1, &holder), RC_OK) << last_error();
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t before = 0x5555, waiting = 0x6666, seen = 1;
  sync_io(s, true, kRegion + 64, &before, 8);
  ASSERT_EQ(rc_cache_migration_begin(cache, 1, 1, 0, 5000), RC_OK) << last_error();
  ASSERT_EQ(rc_write(s, kRegion + 128, &waiting, 8, 30), RC_OK);  // waits for the move
  a.reset();                                                         // the source is gone
  ASSERT_EQ(rc_cache_migration_commit(cache, 1, holder, 0), RC_OK) << last_error();
  auto done = wait_for(s, 1);
  EXPECT_EQ(done[0].tag, 30u);
  EXPECT_EQ(done[0].status, RC_OK);
  sync_io(s, false, kRegion + 128, &seen, 8);
  EXPECT_EQ(seen, waiting);
  sync_io(s, false, kRegion + 64, &seen, 8);
  EXPECT_EQ(seen, 0u);  // the content was not copied: a replaced region starts empty
  // One-sided shm reads notice a dead server at their next liveness probe, a few milliseconds of the coarse clock
  // apart: before that they read its mapping as it was left (the order of earlier tests decides where in the interval
  // this read falls).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(rc_read(s, 0, &seen, 8, 31), RC_OK);  // region 0 stayed on the lost server
  done = wait_for(s, 1);
  EXPECT_EQ(done[0].status, RC_E_DISCONNECTED);
  rc_session_close(s);
  rc_cache_close(cache);
}

// rc_cache_holder_status follows each holder's server: there, gone (the others undisturbed), let go once its regions
// moved to a server started again at its endpoint (the managed client's recovery, driven by hand).
TEST_P(Migration, HolderStatusFollowsItsServerThroughARestart) {
  auto a = std::make_unique<Server>(listen_for(transport(), 17));
  Server b(listen_for(transport(), 18));
  const std::string where = a->endpoint;
  rc_cache* cache = open_cache({where, b.endpoint}, kRegions, client_threads());
  EXPECT_EQ(rc_cache_holder_status(cache, 0), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_holder_status(cache, 1), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_holder_status(cache, 2), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_holder_status(nullptr, 0), RC_E_INVALID_ARGUMENT);
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t value = 0x4242, seen = 0;
  sync_io(s, true, 8, &value, 8);
  a.reset();
  rc_status gone = RC_OK;
  for (int i = 0; i < 200 && (gone = rc_cache_holder_status(cache, 0)) == RC_OK; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(gone, RC_OK) << "holder 0's server stopped 2 s ago";
  EXPECT_EQ(rc_cache_holder_status(cache, 1), RC_OK) << last_error();

  Server again(where.rfind("tcp:", 0) == 0 ? where : listen_for(transport(), 17));
  ASSERT_EQ(again.endpoint, where);
  uint32_t fresh = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, where.c_str(), nullptr, kRegions, &fresh), RC_OK) << last_error();
  for (uint32_t r = 0; r < kRegions; ++r) {
    ASSERT_EQ(rc_cache_migration_begin(cache, r, 1, 0, 5000), RC_OK) << last_error();
    ASSERT_EQ(rc_cache_migration_commit(cache, r, fresh, r), RC_OK) << last_error();
  }
  EXPECT_EQ(rc_cache_holder_status(cache, 0), RC_E_CLOSED);
  EXPECT_EQ(rc_cache_holder_status(cache, fresh), RC_OK) << last_error();
  sync_io(s, false, 8, &seen, 8);
  EXPECT_EQ(seen, 0u);  // lent again, empty
  sync_io(s, true, 8, &value, 8);
  sync_io(s, false, 8, &seen, 8);
  EXPECT_EQ(seen, value);
  rc_session_close(s);
  rc_cache_close(cache);
}

// A target lost in the middle of a move: the driver aborts, the region stays on its source, the write
// that waited goes there, and the dead target is let go.
TEST_P(Migration, ATargetLostMidMoveLeavesTheRegionOnItsSource) {
  Server a(listen_for(transport(), 15));
  auto b = std::make_unique<Server>(listen_for(transport(), 16));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 0;
  ASSERT_EQ(rc_cache_add_holder(cache, b->endpoint.c_str(), nullptr, 1, &holder), RC_OK) << last_error();
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t waiting = 0x7777, seen = 0;
  ASSERT_EQ(rc_cache_migration_begin(cache, 2, 1, 0, 5000), RC_OK) << last_error();
  ASSERT_EQ(rc_write(s, 2 * kRegion + 8, &waiting, 8, 40), RC_OK);
  b.reset();
  ASSERT_EQ(rc_cache_migration_abort(cache, 2), RC_OK) << last_error();
  auto done = wait_for(s, 1);
  EXPECT_EQ(done[0].tag, 40u);
  EXPECT_EQ(done[0].status, RC_OK);
  sync_io(s, false, 2 * kRegion + 8, &seen, 8);
  EXPECT_EQ(seen, waiting);
  ASSERT_EQ(rc_cache_remove_holder(cache, holder), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_holder_count(cache), 1u);
  rc_session_close(s);
  rc_cache_close(cache);
}

// A session that keeps a batch unsent (it never polls) holds a migration back: begin gives up at its
// timeout, names why, and the region is not moving afterwards.
TEST_P(Migration, BeginGivesUpOnASessionThatNeverSends) {
  if (client_threads() != 0) GTEST_SKIP() << "with client threads, batches go out without the session";
  Server a(listen_for(transport(), 9));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, 0);
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t value = 5;
  ASSERT_EQ(rc_write(s, kRegion, &value, 8, 1), RC_OK);  // b = 8: stays in the open batch
  EXPECT_EQ(rc_cache_migration_begin(cache, 1, 1, 0, 100), RC_E_TIMEOUT);
  EXPECT_NE(last_error().find("1 session(s)"), std::string::npos) << last_error();
  rc_region_info info{};
  ASSERT_EQ(rc_cache_region_info(cache, 1, &info), RC_OK);
  EXPECT_EQ(info.moving, 0u);
  wait_for(s, 1);
  rc_session_close(s);
  rc_cache_close(cache);
}

// Lines of /proc/self/maps that map a cache region's memfd (the embedded servers' and the clients').
int region_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("memfd:remotecache-region") != std::string::npos ? 1 : 0;
  return n;
}

// Over shm every session's connections carry the cache's region fds: the process maps each region once
// for all of them (one set of page-table entries, faulted once after a move rather than per session),
// and a mapping outlives the sessions that close while others use it.
TEST_P(Migration, SessionsShareOneMappingOfEachRegion) {
  if (transport() != "shm") GTEST_SKIP() << "shm maps regions into the client";
  Server a(listen_for(transport(), 23));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  const auto touch = [&](rc_session* s, uint64_t value) {
    for (uint32_t r = 0; r < kRegions; ++r) {
      uint64_t back = 0;
      sync_io(s, true, r * kRegion + 8 * value, &value, 8);
      sync_io(s, false, r * kRegion + 8 * value, &back, 8);
      EXPECT_EQ(back, value);
    }
  };
  rc_session* first = nullptr;
  ASSERT_EQ(rc_session_open(cache, &first), RC_OK);
  touch(first, 1);
  const int with_one = region_mappings();
  std::vector<rc_session*> more(4, nullptr);
  for (std::size_t i = 0; i < more.size(); ++i) {
    ASSERT_EQ(rc_session_open(cache, &more[i]), RC_OK);
    touch(more[i], 2 + i);
  }
  EXPECT_EQ(region_mappings(), with_one) << "each session mapped the regions again";
  rc_session_close(first);
  for (std::size_t i = 1; i < more.size(); ++i) rc_session_close(more[i]);
  touch(more[0], 9);
  rc_session_close(more[0]);
  rc_cache_close(cache);
}

// Over shm the client's mappings of the regions ask for 2 MiB pages as the server's do (VmFlags "hg" in smaps:
// MADV_HUGEPAGE), so that where the host allows shmem huge pages (shmem_enabled = advise) the client maps them whole.
TEST_P(Migration, RegionMappingsAskForHugePages) {
  if (transport() != "shm") GTEST_SKIP() << "shm maps regions into the client";
  Server a(listen_for(transport(), 26));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  rc_session* s = nullptr;
  ASSERT_EQ(rc_session_open(cache, &s), RC_OK);
  uint64_t value = 7;
  sync_io(s, true, 0, &value, 8);
  std::ifstream smaps("/proc/self/smaps");
  int regions = 0, asking = 0;
  bool region = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.find("memfd:remotecache-region") != std::string::npos) {
      region = true;
    } else if (region && line.rfind("VmFlags:", 0) == 0) {
      ++regions;
      asking += (line + " ").find(" hg ") != std::string::npos ? 1 : 0;
      region = false;
    }
  }
  EXPECT_GE(regions, 2 * static_cast<int>(kRegions)) << "the server's mappings and the client's";
  EXPECT_EQ(asking, regions) << "a region mapping without MADV_HUGEPAGE";
  rc_session_close(s);
  rc_cache_close(cache);
}

// Kilobytes of region memory this process has mapped (the Rss of its region mappings: the client's and
// the in-process servers').
uint64_t region_rss_kb() {
  std::ifstream smaps("/proc/self/smaps");
  uint64_t kb = 0;
  bool region = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.find("memfd:remotecache-region") != std::string::npos) region = true;
    else if (line.rfind("Rss:", 0) == 0) {
      if (region) kb += std::stoull(line.substr(4));
      region = false;
    }
  }
  return kb;
}

// A mover maps the target's region while it is copied: over shm one pass maps all its pages into the
// process (tcp maps nothing), and the region then moves there under verified traffic as without it.
TEST_P(Migration, ATargetsRegionIsMappedAheadOfTheCommit) {
  Server a(listen_for(transport(), 24)), b(listen_for(transport(), 25));
  rc_cache* cache = open_cache({a.endpoint}, kRegions, client_threads());
  uint32_t holder = 99;
  ASSERT_EQ(rc_cache_add_holder(cache, b.endpoint.c_str(), nullptr, kRegions, &holder), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_map_region_ahead(cache, holder, kRegions), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no region " + std::to_string(kRegions)), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_map_region_ahead(cache, holder + 1, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not connected"), std::string::npos) << last_error();
  EXPECT_EQ(rc_cache_map_region_ahead(nullptr, holder, 0), RC_E_INVALID_ARGUMENT);

  const uint64_t before = region_rss_kb();
  ASSERT_EQ(rc_cache_map_region_ahead(cache, holder, 2), RC_OK) << last_error();
  const uint64_t mapped = region_rss_kb() - before;
  if (transport() == "shm")
    EXPECT_GE(mapped, kRegion / 1024) << "the target's region was not mapped ahead";
  else
    EXPECT_LT(mapped, kRegion / 1024) << "tcp maps no region into the client";
  EXPECT_EQ(rc_cache_map_region_ahead(cache, holder, 2), RC_OK) << "a mapped region is mapped again at no harm";

  {
    VerifiedTraffic traffic(cache, 2);
    wait_for_ops(traffic, rctest::scaled(10000));
    ASSERT_EQ(rc_cache_migration_begin(cache, 1, 1, 0, 5000), RC_OK) << last_error();
    copy_region(a.endpoint, kRegions, 1, b.endpoint, kRegions, 2);
    ASSERT_EQ(rc_cache_migration_commit(cache, 1, holder, 2), RC_OK) << last_error();
    wait_for_ops(traffic, rctest::scaled(10000));
    traffic.stop();
    EXPECT_EQ(traffic.failed(), 0u) << traffic.first_problem();
    EXPECT_EQ(traffic.wrong(), 0u) << traffic.first_problem();
  }
  EXPECT_EQ(rc_cache_close(cache), RC_OK) << last_error();
}

INSTANTIATE_TEST_SUITE_P(Transports, Migration,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(0u, 1u)),
                         [](const auto& param) {
                           return std::get<0>(param.param) + "_c" + std::to_string(std::get<1>(param.param));
                         });

}  // namespace
