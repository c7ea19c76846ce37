// The servers' part of live migration (Redy §6.2): a target server pulls a region of a cache from a
// source server (rc_admin_pull_region on the target) over a read-only migration-source connection
// authorized by a migration capability (rc_capability_mint_migration). Against real remotecache-server
// children: the copy over tcp (batched reads) and shm (one-sided reads) byte for byte; every refusal
// with its status and reason; that a migration connection reads and never writes; that a migration
// capability admits no client; a killed, a silent source and a stopping target; and the commands. In
// process: the wire layouts, the registry's and the executor's rules, and a pull between two embedded
// servers (for the sanitizers). The client's side of migration is test_migration.cpp's.
#include <remotecache/remotecache_admin.h>

#include <filesystem>

#include "common/admin_codec.h"
#include "common/capability.h"
#include "common/clock.h"
#include "common/endpoint.h"
#include "harness.h"
#include "server/admin_session.h"
#include "server/executor.h"
#include "server/registry.h"
#include "transport/transport.h"

#ifndef RC_ADMIN_PATH
#error "RC_ADMIN_PATH must name the remotecache-admin binary"
#endif
#ifndef RC_CAPABILITY_PATH
#error "RC_CAPABILITY_PATH must name the remotecache-capability binary"
#endif

namespace {

using namespace rctest;

constexpr uint64_t kPullRegion = 4 * MiB;  // the servers' --region-size in these tests
constexpr uint32_t kRegions = 3;

int reply_ms() { return rctest::scaled_ms(5000); }

uint64_t an_hour_from_now() { return unix_now_ms() + 3600 * 1000; }

std::string fresh_name(const char* tag) {
  static std::atomic<int> counter{0};
  return "rc-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(++counter);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string mint_migration(const std::vector<uint8_t>& key, uint64_t cache_id, const std::string& server_id,
                           uint64_t expires_unix_ms) {
  char text[RC_MAX_CAPABILITY_TEXT] = {};
  if (rc_capability_mint_migration(key.data(), key.size(), cache_id, server_id.c_str(), expires_unix_ms, text,
                                   sizeof text) != RC_OK)
    return "";
  return text;
}


rc_status admin_connect(const std::string& endpoint, const std::vector<uint8_t>& key, AdminHandle& out) {
  return rc_admin_connect(endpoint.c_str(), key.data(), key.size(), static_cast<uint32_t>(reply_ms()), &out.a);
}

struct Pulled {
  rc_status status = RC_E_INTERNAL;
  rc_pull_result result{};
  std::string error;  // rc_last_error() on failure
  std::chrono::milliseconds took{0};
};

Pulled pull(rc_admin* admin, uint64_t cache_id, uint32_t target_region, uint32_t source_region,
            const std::string& source, const std::string& capability, uint32_t timeout_ms = 0,
            uint32_t max_mib_per_s = 0, uint32_t regions = 0) {
  rc_pull_request request{};
  request.cache_id = cache_id;
  request.target_region = target_region;
  request.source_region = source_region;
  request.source_endpoint = source.c_str();
  request.source_capability = capability.c_str();
  request.timeout_ms = timeout_ms;
  request.max_mib_per_s = max_mib_per_s;
  request.regions = regions;
  Pulled out;
  const auto t0 = Clock::now();
  out.status = rc_admin_pull_region(admin, &request, &out.result);
  out.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  if (out.status != RC_OK) out.error = last_error();
  return out;
}

// The connections the server reports for the cache with this id (the first one listed); -1 when none.
int64_t connections_of(rc_admin* admin, uint64_t cache_id) {
  std::vector<rc_admin_cache> list(64);
  uint32_t count = 0;
  if (rc_admin_list_caches(admin, list.data(), static_cast<uint32_t>(list.size()), &count) != RC_OK) return -1;
  for (uint32_t i = 0; i < std::min<uint32_t>(count, 64); ++i)
    if (list[i].cache_id == cache_id) return list[i].connections;
  return -1;
}

// Polls the listing until the cache has `want` connections or the time passes; the last count seen.
int64_t wait_connections(rc_admin* admin, uint64_t cache_id, int64_t want, int timeout_ms) {
  const auto deadline = Clock::now() + ms(rctest::scaled_ms(timeout_ms));
  for (;;) {
    const int64_t n = connections_of(admin, cache_id);
    if (n == want || Clock::now() > deadline) return n;
    std::this_thread::sleep_for(1ms);
  }
}

// SIGSTOP, returning once every thread of the process has stopped (kill() returns before that).
::testing::AssertionResult stop_process(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return ::testing::AssertionFailure() << "SIGSTOP: " << std::strerror(errno);
  const auto deadline = Clock::now() + 10s;
  for (;;) {
    bool stopped = true;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      const std::string stat = read_text((task.path() / "stat").string());
      const auto close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size())
        stopped = stopped && (stat[close + 2] == 'T' || stat[close + 2] == 't');
    }
    if (stopped) return ::testing::AssertionSuccess();
    if (Clock::now() > deadline) return ::testing::AssertionFailure() << "not stopped 10 s after SIGSTOP";
    std::this_thread::sleep_for(1ms);
  }
}

// Writes `data` at `base` through a fresh session, 256 KiB at a time.
::testing::AssertionResult write_all(rc_cache* cache, uint64_t base, const std::vector<uint8_t>& data) {
  SessionHandle s;
  if (const rc_status st = rc_session_open(cache, &s.s); st != RC_OK)
    return ::testing::AssertionFailure() << "rc_session_open = " << sname(st);
  {
    Pipeline pl(s.s, "write_all");
    const uint64_t chunk = 256 * KiB;
    for (uint64_t off = 0; off < data.size(); off += chunk) {
      const uint64_t n = std::min<uint64_t>(chunk, data.size() - off);
      if (const rc_status st = pl.write(base + off, std::vector<uint8_t>(data.begin() + static_cast<std::ptrdiff_t>(off),
                                                                         data.begin() + static_cast<std::ptrdiff_t>(off + n)));
          st != RC_OK)
        return ::testing::AssertionFailure() << "write submit: " << sname(st) << ": " << last_error();
      while (pl.pending() >= 8)
        if (!pl.reap_some(hang_limit())) break;
    }
    if (!pl.drain(hang_limit())) {
      pl.abandon();
      s.leak();
      return ::testing::AssertionFailure() << "writes hung";
    }
    if (pl.failures() != 0) return ::testing::AssertionFailure() << pl.failures() << " writes failed";
  }
  return s.close() == RC_OK ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "rc_session_close";
}

// Reads [base, base + expected.size()) through a fresh session and compares.
::testing::AssertionResult holds(rc_cache* cache, uint64_t base, const std::vector<uint8_t>& expected,
                                 const std::string& label) {
  SessionHandle s;
  if (const rc_status st = rc_session_open(cache, &s.s); st != RC_OK)
    return ::testing::AssertionFailure() << "rc_session_open = " << sname(st);
  const auto verified = verify_all(s.s, expected, base, label);
  if (!verified) return verified;
  return s.close() == RC_OK ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "rc_session_close";
}

// ---- fixture: keyed servers with their own keys and ids -------------------------------------------

