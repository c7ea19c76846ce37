// Black-box conformance suite: runs remotecache-server as a child process and drives it through the
// public C API only (plus raw sockets for the malformed-input tests), once per transport.
//
// Every data check compares against a shadow copy of the cache kept by the test: requests of one
// session execute in program order, so a read must return the shadow as it was when the read was
// submitted.
#include "harness.h"
#include "raw_verbs.h"

namespace {

using namespace rctest;

// The data-path configurations every data test runs through: {c, s, b, q}.
const rc_config kConfigs[] = {{0, 1, 1, 1}, {0, 1, 16, 4}, {1, 1, 32, 8}, {2, 2, 8, 2}, {0, 0, 1, 1}};

std::string str(const rc_config& c) {
  std::ostringstream o;
  o << "{c=" << c.client_threads << ",s=" << c.server_threads << ",b=" << c.batch_size << ",q=" << c.queue_depth << "}";
  return o.str();
}

// Stops and joins a test's background load on every way out of the test.
struct StopAndJoin {
  std::atomic<bool>& stop;
  std::thread& t;
  ~StopAndJoin() {
    stop = true;
    if (t.joinable()) t.join();
  }
};

// Waits until a background load has completed a few more operations. False once `ended()` says the load
// stopped; false with a failure added when it makes no progress for the hang limit.
bool load_advanced(const std::atomic<uint64_t>& progress, const std::function<bool()>& ended, const std::string& after) {
  const uint64_t target = progress.load() + rctest::scaled(20, 5);
  const auto deadline = Clock::now() + hang_limit();
  while (progress.load() < target && !ended()) {
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "the load made no progress after " << after;
      return false;
    }
    std::this_thread::sleep_for(1ms);
  }
  return !ended();
}

bool same(const rc_config& a, const rc_config& b) {
  return a.client_threads == b.client_threads && a.server_threads == b.server_threads &&
         a.batch_size == b.batch_size && a.queue_depth == b.queue_depth;
}


// ---- the fixture ------------------------------------------------------------------------------------

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (verbs()) {
      if (const std::string why = verbs_unavailable(); !why.empty()) GTEST_SKIP() << why;
    }
    watchdog_ = std::make_unique<Watchdog>(std::string(info->test_suite_name()) + "." + info->name(), 110s);
    phase("starting server");
    ASSERT_TRUE(server_.start(fresh_listen()));
  }

  void TearDown() override {
    phase("stopping server (SIGTERM)");
    if (server_.running()) {
      EXPECT_TRUE(server_.stop());
    }
    watchdog_.reset();
  }

  bool tcp() const { return GetParam() == "tcp"; }
  bool verbs() const { return GetParam() == "verbs"; }
  bool shm() const { return GetParam() == "shm"; }

  // The address of an RDMA-capable interface (RC_VERBS_ADDR; tests/rdma-vm sets it inside its VM).
  static std::string verbs_address() {
    const char* a = std::getenv("RC_VERBS_ADDR");
    return a != nullptr ? a : "";
  }

  // Why the verbs instantiation cannot run here, or "" when it can: it needs an RDMA device.
  static std::string verbs_unavailable() {
    if (verbs_address().empty())
      return "verbs: RC_VERBS_ADDR is not set (the IPv4 address of an RDMA-capable interface); "
             "tests/rdma-vm/run.sh runs this suite over Soft-RoCE in a VM";
    const std::string listen = "verbs:" + verbs_address() + ":0";
    const char* l = listen.c_str();
    rc_server_options so{};
    so.listen = &l;
    so.listen_count = 1;
    so.region_size = 1 * MiB;
    so.memory_limit = 1 * MiB;
    rc_server* srv = nullptr;
    if (rc_server_start(&so, &srv) != RC_OK) return "verbs unavailable: " + last_error();
    rc_server_stop(srv);
    return "";
  }

  std::string fresh_listen() {
    static std::atomic<int> counter{0};
    if (tcp()) return "tcp:127.0.0.1:0";
    if (verbs()) return "verbs:" + verbs_address() + ":0";
    const std::string path = "/tmp/rc-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter) + ".sock";
    ::unlink(path.c_str());
    return "shm:" + path;
  }

  void phase(const std::string& p) {
    if (watchdog_) watchdog_->phase(p);
  }

  // Opens a cache on this test's server.
  ::testing::AssertionResult open(CacheHandle& cache, const rc_cache_options& o) {
    const rc_status st = open_cache({server_.endpoint()}, o, &cache.c);
    if (st != RC_OK)
      return ::testing::AssertionFailure() << "rc_cache_open(" << server_.endpoint() << ", " << str(o.config) << ", "
                                           << o.regions_per_server << " regions) = " << sname(st) << ": " << last_error();
    if (cache.c == nullptr) return ::testing::AssertionFailure() << "rc_cache_open returned RC_OK and a null cache";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult session(CacheHandle& cache, SessionHandle& s) {
    const rc_status st = rc_session_open(cache.c, &s.s);
    if (st != RC_OK) return ::testing::AssertionFailure() << "rc_session_open = " << sname(st) << ": " << last_error();
    if (s.s == nullptr) return ::testing::AssertionFailure() << "rc_session_open returned RC_OK and a null session";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult server_alive() {
    if (!server_.alive())
      return ::testing::AssertionFailure() << "the server process died: " << server_.exit_description();
    return ::testing::AssertionSuccess();
  }

  // ErrorsConnect*: opening a cache on `target`, where nobody listens or nobody answers, fails (timed out or
  // disconnected) within its 1 s connect timeout.
  void expect_open_fails_in_time(const std::string& target) {
    rc_cache_options o = make_options(fresh_cache_id(), rc_config{0, 1, 1, 1});
    o.connect_timeout_ms = 1000;
    CacheHandle c;
    phase("connect to " + target);
    const auto t0 = Clock::now();
    const rc_status st = open_cache({target}, o, &c.c);
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_TRUE(st == RC_E_TIMEOUT || st == RC_E_DISCONNECTED) << sname(st) << ": " << last_error();
    EXPECT_LT(elapsed, 1000 + rctest::scaled_ms(10000)) << "rc_cache_open took " << elapsed << " ms";
    if (st == RC_OK) {
      EXPECT_EQ(c.close(), RC_OK);
    }
    c.leak();
  }

#ifdef RC_HAVE_VERBS
  // MalformedInputNeverCrashesServer for verbs: raw rdma_cm clients with broken handshakes, then frames
  // written straight into the server's request ring; `check` verifies the server and a good cache after each.
  template <typename Check, typename Garbage>
  void malformed_verbs_input(Check& check, int reply_ms, Garbage& garbage) {
    using rawverbs::RawClient;
    const std::string ep = server_.endpoint();
    auto spec = [](uint32_t regions) {
      ConnectSpec s;
      s.cache_id = fresh_cache_id();
      s.regions = regions;
      return s;
    };
    // The handshake: each of these must end the connection (or be refused) and touch nothing else.
    const std::pair<const char*, std::vector<uint8_t>> bad_first_messages[] = {
        {"garbage as the first message", garbage(4096)},
        {"half a frame header", std::vector<uint8_t>(12, 0x5a)},
        {"a batch before the Connect", batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}})},
        {"a Connect without the response ring", connect_frame(spec(1))},
    };
    for (const auto& [what, message] : bad_first_messages) {
      phase(what);
      RawClient c;
      ASSERT_EQ(c.connect(ep), "") << what;
      ASSERT_TRUE(c.send(message)) << what;
      EXPECT_TRUE(c.ended_by_server(reply_ms)) << "the server should drop a peer sending " << what;
      if (!check(what)) return;
    }
    {
      phase("a response ring of another geometry");
      RawClient c;
      ASSERT_EQ(c.connect(ep), "");
      ASSERT_TRUE(c.send_connect(spec(1), rawverbs::kSlots - 1));
      EXPECT_TRUE(c.ended_by_server(reply_ms));
    }
    if (!check("a response ring of another geometry")) return;
    {
      phase("connect and close");
      RawClient c;
      ASSERT_EQ(c.connect(ep), "");
    }
    if (!check("connect and close")) return;
    {
      phase("connect asking for too much memory");
      RawClient c;
      RawReply r;
      ASSERT_EQ(c.open(ep, spec(100), r), "");  // 100 MiB > the 64 MiB limit
      EXPECT_EQ(r.reply.status, RC_E_NO_MEMORY) << r.message();
    }
    if (!check("connect asking for too much memory")) return;

    // A valid handshake, then a misbehaving frame in the request ring (imm = the length it claims).
    auto batch = [] { return batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}}); };
    auto with_u32 = [](std::vector<uint8_t> f, std::size_t at, uint32_t v) {
      std::memcpy(f.data() + at, &v, 4);
      return f;
    };
    struct BadFrame {
      const char* what;
      std::vector<uint8_t> frame;
      uint32_t imm;
      bool must_close;
    };
    auto b = batch();
    auto bad_magic = b;
    bad_magic[0] ^= 0xFF;
    const BadFrame bad_frames[] = {
        {"garbage in the ring", garbage(512), 512, true},
        {"a length beyond a ring slot", b, rawverbs::kSlotBytes + 1, true},
        {"a batch with bad magic", bad_magic, static_cast<uint32_t>(b.size()), true},
        {"a batch claiming bytes > kMaxFrame", with_u32(b, offsetof(wire::FrameHeader, bytes), wire::kMaxFrame + 1),
         static_cast<uint32_t>(b.size()), true},
        {"a batch longer than the length announced", b, 8, true},
        {"a count larger than the entries present", with_u32(b, offsetof(wire::FrameHeader, count), 100),
         static_cast<uint32_t>(b.size()), false},
    };
    for (const BadFrame& bad : bad_frames) {
      phase(bad.what);
      RawClient c;
      RawReply r;
      ASSERT_EQ(c.open(ep, spec(1), r), "") << bad.what;
      ASSERT_EQ(r.reply.status, RC_OK) << r.message();
      ASSERT_EQ(c.write_frame(bad.frame, 0, bad.imm), IBV_WC_SUCCESS) << bad.what;
      const bool ended = c.ended_by_server(bad.must_close ? reply_ms : rctest::scaled_ms(2000));
      if (bad.must_close) {
        EXPECT_TRUE(ended) << "the server should drop a peer sending " << bad.what;
      }
      if (!check(bad.what)) return;
    }
    {
      phase("a frame written past the request ring");
      RawClient c;
      RawReply r;
      ASSERT_EQ(c.open(ep, spec(1), r), "");
      ASSERT_EQ(r.reply.status, RC_OK) << r.message();
      EXPECT_NE(c.write_frame(b, rawverbs::kSlots, static_cast<uint32_t>(b.size())), IBV_WC_SUCCESS)
          << "the ring's window must end with the ring";
    }
    if (!check("a frame written past the request ring")) return;
  }
#endif

  ServerProcess server_;
  std::unique_ptr<Watchdog> watchdog_;
};

// ---- basic behaviour --------------------------------------------------------------------------------

TEST_P(Conformance, FreshCacheReadsZerosAndReportsConfig) {
  for (const rc_config& cfg : kConfigs) {
    SCOPED_TRACE(str(cfg));
    phase("open " + str(cfg));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), cfg)));
    EXPECT_EQ(rc_cache_capacity(cache.c), 4 * kRegionSize);
    rc_config got{};
    ASSERT_EQ(rc_cache_get_config(cache.c, &got), RC_OK);
    EXPECT_TRUE(same(got, cfg)) << "rc_cache_get_config = " << str(got);

    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    phase("read zeros " + str(cfg));
    const std::vector<uint8_t> zeros(4 * kRegionSize, 0);
    EXPECT_TRUE(verify_all(s.s, zeros, 0, str(cfg)));
    EXPECT_EQ(rc_session_outstanding(s.s), 0u);
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK) << last_error();
  }
}

// (a) Random asynchronous I/O of 1 B..64 KiB, often across region boundaries, against a shadow.
TEST_P(Conformance, RandomIoMatchesShadow) {
  uint64_t seed = 1;
  for (const rc_config& cfg : kConfigs) {
    SCOPED_TRACE(str(cfg));
    phase("random io " + str(cfg));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), cfg)));
    ASSERT_EQ(rc_cache_capacity(cache.c), 4 * MiB);
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    std::vector<uint8_t> shadow(4 * MiB, 0);
    std::mt19937_64 rng(seed++);
    RandomIo p;
    p.ops = rctest::scaled(2000, 200);
    p.max_outstanding = 32;
    bool hung = false;
    {
      Pipeline pl(s.s, "random io " + str(cfg));
      const auto r = run_random_io(pl, shadow, p, rng);
      hung = r.hung;
      EXPECT_EQ(pl.failures(), 0u);
      EXPECT_EQ(r.submitted, p.ops);
      EXPECT_GT(pl.reads_verified(), p.ops / 4);
    }
    if (hung) {
      s.leak();
      cache.leak();
      FAIL() << "the library hung";
    }
    phase("verify all " + str(cfg));
    EXPECT_TRUE(verify_all(s.s, shadow, 0, str(cfg)));
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK) << last_error();
  }
}

// Single operations much larger than a chunk, a region and a batch.
TEST_P(Conformance, LargeSingleOperations) {
  for (const rc_config& cfg : {rc_config{0, 1, 1, 1}, rc_config{1, 2, 32, 8}, rc_config{0, 0, 1, 1}}) {
    SCOPED_TRACE(str(cfg));
    phase("large ops " + str(cfg));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), cfg)));
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    auto whole = pattern(77, 4 * MiB);
    ASSERT_EQ(sync_write(s.s, 0, whole.data(), whole.size()), RC_OK) << last_error();
    std::vector<uint8_t> back(4 * MiB);
    ASSERT_EQ(sync_read(s.s, 0, back.data(), back.size()), RC_OK) << last_error();
    EXPECT_TRUE(back == whole) << "whole-cache write/read differs";

    const uint64_t a = 1 * MiB - 7;
    const uint64_t n = 2 * MiB + 13;
    auto mid = pattern(78, n);
    ASSERT_EQ(sync_write(s.s, a, mid.data(), n), RC_OK) << last_error();
    std::memcpy(whole.data() + a, mid.data(), n);
    ASSERT_EQ(sync_read(s.s, 0, back.data(), back.size()), RC_OK) << last_error();
    EXPECT_TRUE(back == whole) << "unaligned multi-region write not reflected exactly";
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
}

// (b) Program order: write X, read, write Y, read — all in flight together — the reads see X then Y.
TEST_P(Conformance, ProgramOrderWithinSession) {
  struct Spot {
    uint64_t address;
    uint64_t length;
  };
  const Spot spots[] = {{0, 8},
                        {1 * MiB - 3, 7},               // crosses region 0 / 1
                        {2 * MiB - 20000, 40000},       // crosses region 1 / 2, more than one chunk
                        {123456, 4096},
                        {3 * MiB + 12345, 1},
                        {4 * MiB - 64 * KiB, 64 * KiB}};  // several chunks, ends at capacity
  // b = 1: lone one-sided requests, several in flight (shm copies a small read only when it is polled,
  // so a write posted after it must not show through).
  const rc_config configs[] = {{0, 1, 16, 4}, {1, 1, 16, 4}, {0, 2, 16, 4}, {1, 2, 16, 4}, {0, 0, 1, 8}, {1, 1, 1, 8}};
  const uint64_t rounds = rctest::scaled(40, 5);
  for (const rc_config& cfg : configs) {
    SCOPED_TRACE(str(cfg));
    phase("program order " + str(cfg));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), cfg)));
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    bool hung = false;
    {
      Pipeline pl(s.s, "program order " + str(cfg));
      // A read before any write sees zeros.
      for (const Spot& sp : spots) {
        const std::vector<uint8_t> zeros(sp.length, 0);
        ASSERT_EQ(pl.read(sp.address, sp.length, zeros.data()), RC_OK);
      }
      std::vector<std::vector<uint8_t>> last(std::size(spots));
      for (uint64_t r = 0; r < rounds && !hung; ++r) {
        for (std::size_t i = 0; i < std::size(spots); ++i) {
          const Spot& sp = spots[i];
          auto x = pattern(r * 1000 + i * 2, sp.length);
          auto y = pattern(r * 1000 + i * 2 + 1, sp.length);
          pl.set_phase(static_cast<int>(r + 1));
          ASSERT_EQ(pl.write(sp.address, x), RC_OK) << last_error();
          ASSERT_EQ(pl.read(sp.address, sp.length, x.data()), RC_OK) << last_error();
          ASSERT_EQ(pl.write(sp.address, y), RC_OK) << last_error();
          ASSERT_EQ(pl.read(sp.address, sp.length, y.data()), RC_OK) << last_error();
          last[i] = std::move(y);
        }
        // Keep a deep queue but bounded; never wait for everything.
        while (pl.pending() > 200)
          if (!pl.reap_some(hang_limit())) {
            hung = true;
            break;
          }
      }
      if (!hung) {
        for (std::size_t i = 0; i < std::size(spots); ++i)
          ASSERT_EQ(pl.read(spots[i].address, spots[i].length, last[i].data()), RC_OK);
        hung = !pl.drain(hang_limit());
      }
      if (hung) pl.abandon();
      EXPECT_EQ(pl.failures(), 0u);
      EXPECT_EQ(pl.reads_verified(), std::size(spots) * (2 * rounds + 2));
    }
    if (hung) {
      s.leak();
      cache.leak();
      FAIL() << "the library hung";
    }
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
}

// (c) Four threads, one session each, on one cache; each works on its own 1 MiB slice (straddling
// region boundaries) and checks against its own shadow.
TEST_P(Conformance, ConcurrentSessionsOnOneCache) {
  const rc_config configs[] = {{1, 2, 8, 4}, {2, 1, 16, 8}, {0, 1, 4, 2}};
  for (const rc_config& cfg : configs) {
    SCOPED_TRACE(str(cfg));
    phase("concurrent sessions " + str(cfg));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), cfg, 5)));
    ASSERT_EQ(rc_cache_capacity(cache.c), 5 * MiB);
    constexpr int kThreads = 4;
    SessionHandle sessions[kThreads];
    for (auto& s : sessions) ASSERT_TRUE(session(cache, s));
    std::atomic<int> hung{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const uint64_t base = 512 * KiB + static_cast<uint64_t>(t) * MiB;
        std::vector<uint8_t> shadow(1 * MiB, 0);
        std::mt19937_64 rng(100 + static_cast<uint64_t>(t));
        RandomIo p;
        p.base = base;
        p.ops = rctest::scaled(1000, 100);
        p.max_outstanding = 16;
        Pipeline pl(sessions[t].s, "thread " + std::to_string(t) + " " + str(cfg));
        const auto r = run_random_io(pl, shadow, p, rng);
        if (r.hung) {
          ++hung;
          return;
        }
        EXPECT_EQ(pl.failures(), 0u);
        EXPECT_TRUE(verify_all(sessions[t].s, shadow, base, pl.label()));
      });
    }
    for (auto& th : threads) th.join();
    if (hung.load() != 0) {
      for (auto& s : sessions) s.leak();
      cache.leak();
      FAIL() << "the library hung";
    }
    for (auto& s : sessions) EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
}

// (d) One thread does checked random I/O while the main thread reconfigures the cache repeatedly.
TEST_P(Conformance, ReconfigureUnderLoad) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), kConfigs[0])));
  SessionHandle s;
  ASSERT_TRUE(session(cache, s));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> progress{0};
  std::atomic<bool> worker_done{false};
  std::atomic<bool> worker_hung{false};
  std::thread worker([&] {
    std::vector<uint8_t> shadow(4 * MiB, 0);
    std::mt19937_64 rng(555);
    RandomIo p;
    p.ops = 0;
    p.stop = &stop;
    p.progress = &progress;
    p.max_outstanding = 32;
    {
      Pipeline pl(s.s, "worker");
      const auto r = run_random_io(pl, shadow, p, rng);
      worker_hung = r.hung;
      EXPECT_EQ(pl.failures(), 0u);
    }
    if (!worker_hung) {
      EXPECT_TRUE(verify_all(s.s, shadow, 0, "worker final"));
    }
    worker_done = true;
  });
  StopAndJoin joiner{stop, worker};
  auto wait_progress = [&](const std::string& after) {
    return load_advanced(progress, [&] { return worker_done.load(); }, after);
  };

  rc_config last = kConfigs[0];
  bool ok = wait_progress("open");
  // Ten full cycles through the configurations, each reconfigure under running I/O.
  const int reconfigures = 10 * static_cast<int>(std::size(kConfigs));
  for (int i = 0; i < reconfigures && ok; ++i) {
    last = kConfigs[static_cast<std::size_t>(i + 1) % std::size(kConfigs)];
    phase("reconfigure #" + std::to_string(i) + " to " + str(last));
    const rc_status st = rc_cache_reconfigure(cache.c, &last);
    EXPECT_EQ(st, RC_OK) << "reconfigure to " << str(last) << ": " << last_error();
    rc_config got{};
    EXPECT_EQ(rc_cache_get_config(cache.c, &got), RC_OK);
    EXPECT_TRUE(same(got, last)) << "after reconfigure to " << str(last) << " get_config = " << str(got);
    ok = st == RC_OK && wait_progress("reconfigure to " + str(last));
  }
  phase("stopping worker");
  stop = true;
  worker.join();
  if (worker_hung) {
    s.leak();
    cache.leak();
    FAIL() << "the library hung";
  }
  rc_config got{};
  EXPECT_EQ(rc_cache_get_config(cache.c, &got), RC_OK);
  EXPECT_TRUE(same(got, last)) << "final get_config = " << str(got) << ", last set " << str(last);
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
}

// ---- (e) errors -----------------------------------------------------------------------------------

TEST_P(Conformance, ErrorsOutOfRange) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1})));
  const uint64_t cap = rc_cache_capacity(cache.c);
  ASSERT_EQ(cap, 4 * MiB);
  SessionHandle s;
  ASSERT_TRUE(session(cache, s));
  uint8_t buf[64] = {};

  struct Case {
    uint64_t address;
    uint64_t length;
    const char* what;
  };
  const Case cases[] = {
      {cap - 10, 11, "one byte past the end"},
      {cap, 1, "starting at capacity"},
      {cap + 4096, 8, "beyond capacity"},
      {0, cap + 1, "longer than the cache"},
      {UINT64_MAX, 1, "address UINT64_MAX"},
      {UINT64_MAX - 5, 10, "address + length wraps around"},
      {8, UINT64_MAX - 7, "length wraps address + length to 0"},
      {1, UINT64_MAX, "length UINT64_MAX"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(rc_read(s.s, c.address, buf, c.length, 1), RC_E_OUT_OF_RANGE) << "read " << c.what;
    const char* err = rc_last_error();
    EXPECT_TRUE(err != nullptr && *err != '\0') << "rc_last_error after a failed read";
    EXPECT_EQ(rc_write(s.s, c.address, buf, c.length, 2), RC_E_OUT_OF_RANGE) << "write " << c.what;
  }
  EXPECT_EQ(rc_session_outstanding(s.s), 0u) << "a synchronous error submits nothing";
  rc_completion comp[4];
  EXPECT_EQ(rc_poll(s.s, comp, 4), 0) << "no completion for rejected submissions";

  // The exact end is fine.
  uint8_t tail[10];
  EXPECT_EQ(sync_read(s.s, cap - 10, tail, 10), RC_OK) << last_error();
  const uint8_t one = 0x5A;
  EXPECT_EQ(sync_write(s.s, cap - 1, &one, 1), RC_OK) << last_error();
  EXPECT_EQ(sync_read(s.s, cap - 10, tail, 10), RC_OK);
  EXPECT_EQ(tail[9], 0x5A);
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
}