class PullBase : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    watchdog_ = std::make_unique<Watchdog>(std::string(info->test_suite_name()) + "." + info->name(), 110s);
    const std::string pid = std::to_string(::getpid());
    id_a_ = "rc-pull-source-" + pid;
    id_b_ = "rc-pull-target-" + pid;
  }
  void TearDown() override {
    watchdog_.reset();
    for (const auto& p : logs_) ::unlink(p.c_str());
  }
  void phase(const std::string& p) {
    if (watchdog_) watchdog_->phase(p);
  }

  std::string listen_on(const std::string& transport) {
    if (transport == "tcp") return "tcp:127.0.0.1:0";
    const std::string path = "/tmp/" + fresh_name("pull") + ".sock";
    ::unlink(path.c_str());
    return "shm:" + path;
  }

  // A server keyed with `key` (open mode when null) named `server_id`, lending regions of `region_size`.
  ::testing::AssertionResult start(ServerProcess& server, const std::string& transport, const KeyFile* key,
                                   const std::string& server_id, uint64_t region_size = kPullRegion,
                                   uint64_t memory_limit = 0) {
    ServerLaunch launch;
    launch.extra = {"--region-size", std::to_string(region_size), "--verbose"};
    if (memory_limit != 0) launch.extra.insert(launch.extra.end(), {"--memory-limit", std::to_string(memory_limit)});
    if (key != nullptr) launch.extra.insert(launch.extra.end(), {"--admission-key", key->path, "--server-id", server_id});
    launch.stderr_path = "/tmp/" + fresh_name("pull-log") + ".txt";
    logs_.push_back(launch.stderr_path);
    return server.start(listen_on(transport), launch);
  }

  // Opens `regions` regions of cache `id` on one server (a capability for `granted` regions when keyed).
  static rc_status open(const std::string& endpoint, const KeyFile* key, const std::string& server_id, uint64_t id,
                        uint32_t regions, const char* token, CacheHandle& cache, uint32_t flags = 0,
                        uint32_t granted = 0) {
    const std::string capability =
        key != nullptr ? mint(key->key, id, server_id, granted != 0 ? granted : regions, an_hour_from_now()) : "";
    const char* caps[] = {capability.c_str()};
    rc_cache_options o = make_options(id, rc_config{0, 1, 8, 4}, regions, token);
    o.connect_timeout_ms = static_cast<uint32_t>(reply_ms());
    o.capabilities = key != nullptr ? caps : nullptr;
    o.flags = flags;
    const rc_status st = open_cache({endpoint}, o, &cache.c);
    if (st != RC_OK) cache.c = nullptr;
    return st;
  }

  KeyFile key_a_;  // the source's admission key
  KeyFile key_b_;  // the target's: the manager mints each server's capabilities with that server's key
  std::string id_a_;
  std::string id_b_;
  std::vector<std::string> logs_;
  std::unique_ptr<Watchdog> watchdog_;
};

class MigrationPull : public PullBase {};
class MigrationPullP : public PullBase, public ::testing::WithParamInterface<std::string> {};

std::string param_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

// ---- the copy ----------------------------------------------------------------------------------------

// A's region 1 of cache X lands in B's region 2, byte for byte; B's other regions and A's cache are
// untouched; the result says how much was copied and how (one-sided over shm, batched over tcp); the
// migration connection is gone from A afterwards and B's cache holds no more connections than before.
// A's cache is exclusive: a migration source is nobody's client, so exclusivity does not stop it.
TEST_P(MigrationPullP, PullCopiesTheRegionByteForByte) {
  ServerProcess a, b;
  ASSERT_TRUE(start(a, GetParam(), &key_a_, id_a_));
  ASSERT_TRUE(start(b, "tcp", &key_b_, id_b_));
  const uint64_t x = fresh_cache_id();
  CacheHandle ca, cb;
  ASSERT_EQ(open(a.endpoint(), &key_a_, id_a_, x, kRegions, "owner-on-a", ca, RC_OPEN_EXCLUSIVE), RC_OK) << last_error();
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, x, kRegions, "owner-on-b", cb), RC_OK) << last_error();
  phase("fill");
  const auto moving = pattern(11, kPullRegion);
  const auto b0 = pattern(12, kPullRegion), b1 = pattern(13, kPullRegion), old2 = pattern(14, kPullRegion);
  ASSERT_TRUE(write_all(ca.c, 1 * kPullRegion, moving));
  ASSERT_TRUE(write_all(cb.c, 0 * kPullRegion, b0));
  ASSERT_TRUE(write_all(cb.c, 1 * kPullRegion, b1));
  ASSERT_TRUE(write_all(cb.c, 2 * kPullRegion, old2));
  AdminHandle on_a, on_b;
  ASSERT_EQ(admin_connect(a.endpoint(), key_a_.key, on_a), RC_OK) << last_error();
  ASSERT_EQ(admin_connect(b.endpoint(), key_b_.key, on_b), RC_OK) << last_error();
  const int64_t a_connections = wait_connections(on_a.a, x, 1, 5000);  // the control connection
  const int64_t b_connections = wait_connections(on_b.a, x, 1, 5000);
  ASSERT_GE(a_connections, 1);

  phase("pull");
  const Pulled p = pull(on_b.a, x, 2, 1, a.endpoint(), mint_migration(key_a_.key, x, id_a_, an_hour_from_now()));
  ASSERT_EQ(p.status, RC_OK) << sname(p.status) << ": " << p.error;
  EXPECT_EQ(p.result.bytes, kPullRegion);
  EXPECT_EQ(p.result.one_sided, GetParam() == "shm" ? 1u : 0u);
  EXPECT_GT(p.result.elapsed_ns, 0u);
  EXPECT_LE(p.result.elapsed_ns / 1'000'000, static_cast<uint64_t>(p.took.count()) + 1);
  std::printf("[ info     ] pulled %llu bytes over %s in %.2f ms (%s), %.0f MB/s on the target\n",
              static_cast<unsigned long long>(p.result.bytes), GetParam().c_str(),
              static_cast<double>(p.result.elapsed_ns) / 1e6, p.result.one_sided ? "one-sided" : "batched",
              static_cast<double>(p.result.bytes) * 1e3 / static_cast<double>(p.result.elapsed_ns));

  phase("check");
  EXPECT_TRUE(holds(cb.c, 2 * kPullRegion, moving, "B's region 2 after the pull"));
  EXPECT_TRUE(holds(cb.c, 0 * kPullRegion, b0, "B's region 0"));
  EXPECT_TRUE(holds(cb.c, 1 * kPullRegion, b1, "B's region 1"));
  EXPECT_TRUE(holds(ca.c, 1 * kPullRegion, moving, "A's region 1 (the source)"));
  EXPECT_EQ(wait_connections(on_a.a, x, a_connections, 5000), a_connections) << "the migration connection stayed on A";
  EXPECT_EQ(wait_connections(on_b.a, x, b_connections, 5000), b_connections) << "the pull's hold stayed on B";
  EXPECT_TRUE(contains(read_text(logs_[1]), "pulled region 1 from " + a.endpoint() + " into region 2 on")) << read_text(logs_[1]);
  EXPECT_TRUE(contains(read_text(logs_[0]), "a migration source connected (read-only")) << read_text(logs_[0]);

  phase("again, the other way round within B's cache");
  // A pull may name the target itself as the source: region 2 (now A's bytes) back onto region 0.
  const Pulled self = pull(on_b.a, x, 0, 2, b.endpoint(), mint_migration(key_b_.key, x, id_b_, an_hour_from_now()));
  ASSERT_EQ(self.status, RC_OK) << self.error;
  EXPECT_TRUE(holds(cb.c, 0, moving, "B's region 0 after pulling from itself"));

  phase("several regions over one connection");
  const auto a2 = pattern(15, kPullRegion);
  ASSERT_TRUE(write_all(ca.c, 2 * kPullRegion, a2));
  const Pulled two = pull(on_b.a, x, 0, 1, a.endpoint(), mint_migration(key_a_.key, x, id_a_, an_hour_from_now()), 0, 0, 2);
  ASSERT_EQ(two.status, RC_OK) << two.error;
  EXPECT_EQ(two.result.bytes, 2 * kPullRegion);
  EXPECT_TRUE(holds(cb.c, 0 * kPullRegion, moving, "B's region 0 after pulling A's 1..2"));
  EXPECT_TRUE(holds(cb.c, 1 * kPullRegion, a2, "B's region 1 after pulling A's 1..2"));
  EXPECT_TRUE(holds(cb.c, 2 * kPullRegion, moving, "B's region 2 (not pulled into)"));
  EXPECT_TRUE(contains(read_text(logs_[1]), "pulled regions 1..+2 from " + a.endpoint() + " into region 0 on")) << read_text(logs_[1]);

  phase("paced");
  // At 8 MiB/s a 4 MiB region cannot be copied in less than the time its bytes after the first read take: a lower
  // bound the pace guarantees, whatever the machine's speed.
  constexpr uint32_t kPace = 8;
  const Pulled paced = pull(on_b.a, x, 1, 1, a.endpoint(), mint_migration(key_a_.key, x, id_a_, an_hour_from_now()), 0, kPace);
  ASSERT_EQ(paced.status, RC_OK) << paced.error;
  EXPECT_TRUE(holds(cb.c, 1 * kPullRegion, moving, "B's region 1 after a paced pull"));
  const double floor_s = static_cast<double>(kPullRegion - 2 * 1048576) / (kPace * 1048576.0);
  EXPECT_GE(static_cast<double>(paced.result.elapsed_ns) * 1e-9, floor_s * 0.95)
      << "a pull paced at " << kPace << " MiB/s copied " << kPullRegion << " bytes in " << paced.result.elapsed_ns << " ns";
  EXPECT_TRUE(cache_works(ca.c, 17, 3));
  EXPECT_TRUE(cache_works(cb.c, 17, 4));
  EXPECT_EQ(ca.close(), RC_OK);
  EXPECT_EQ(cb.close(), RC_OK);
  EXPECT_TRUE(a.stop());
  EXPECT_TRUE(b.stop());
}