TEST_P(Conformance, ErrorsInvalidArguments) {
  const std::string ep = server_.endpoint();
  const char* eps[] = {ep.c_str()};
  const rc_cache_options o = make_options(fresh_cache_id(), rc_config{0, 1, 1, 1});
  rc_cache* c = nullptr;
  EXPECT_EQ(rc_cache_open(nullptr, 1, &o, &c), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_open(eps, 0, &o, &c), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_open(eps, 1, nullptr, &c), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_open(eps, 1, &o, nullptr), RC_E_INVALID_ARGUMENT);
  const char* null_ep[] = {nullptr};
  EXPECT_EQ(rc_cache_open(null_ep, 1, &o, &c), RC_E_INVALID_ARGUMENT);
  for (const char* bad : {"", "bogus", "udp:127.0.0.1:1", "tcp:", "tcp:127.0.0.1", "tcp:127.0.0.1:notaport",
                          "tcp:127.0.0.1:70000", "shm:"}) {
    const char* one[] = {bad};
    EXPECT_EQ(rc_cache_open(one, 1, &o, &c), RC_E_INVALID_ARGUMENT) << "endpoint '" << bad << "'";
  }
  for (const rc_config& bad : {rc_config{0, 1, 0, 1}, rc_config{0, 1, 257, 1}, rc_config{0, 1, 1, 0},
                               rc_config{0, 1, 1, 65}}) {
    rc_cache_options ob = o;
    ob.config = bad;
    EXPECT_EQ(rc_cache_open(eps, 1, &ob, &c), RC_E_INVALID_ARGUMENT) << "config " << str(bad);
  }

  CacheHandle cache;
  ASSERT_TRUE(open(cache, o));
  rc_config cfg{};
  EXPECT_EQ(rc_cache_get_config(nullptr, &cfg), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_get_config(cache.c, nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_reconfigure(nullptr, &o.config), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_reconfigure(cache.c, nullptr), RC_E_INVALID_ARGUMENT);
  for (const rc_config& bad : {rc_config{0, 1, 0, 1}, rc_config{0, 1, 257, 1}, rc_config{0, 1, 1, 0},
                               rc_config{0, 1, 1, 65}}) {
    EXPECT_EQ(rc_cache_reconfigure(cache.c, &bad), RC_E_INVALID_ARGUMENT) << "config " << str(bad);
    EXPECT_EQ(rc_cache_get_config(cache.c, &cfg), RC_OK);
    EXPECT_TRUE(same(cfg, o.config)) << "a rejected reconfigure changed the config to " << str(cfg);
  }
  EXPECT_EQ(rc_session_open(nullptr, nullptr), RC_E_INVALID_ARGUMENT);
  rc_session* dummy = nullptr;
  EXPECT_EQ(rc_session_open(nullptr, &dummy), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_session_open(cache.c, nullptr), RC_E_INVALID_ARGUMENT);

  SessionHandle s;
  ASSERT_TRUE(session(cache, s));
  uint8_t buf[16] = {};
  rc_completion comp[4];
  EXPECT_EQ(rc_read(nullptr, 0, buf, 1, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_write(nullptr, 0, buf, 1, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_read(s.s, 0, nullptr, 1, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_write(s.s, 0, nullptr, 1, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_flush(nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_poll(nullptr, comp, 4), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_poll(s.s, nullptr, 4), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_wait(nullptr, comp, 4, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_wait(s.s, nullptr, 4, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_session_close(nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_close(nullptr), RC_E_INVALID_ARGUMENT);
  rc_server* srv = nullptr;
  EXPECT_EQ(rc_server_start(nullptr, &srv), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_server_stop(nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_server_endpoint(nullptr, 0), nullptr);
  EXPECT_EQ(rc_session_outstanding(s.s), 0u);
  EXPECT_EQ(rc_poll(s.s, comp, 4), 0);
  EXPECT_EQ(rc_wait(s.s, comp, 4, 0), 0) << "nothing outstanding";
  EXPECT_EQ(rc_wait(s.s, comp, 4, -1), 0) << "-1 returns at once when nothing is outstanding";

  // The session is still usable after all that.
  EXPECT_TRUE(cache_works(cache.c, 5000, 3));
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
}

TEST_P(Conformance, StatusNames) {
  const std::pair<int32_t, const char*> names[] = {
      {RC_OK, "RC_OK"},
      {RC_E_INVALID_ARGUMENT, "RC_E_INVALID_ARGUMENT"},
      {RC_E_OUT_OF_RANGE, "RC_E_OUT_OF_RANGE"},
      {RC_E_DISCONNECTED, "RC_E_DISCONNECTED"},
      {RC_E_AUTH, "RC_E_AUTH"},
      {RC_E_NO_MEMORY, "RC_E_NO_MEMORY"},
      {RC_E_BUSY, "RC_E_BUSY"},
      {RC_E_TIMEOUT, "RC_E_TIMEOUT"},
      {RC_E_PROTOCOL, "RC_E_PROTOCOL"},
      {RC_E_CLOSED, "RC_E_CLOSED"},
      {RC_E_UNSUPPORTED, "RC_E_UNSUPPORTED"},
      {RC_E_INTERNAL, "RC_E_INTERNAL"},
      {RC_E_EXPIRED, "RC_E_EXPIRED"},
      {RC_E_IN_USE, "RC_E_IN_USE"},
      {RC_E_LIMIT, "RC_E_LIMIT"},
  };
  for (const auto& [code, name] : names) {
    const char* got = rc_status_name(code);
    ASSERT_NE(got, nullptr) << code;
    EXPECT_STREQ(got, name);
  }
  EXPECT_NE(rc_status_name(12345), nullptr);
  EXPECT_NE(rc_status_name(-12345), nullptr);
}

// Tokens (wire v2): the same id with another token is another cache, so a wrong token cannot reach,
// lock out or even detect the right one's cache; the right token shares it.
TEST_P(Conformance, ErrorsAuth) {
  const uint64_t id = fresh_cache_id();
  CacheHandle a;
  ASSERT_TRUE(open(a, make_options(id, rc_config{0, 1, 1, 1}, 4, "alpha")));
  SessionHandle sa;
  ASSERT_TRUE(session(a, sa));
  const uint64_t at = 1 * MiB - 100;
  const auto data = pattern(9, 5000);
  ASSERT_EQ(sync_write(sa.s, at, data.data(), data.size()), RC_OK);

  phase("wrong token");
  {
    // A cache is named by (id, token): a wrong token gets what an unused id gets, a fresh empty
    // cache, and neither it nor its writes touch the first one.
    CacheHandle wrong;
    ASSERT_TRUE(open(wrong, make_options(id, rc_config{0, 1, 1, 1}, 4, "beta")));
    EXPECT_EQ(rc_cache_capacity(wrong.c), rc_cache_capacity(a.c));
    SessionHandle sw;
    ASSERT_TRUE(session(wrong, sw));
    std::vector<uint8_t> seen(data.size(), 0xEE);
    ASSERT_EQ(sync_read(sw.s, at, seen.data(), seen.size()), RC_OK);
    EXPECT_TRUE(seen == std::vector<uint8_t>(data.size(), 0)) << "a wrong token sees the data of the right one";
    const auto scribble = pattern(11, data.size());
    ASSERT_EQ(sync_write(sw.s, at, scribble.data(), scribble.size()), RC_OK);
    EXPECT_EQ(sw.close(), RC_OK);
    EXPECT_EQ(wrong.close(), RC_OK);
  }
  {
    std::vector<uint8_t> back(data.size());
    ASSERT_EQ(sync_read(sa.s, at, back.data(), back.size()), RC_OK);
    EXPECT_TRUE(back == data) << "a cache opened with a wrong token changed the first one's data";
  }
  phase("no token");
  {
    // No token: the library picks a random one, so the cache is never shared.
    CacheHandle none;
    ASSERT_TRUE(open(none, make_options(id, rc_config{0, 1, 1, 1}, 4, nullptr)));
    SessionHandle sn;
    ASSERT_TRUE(session(none, sn));
    std::vector<uint8_t> seen(data.size(), 0xEE);
    ASSERT_EQ(sync_read(sn.s, at, seen.data(), seen.size()), RC_OK);
    EXPECT_TRUE(seen == std::vector<uint8_t>(data.size(), 0)) << "an open without a token reached another cache";
    EXPECT_EQ(sn.close(), RC_OK);
    EXPECT_EQ(none.close(), RC_OK);
  }
  EXPECT_TRUE(cache_works(a.c, 3 * MiB, 1)) << "other caches with the same id disturbed the first handle";

  phase("right token");
  CacheHandle b;
  ASSERT_TRUE(open(b, make_options(id, rc_config{1, 1, 8, 2}, 4, "alpha")));
  EXPECT_EQ(rc_cache_capacity(b.c), rc_cache_capacity(a.c));
  SessionHandle sb;
  ASSERT_TRUE(session(b, sb));
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(sync_read(sb.s, at, back.data(), back.size()), RC_OK);
  EXPECT_TRUE(back == data) << "a second handle on the same cache id does not see the first one's data";

  const auto data2 = pattern(10, 777);
  ASSERT_EQ(sync_write(sb.s, 2 * MiB - 300, data2.data(), data2.size()), RC_OK);
  std::vector<uint8_t> back2(data2.size());
  ASSERT_EQ(sync_read(sa.s, 2 * MiB - 300, back2.data(), back2.size()), RC_OK);
  EXPECT_TRUE(back2 == data2) << "the first handle does not see the second one's write";

  EXPECT_EQ(sb.close(), RC_OK);
  EXPECT_EQ(b.close(), RC_OK);
  std::vector<uint8_t> back3(data.size());
  ASSERT_EQ(sync_read(sa.s, at, back3.data(), back3.size()), RC_OK) << "closing the second handle broke the first";
  EXPECT_TRUE(back3 == data);
  EXPECT_EQ(sa.close(), RC_OK);
  EXPECT_EQ(a.close(), RC_OK);
}

// ---- a cache's lifetime (the rule: src/server/registry.h) -------------------------------------------

// A server with an admission key on this test's transport, beside the open-mode server_.
struct KeyedServer {
  KeyFile key;
  std::string id = "rc-conformance-" + std::to_string(::getpid());
  ServerProcess server;
  std::string capability;  // the last one minted; options() point at it
  const char* capability_ptr = nullptr;

  // Options for a cache of `regions` regions with a capability for it that ends at `lease_end`.
  rc_cache_options options(uint64_t cache_id, uint32_t regions, const char* token, uint64_t lease_end,
                           uint32_t flags = 0) {
    capability = mint(key.key, cache_id, id, regions, lease_end);
    capability_ptr = capability.c_str();
    rc_cache_options o = make_options(cache_id, rc_config{0, 1, 8, 4}, regions, token);
    o.capabilities = &capability_ptr;
    o.flags = flags;
    return o;
  }
};

// Writes `data` at `at` through a new session of `cache`, or reads it back into `out`.
::testing::AssertionResult write_through(rc_cache* cache, uint64_t at, const std::vector<uint8_t>& data) {
  SessionHandle s;
  if (const rc_status st = rc_session_open(cache, &s.s); st != RC_OK)
    return ::testing::AssertionFailure() << "rc_session_open = " << sname(st) << ": " << last_error();
  if (const int32_t st = sync_write(s.s, at, data.data(), data.size()); st != RC_OK)
    return ::testing::AssertionFailure() << "write = " << sname(st) << ": " << last_error();
  if (const rc_status st = s.close(); st != RC_OK) return ::testing::AssertionFailure() << "rc_session_close = " << sname(st);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult read_through(rc_cache* cache, uint64_t at, std::vector<uint8_t>& out) {
  SessionHandle s;
  if (const rc_status st = rc_session_open(cache, &s.s); st != RC_OK)
    return ::testing::AssertionFailure() << "rc_session_open = " << sname(st) << ": " << last_error();
  if (const int32_t st = sync_read(s.s, at, out.data(), out.size()); st != RC_OK)
    return ::testing::AssertionFailure() << "read = " << sname(st) << ": " << last_error();
  if (const rc_status st = s.close(); st != RC_OK) return ::testing::AssertionFailure() << "rc_session_close = " << sname(st);
  return ::testing::AssertionSuccess();
}

// A cache admitted by a capability lives for its lease, whoever is connected (issue 37): fill it,
// close it entirely, reopen it with the same token and capability, and the bytes are there. Both
// opens ask for RC_OPEN_EXCLUSIVE: once nobody is connected the cache forgets its first client, so
// the second open (another client id) gets it exclusively too.
TEST_P(Conformance, LeasedCacheOutlivesItsConnections) {
  KeyedServer k;
  phase("starting a keyed server");
  ASSERT_TRUE(k.server.start(fresh_listen(), {"--admission-key", k.key.path, "--server-id", k.id}));
  const uint64_t id = fresh_cache_id();
  const uint64_t lease_end = unix_now_ms() + 3600 * 1000;
  const uint64_t at = kRegionSize - 4000;  // across the two regions
  const auto data = pattern(37, 9000);
  {
    CacheHandle first;
    ASSERT_EQ(open_cache({k.server.endpoint()}, k.options(id, 2, "populated", lease_end, RC_OPEN_EXCLUSIVE), &first.c),
              RC_OK)
        << last_error();
    ASSERT_TRUE(write_through(first.c, at, data));
    ASSERT_EQ(first.close(), RC_OK);
  }
  phase("closed: the memory stays lent");
  // Were it freed with its last connection, memory lent would reach 0 well within this wait.
  EXPECT_EQ(k.server.wait_memory_in_use(0, 1000), 2 * kRegionSize) << "the lease-lived cache was freed with its last connection";
  phase("reopen");
  CacheHandle again;
  ASSERT_EQ(open_cache({k.server.endpoint()}, k.options(id, 2, "populated", lease_end, RC_OPEN_EXCLUSIVE), &again.c),
            RC_OK)
      << "the idle cache's first client still holds it: " << last_error();
  std::vector<uint8_t> back(data.size(), 0xEE);
  ASSERT_TRUE(read_through(again.c, at, back));
  EXPECT_TRUE(back == data) << "the reopened cache lost the bytes written before it was closed";
  phase("another token is another cache");
  {
    CacheHandle other;
    ASSERT_EQ(open_cache({k.server.endpoint()}, k.options(id, 2, "another-token", lease_end), &other.c), RC_E_AUTH)
        << "the capability grants 2 regions, all held by the idle cache: " << last_error();
    other.leak();
  }
  EXPECT_EQ(again.close(), RC_OK);
  EXPECT_TRUE(k.server.alive());
  EXPECT_TRUE(k.server.stop());
}

// A lease-lived cache nobody is connected to is still freed when its lease ends: memory lent is 0
// within 1.5 s (scaled) of the lease end (the server checks leases every 250 ms) and not before it;
// the expired capability no longer opens it, and a fresh one (same token) gets a new, zeroed cache.
TEST_P(Conformance, LeaseEndFreesAnIdleCache) {
  KeyedServer k;
  phase("starting a keyed server");
  ASSERT_TRUE(k.server.start(fresh_listen(), {"--admission-key", k.key.path, "--server-id", k.id}));
  const uint64_t id = fresh_cache_id();
  const uint64_t lease_end = unix_now_ms() + 2000;
  const auto data = pattern(38, 5000);
  {
    CacheHandle cache;
    ASSERT_EQ(open_cache({k.server.endpoint()}, k.options(id, 2, "short-lease", lease_end), &cache.c), RC_OK)
        << last_error();
    ASSERT_TRUE(write_through(cache.c, 100, data));
    ASSERT_EQ(cache.close(), RC_OK);
  }
  phase("waiting for the lease end");
  const std::string expired = k.capability;
  uint64_t lent = k.server.memory_in_use();
  const uint64_t give_up = lease_end + static_cast<uint64_t>(rctest::scaled_ms(1500));
  while (lent != 0 && lent != ServerProcess::kNoAnswer && unix_now_ms() < give_up) {
    std::this_thread::sleep_for(50ms);
    lent = k.server.memory_in_use();
  }
  const int64_t freed_after = static_cast<int64_t>(unix_now_ms()) - static_cast<int64_t>(lease_end);
  ASSERT_EQ(lent, 0u) << "an idle cache outlived its lease by over " << rctest::scaled_ms(1500) << " ms";
  EXPECT_GE(freed_after, -50) << "the idle cache was freed " << -freed_after << " ms before its lease ended";
  phase("reopen after the lease end");
  {
    const char* caps[] = {expired.c_str()};
    rc_cache_options o = make_options(id, rc_config{0, 1, 8, 4}, 2, "short-lease");
    o.capabilities = caps;
    CacheHandle stale;
    EXPECT_EQ(open_cache({k.server.endpoint()}, o, &stale.c), RC_E_AUTH) << last_error();
    EXPECT_TRUE(contains(last_error(), "expired")) << last_error();
    stale.leak();
  }
  CacheHandle fresh;
  ASSERT_EQ(open_cache({k.server.endpoint()}, k.options(id, 2, "short-lease", unix_now_ms() + 3600 * 1000), &fresh.c),
            RC_OK)
      << last_error();
  std::vector<uint8_t> back(data.size(), 0xEE);
  ASSERT_TRUE(read_through(fresh.c, 100, back));
  EXPECT_TRUE(back == std::vector<uint8_t>(data.size(), 0)) << "a cache created after the lease ended shows the old bytes";
  EXPECT_EQ(fresh.close(), RC_OK);
  EXPECT_TRUE(k.server.stop());
}

// Without an admission key (open mode) nothing would ever free a cache nobody is connected to, so
// it goes with its last connection, as before: memory lent returns to 0 and a reopen reads zeros.
TEST_P(Conformance, OpenModeCacheIsFreedWithItsLastConnection) {
  const uint64_t id = fresh_cache_id();
  const auto data = pattern(39, 5000);
  {
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(id, rc_config{0, 1, 8, 4}, 2, "unmanaged")));
    ASSERT_TRUE(write_through(cache.c, 100, data));
    ASSERT_EQ(cache.close(), RC_OK);
  }
  EXPECT_EQ(server_.wait_memory_in_use(0, 5000), 0u) << "an open-mode cache outlived its last connection";
  CacheHandle again;
  ASSERT_TRUE(open(again, make_options(id, rc_config{0, 1, 8, 4}, 2, "unmanaged")));
  std::vector<uint8_t> back(data.size(), 0xEE);
  ASSERT_TRUE(read_through(again.c, 100, back));
  EXPECT_TRUE(back == std::vector<uint8_t>(data.size(), 0)) << "an open-mode cache kept its bytes with nobody connected";
  EXPECT_EQ(again.close(), RC_OK);
}

TEST_P(Conformance, ErrorsNoMemory) {
  static_assert(100 * kRegionSize > kMemoryLimit && 60 * kRegionSize <= kMemoryLimit);
  {
    CacheHandle big;
    const rc_status st =
        open_cache({server_.endpoint()}, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 100), &big.c);
    EXPECT_EQ(st, RC_E_NO_MEMORY) << "100 x 1 MiB regions from a server limited to 64 MiB: " << last_error();
    if (st == RC_OK) {
      EXPECT_EQ(big.close(), RC_OK);
    }
    big.leak();
  }
  // The refused request must not have kept memory: 60 of the 64 MiB are still available.
  CacheHandle ok;
  ASSERT_TRUE(open(ok, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 60)));
  EXPECT_EQ(rc_cache_capacity(ok.c), 60 * MiB);
  EXPECT_TRUE(cache_works(ok.c, 59 * MiB + 17, 4));
  EXPECT_EQ(ok.close(), RC_OK);
}

TEST_P(Conformance, ErrorsBusyAtSessionCapacity) {
  for (const rc_config& cfg : {rc_config{0, 1, 16, 4}, rc_config{1, 1, 1, 1}}) {
    SCOPED_TRACE(str(cfg));
    rc_cache_options o = make_options(fresh_cache_id(), cfg);
    o.session_capacity = 4;
    CacheHandle cache;
    ASSERT_TRUE(open(cache, o));
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    // Buffers are leaked if the library hangs, so it can never write into freed memory.
    auto bufs = std::make_unique<uint8_t[]>(8 * 8);
    for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(rc_read(s.s, i * 100, bufs.get() + i * 8, 8, i + 1), RC_OK) << i;
    uint8_t spare[8] = {};
    EXPECT_EQ(rc_read(s.s, 1000, spare, 8, 99), RC_E_BUSY) << "5th outstanding read";
    EXPECT_EQ(rc_write(s.s, 1000, spare, 8, 99), RC_E_BUSY) << "5th outstanding write";
    EXPECT_EQ(rc_session_outstanding(s.s), 4u);

    // Once one completion has been returned there is room for exactly one more.
    std::set<uint64_t> seen;
    rc_completion c[4];
    int32_t n = 0;
    auto deadline = Clock::now() + hang_limit();
    while (n == 0 && Clock::now() < deadline) n = rc_wait(s.s, c, 1, 100);
    if (n == 0) {
      (void)bufs.release();
      s.leak();
      cache.leak();
      FAIL() << "no completion arrived";
    }
    ASSERT_EQ(n, 1) << "rc_wait with max 1";
    EXPECT_EQ(c[0].status, RC_OK);
    seen.insert(c[0].tag);
    EXPECT_EQ(rc_session_outstanding(s.s), 3u);
    EXPECT_EQ(rc_read(s.s, 2000, bufs.get() + 4 * 8, 8, 5), RC_OK);
    EXPECT_EQ(rc_read(s.s, 1000, spare, 8, 99), RC_E_BUSY) << "full again";

    deadline = Clock::now() + hang_limit();
    while (rc_session_outstanding(s.s) > 0 && Clock::now() < deadline) {
      n = rc_wait(s.s, c, 4, 100);
      ASSERT_GE(n, 0);
      for (int32_t i = 0; i < n; ++i) {
        EXPECT_EQ(c[i].status, RC_OK);
        EXPECT_TRUE(c[i].tag >= 1 && c[i].tag <= 5) << "unexpected tag " << c[i].tag;
        EXPECT_TRUE(seen.insert(c[i].tag).second) << "tag " << c[i].tag << " completed twice";
      }
    }
    if (rc_session_outstanding(s.s) > 0) {
      (void)bufs.release();
      s.leak();
      cache.leak();
      FAIL() << "operations never completed";
    }
    EXPECT_EQ(seen.size(), 5u);
    for (int i = 0; i < 5 * 8; ++i) EXPECT_EQ(bufs[static_cast<std::size_t>(i)], 0) << "fresh cache reads zeros";
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
}

TEST_P(Conformance, ErrorsCloseCacheWithOpenSession) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), rc_config{1, 1, 4, 2})));
  SessionHandle s;
  ASSERT_TRUE(session(cache, s));
  EXPECT_EQ(rc_cache_close(cache.c), RC_E_INVALID_ARGUMENT);
  // Still fully usable.
  const auto data = pattern(5, 100);
  EXPECT_EQ(sync_write(s.s, 10, data.data(), data.size()), RC_OK);
  std::vector<uint8_t> back(100);
  EXPECT_EQ(sync_read(s.s, 10, back.data(), back.size()), RC_OK);
  EXPECT_TRUE(back == data);
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
}

// An endpoint where nobody listens: an error (not a hang) within connect_timeout_ms.
TEST_P(Conformance, ErrorsConnectNobodyListening) {
  std::vector<std::string> targets;
  std::vector<std::string> cleanup;
  if (tcp()) {
    Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(probe.fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(probe.fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    targets.push_back("tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port)));  // bound, not listening
  } else if (verbs()) {
    // The server's port with the server gone: rdma_cm's connect is rejected.
    const std::string ep = server_.endpoint();
    ASSERT_TRUE(server_.stop());
    targets.push_back(ep);
  } else {
    const std::string missing = "/tmp/rc-test-" + std::to_string(getpid()) + "-missing.sock";
    ::unlink(missing.c_str());
    targets.push_back("shm:" + missing);
    // A stale socket file nobody listens on.
    const std::string stale = "/tmp/rc-test-" + std::to_string(getpid()) + "-stale.sock";
    ::unlink(stale.c_str());
    Fd u(::socket(AF_UNIX, SOCK_SEQPACKET, 0));
    socklen_t len = 0;
    sockaddr_un a = unix_address(stale, len);
    ASSERT_EQ(::bind(u.fd, reinterpret_cast<sockaddr*>(&a), len), 0);
    u.reset();
    targets.push_back("shm:" + stale);
    cleanup.push_back(stale);
  }
  for (const auto& t : targets) {
    SCOPED_TRACE(t);
    expect_open_fails_in_time(t);
  }
  for (const auto& p : cleanup) ::unlink(p.c_str());
}

// A peer that accepts connections (kernel backlog) but never answers the handshake.
TEST_P(Conformance, ErrorsConnectSilentPeer) {
  if (verbs()) {
#ifdef RC_HAVE_VERBS
    // One listener that never answers the connection request, one that accepts and never replies to the Connect.
    for (const bool accept : {false, true}) {
      SCOPED_TRACE(accept ? "accepts, then silent" : "never accepts");
      rawverbs::SilentListener silent(accept);
      const std::string target = silent.start(verbs_address());
      ASSERT_FALSE(target.empty()) << "cannot listen with rdma_cm on " << verbs_address();
      expect_open_fails_in_time(target);
    }
    return;
#else
    GTEST_SKIP() << "built without rdma-core";
#endif
  }
  Fd listener;
  std::string target;
  std::string path;
  if (tcp()) {
    listener.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(listener.fd, 16), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    target = "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  } else {
    path = "/tmp/rc-test-" + std::to_string(getpid()) + "-silent.sock";
    ::unlink(path.c_str());
    listener.fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    socklen_t len = 0;
    sockaddr_un a = unix_address(path, len);
    ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), len), 0);
    ASSERT_EQ(::listen(listener.fd, 16), 0);
    target = "shm:" + path;
  }
  expect_open_fails_in_time(target);
  if (!path.empty()) ::unlink(path.c_str());
}

// ---- (f) dead server ---------------------------------------------------------------------------------

TEST_P(Conformance, DeadServerFailsOutstandingOperations) {
  for (uint32_t c : {0u, 1u}) {
    const rc_config cfg{c, 1, 8, 4};
    SCOPED_TRACE(str(cfg));
    phase("dead server " + str(cfg));
    ServerProcess victim;
    ASSERT_TRUE(victim.start(fresh_listen()));
    rc_cache_options o = make_options(fresh_cache_id(), cfg);
    o.op_timeout_ms = 2000;
    CacheHandle cache;
    {
      const rc_status st = open_cache({victim.endpoint()}, o, &cache.c);
      ASSERT_EQ(st, RC_OK) << last_error();
    }
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    // The connection works.
    EXPECT_TRUE(cache_works(cache.c, 100, 1));

    Pipeline pl(s.s, "dead server " + str(cfg));
    uint64_t pre_ok = 0, pre_err = 0, post_ok = 0, post_err = 0, bad = 0;
    pl.set_handler([&](const PendingOp& op, int32_t st) {
      const bool is_error = st == RC_E_DISCONNECTED || st == RC_E_TIMEOUT;
      if (op.phase == 0) {
        // Submitted before the kill: may have finished in time, otherwise it must fail.
        if (st == RC_OK) ++pre_ok;
        else if (is_error) ++pre_err;
        else if (bad++ < 5) ADD_FAILURE() << Pipeline::describe(op) << " completed with " << sname(st);
      } else {
        if (is_error) ++post_err;
        else {
          ++post_ok;
          if (bad++ < 5) ADD_FAILURE() << Pipeline::describe(op) << " submitted after the server died completed with "
                                       << sname(st);
        }
      }
    });
    std::mt19937_64 rng(c + 1);
    for (int i = 0; i < 64; ++i) {
      const uint64_t len = 1 + rng() % (48 * KiB);
      const uint64_t addr = rng() % (4 * MiB - len);
      const rc_status st = (i % 2) ? pl.write(addr, pattern(rng(), len)) : pl.read(addr, len, nullptr);
      ASSERT_EQ(st, RC_OK) << "submission " << i << ": " << last_error();
    }
    const uint64_t in_flight = pl.pending();

    phase("SIGKILL " + str(cfg));
    victim.kill_hard();
    const auto killed_at = Clock::now();
    const auto deadline = killed_at + ms(rctest::scaled_ms(5000));

    // New submissions fail synchronously or complete with an error, once the death can have been noticed: shm's
    // one-sided operations never reach the server, and its client probes the handshake socket every 2 ms of them
    // (shm_transport.cpp, kProbeEveryNs), so what it posts within that window of the last probe still lands in
    // the (now orphaned) mapping, as it would have a moment before the kill.
    std::this_thread::sleep_for(ms(5));
    pl.set_phase(1);
    uint64_t sync_errors = 0;
    for (int i = 0; i < 16; ++i) {
      const uint64_t len = 1 + rng() % (8 * KiB);
      const uint64_t addr = rng() % (4 * MiB - len);
      const rc_status st = (i % 2) ? pl.write(addr, pattern(rng(), len)) : pl.read(addr, len, nullptr);
      if (st != RC_OK) {
        ++sync_errors;
        EXPECT_NE(st, RC_E_OUT_OF_RANGE);
        EXPECT_NE(st, RC_E_INVALID_ARGUMENT);
      }
    }

    phase("draining after SIGKILL " + str(cfg));
    while (pl.pending() > 0 && Clock::now() < deadline) {
      if (pl.reap(100) < 0) break;
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at).count();
    const bool hung = pl.pending() > 0;
    EXPECT_FALSE(hung) << pl.pending() << " operations still outstanding " << took << " ms after the server died";
    EXPECT_EQ(bad, 0u);
    if (!hung) {
      EXPECT_EQ(pre_ok + pre_err, in_flight) << "every operation in flight at the kill completes";
    }
    EXPECT_EQ(post_ok, 0u);
    std::printf("[ info     ] %s: %llu in flight at kill: %llu ok, %llu failed; after kill: %llu sync errors, "
                "%llu async errors; drained in %lld ms\n",
                str(cfg).c_str(), static_cast<unsigned long long>(in_flight), static_cast<unsigned long long>(pre_ok),
                static_cast<unsigned long long>(pre_err), static_cast<unsigned long long>(sync_errors),
                static_cast<unsigned long long>(post_err), static_cast<long long>(took));
    if (hung) {
      pl.abandon();
      s.leak();
      cache.leak();
      FAIL() << "operations hang after the server died";
    }

    // Once everything drained: a new operation still never hangs.
    phase("submit after drain " + str(cfg));
    const rc_status st = pl.read(0, 64, nullptr);
    if (st == RC_OK) {
      const auto d2 = Clock::now() + ms(rctest::scaled_ms(5000));
      while (pl.pending() > 0 && Clock::now() < d2)
        if (pl.reap(100) < 0) break;
      if (pl.pending() > 0) {
        pl.abandon();
        s.leak();
        cache.leak();
        FAIL() << "an operation submitted after the failure was noticed hangs";
      }
    }
    EXPECT_EQ(post_ok, 0u);
    phase("close after dead server " + str(cfg));
    EXPECT_EQ(s.close(), RC_OK);
    const rc_status cs = cache.close();
    EXPECT_TRUE(cs == RC_OK || cs == RC_E_DISCONNECTED) << "rc_cache_close = " << sname(cs);
  }
}

// The server dies while the client is idle: later operations must start failing (RC_E_DISCONNECTED or
// RC_E_TIMEOUT) within a few seconds, whatever path (one-sided or batched) they take.
TEST_P(Conformance, IdleDeadServerIsNoticed) {
  for (const rc_config& cfg : {rc_config{0, 1, 1, 1}, rc_config{1, 1, 8, 4}, rc_config{0, 0, 1, 1}}) {
    SCOPED_TRACE(str(cfg));
    phase("idle dead server " + str(cfg));
    ServerProcess victim;
    ASSERT_TRUE(victim.start(fresh_listen()));
    rc_cache_options o = make_options(fresh_cache_id(), cfg);
    o.op_timeout_ms = 2000;
    CacheHandle cache;
    ASSERT_EQ(open_cache({victim.endpoint()}, o, &cache.c), RC_OK) << last_error();
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    EXPECT_TRUE(cache_works(cache.c, 4096, 2));
    victim.kill_hard();

    uint8_t b[256];
    int32_t st = RC_OK;
    uint64_t ok_ops = 0;
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(5000));
    while (st == RC_OK && Clock::now() < deadline) {
      st = (ok_ops % 2) ? sync_write(s.s, 1000, b, sizeof b) : sync_read(s.s, 1000, b, sizeof b);
      if (st == RC_OK) {
        ++ok_ops;
        std::this_thread::sleep_for(5ms);
      }
    }
    EXPECT_TRUE(st == RC_E_DISCONNECTED || st == RC_E_TIMEOUT)
        << "operations against a killed server: last status " << sname(st) << " after " << ok_ops
        << " operations succeeded";
    if (st == kHung) {
      s.leak();
      cache.leak();
      FAIL() << "the library hung";
    }
    EXPECT_EQ(s.close(), RC_OK);
    cache.close();
  }
}

// rc_wake is how a binding takes a session back from a thread blocked in rc_wait: with the server
// stopped (SIGSTOP), an outstanding read cannot complete, yet the wait must return when woken.
TEST_P(Conformance, WakeInterruptsWait) {
  for (const rc_config& cfg : {rc_config{0, 1, 1, 1}, rc_config{1, 1, 1, 1}}) {
    SCOPED_TRACE(str(cfg));
    ServerProcess frozen;
    ASSERT_TRUE(frozen.start(fresh_listen()));
    rc_cache_options o = make_options(fresh_cache_id(), cfg);
    o.op_timeout_ms = 20000;  // far beyond the test: only rc_wake can end the wait
    CacheHandle cache;
    ASSERT_EQ(open_cache({frozen.endpoint()}, o, &cache.c), RC_OK) << last_error();
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    ASSERT_EQ(::kill(frozen.pid(), SIGSTOP), 0);
    uint8_t b[64];
    // A batched read over tcp (or a batch over shm with s = 1 and b > 1) needs the stopped server.
    ASSERT_EQ(rc_write(s.s, 0, b, sizeof b, 1), RC_OK);
    ASSERT_EQ(rc_read(s.s, 0, b, sizeof b, 2), RC_OK);
    std::atomic<int32_t> result{INT32_MIN};
    std::atomic<bool> returned{false};
    const auto started = Clock::now();
    std::thread waiter([&] {
      rc_completion c[4];
      int32_t total = 0;
      // Completions that need no server (shm one-sided) come back first; then the wait blocks.
      for (;;) {
        const int32_t n = rc_wait(s.s, c, 4, -1);
        if (n <= 0) {
          result = n;
          break;
        }
        total += n;
        if (total == 2) {
          result = total;
          break;
        }
      }
      returned = true;
    });
    std::this_thread::sleep_for(ms(100));
    ASSERT_EQ(rc_wake(s.s), RC_OK);
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(3000));
    while (!returned && Clock::now() < deadline) std::this_thread::sleep_for(ms(5));
    const bool woke = returned.load();
    ::kill(frozen.pid(), SIGCONT);  // lets everything finish, whatever happened
    waiter.join();
    EXPECT_TRUE(woke) << "rc_wait did not return after rc_wake";
    EXPECT_LT(Clock::now() - started, ms(rctest::scaled_ms(10000)));
    EXPECT_EQ(s.close(), RC_OK);
    cache.close();
  }
}

// ---- (g) restart ------------------------------------------------------------------------------------

TEST_P(Conformance, RestartAndReconnect) {
  const uint64_t id = fresh_cache_id();
  const rc_cache_options o = make_options(id, rc_config{1, 1, 8, 4});
  CacheHandle old_cache;
  ASSERT_TRUE(open(old_cache, o));
  SessionHandle old_s;
  ASSERT_TRUE(session(old_cache, old_s));
  const auto data = pattern(33, 3 * MiB);
  ASSERT_EQ(sync_write(old_s.s, 512 * KiB, data.data(), data.size()), RC_OK);
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(sync_read(old_s.s, 512 * KiB, back.data(), back.size()), RC_OK);
  ASSERT_TRUE(back == data);

  phase("kill and restart");
  const std::string before = server_.endpoint();
  server_.kill_hard();
  ASSERT_TRUE(server_.restart());
  EXPECT_EQ(server_.endpoint(), before) << "the restarted server must listen on the same endpoint";

  phase("open after restart");
  CacheHandle fresh;
  ASSERT_TRUE(open(fresh, o));
  EXPECT_EQ(rc_cache_capacity(fresh.c), 4 * MiB);
  SessionHandle s;
  ASSERT_TRUE(session(fresh, s));
  std::vector<uint8_t> after(data.size(), 0xEE);
  ASSERT_EQ(sync_read(s.s, 512 * KiB, after.data(), after.size()), RC_OK) << last_error();
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == 0; }))
      << "a restarted server must hand out zeroed memory";
  EXPECT_TRUE(cache_works(fresh.c, 2 * MiB - 1000, 8));

  phase("close the stale handle");
  // The stale handle must close without hanging (its operations fail or it reconnected).
  {
    uint8_t b[16];
    const int32_t st = sync_read(old_s.s, 0, b, sizeof b);
    EXPECT_NE(st, kHung) << "an operation on the stale handle hangs";
    if (st == kHung) {
      old_s.leak();
      old_cache.leak();
    }
  }
  if (old_s.s != nullptr) {
    EXPECT_EQ(old_s.close(), RC_OK);
    old_cache.close();
  }
  EXPECT_TRUE(cache_works(fresh.c, 100, 9)) << "closing the stale handle disturbed the new one";
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(fresh.close(), RC_OK);
}

// ---- two servers --------------------------------------------------------------------------------------

TEST_P(Conformance, TwoServersMapInEndpointOrder) {
  ServerProcess second;
  ASSERT_TRUE(second.start(fresh_listen()));
  const uint64_t id = fresh_cache_id();
  const rc_cache_options o = make_options(id, rc_config{1, 2, 16, 4}, 2);
  CacheHandle both;
  ASSERT_EQ(open_cache({server_.endpoint(), second.endpoint()}, o, &both.c), RC_OK) << last_error();
  ASSERT_EQ(rc_cache_capacity(both.c), 4 * MiB);
  SessionHandle s;
  ASSERT_TRUE(session(both, s));
  std::vector<uint8_t> shadow = pattern(44, 4 * MiB);
  ASSERT_EQ(sync_write(s.s, 0, shadow.data(), shadow.size()), RC_OK);
  {
    std::mt19937_64 rng(45);
    RandomIo p;
    p.ops = rctest::scaled(1000, 100);
    Pipeline pl(s.s, "two servers");
    const auto r = run_random_io(pl, shadow, p, rng);
    ASSERT_FALSE(r.hung);
    EXPECT_EQ(pl.failures(), 0u);
  }
  EXPECT_TRUE(verify_all(s.s, shadow, 0, "two servers"));

  // Each server alone holds its half, in endpoint order.
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE("server " + std::to_string(k));
    CacheHandle one;
    ASSERT_EQ(open_cache({k == 0 ? server_.endpoint() : second.endpoint()}, o, &one.c), RC_OK) << last_error();
    ASSERT_EQ(rc_cache_capacity(one.c), 2 * MiB);
    SessionHandle s1;
    ASSERT_TRUE(session(one, s1));
    const std::vector<uint8_t> half(shadow.begin() + k * static_cast<std::ptrdiff_t>(2 * MiB),
                                    shadow.begin() + (k + 1) * static_cast<std::ptrdiff_t>(2 * MiB));
    EXPECT_TRUE(verify_all(s1.s, half, 0, "server " + std::to_string(k) + " alone"));
    EXPECT_EQ(s1.close(), RC_OK);
    EXPECT_EQ(one.close(), RC_OK);
  }
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(both.close(), RC_OK);
  EXPECT_TRUE(second.stop());
}