// ---- refusals ----------------------------------------------------------------------------------------

// Every pull that cannot be done is refused with a status and a reason that names what and where, the
// target region keeps its bytes, and the admin connection goes on (a failed pull is no protocol fault).
TEST_P(MigrationPullP, RefusalsNameWhatAndWhy) {
  ServerProcess a, b;
  ASSERT_TRUE(start(a, GetParam(), &key_a_, id_a_));
  ASSERT_TRUE(start(b, "tcp", &key_b_, id_b_));
  const std::string src = a.endpoint();
  const uint64_t x = fresh_cache_id();
  CacheHandle ca, cb;
  ASSERT_EQ(open(src, &key_a_, id_a_, x, kRegions, "a", ca), RC_OK) << last_error();
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, x, kRegions, "b", cb), RC_OK) << last_error();
  const auto old2 = pattern(21, kPullRegion);
  ASSERT_TRUE(write_all(cb.c, 2 * kPullRegion, old2));
  ASSERT_TRUE(write_all(ca.c, 1 * kPullRegion, pattern(22, kPullRegion)));
  AdminHandle admin;
  ASSERT_EQ(admin_connect(b.endpoint(), key_b_.key, admin), RC_OK) << last_error();
  const std::string good = mint_migration(key_a_.key, x, id_a_, an_hour_from_now());

  struct Case {
    const char* what;
    uint64_t cache_id;
    uint32_t target_region;
    uint32_t source_region;
    std::string source;
    std::string capability;
    rc_status want;
    std::vector<std::string> says;  // parts of the reason
  };
  const uint64_t absent = fresh_cache_id();
  const std::vector<Case> cases = {
      {"a client's capability", x, 2, 1, src, mint(key_a_.key, x, id_a_, kRegions, an_hour_from_now()), RC_E_AUTH,
       {src, "needs a migration capability"}},
      {"a migration capability for another cache", x, 2, 1, src,
       mint_migration(key_a_.key, absent, id_a_, an_hour_from_now()), RC_E_AUTH,
       {"it is for cache " + std::to_string(absent) + ", not cache " + std::to_string(x)}},
      {"a migration capability for another server", x, 2, 1, src,
       mint_migration(key_a_.key, x, "some-other-server", an_hour_from_now()), RC_E_AUTH,
       {"it is for server 'some-other-server', this is '" + id_a_ + "'"}},
      {"a migration capability signed with the target's key", x, 2, 1, src,
       mint_migration(key_b_.key, x, id_a_, an_hour_from_now()), RC_E_AUTH, {"signature does not verify"}},
      {"an expired migration capability", x, 2, 1, src, mint_migration(key_a_.key, x, id_a_, unix_now_ms() - 5000),
       RC_E_AUTH, {"expired"}},
      {"no cache with the id on the target", absent, 0, 0, src, mint_migration(key_a_.key, absent, id_a_, an_hour_from_now()),
       RC_E_INVALID_ARGUMENT, {"the target", "no live cache with id " + std::to_string(absent)}},
      {"the target region out of range", x, kRegions, 1, src, good, RC_E_OUT_OF_RANGE,
       {"target region 3 is out of range", "has 3 regions on this server"}},
      {"the source region out of range", x, 2, kRegions + 4, src, good, RC_E_OUT_OF_RANGE,
       {"source region 7 is out of range", "has 3 regions on " + src}},
      {"an endpoint that does not parse", x, 2, 1, "nowhere", good, RC_E_INVALID_ARGUMENT, {"the source endpoint"}},
  };
  for (const Case& c : cases) {
    phase(c.what);
    const Pulled p = pull(admin.a, c.cache_id, c.target_region, c.source_region, c.source, c.capability);
    std::printf("[ info     ] %s: %s: %s\n", c.what, sname(p.status).c_str(), p.error.c_str());
    EXPECT_EQ(p.status, c.want) << c.what << ": " << p.error;
    for (const auto& part : c.says) EXPECT_TRUE(contains(p.error, part)) << c.what << ": '" << part << "' not in: " << p.error;
    EXPECT_EQ(p.result.bytes, 0u) << c.what;
  }

  phase("region ranges past either cache, and a reserved field set");
  Pulled past = pull(admin.a, x, 2, 0, src, good, 0, 0, 2);
  EXPECT_EQ(past.status, RC_E_OUT_OF_RANGE) << past.error;
  EXPECT_TRUE(contains(past.error, "target regions 2..+2 is out of range")) << past.error;
  past = pull(admin.a, x, 0, 2, src, good, 0, 0, 2);
  EXPECT_EQ(past.status, RC_E_OUT_OF_RANGE) << past.error;
  EXPECT_TRUE(contains(past.error, "source regions 2..+2 is out of range")) << past.error;
  EXPECT_TRUE(holds(cb.c, 2 * kPullRegion, old2, "B's region 2 after the refusals"));
  rc_pull_request reserved{};
  reserved.cache_id = x;
  reserved.source_endpoint = src.c_str();
  reserved.source_capability = good.c_str();
  reserved.reserved = 1;
  EXPECT_EQ(rc_admin_pull_region(admin.a, &reserved, nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "reserved must be 0")) << last_error();

  phase("the source holds no cache with the id, or two");
  const uint64_t only_on_b = fresh_cache_id();
  CacheHandle on_b_only;
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, only_on_b, 1, "b", on_b_only), RC_OK) << last_error();
  Pulled p = pull(admin.a, only_on_b, 0, 0, src, mint_migration(key_a_.key, only_on_b, id_a_, an_hour_from_now()));
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT) << p.error;
  EXPECT_TRUE(contains(p.error, src) && contains(p.error, "no live cache with id " + std::to_string(only_on_b))) << p.error;
  CacheHandle twin1, twin2;
  ASSERT_EQ(open(src, &key_a_, id_a_, only_on_b, 1, "twin-1", twin1, 0, 2), RC_OK) << last_error();
  ASSERT_EQ(open(src, &key_a_, id_a_, only_on_b, 1, "twin-2", twin2, 0, 2), RC_OK) << last_error();
  p = pull(admin.a, only_on_b, 0, 0, src, mint_migration(key_a_.key, only_on_b, id_a_, an_hour_from_now()));
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT) << p.error;
  EXPECT_TRUE(contains(p.error, "2 caches share id " + std::to_string(only_on_b))) << p.error;

  phase("the target holds two caches with the id");
  const uint64_t twice = fresh_cache_id();
  CacheHandle t1, t2;
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, twice, 1, "one", t1, 0, 2), RC_OK) << last_error();
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, twice, 1, "two", t2, 0, 2), RC_OK) << last_error();
  p = pull(admin.a, twice, 0, 0, src, mint_migration(key_a_.key, twice, id_a_, an_hour_from_now()));
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT) << p.error;
  EXPECT_TRUE(contains(p.error, "the target") && contains(p.error, "2 caches share id " + std::to_string(twice))) << p.error;

  phase("regions of another size");
  ServerProcess c;
  ASSERT_TRUE(start(c, "tcp", &key_b_, id_b_ + "-c", kPullRegion / 4));
  CacheHandle cc;
  ASSERT_EQ(open(c.endpoint(), &key_b_, id_b_ + "-c", x, kRegions, "c", cc), RC_OK) << last_error();
  AdminHandle on_c;
  ASSERT_EQ(admin_connect(c.endpoint(), key_b_.key, on_c), RC_OK) << last_error();
  p = pull(on_c.a, x, 0, 1, src, good);
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT) << p.error;
  EXPECT_TRUE(contains(p.error, "region sizes differ") && contains(p.error, std::to_string(kPullRegion)) &&
              contains(p.error, std::to_string(kPullRegion / 4)))
      << p.error;

  phase("an open-mode source");
  ServerProcess open_source;
  ASSERT_TRUE(start(open_source, GetParam(), nullptr, ""));
  CacheHandle co;
  ASSERT_EQ(open(open_source.endpoint(), nullptr, "", x, kRegions, "open", co), RC_OK) << last_error();
  p = pull(admin.a, x, 2, 1, open_source.endpoint(),
           mint_migration(key_a_.key, x, open_source.server_id(), an_hour_from_now()));
  EXPECT_EQ(p.status, RC_E_AUTH) << p.error;
  EXPECT_TRUE(contains(p.error, "open mode") && contains(p.error, open_source.endpoint())) << p.error;

  phase("nobody listening");
  p = pull(admin.a, x, 2, 1, GetParam() == "tcp" ? "tcp:127.0.0.1:1" : "shm:/tmp/" + fresh_name("nobody"), good, 2000);
  EXPECT_EQ(p.status, RC_E_DISCONNECTED) << p.error;
  EXPECT_TRUE(contains(p.error, "connecting to the source")) << p.error;

  phase("caught by the library before anything is sent");
  p = pull(admin.a, x, 2, 1, src, "not a capability");
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(p.error, "source_capability")) << p.error;
  p = pull(admin.a, x, 2, 1, std::string(RC_MAX_PULL_ENDPOINT_BYTES + 1, 'x'), good);
  EXPECT_EQ(p.status, RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(p.error, "source_endpoint")) << p.error;
  EXPECT_EQ(rc_admin_pull_region(admin.a, nullptr, nullptr), RC_E_INVALID_ARGUMENT);

  phase("nothing changed, and the admin connection goes on");
  EXPECT_TRUE(holds(cb.c, 2 * kPullRegion, old2, "B's region 2 after the refused pulls"));
  rc_server_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(rc_admin_stats(admin.a, &s), RC_OK) << last_error();
  const Pulled ok = pull(admin.a, x, 2, 1, src, good);
  EXPECT_EQ(ok.status, RC_OK) << ok.error;
  EXPECT_TRUE(holds(cb.c, 2 * kPullRegion, pattern(22, kPullRegion), "B's region 2 after the good pull"));
  EXPECT_TRUE(a.stop());
  EXPECT_TRUE(b.stop());
}