// ---- grow and shrink ------------------------------------------------------------------------------------

rc_status grow(rc_cache* cache, const std::vector<std::string>& endpoints, const char* const* capabilities = nullptr) {
  std::vector<const char*> eps;
  for (const auto& e : endpoints) eps.push_back(e.c_str());
  return rc_cache_grow(cache, eps.data(), eps.size(), capabilities);
}

// A cache grows by a server and shrinks back, again and again, while another session does verified
// random I/O on the first server's range without pause: that I/O never fails, the added range holds
// what is written there, and after a shrink I/O past the new capacity is refused as out of range.
TEST_P(Conformance, GrowAndShrinkUnderVerifiedLoad) {
  ServerProcess second;
  ASSERT_TRUE(second.start(fresh_listen()));
  const uint64_t kept = 2 * kRegionSize;  // regions_per_server = 2
  for (const rc_config& config : {rc_config{0, 1, 16, 4}, rc_config{1, 1, 32, 8}, rc_config{0, 0, 1, 1}}) {
    SCOPED_TRACE(str(config));
    phase("open " + str(config));
    CacheHandle cache;
    ASSERT_TRUE(open(cache, make_options(fresh_cache_id(), config, 2)));
    ASSERT_EQ(rc_cache_server_count(cache.c), 1u);
    SessionHandle load, probe;
    ASSERT_TRUE(session(cache, load));
    ASSERT_TRUE(session(cache, probe));

    std::atomic<bool> stop{false}, hung{false};
    std::atomic<uint64_t> progress{0}, failures{0};
    std::thread worker([&] {
      std::vector<uint8_t> shadow(kept, 0);
      std::mt19937_64 rng(777);
      RandomIo p;
      p.stop = &stop;
      p.progress = &progress;
      {
        Pipeline pl(load.s, "load on the kept range");
        const auto r = run_random_io(pl, shadow, p, rng);
        hung = r.hung;
        failures = pl.failures();
      }
      if (!hung && !verify_all(load.s, shadow, 0, "kept range after resizes")) ++failures;
    });
    StopAndJoin joiner{stop, worker};
    auto advanced = [&](const std::string& after) {
      return load_advanced(progress, [&] { return failures.load() != 0 || hung.load(); }, after);
    };

    ASSERT_TRUE(advanced("open"));
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      phase("grow, round " + std::to_string(round));
      ASSERT_EQ(grow(cache.c, {second.endpoint()}), RC_OK) << last_error();
      ASSERT_EQ(rc_cache_capacity(cache.c), 2 * kept);
      ASSERT_EQ(rc_cache_server_count(cache.c), 2u);
      // The whole added range, up to the new server's last byte (the load owns the range below it).
      const auto data = pattern(900 + static_cast<uint64_t>(round), kept);
      ASSERT_EQ(sync_write(probe.s, kept, data.data(), data.size()), RC_OK) << last_error();
      std::vector<uint8_t> back(data.size());
      ASSERT_EQ(sync_read(probe.s, kept, back.data(), back.size()), RC_OK) << last_error();
      ASSERT_TRUE(back == data) << "the grown range does not hold what was written";
      ASSERT_TRUE(advanced("grow"));

      phase("shrink, round " + std::to_string(round));
      ASSERT_EQ(rc_cache_shrink(cache.c, 1), RC_OK) << last_error();
      ASSERT_EQ(rc_cache_capacity(cache.c), kept);
      ASSERT_EQ(rc_cache_server_count(cache.c), 1u);
      uint8_t byte = 0;
      EXPECT_EQ(rc_read(probe.s, kept, &byte, 1, 1), RC_E_OUT_OF_RANGE) << "a read past the shrunk cache";
      EXPECT_TRUE(contains(last_error(), "outside the cache's " + std::to_string(kept) + " bytes")) << last_error();
      ASSERT_TRUE(advanced("shrink"));
    }
    phase("stop the load");
    stop = true;
    worker.join();
    if (hung) {
      load.leak();
      probe.leak();
      cache.leak();
      FAIL() << "the library hung";
    }
    EXPECT_EQ(failures.load(), 0u);
    EXPECT_EQ(load.close(), RC_OK);
    EXPECT_EQ(probe.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
    // Nothing keeps the dropped server's share.
    EXPECT_EQ(second.wait_memory_in_use(0, 5000), 0u);
  }
  EXPECT_TRUE(second.stop());
}