// A migration capability admits no client: an ordinary open presenting one is refused with RC_E_AUTH
// saying so, whether the cache exists or not, and nothing is created.
TEST_P(MigrationPullP, AMigrationCapabilityIsNoAdmission) {
  ServerProcess a;
  ASSERT_TRUE(start(a, GetParam(), &key_a_, id_a_));
  const uint64_t x = fresh_cache_id();
  const std::string capability = mint_migration(key_a_.key, x, id_a_, an_hour_from_now());
  const char* caps[] = {capability.c_str()};
  rc_cache_options o = make_options(x, rc_config{0, 1, 8, 4}, 1, "thief");
  o.capabilities = caps;
  CacheHandle refused;
  EXPECT_EQ(open_cache({a.endpoint()}, o, &refused.c), RC_E_AUTH);
  refused.c = nullptr;
  const std::string why = last_error();
  EXPECT_TRUE(contains(why, "a migration capability admits a server pulling a region, not a client")) << why;
  AdminHandle admin;
  ASSERT_EQ(admin_connect(a.endpoint(), key_a_.key, admin), RC_OK) << last_error();
  EXPECT_EQ(connections_of(admin.a, x), -1) << "a cache was created";
  CacheHandle owner;
  ASSERT_EQ(open(a.endpoint(), &key_a_, id_a_, x, 1, "owner", owner), RC_OK) << last_error();
  EXPECT_EQ(open_cache({a.endpoint()}, o, &refused.c), RC_E_AUTH) << "a migration capability joined a live cache";
  refused.c = nullptr;
  o.token = "owner";  // even with the right token
  EXPECT_EQ(open_cache({a.endpoint()}, o, &refused.c), RC_E_AUTH);
  refused.c = nullptr;
  EXPECT_EQ(owner.close(), RC_OK);
  EXPECT_TRUE(a.stop());
}

// A migration connection reads and never writes: through the transport API, a Write and a
// SetServerThreads in a batch are answered RC_E_AUTH while the batch's Read runs; a one-sided write is
// refused by the connection (shm maps the regions read-only); a raw shm client gets read-only fds it
// cannot map for writing. The source's bytes are unchanged afterwards.
TEST_P(MigrationPullP, AMigrationConnectionCannotWrite) {
  ServerProcess a;
  ASSERT_TRUE(start(a, GetParam(), &key_a_, id_a_));
  const uint64_t x = fresh_cache_id();
  CacheHandle ca;
  ASSERT_EQ(open(a.endpoint(), &key_a_, id_a_, x, kRegions, "owner", ca), RC_OK) << last_error();
  const auto content = pattern(31, kPullRegion);
  ASSERT_TRUE(write_all(ca.c, kPullRegion, content));
  const auto capability = rc::capability::from_text(mint_migration(key_a_.key, x, id_a_, an_hour_from_now()));
  ASSERT_TRUE(capability);

  phase("transport API");
  rc::transport::ConnectParams params;
  params.request.cache_id = x;
  params.request.flags = wire::kConnectMigrationSource;
  params.request.capability_length = sizeof(wire::Capability);
  params.request.capability = *capability;
  params.timeout_ms = static_cast<uint32_t>(reply_ms());
  rc::Status st = RC_OK;
  const auto endpoint = rc::parse_endpoint(a.endpoint());
  ASSERT_TRUE(endpoint);
  auto link = rc::transport::connect(*endpoint, params, st);
  ASSERT_TRUE(link) << sname(st) << ": " << last_error();
  EXPECT_EQ(link->reply().flags & wire::kReplyReadOnly, wire::kReplyReadOnly);
  EXPECT_EQ(link->reply().region_count, kRegions);
  EXPECT_EQ(link->reply().region_size, kPullRegion);
  const auto junk = pattern(32, 2048);
  if (link->one_sided()) {
    EXPECT_EQ(link->post_write(1, 1, 0, junk.data(), static_cast<uint32_t>(junk.size())), RC_E_AUTH);
    EXPECT_TRUE(contains(last_error(), "read-only")) << last_error();
  }
  std::vector<std::byte> buffer(wire::kMaxFrame);
  wire::BatchWriter writer(buffer.data());
  writer.add(wire::Op::Write, 1, 0, static_cast<uint32_t>(junk.size()), junk.data());
  writer.add(wire::Op::SetServerThreads, 0, 2, 0, nullptr);
  writer.add(wire::Op::Read, 1, 0, 1024, nullptr);
  ASSERT_EQ(link->send_frame(writer.finish(1)), RC_OK) << last_error();
  std::span<const std::byte> frame;
  const auto give_up = Clock::now() + ms(reply_ms());
  while ((st = link->poll_response(frame)) == RC_E_BUSY && Clock::now() < give_up) std::this_thread::sleep_for(100us);
  ASSERT_EQ(st, RC_OK) << sname(st) << ": " << last_error();
  const RawResponse response =
      parse_response(reinterpret_cast<const uint8_t*>(frame.data()), frame.size(), {false, false, true}, wire::kVersion);
  link->release_response();
  ASSERT_TRUE(response.received);
  ASSERT_EQ(response.entries.size(), 3u);
  EXPECT_EQ(response.entries[0].status, RC_E_AUTH) << "a write on a migration connection";
  EXPECT_EQ(response.entries[1].status, RC_E_AUTH) << "SetServerThreads on a migration connection";
  EXPECT_EQ(response.entries[2].status, RC_OK);
  EXPECT_TRUE(response.payloads[2] == std::vector<uint8_t>(content.begin(), content.begin() + 1024));
  link.reset();

  if (GetParam() == "shm") {
    phase("raw shm: read-only fds");
    ConnectSpec spec;
    spec.cache_id = x;
    spec.regions = 0;
    spec.token = "";
    spec.flags = wire::kConnectMigrationSource;
    spec.capability = *capability;
    RawShm raw;
    raw_shm_connect(raw, a.endpoint().substr(4), spec, wire::kVersion, reply_ms());
    ASSERT_TRUE(raw.ok()) << raw.reply.message();
    EXPECT_EQ(raw.reply.reply.flags & wire::kReplyReadOnly, wire::kReplyReadOnly);
    const int fd = raw.region_fd(1);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
    void* writable = ::mmap(nullptr, kPullRegion, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_EQ(writable, MAP_FAILED) << "a migration source mapped a region for writing";
    if (writable != MAP_FAILED) ::munmap(writable, kPullRegion);
    EXPECT_EQ(::write(fd, junk.data(), junk.size()), -1);
    void* readable = ::mmap(nullptr, kPullRegion, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(readable, MAP_FAILED) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(readable, content.data(), kPullRegion), 0);
    ::munmap(readable, kPullRegion);
  }

  phase("unchanged");
  EXPECT_TRUE(holds(ca.c, kPullRegion, content, "the source region after the refused writes"));
  AdminHandle admin;
  ASSERT_EQ(admin_connect(a.endpoint(), key_a_.key, admin), RC_OK) << last_error();
  std::vector<rc_admin_cache> list(4);
  uint32_t count = 0;
  ASSERT_EQ(rc_admin_list_caches(admin.a, list.data(), 4, &count), RC_OK);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(list[0].server_threads, 1u) << "a migration connection changed the cache's s";
  EXPECT_EQ(ca.close(), RC_OK);
  EXPECT_TRUE(a.stop());
}

INSTANTIATE_TEST_SUITE_P(Transports, MigrationPullP, ::testing::Values("tcp", "shm"), param_name);

// ---- a source that dies, one that falls silent, a target that stops ---------------------------------

// Large regions on a tcp source (batched reads need its threads), so that a pull is still under way when
// the test stops the source: the migration connection's arrival on the source starts the clock.
constexpr uint64_t kSlowRegion = 256 * MiB;

class MigrationPullFailures : public PullBase {
 protected:
  // Starts A (tcp, kSlowRegion) and B with one region of cache X each, and a pull on its own thread.
  void SetUp() override {
    PullBase::SetUp();
    ASSERT_TRUE(start(a_, "tcp", &key_a_, id_a_, kSlowRegion, 2 * kSlowRegion));
    ASSERT_TRUE(start(b_, "tcp", &key_b_, id_b_, kSlowRegion, 2 * kSlowRegion));
    x_ = fresh_cache_id();
    ASSERT_EQ(open(a_.endpoint(), &key_a_, id_a_, x_, 1, "a", ca_), RC_OK) << last_error();
    ASSERT_EQ(open(b_.endpoint(), &key_b_, id_b_, x_, 1, "b", cb_), RC_OK) << last_error();
    ASSERT_EQ(admin_connect(a_.endpoint(), key_a_.key, on_a_), RC_OK) << last_error();
    ASSERT_EQ(admin_connect(b_.endpoint(), key_b_.key, on_b_), RC_OK) << last_error();
    ASSERT_EQ(wait_connections(on_a_.a, x_, 1, 5000), 1);
  }
  void TearDown() override {
    if (a_.running()) ::kill(a_.pid(), SIGCONT);  // a test that failed early leaves it stopped
    if (puller_.joinable()) puller_.join();
    PullBase::TearDown();
  }

  // Starts the pull and returns once the source holds the migration connection (and A is stopped,
  // so the copy cannot finish before the test is ready for it).
  ::testing::AssertionResult start_pull_and_stop_source(uint32_t timeout_ms) {
    const std::string capability = mint_migration(key_a_.key, x_, id_a_, an_hour_from_now());
    puller_ = std::thread([this, capability, timeout_ms] {
      pulled_ = pull(on_b_.a, x_, 0, 0, a_.endpoint(), capability, timeout_ms);
      finished_.store(true);
    });
    if (wait_connections(on_a_.a, x_, 2, 10000) != 2)
      return ::testing::AssertionFailure() << "the migration connection never reached the source";
    if (auto stopped = stop_process(a_.pid()); !stopped) return stopped;
    if (finished_.load())
      return ::testing::AssertionFailure() << "the pull of " << kSlowRegion << " bytes ended before the source stopped: "
                                           << sname(pulled_.status) << " " << pulled_.error;
    return ::testing::AssertionSuccess();
  }

  // Waits for the pull thread; false when it is still running after `limit`.
  bool wait_pull(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!finished_.load() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    if (!finished_.load()) return false;
    puller_.join();
    return true;
  }

  ServerProcess a_, b_;
  uint64_t x_ = 0;
  CacheHandle ca_, cb_;
  AdminHandle on_a_, on_b_;
  std::thread puller_;
  std::atomic<bool> finished_{false};
  Pulled pulled_;
};

// SIGKILL of the source mid-pull fails the pull at once with RC_E_DISCONNECTED naming the source,
// long before its deadline; the target goes on serving its cache and its admin connection.
TEST_F(MigrationPullFailures, SourceKilledMidPull) {
  ASSERT_TRUE(start_pull_and_stop_source(60'000));
  const auto killed = Clock::now();
  a_.kill_hard();
  ASSERT_TRUE(wait_pull(ms(rctest::scaled_ms(5000)))) << "the pull outlived its killed source";
  const auto after_kill = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  std::printf("[ info     ] killed source: %s after %lld ms: %s\n", sname(pulled_.status).c_str(),
              static_cast<long long>(after_kill.count()), pulled_.error.c_str());
  EXPECT_EQ(pulled_.status, RC_E_DISCONNECTED) << pulled_.error;
  EXPECT_TRUE(contains(pulled_.error, a_.endpoint())) << pulled_.error;
  EXPECT_LT(pulled_.result.bytes, kSlowRegion);
  EXPECT_TRUE(cache_works(cb_.c, 4096, 41)) << "the target stopped serving";
  rc_server_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(rc_admin_stats(on_b_.a, &s), RC_OK) << last_error();
  EXPECT_EQ(wait_connections(on_b_.a, x_, 1, 5000), 1) << "the pull's hold stayed on the target";
  EXPECT_EQ(cb_.close(), RC_OK);
  EXPECT_TRUE(b_.stop());
}

// A source that stops answering fails the pull with RC_E_TIMEOUT at the pull's own deadline.
TEST_F(MigrationPullFailures, SilentSourceTimesOut) {
  constexpr uint32_t kTimeoutMs = 1500;
  const auto t0 = Clock::now();
  ASSERT_TRUE(start_pull_and_stop_source(kTimeoutMs));
  ASSERT_TRUE(wait_pull(ms(kTimeoutMs + rctest::scaled_ms(5000)))) << "the pull outlived its deadline";
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  std::printf("[ info     ] silent source: %s after %lld ms: %s\n", sname(pulled_.status).c_str(),
              static_cast<long long>(took.count()), pulled_.error.c_str());
  EXPECT_EQ(pulled_.status, RC_E_TIMEOUT) << pulled_.error;
  // Silent from before the pull reached it (a slow build: ASan) or from the middle: the deadline is the pull's either way.
  EXPECT_TRUE(contains(pulled_.error, "within its 1500 ms") ||
              contains(pulled_.error, "no Connect reply from " + a_.endpoint()))
      << pulled_.error;
  EXPECT_GE(took, ms(kTimeoutMs - 50));
  ASSERT_EQ(::kill(a_.pid(), SIGCONT), 0);
  EXPECT_TRUE(cache_works(cb_.c, 4096, 42));
  EXPECT_TRUE(cache_works(ca_.c, 4096, 43)) << "the source did not recover from SIGSTOP";
  EXPECT_EQ(ca_.close(), RC_OK);
  EXPECT_EQ(cb_.close(), RC_OK);
  EXPECT_TRUE(a_.stop());
  EXPECT_TRUE(b_.stop());
}

// A target that is told to stop in the middle of a pull (from a silent source, with a minute to go)
// ends it and exits promptly; the caller gets the cancellation or a closed connection, never a hang.
TEST_F(MigrationPullFailures, StoppingTargetEndsThePull) {
  ASSERT_TRUE(start_pull_and_stop_source(60'000));
  const auto t0 = Clock::now();
  EXPECT_TRUE(b_.stop());
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_LT(took, ms(rctest::scaled_ms(5000))) << "the target waited for its pull to stop";
  ASSERT_TRUE(wait_pull(ms(rctest::scaled_ms(10000))));
  std::printf("[ info     ] stopping target: %s after %lld ms: %s\n", sname(pulled_.status).c_str(),
              static_cast<long long>(took.count()), pulled_.error.c_str());
  EXPECT_TRUE(pulled_.status == RC_E_CLOSED || pulled_.status == RC_E_DISCONNECTED)
      << sname(pulled_.status) << ": " << pulled_.error;
  if (pulled_.status == RC_E_CLOSED) {
    EXPECT_TRUE(contains(pulled_.error, "server is stopping")) << pulled_.error;
  }
  ASSERT_EQ(::kill(a_.pid(), SIGCONT), 0);
  EXPECT_TRUE(cache_works(ca_.c, 0, 44));
  EXPECT_EQ(ca_.close(), RC_OK);
  EXPECT_TRUE(a_.stop());
}

// ---- the commands ----------------------------------------------------------------------------------


// remotecache-capability --migration mints what remotecache-admin pull hands the target; the pull
// prints what it did (text or JSON), and a refused one exits 1 with the reason; bad arguments exit 2.
TEST_F(MigrationPull, CommandsMintAndPull) {
  ServerProcess a, b;
  ASSERT_TRUE(start(a, "shm", &key_a_, id_a_));
  ASSERT_TRUE(start(b, "tcp", &key_b_, id_b_));
  const uint64_t x = fresh_cache_id();
  CacheHandle ca, cb;
  ASSERT_EQ(open(a.endpoint(), &key_a_, id_a_, x, kRegions, "a", ca), RC_OK) << last_error();
  ASSERT_EQ(open(b.endpoint(), &key_b_, id_b_, x, kRegions, "b", cb), RC_OK) << last_error();
  const auto content = pattern(51, kPullRegion);
  ASSERT_TRUE(write_all(ca.c, 2 * kPullRegion, content));

  Command minted = run_tool(RC_CAPABILITY_PATH, {"--key", key_a_.path, "--cache-id", std::to_string(x), "--server", id_a_,
                                            "--migration", "--ttl", "600"});
  ASSERT_EQ(minted.exit_code, 0) << minted.out;
  const std::string capability = minted.out.substr(0, minted.out.find('\n'));
  const auto parsed = rc::capability::from_text(capability);
  ASSERT_TRUE(parsed) << minted.out;
  EXPECT_EQ(parsed->rights, wire::kCapabilityRightMigrationSource);
  EXPECT_EQ(parsed->regions, 0u);
  Command bad = run_tool(RC_CAPABILITY_PATH, {"--key", key_a_.path, "--cache-id", "1", "--server", id_a_, "--migration",
                                         "--regions", "2"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  Command help = run_tool(RC_CAPABILITY_PATH, {"--help"});
  EXPECT_TRUE(contains(help.out, "--migration")) << help.out;

  const std::vector<std::string> base = {"--connect", b.endpoint(), "--key", key_b_.path};
  const auto admin = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return run_tool(RC_ADMIN_PATH, args);
  };
  Command c = admin({"pull", std::to_string(x), "--source", a.endpoint(), "--source-region", "2", "--target-region", "1",
                     "--capability", capability});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "pulled region 2 of cache " + std::to_string(x) + " from " + a.endpoint() +
                                  " into region 1: " + std::to_string(kPullRegion) + " bytes"))
      << c.out;
  EXPECT_TRUE(contains(c.out, "(one-sided reads)")) << c.out;
  EXPECT_TRUE(holds(cb.c, kPullRegion, content, "B's region 1 after remotecache-admin pull"));
  c = admin({"--json", "pull", std::to_string(x), "--source", a.endpoint(), "--source-region", "2", "--target-region",
             "0", "--capability", capability, "--pull-timeout", "20000"});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "\"bytes\":" + std::to_string(kPullRegion) + ",")) << c.out;
  EXPECT_TRUE(contains(c.out, "\"one_sided\":true}")) << c.out;
  c = admin({"pull", std::to_string(x), "--source", a.endpoint(), "--source-region", "2", "--target-region", "1",
             "--capability", mint(key_a_.key, x, id_a_, 3, an_hour_from_now())});
  EXPECT_EQ(c.exit_code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "RC_E_AUTH") && contains(c.out, "needs a migration capability")) << c.out;
  c = admin({"pull", std::to_string(x), "--source", a.endpoint()});
  EXPECT_EQ(c.exit_code, 2) << c.out;
  c = admin({"stats", "--source", a.endpoint()});
  EXPECT_EQ(c.exit_code, 2) << c.out;
  c = admin({"--help"});
  EXPECT_TRUE(contains(c.out, "pull CACHE_ID") && contains(c.out, "--source-region")) << c.out;
  EXPECT_EQ(ca.close(), RC_OK);
  EXPECT_EQ(cb.close(), RC_OK);
  EXPECT_TRUE(a.stop());
  EXPECT_TRUE(b.stop());
}

// ---- in process ------------------------------------------------------------------------------------

// The layouts the manager, the servers and other bindings agree on.
TEST(MigrationPullWire, LayoutsArePinned) {
  EXPECT_EQ(offsetof(wire::Capability, rights), 5u);
  EXPECT_EQ(sizeof(wire::Capability), 144u);
  EXPECT_EQ(wire::kCapabilityRightMigrationSource, 1u);
  EXPECT_EQ(wire::kConnectMigrationSource, 2u);
  EXPECT_EQ(offsetof(wire::ConnectReply, flags), 20u);
  EXPECT_EQ(wire::kReplyReadOnly, 1u);
  EXPECT_EQ(static_cast<int>(wire::AdminOp::PullRegion), 5);
  EXPECT_EQ(sizeof(wire::AdminPullRequest), 304u);
  EXPECT_EQ(offsetof(wire::AdminPullRequest, regions), 24u);
  EXPECT_EQ(offsetof(wire::AdminPullRequest, source_endpoint), 32u);
  EXPECT_EQ(offsetof(wire::AdminPullRequest, source_capability), 160u);
  EXPECT_EQ(sizeof(wire::AdminPullResult), 280u);
  EXPECT_EQ(sizeof(rc_pull_request), 48u);
  EXPECT_EQ(sizeof(rc_pull_result), 24u);
  EXPECT_GE(RC_API_VERSION, 7);
  // A capability minted before rights existed had zeros there: it is still an ordinary admission.
  const std::vector<uint8_t> key(32, 0x44);
  const wire::Capability plain = rc::capability::mint(key, 9, "s", 2, UINT64_MAX);
  EXPECT_EQ(plain.rights, 0u);
  EXPECT_EQ(rc::capability::verify(plain, key, {9, "s", 2, 1}), RC_OK) << rc::last_error();
  const wire::Capability migration =
      rc::capability::mint(key, 9, "s", 0, UINT64_MAX, wire::kCapabilityRightMigrationSource);
  EXPECT_EQ(rc::capability::verify(migration, key, {9, "s", 0, 1}), RC_E_AUTH) << "a migration capability admitted a client";
  EXPECT_EQ(rc::capability::verify(plain, key, {9, "s", 0, 1, wire::kCapabilityRightMigrationSource}), RC_E_AUTH);
  EXPECT_EQ(rc::capability::verify(migration, key, {9, "s", 0, 1, wire::kCapabilityRightMigrationSource}), RC_OK);
  wire::Capability forged = plain;
  forged.rights = wire::kCapabilityRightMigrationSource;  // the MAC covers the rights
  EXPECT_EQ(rc::capability::verify(forged, key, {9, "s", 0, 1, wire::kCapabilityRightMigrationSource}), RC_E_AUTH);
  EXPECT_TRUE(contains(rc::last_error(), "signature")) << rc::last_error();
}

// The registry's rules for migration sources, one by one.
TEST(MigrationPullRegistry, MigrationSourcesJoinReadOnlyAndOnlyThat) {
  const std::vector<uint8_t> key(32, 0x55);
  const std::string server = "registry-under-test";
  rc::server::Registry registry(64 * KiB, 4 * MiB, rc::server::Admission{key, server}, false);
  rc::server::Registry open_registry(64 * KiB, 4 * MiB, rc::server::Admission{{}, server}, false);
  const uint64_t x = 77;
  const auto connect = [&](uint64_t id, uint32_t regions, const char* token, uint32_t flags, const wire::Capability& cap,
                           uint8_t client) {
    wire::ConnectRequest r{};
    r.cache_id = id;
    r.regions = regions;
    r.server_threads = 1;
    r.token_length = static_cast<uint32_t>(std::strlen(token));
    std::memcpy(r.token, token, r.token_length);
    r.flags = flags;
    std::memset(r.client_id, client, sizeof r.client_id);
    r.capability_length = sizeof cap;
    r.capability = cap;
    return r;
  };
  const wire::Capability client_cap = rc::capability::mint(key, x, server, 8, UINT64_MAX / 2);
  const wire::Capability migration =
      rc::capability::mint(key, x, server, 0, UINT64_MAX / 2, wire::kCapabilityRightMigrationSource);
  const auto refused = [](const rc::transport::Grant& g, rc_status want, const std::string& says) {
    return ::testing::AssertionResult(g.status == want && contains(g.message, says))
           << sname(g.status) << ": " << g.message;
  };
  std::vector<std::shared_ptr<rc::server::CacheState>> held;
  std::shared_ptr<rc::server::CacheState> cache;

  EXPECT_TRUE(refused(registry.attach(connect(x, 0, "", wire::kConnectMigrationSource, migration, 9), cache),
                      RC_E_INVALID_ARGUMENT, "no live cache with id 77"));
  EXPECT_TRUE(refused(open_registry.attach(connect(x, 0, "", wire::kConnectMigrationSource, migration, 9), cache),
                      RC_E_AUTH, "open mode"));
  ASSERT_EQ(registry.attach(connect(x, 2, "owner", wire::kConnectExclusive, client_cap, 1), cache).status, RC_OK);
  held.push_back(cache);
  const auto owner = cache;
  EXPECT_TRUE(refused(registry.attach(connect(x, 0, "", wire::kConnectMigrationSource, client_cap, 9), cache),
                      RC_E_AUTH, "needs a migration capability"));
  EXPECT_TRUE(refused(registry.attach(connect(x, 1, "owner", 0, migration, 1), cache), RC_E_AUTH,
                      "admits a server pulling a region, not a client"));
  EXPECT_TRUE(refused(
      registry.attach(connect(x, 0, "", wire::kConnectMigrationSource | wire::kConnectExclusive, migration, 9), cache),
      RC_E_INVALID_ARGUMENT, "exclusively"));
  EXPECT_TRUE(refused(registry.attach(connect(x, 2, "", wire::kConnectMigrationSource, migration, 9), cache),
                      RC_E_INVALID_ARGUMENT, "no regions and no token"));
  EXPECT_TRUE(refused(registry.attach(connect(x, 0, "owner", wire::kConnectMigrationSource, migration, 9), cache),
                      RC_E_INVALID_ARGUMENT, "no regions and no token"));
  wire::ConnectRequest none = connect(x, 0, "", wire::kConnectMigrationSource, migration, 9);
  none.capability_length = 0;
  EXPECT_TRUE(refused(registry.attach(none, cache), RC_E_AUTH, "carries none"));
  EXPECT_TRUE(refused(registry.attach(connect(x, 0, "", 4, migration, 9), cache), RC_E_INVALID_ARGUMENT,
                      "unknown Connect flags"));

  cache.reset();
  const rc::transport::Grant g = registry.attach(connect(x, 0, "", wire::kConnectMigrationSource, migration, 9), cache);
  ASSERT_EQ(g.status, RC_OK) << g.message;
  EXPECT_EQ(cache, owner) << "it did not join the live cache";
  EXPECT_TRUE(g.read_only);
  EXPECT_EQ(g.regions.size(), 2u);
  EXPECT_EQ(g.region_size, 64 * KiB);
  EXPECT_FALSE(owner->shared) << "a migration source counted as another client";
  EXPECT_TRUE(owner->exclusive);
  held.push_back(cache);
  const uint64_t lent = registry.memory_in_use();
  EXPECT_EQ(lent, 2 * 64 * KiB) << "a migration source took memory";
  // The owner (same client id) can still add connections; the migration source changed nothing there.
  ASSERT_EQ(registry.attach(connect(x, 2, "owner", 0, client_cap, 1), cache).status, RC_OK);
  held.push_back(cache);

  // Another token: a second cache with the id, and migration sources are refused for the ambiguity.
  // Its lease ends before the owner's, so that expiring it below leaves the owner alone.
  const uint64_t other_end = UINT64_MAX / 4;
  const wire::Capability other_cap = rc::capability::mint(key, x, server, 8, other_end);
  ASSERT_EQ(registry.attach(connect(x, 1, "other", 0, other_cap, 2), cache).status, RC_OK);
  held.push_back(cache);
  const auto other = cache;
  EXPECT_TRUE(refused(registry.attach(connect(x, 0, "", wire::kConnectMigrationSource, migration, 9), cache),
                      RC_E_INVALID_ARGUMENT, "2 caches share id 77"));
  EXPECT_EQ(registry.hold(x), nullptr);
  EXPECT_TRUE(contains(rc::last_error(), "2 caches share id 77")) << rc::last_error();
  registry.detach(held.back());
  held.pop_back();
  // Lease-lived: closed, it keeps its memory until its lease ends; then it goes at once, since no
  // connection is left to free it.
  EXPECT_EQ(registry.memory_in_use(), lent + 64 * KiB) << "a lease-lived cache was freed with its last connection";
  uint64_t next_end = 0;
  EXPECT_EQ(registry.expire(other_end, next_end), 1u);
  EXPECT_EQ(next_end, UINT64_MAX / 2) << "the owner's lease end";
  EXPECT_EQ(registry.memory_in_use(), lent) << "an idle cache whose lease ended is still lent";
  EXPECT_TRUE(other->regions.empty());

  // A pull's hold works on a cache whose connections all closed: lease-lived, it stays; once nobody
  // is connected it forgets its exclusive owner.
  const auto hold = registry.hold(x);
  ASSERT_EQ(hold, owner);
  for (auto& c : held) registry.detach(c);
  held.clear();
  EXPECT_TRUE(owner->exclusive) << "the hold still counts: the cache is not idle yet";
  registry.release(hold);
  EXPECT_EQ(registry.memory_in_use(), lent) << "the lease-lived cache was freed with its last hold";
  EXPECT_FALSE(owner->regions.empty());
  EXPECT_FALSE(owner->exclusive) << "an idle cache is still exclusive to the client that left";
  EXPECT_EQ(registry.stats().connections, 0u);
  EXPECT_EQ(registry.stats().caches, 1u);

  // A dropped cache under a hold goes with the hold; the hold of an idle cache works as ever.
  const auto again = registry.hold(x);
  ASSERT_EQ(again, owner);
  EXPECT_EQ(registry.drop(x), 1u);
  EXPECT_EQ(registry.memory_in_use(), lent) << "a dropped cache was freed under a pull's hold";
  EXPECT_FALSE(owner->regions.empty());
  registry.release(again);
  EXPECT_EQ(registry.memory_in_use(), 0u);
  EXPECT_TRUE(owner->regions.empty());
  EXPECT_EQ(registry.stats().connections, 0u);
}

// A read-only connection's writes and control entries are answered RC_E_AUTH and change nothing;
// its reads run, in the same batch.
TEST(MigrationPullExecutor, ReadOnlyConnectionsOnlyRead) {
  std::vector<std::byte> region(4096, std::byte{0x5a});
  const rc::server::RegionView views[] = {{region.data(), region.size()}};
  std::vector<std::byte> frame(wire::kMaxFrame), out(wire::kMaxFrame);
  wire::BatchWriter writer(frame.data());
  const std::vector<uint8_t> junk(64, 0x11);
  writer.add(wire::Op::Write, 0, 0, 64, junk.data());
  writer.add(wire::Op::Read, 0, 0, 64, nullptr);
  writer.add(wire::Op::SetServerThreads, 0, 3, 0, nullptr);
  const auto batch = writer.finish(1);
  const rc::server::ExecResult r = rc::server::execute_batch(batch, views, 1, out.data(), rc::server::Access::ReadOnly);
  ASSERT_FALSE(r.malformed) << r.reason;
  EXPECT_FALSE(r.server_threads.has_value());
  const RawResponse parsed =
      parse_response(reinterpret_cast<const uint8_t*>(out.data()), r.response_bytes, {false, true, false}, wire::kVersion);
  ASSERT_EQ(parsed.entries.size(), 3u);
  EXPECT_EQ(parsed.entries[0].status, RC_E_AUTH);
  EXPECT_EQ(parsed.entries[1].status, RC_OK);
  EXPECT_EQ(parsed.entries[2].status, RC_E_AUTH);
  EXPECT_EQ(parsed.payloads[1], std::vector<uint8_t>(64, 0x5a));
  EXPECT_EQ(region[0], std::byte{0x5a}) << "a read-only connection wrote";
  // The same batch on an ordinary connection writes.
  const rc::server::ExecResult w = rc::server::execute_batch(batch, views, 1, out.data());
  EXPECT_EQ(w.server_threads.value_or(0), 3u);
  EXPECT_EQ(region[0], std::byte{0x11});
}

// The admin session's structural checks of a PullRegion request, and the answer of a session that
// cannot pull (no puller): a reply with RC_E_UNSUPPORTED, the session going on.
TEST(MigrationPullSession, PullRequestsAreCheckedBeforeTheyRun) {
  rc::server::Registry registry(64 * KiB, 1 * MiB, rc::server::Admission{{}, "s"}, false);
  const std::vector<uint8_t> key(32, 0x66);
  const auto opened_session = [&](rc::server::AdminSession& session, rc::admin::SessionKey& session_key) {
    wire::AdminHello hello{};
    hello.admin_version = wire::kAdminVersion;
    const auto greeting = session.greet(rc::admin::encode_hello(hello));
    wire::AdminChallenge challenge{};
    if (greeting.close || rc::admin::decode_challenge(greeting.frame, challenge) != RC_OK) return false;
    session_key = rc::admin::derive_session_key(key, challenge, hello);
    return true;
  };
  wire::AdminPullRequest good{};
  good.cache_id = 1;
  std::strcpy(good.source_endpoint, "tcp:127.0.0.1:9");
  const auto send_pull = [&](rc::server::AdminSession& session, const rc::admin::SessionKey& k, uint64_t seq,
                        const wire::AdminPullRequest& r, std::size_t size = sizeof(wire::AdminPullRequest)) {
    return session.handle(rc::admin::seal(k, wire::Kind::AdminRequest, wire::AdminOp::PullRegion, seq,
                                          {reinterpret_cast<const std::byte*>(&r), size}));
  };

  struct Bad {
    const char* what;
    wire::AdminPullRequest request;
    std::size_t size;
    const char* says;
  };
  wire::AdminPullRequest unterminated = good;
  std::memset(unterminated.source_endpoint, 'x', sizeof unterminated.source_endpoint);
  wire::AdminPullRequest empty = good;
  empty.source_endpoint[0] = '\0';
  wire::AdminPullRequest reserved = good;
  reserved.reserved = 7;
  const Bad bad[] = {{"short payload", good, sizeof(wire::AdminRequest), "a request payload of 24 bytes, not 304"},
                     {"endpoint without a NUL", unterminated, sizeof unterminated, "not NUL-terminated"},
                     {"no endpoint", empty, sizeof empty, "names no source endpoint"},
                     {"reserved set", reserved, sizeof reserved, "reserved field is not 0"}};
  for (const Bad& b : bad) {
    rc::server::AdminSession session(rc::server::AdminContext{&registry, 1, rc::now_ns(), nullptr, nullptr}, key);
    rc::admin::SessionKey k{};
    ASSERT_TRUE(opened_session(session, k));
    const auto answer = send_pull(session, k, 1, b.request, b.size);
    EXPECT_TRUE(answer.close) << b.what;
    EXPECT_TRUE(contains(answer.refused, b.says)) << b.what << ": " << answer.refused;
  }

  rc::server::AdminSession session(rc::server::AdminContext{&registry, 1, rc::now_ns(), nullptr, nullptr}, key);
  rc::admin::SessionKey k{};
  ASSERT_TRUE(opened_session(session, k));
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    const auto answer = send_pull(session, k, seq, good);
    ASSERT_FALSE(answer.close) << answer.refused;
    rc::admin::Opened reply;
    ASSERT_EQ(rc::admin::open(k, answer.frame, wire::Kind::AdminReply, reply), RC_OK);
    wire::AdminPullResult result{};
    ASSERT_EQ(reply.payload.size(), sizeof result);
    std::memcpy(&result, reply.payload.data(), sizeof result);
    EXPECT_EQ(result.status, RC_E_UNSUPPORTED);
  }
}