// A grow that cannot be carried out changes nothing and leaves nothing behind; bad arguments are
// refused with what was wrong.
TEST_P(Conformance, GrowIsAllOrNothing) {
  if (verbs()) GTEST_SKIP() << "the unreachable server is a tcp or shm path";
  ServerProcess second;
  ASSERT_TRUE(second.start(fresh_listen()));
  rc_cache_options o = make_options(fresh_cache_id(), rc_config{0, 1, 8, 4}, 2);
  o.connect_timeout_ms = 1000;
  CacheHandle cache;
  ASSERT_TRUE(open(cache, o));
  SessionHandle s;
  ASSERT_TRUE(session(cache, s));
  const auto data = pattern(31, 4096);
  ASSERT_EQ(sync_write(s.s, 100, data.data(), data.size()), RC_OK);

  phase("grow onto a live server and a dead one");
  const std::string dead = tcp() ? "tcp:127.0.0.1:1" : "shm:/tmp/rc-test-" + std::to_string(getpid()) + "-nobody.sock";
  const rc_status st = grow(cache.c, {second.endpoint(), dead});
  EXPECT_TRUE(st == RC_E_DISCONNECTED || st == RC_E_TIMEOUT) << sname(st) << ": " << last_error();
  EXPECT_EQ(rc_cache_capacity(cache.c), 2 * kRegionSize);
  EXPECT_EQ(rc_cache_server_count(cache.c), 1u);
  EXPECT_EQ(second.wait_memory_in_use(0, 5000), 0u) << "the live server kept the failed grow's share";
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(sync_read(s.s, 100, back.data(), back.size()), RC_OK) << last_error();
  EXPECT_TRUE(back == data);

  phase("bad arguments");
  EXPECT_EQ(rc_cache_grow(cache.c, nullptr, 1, nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(grow(cache.c, {}), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "at least one endpoint")) << last_error();
  EXPECT_EQ(grow(cache.c, {"carrier-pigeon:somewhere"}), RC_E_INVALID_ARGUMENT);
  const char* caps[] = {"not-a-capability"};
  EXPECT_EQ(grow(cache.c, {second.endpoint()}, caps), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "opened without capabilities")) << last_error();
  EXPECT_EQ(rc_cache_shrink(cache.c, 0), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "can keep 1..1 of them, not 0")) << last_error();
  EXPECT_EQ(rc_cache_shrink(cache.c, 2), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_shrink(nullptr, 1), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_cache_server_count(nullptr), 0u);
  EXPECT_EQ(rc_cache_shrink(cache.c, 1), RC_OK) << "keeping every server is a no-op";
  EXPECT_EQ(rc_cache_capacity(cache.c), 2 * kRegionSize);

  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(second.stop());
}

// ---- embedded server ------------------------------------------------------------------------------------