// Two embedded servers in this process (so that the sanitizers see both ends of a pull), the source on
// shm and on tcp: a pull over each, checked through the target's client.
TEST(MigrationPullEmbedded, PullBetweenEmbeddedServers) {
  Watchdog watchdog("MigrationPullEmbedded.PullBetweenEmbeddedServers", 110s);
  const std::vector<uint8_t> key(32, 0x77);
  const std::string shm_path = "/tmp/" + fresh_name("embedded-pull") + ".sock";
  ::unlink(shm_path.c_str());
  const std::string shm_listen = "shm:" + shm_path;
  const auto start = [&](const char* id, std::vector<const char*> listen, rc_server** out) {
    rc_server_options so{};
    so.listen = listen.data();
    so.listen_count = listen.size();
    so.region_size = 256 * KiB;
    so.memory_limit = 8 * MiB;
    so.max_threads = 2;
    so.admission_key = key.data();
    so.admission_key_length = key.size();
    so.server_id = id;
    return rc_server_start(&so, out);
  };
  rc_server* source = nullptr;
  rc_server* target = nullptr;
  ASSERT_EQ(start("embedded-source", {"tcp:127.0.0.1:0", shm_listen.c_str()}, &source), RC_OK) << last_error();
  ASSERT_EQ(start("embedded-target", {"tcp:127.0.0.1:0"}, &target), RC_OK) << last_error();
  const uint64_t x = fresh_cache_id();
  const auto open_on = [&](rc_server* server, const char* id, CacheHandle& cache) {
    const std::string cap = mint(key, x, id, 2, unix_now_ms() + 60'000);
    const char* caps[] = {cap.c_str()};
    rc_cache_options o = make_options(x, rc_config{0, 1, 8, 4}, 2, id);
    o.capabilities = caps;
    return open_cache({rc_server_endpoint(server, 0)}, o, &cache.c);
  };
  {
    CacheHandle on_source, on_target;
    ASSERT_EQ(open_on(source, "embedded-source", on_source), RC_OK) << last_error();
    ASSERT_EQ(open_on(target, "embedded-target", on_target), RC_OK) << last_error();
    const auto content = pattern(61, 256 * KiB);
    ASSERT_TRUE(write_all(on_source.c, 256 * KiB, content));
    AdminHandle admin;
    ASSERT_EQ(admin_connect(rc_server_endpoint(target, 0), key, admin), RC_OK) << last_error();
    const std::string cap = mint_migration(key, x, "embedded-source", unix_now_ms() + 60'000);
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string from = rc_server_endpoint(source, i);
      const Pulled p = pull(admin.a, x, static_cast<uint32_t>(i), 1, from, cap);
      ASSERT_EQ(p.status, RC_OK) << from << ": " << p.error;
      EXPECT_EQ(p.result.one_sided, from.rfind("shm:", 0) == 0 ? 1u : 0u);
      EXPECT_TRUE(holds(on_target.c, i * 256 * KiB, content, "target region " + std::to_string(i) + " from " + from));
    }
    EXPECT_EQ(on_source.close(), RC_OK);
    EXPECT_EQ(on_target.close(), RC_OK);
  }
  EXPECT_EQ(rc_server_stop(target), RC_OK);
  EXPECT_EQ(rc_server_stop(source), RC_OK);
}

}  // namespace