TEST_P(Conformance, EmbeddedServer) {
  const std::string listen = fresh_listen();
  const char* l = listen.c_str();
  rc_server_options so{};
  so.listen = &l;
  so.listen_count = 1;
  so.region_size = 1 * MiB;
  so.memory_limit = 16 * MiB;
  so.max_threads = 2;
  rc_server* srv = nullptr;
  ASSERT_EQ(rc_server_start(&so, &srv), RC_OK) << last_error();
  const char* ep = rc_server_endpoint(srv, 0);
  ASSERT_NE(ep, nullptr);
  const std::string endpoint = ep;
  EXPECT_EQ(rc_server_endpoint(srv, 1), nullptr);
  if (!shm()) {
    EXPECT_NE(endpoint.substr(endpoint.size() - 2), ":0") << "port 0 must be resolved: " << endpoint;
  }
  else EXPECT_EQ(endpoint, listen);
  EXPECT_EQ(rc_server_memory_in_use(srv), 0u);

  {
    CacheHandle cache;
    ASSERT_EQ(open_cache({endpoint}, make_options(fresh_cache_id(), rc_config{1, 1, 8, 4}), &cache.c), RC_OK)
        << last_error();
    EXPECT_EQ(rc_server_memory_in_use(srv), 4 * MiB);
    CacheHandle too_big;
    EXPECT_EQ(open_cache({endpoint}, make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 13), &too_big.c),
              RC_E_NO_MEMORY);
    too_big.leak();
    EXPECT_TRUE(cache_works(cache.c, 1 * MiB - 5, 12));

    // Stopping the server disconnects its clients.
    SessionHandle s;
    ASSERT_TRUE(session(cache, s));
    phase("rc_server_stop with a client connected");
    ASSERT_EQ(rc_server_stop(srv), RC_OK);
    srv = nullptr;
    // The client learns of the close asynchronously (a one-sided shm read may still be served from
    // the mapping until then), but within a few seconds operations must fail with RC_E_DISCONNECTED.
    uint8_t b[64];
    int32_t st = RC_OK;
    uint64_t ok_reads = 0;
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(5000));
    while (st == RC_OK && Clock::now() < deadline) {
      st = sync_read(s.s, 0, b, sizeof b);
      if (st == RC_OK) {
        ++ok_reads;
        std::this_thread::sleep_for(5ms);
      }
    }
    EXPECT_EQ(st, RC_E_DISCONNECTED) << "reading from a stopped server (" << ok_reads
                                     << " reads succeeded after rc_server_stop returned)";
    if (ok_reads > 0) {
      std::printf("[ info     ] %llu reads succeeded after rc_server_stop before the client noticed\n",
                  static_cast<unsigned long long>(ok_reads));
    }
    if (st == kHung) {
      s.leak();
      cache.leak();
      return;
    }
    EXPECT_EQ(s.close(), RC_OK);
    cache.close();
  }
  if (srv != nullptr) {
    EXPECT_EQ(rc_server_stop(srv), RC_OK);
  }
}

// ---- (h) malformed input ---------------------------------------------------------------------------------

TEST_P(Conformance, MalformedInputNeverCrashesServer) {
  // A well-behaved cache that must keep working throughout.
  CacheHandle good;
  ASSERT_TRUE(open(good, make_options(fresh_cache_id(), rc_config{1, 1, 8, 4})));
  ASSERT_TRUE(cache_works(good.c, 0, 1));
  uint64_t n = 0;
  auto check = [&](const std::string& what) {
    phase("after " + what);
    EXPECT_TRUE(server_alive()) << "after " << what;
    if (!server_.alive()) return false;
    const uint64_t addr = (n * 300007) % (4 * MiB - 4096);
    EXPECT_TRUE(cache_works(good.c, addr, 1000 + n)) << "the good cache broke after " << what;
    ++n;
    return true;
  };
  const int reply_ms = rctest::scaled_ms(10000);
  std::mt19937_64 rng(99);
  auto garbage = [&](std::size_t len) {
    std::vector<uint8_t> g(len);
    fill_random(g.data(), len, rng());
    return g;
  };

  if (verbs()) {
#ifdef RC_HAVE_VERBS
    malformed_verbs_input(check, reply_ms, garbage);
#endif
    return;
  }
  if (tcp()) {
    const std::string ep = server_.endpoint();
    {
      phase("garbage");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      const auto g = garbage(4096);
      send_all(fd.fd, g.data(), g.size());
      EXPECT_EQ(wait_closed(fd.fd, reply_ms), PeerState::Closed) << "the server should drop a peer sending garbage";
    }
    if (!check("garbage")) return;
    {
      phase("partial header then close");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 1, "x");
      send_all(fd.fd, f.data(), 10);
    }
    if (!check("partial header then close")) return;
    {
      phase("connect and close");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
    }
    if (!check("connect and close")) return;
    {
      phase("batch before connect");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      const auto b = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      send_all(fd.fd, b.data(), b.size());
      EXPECT_EQ(wait_closed(fd.fd, reply_ms), PeerState::Closed);
    }
    if (!check("batch before connect")) return;
    {
      phase("oversized token_length");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 1, "tok", 100000);
      send_all(fd.fd, f.data(), f.size());
      const RawReply r = read_connect_reply(fd.fd, reply_ms);
      if (r.received) {
        EXPECT_NE(r.reply.status, RC_OK) << "token_length 100000 accepted";
      }
    }
    if (!check("oversized token_length")) return;
    {
      phase("truncated connect frame");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      auto f = connect_frame(fresh_cache_id(), 1, "tok");
      wire::FrameHeader h;
      std::memcpy(&h, f.data(), sizeof h);
      h.bytes = sizeof h + 8;  // claims a frame too short to hold a ConnectRequest
      std::memcpy(f.data(), &h, sizeof h);
      send_all(fd.fd, f.data(), h.bytes);
      const RawReply r = read_connect_reply(fd.fd, reply_ms);
      if (r.received) {
        EXPECT_NE(r.reply.status, RC_OK) << "a truncated Connect was accepted";
      }
    }
    if (!check("truncated connect frame")) return;
    {
      phase("connect asking for too much memory");
      Fd fd(connect_tcp(ep));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 100, "tok");  // 100 MiB > 64 MiB limit
      send_all(fd.fd, f.data(), f.size());
      const RawReply r = read_connect_reply(fd.fd, reply_ms);
      ASSERT_TRUE(r.received) << "no ConnectReply to an oversized request";
      EXPECT_EQ(r.reply.status, RC_E_NO_MEMORY);
    }
    if (!check("connect asking for too much memory")) return;

    // A valid handshake, then a misbehaving batch.
    auto handshake = [&](Fd& fd) {
      fd.fd = connect_tcp(ep);
      if (fd.fd < 0) return false;
      const auto f = connect_frame(fresh_cache_id(), 1, "raw-token");
      if (!send_all(fd.fd, f.data(), f.size())) return false;
      const RawReply r = read_connect_reply(fd.fd, reply_ms);
      EXPECT_TRUE(r.received) << "no valid ConnectReply";
      if (!r.received) return false;
      EXPECT_EQ(r.reply.status, RC_OK) << std::string(r.reply.message, strnlen(r.reply.message, sizeof r.reply.message));
      EXPECT_EQ(r.reply.region_count, 1u);
      EXPECT_EQ(r.reply.region_size, kRegionSize);
      EXPECT_EQ(r.regions.size(), 1u);
      EXPECT_GE(r.reply.max_frame, sizeof(wire::FrameHeader) + sizeof(wire::RequestEntry));
      return r.reply.status == RC_OK;
    };
    {
      phase("batch with bad magic");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      auto b = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      b[0] ^= 0xFF;
      send_all(fd.fd, b.data(), b.size());
      EXPECT_EQ(wait_closed(fd.fd, reply_ms), PeerState::Closed) << "bad magic must close the connection";
    }
    if (!check("batch with bad magic")) return;
    {
      phase("batch with bytes > kMaxFrame");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      auto b = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      const uint32_t huge = wire::kMaxFrame + 1;
      std::memcpy(b.data() + offsetof(wire::FrameHeader, bytes), &huge, 4);
      send_all(fd.fd, b.data(), b.size());
      EXPECT_EQ(wait_closed(fd.fd, reply_ms), PeerState::Closed);
    }
    if (!check("batch with bytes > kMaxFrame")) return;
    {
      phase("batch with bytes larger than sent, then EOF");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      auto b = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      const uint32_t more = 1000;
      std::memcpy(b.data() + offsetof(wire::FrameHeader, bytes), &more, 4);
      send_all(fd.fd, b.data(), b.size());
      ::shutdown(fd.fd, SHUT_WR);
      EXPECT_EQ(wait_closed(fd.fd, reply_ms), PeerState::Closed) << "EOF inside a frame must close the connection";
    }
    if (!check("batch with bytes larger than sent")) return;
    {
      phase("count larger than the entries present");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      auto b = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      const uint32_t count = 100;
      std::memcpy(b.data() + offsetof(wire::FrameHeader, count), &count, 4);
      send_all(fd.fd, b.data(), b.size());
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));  // closed or answered with errors: either is fine
    }
    if (!check("count larger than the entries present")) return;
    {
      phase("write payload beyond the frame");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      auto b = batch_frame(1, {RawEntry{wire::Op::Write, 0, 0, 16, std::vector<uint8_t>(16, 1)}});
      const uint32_t len = 30000;
      std::memcpy(b.data() + sizeof(wire::FrameHeader) + offsetof(wire::RequestEntry, length), &len, 4);
      send_all(fd.fd, b.data(), b.size());
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("write payload beyond the frame")) return;
    {
      phase("entries out of range get an error status, not a close");
      Fd fd;
      ASSERT_TRUE(handshake(fd));
      struct Bad {
        RawEntry e;
        const char* what;
      };
      const Bad bads[] = {
          {RawEntry{wire::Op::Read, 5, 0, 8, {}}, "region index beyond the grant"},
          {RawEntry{wire::Op::Read, 0, kRegionSize - 4, 8, {}}, "read past the region end"},
          {RawEntry{wire::Op::Read, 0, UINT64_MAX - 3, 8, {}}, "offset + length overflows"},
          {RawEntry{wire::Op::Write, 0, kRegionSize - 4, 8, std::vector<uint8_t>(8, 7)}, "write past the region end"},
          {RawEntry{wire::Op::Write, 1, 0, 8, std::vector<uint8_t>(8, 7)}, "write to a region beyond the grant"},
      };
      uint64_t seq = 1;
      for (const Bad& bad : bads) {
        SCOPED_TRACE(bad.what);
        const auto b = batch_frame(seq, {bad.e});
        ASSERT_TRUE(send_all(fd.fd, b.data(), b.size()));
        const RawResponse r = read_response(fd.fd, {bad.e.op == wire::Op::Read}, reply_ms);
        ASSERT_TRUE(r.received) << "no Response frame (connection closed?)";
        EXPECT_EQ(r.header.seq, seq);
        EXPECT_EQ(r.header.flags & wire::kFlagAllOk, 0) << "an error reported as all-ok";
        ASSERT_EQ(r.entries.size(), 1u);
        EXPECT_EQ(r.entries[0].status, RC_E_OUT_OF_RANGE);
        ++seq;
      }
      // The connection still serves valid requests.
      const auto payload = pattern(5, 13);
      const auto b = batch_frame(seq, {RawEntry{wire::Op::Write, 0, 100, 13, payload},
                                       RawEntry{wire::Op::Read, 0, 100, 13, {}}});
      ASSERT_TRUE(send_all(fd.fd, b.data(), b.size()));
      const RawResponse r = read_response(fd.fd, {false, true}, reply_ms);
      ASSERT_TRUE(r.received);
      EXPECT_EQ(r.header.seq, seq);
      ASSERT_EQ(r.entries.size(), 2u);
      EXPECT_EQ(r.entries[0].status, RC_OK);
      EXPECT_EQ(r.entries[1].status, RC_OK);
      EXPECT_EQ(r.entries[1].length, 13u);
      EXPECT_TRUE(r.payloads[1] == payload) << "read after write on a raw connection";
      ++seq;

      phase("wrong seq");
      const auto w = batch_frame(seq + 41, {RawEntry{wire::Op::Read, 0, 0, 8, {}}});
      send_all(fd.fd, w.data(), w.size());
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));  // closed or answered: either is fine
    }
    if (!check("out-of-range entries and wrong seq")) return;
    {
      phase("connect with a used cache id and a wrong token");
      // A cache is named by (id, token): a wrong token opens another, empty cache with the same id,
      // exactly as if the id were unused, and sees nothing of the first one's data.
      const uint64_t id = fresh_cache_id();
      Fd first(connect_tcp(ep));
      ASSERT_GE(first.fd, 0);
      auto f = connect_frame(id, 1, "right");
      send_all(first.fd, f.data(), f.size());
      const RawReply r1 = read_connect_reply(first.fd, reply_ms);
      ASSERT_TRUE(r1.received);
      EXPECT_EQ(r1.reply.status, RC_OK);
      const auto secret = pattern(77, 64);
      const auto w = batch_frame(1, {RawEntry{wire::Op::Write, 0, 4096, 64, secret}});
      ASSERT_TRUE(send_all(first.fd, w.data(), w.size()));
      const RawResponse wr = read_response(first.fd, {false}, reply_ms);
      ASSERT_TRUE(wr.received) << "no Response to the first connection's write";

      auto read_back = [&](const std::string& token, std::vector<uint8_t>& out) {
        Fd other(connect_tcp(ep));
        if (other.fd < 0) return false;
        const auto c = connect_frame(id, 1, token);
        send_all(other.fd, c.data(), c.size());
        const RawReply r = read_connect_reply(other.fd, reply_ms);
        EXPECT_TRUE(r.received) << "no ConnectReply for token '" << token << "'";
        if (!r.received) return false;
        EXPECT_EQ(r.reply.status, RC_OK) << "token '" << token << "': " << r.message();
        if (r.reply.status != RC_OK) return false;
        const auto rd = batch_frame(1, {RawEntry{wire::Op::Read, 0, 4096, 64, {}}});
        send_all(other.fd, rd.data(), rd.size());
        const RawResponse resp = read_response(other.fd, {true}, reply_ms);
        EXPECT_TRUE(resp.received && resp.entries.size() == 1) << "no read Response for token '" << token << "'";
        if (!resp.received || resp.entries.size() != 1) return false;
        out = resp.payloads[0];
        return true;
      };
      std::vector<uint8_t> got;
      ASSERT_TRUE(read_back("wrong", got));
      EXPECT_TRUE(got == std::vector<uint8_t>(64, 0)) << "a wrong token sees the data of the cache with the right one";
      ASSERT_TRUE(read_back("right", got));
      EXPECT_TRUE(got == secret) << "the right token does not reach the first connection's cache";
    }
    if (!check("wrong token")) return;
    {
      phase("many short-lived connections");
      for (int i = 0; i < 50; ++i) {
        Fd fd(connect_tcp(ep));
        ASSERT_GE(fd.fd, 0);
        if (i % 2) {
          const auto g = garbage(static_cast<std::size_t>(1 + rng() % 200));
          send_all(fd.fd, g.data(), g.size());
        }
      }
    }
    if (!check("many short-lived connections")) return;
  } else {
    const std::string path = server_.endpoint().substr(4);
    {
      phase("garbage datagram");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0) << "connect to " << path << ": " << std::strerror(errno);
      const auto g = garbage(4096);
      send_packet(fd.fd, g.data(), g.size(), -1);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("garbage datagram")) return;
    {
      phase("empty datagram");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      send_packet(fd.fd, "", 0, -1);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("empty datagram")) return;
    {
      phase("huge garbage datagram");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      const auto g = garbage(100000);
      send_packet(fd.fd, g.data(), g.size(), -1);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("huge garbage datagram")) return;
    {
      phase("garbage with a file descriptor attached");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      const auto g = garbage(64);
      send_packet(fd.fd, g.data(), g.size(), devnull.fd);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("garbage with a file descriptor attached")) return;
    {
      phase("connect frame then immediate close");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 1, "tok");
      send_packet(fd.fd, f.data(), f.size(), -1);
    }
    if (!check("connect frame then immediate close")) return;
    {
      phase("connect frame with oversized token_length");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 1, "tok", 100000);
      send_packet(fd.fd, f.data(), f.size(), -1);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("connect frame with oversized token_length")) return;
    {
      phase("connect frame asking for too much memory");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
      const auto f = connect_frame(fresh_cache_id(), 100, "tok");  // 100 MiB > 64 MiB limit
      send_packet(fd.fd, f.data(), f.size(), -1);
      (void)wait_closed(fd.fd, rctest::scaled_ms(2000));
    }
    if (!check("connect frame asking for too much memory")) return;
    {
      phase("connect and close");
      Fd fd(connect_unix_seqpacket(path));
      ASSERT_GE(fd.fd, 0);
    }
    if (!check("connect and close")) return;
    {
      phase("many short-lived connections");
      for (int i = 0; i < 50; ++i) {
        Fd fd(connect_unix_seqpacket(path));
        ASSERT_GE(fd.fd, 0);
        if (i % 2) {
          const auto g = garbage(static_cast<std::size_t>(1 + rng() % 200));
          send_packet(fd.fd, g.data(), g.size(), -1);
        }
      }
    }
    if (!check("many short-lived connections")) return;
  }
  EXPECT_EQ(good.close(), RC_OK);
}

// Clients that connect and then stay silent (or stop half-way through a header) must not keep
// others from connecting: with 8 of them, a server that handshakes one connection at a time with a
// multi-second handshake deadline makes rc_cache_open time out.
TEST_P(Conformance, SilentClientsDoNotBlockOthers) {
  std::vector<std::unique_ptr<Fd>> silent;
#ifdef RC_HAVE_VERBS
  // verbs: established queue pairs that never send their Connect, or half of one.
  std::vector<std::unique_ptr<rawverbs::RawClient>> silent_verbs;
  for (int i = 0; verbs() && i < 8; ++i) {
    auto c = std::make_unique<rawverbs::RawClient>();
    ASSERT_EQ(c->connect(server_.endpoint()), "");
    if (i % 2 == 1) {
      ASSERT_TRUE(c->send(std::vector<uint8_t>(12, 0x5a)));
    }
    silent_verbs.push_back(std::move(c));
  }
#endif
  for (int i = 0; !verbs() && i < 8; ++i) {
    auto fd = std::make_unique<Fd>(tcp() ? connect_tcp(server_.endpoint())
                                         : connect_unix_seqpacket(server_.endpoint().substr(4)));
    ASSERT_GE(fd->fd, 0);
    if (tcp() && i % 2 == 1) {
      const auto f = connect_frame(fresh_cache_id(), 1, "x");
      send_all(fd->fd, f.data(), 12);  // half a header, then nothing
    }
    silent.push_back(std::move(fd));
  }
  phase("open while silent clients are connected");
  CacheHandle cache;
  rc_cache_options o = make_options(fresh_cache_id(), rc_config{0, 1, 1, 1});
  o.connect_timeout_ms = static_cast<uint32_t>(rctest::scaled_ms(5000));
  const auto t0 = Clock::now();
  const rc_status st = open_cache({server_.endpoint()}, o, &cache.c);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  ASSERT_EQ(st, RC_OK) << "rc_cache_open with 8 silent clients connected failed after " << took
                       << " ms (connect_timeout_ms " << o.connect_timeout_ms << "): " << last_error();
  EXPECT_TRUE(cache_works(cache.c, 777, 5));
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(server_alive());
}

// A verbs client's keys are memory windows bound to its own queue pair: no other queue pair can use them, and
// the region registrations under them give no remote access at all. An attacker with a cache of its own on the
// same server tries the keys it could best guess or steal, each on a fresh queue pair (a refused access breaks
// the queue pair that made it); the victim's bytes stay unread and unchanged.
TEST_P(Conformance, GuessedKeysReachNothing) {
  if (!verbs()) GTEST_SKIP() << "keys are the verbs transport's (shm clients map only the fds they were sent, tcp clients have no one-sided path)";
#ifndef RC_HAVE_VERBS
  GTEST_SKIP() << "built without rdma-core";
#else
  using rawverbs::RawClient;
  // In this process, so that the test can learn the registrations' own keys.
  const std::string listen = fresh_listen();
  const char* l = listen.c_str();
  rc_server_options so{};
  so.listen = &l;
  so.listen_count = 1;
  so.region_size = 1 * MiB;
  so.memory_limit = 16 * MiB;
  rc_server* srv = nullptr;
  ASSERT_EQ(rc_server_start(&so, &srv), RC_OK) << last_error();
  const std::string ep = rc_server_endpoint(srv, 0);
  auto spec = [](uint64_t id) {
    ConnectSpec s;
    s.cache_id = id;
    s.regions = 1;
    return s;
  };
  const uint64_t victim_id = fresh_cache_id(), attacker_id = fresh_cache_id();

  phase("victim connects");
  RawClient victim;
  RawReply vr;
  ASSERT_EQ(victim.open(ep, spec(victim_id), vr), "");
  ASSERT_EQ(vr.reply.status, RC_OK) << vr.message();
  ASSERT_EQ(vr.regions.size(), 1u);
  const uint64_t vaddr = vr.regions[0].addr;
  const auto vkey = static_cast<uint32_t>(vr.regions[0].key);
  std::vector<uint8_t> secret(64);
  for (std::size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(0xA5 ^ i);
  std::vector<uint8_t> got;
  ASSERT_EQ(victim.write(vaddr, vkey, secret), IBV_WC_SUCCESS);
  ASSERT_EQ(victim.read(vaddr, vkey, 64, got), IBV_WC_SUCCESS);
  ASSERT_EQ(got, secret);
  const uint32_t registration = rc::transport::verbs::registration_key(reinterpret_cast<const void*>(vaddr));
  EXPECT_NE(registration, 0u) << "the victim's region should be registered with the device";
  EXPECT_NE(registration, vkey) << "a client must be given a window's key, never the registration's";

  struct Guess {
    uint32_t key;
    std::string what;
  };
  std::vector<Guess> guesses = {{vkey, "the victim's window key (stolen)"}, {registration, "the region registration's key"}};
  for (uint32_t k : {1u, 2u, 0x80u, 0xFFu})
    guesses.push_back({(vkey & ~0xFFu) | ((vkey + k) & 0xFFu), "the victim's window with key byte +" + std::to_string(k)});
  guesses.push_back({0, "the attacker's own window key"});  // filled in per connection
  for (const Guess& g : guesses) {
    for (const bool write : {false, true}) {
      SCOPED_TRACE(g.what + (write ? ", RDMA WRITE" : ", RDMA READ"));
      phase(g.what);
      RawClient attacker;
      RawReply ar;
      ASSERT_EQ(attacker.open(ep, spec(attacker_id), ar), "");
      ASSERT_EQ(ar.reply.status, RC_OK) << ar.message();
      const auto own = static_cast<uint32_t>(ar.regions[0].key);
      ASSERT_EQ(attacker.read(ar.regions[0].addr, own, 8, got), IBV_WC_SUCCESS) << "the attacker's own window must work";
      const uint32_t key = g.key != 0 ? g.key : own;
      if (write) {
        EXPECT_NE(attacker.write(vaddr, key, std::vector<uint8_t>(64, 0x11)), IBV_WC_SUCCESS);
      } else {
        EXPECT_NE(attacker.read(vaddr, key, 64, got), IBV_WC_SUCCESS);
        EXPECT_NE(got, secret);
      }
    }
  }
  phase("victim checks its bytes");
  ASSERT_EQ(victim.read(vaddr, vkey, 64, got), IBV_WC_SUCCESS) << "the victim's own window must still work";
  EXPECT_EQ(got, secret);
  EXPECT_EQ(rc_server_stop(srv), RC_OK);
#endif
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance,
                         ::testing::Values(std::string("shm"), std::string("tcp"), std::string("verbs")),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
