// The abuse soak (issue 12, deliverable 6): remotecache-server with an admission key, legitimate
// clients that verify every read against a shadow copy (tcp two-sided, shm two-sided, shm one-sided)
// and open short-lived caches now and then, and hostile threads that run every attack of the issue
// at once, for RC_SOAK_SECONDS (default 20, at most 600; loopback only):
//  - memfd resizing (socket file and abstract endpoint), bytes on the shm socket (leave, exit, stay),
//    slow tcp readers, 100 silent tcp connections reopened as they are dropped, departed shm clients
//    keeping their mappings;
//  - connect/disconnect churn (raw and library, garbage, half frames, hang-ups mid-handshake);
//  - capabilities: none, forged, tampered, expired, for another server or cache, too many regions,
//    and leases that end while the hostile tenant is connected;
//  - exclusive squatting: opening the legitimate caches' ids (without their capabilities), and a
//    second client on another tenant's exclusive cache.
// Hostile tenants hold valid capabilities for their own caches, as a manager grants them: a bounded
// set of caches each (a quota), since a cache admitted by a capability keeps its memory for its lease
// whoever is connected; short-lived caches are deallocated by the soak after use (admin DropCache, as
// the manager does) and leases end. The soak passes only with 0 errors
// for the legitimate clients, every attack refused the way the contract says, the server alive, all
// memory lent back (0) once attackers and legitimate clients are gone, and the server's RSS under
// rss_bound() (128 MiB; more under a sanitizer) the whole time. It prints one summary line.
#include <map>

#include "attacks.h"
#include "common/capability.h"

namespace {

using namespace rctest;

constexpr uint64_t kSoakMemoryLimit = 256 * MiB;
// The server's VmRSS, sampled every 100 ms, stays below this: 128 MiB (the caches lent, at most
// ~40 MiB at a time here, count in it: their pages are the server's shared memory). A sanitizer build
// gets 3 x that plus ASan's quarantine of freed memory (256 MiB by default).
inline uint64_t rss_bound() { return rctest::under_sanitizer() ? (3 * 128 + 256) * MiB : 128 * MiB; }

// The lease of a short-lived cache (a library open, some use, a close, then its deallocation): long
// enough for a loaded open, short enough that one whose deallocation failed goes soon.
constexpr uint64_t kShortLeaseMs = 10'000;

// Every hostile loop also stops after this many rounds, whatever the clock says.
constexpr int kMaxRounds = 1'000'000;

int soak_seconds() {
  const double s = rctest::env_double("RC_SOAK_SECONDS", 20.0);
  return static_cast<int>(std::clamp(s, 1.0, 600.0));
}

std::string lent_text(uint64_t v) { return v == ServerProcess::kNoAnswer ? std::string("?") : std::to_string(v); }

struct Counter {
  const char* name;
  std::atomic<uint64_t> n{0};
};

class Soak {
 public:
  Soak() : server_id_("rc-soak-" + std::to_string(::getpid())) {}

  enum Attack {
    kResize,
    kSocketByte,
    kSlowReader,
    kSilentReopen,
    kDeparted,
    kChurn,
    kBadCapability,
    kLeaseEnd,
    kSquat,
    kAttackKinds
  };

  void run();

 private:
  // ---- bookkeeping ----
  void anomaly(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (anomalies_.size() < 20) anomalies_.push_back(what);
    ++anomaly_count_;
  }
  void legit_error(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (legit_errors_.size() < 20) legit_errors_.push_back(what);
    ++legit_error_count_;
  }
  void count(Attack a) { attacks_[a].n.fetch_add(1, std::memory_order_relaxed); }
  // A hostile client that did not get through its handshake: with hundreds of hostile handshakes a
  // second from the same peer (uid 0 for shm, 127.0.0.1 for part of the tcp ones), the server may
  // evict or refuse it (handshake slots per peer). Not a security outcome; counted and printed.
  void lost_handshake() { lost_.fetch_add(1, std::memory_order_relaxed); }
  static bool is_load_refusal(int32_t st) {
    return st == RC_E_LIMIT || st == RC_E_DISCONNECTED || st == RC_E_TIMEOUT;
  }
  bool running() const { return !stop_.load(); }
  // Sleeps up to d, less when the soak ends.
  void pause(std::chrono::milliseconds d) {
    const auto until = Clock::now() + d;
    while (running() && Clock::now() < until) std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(d, 20ms));
  }

  uint64_t next_id() { return fresh_cache_id(); }
  // A cache id of its own and a valid capability for it, as the manager gives a tenant.
  struct Admission {
    uint64_t id = 0;
    std::string capability;
    const char* const* caps() {
      text_ = capability.c_str();
      return &text_;
    }

   private:
    const char* text_ = nullptr;
  };
  Admission admission(uint32_t regions, uint64_t ttl_ms) {
    Admission a;
    a.id = next_id();
    a.capability = cap(a.id, regions, ttl_ms);
    return a;
  }
  std::string cap(uint64_t id, uint32_t regions, uint64_t ttl_ms) {
    return mint(key_.key, id, server_id_, regions, unix_now_ms() + ttl_ms);
  }
  // A Connect of a hostile tenant to one of its caches: the pool for its region count, a cache picked
  // at random (several attackers may join one; none opens them exclusively).
  ConnectSpec hostile_spec(uint32_t regions, uint64_t ttl_ms = 600'000) {
    uint64_t id = 0;
    {
      std::lock_guard lock(mu_);
      auto& pool = hostile_pool_[regions];
      if (pool.empty())
        for (uint32_t i = 0; i < kHostilePool; ++i) pool.push_back(next_id());
      id = pool[pool_rng_() % pool.size()];
    }
    return hostile_spec_for(id, regions, ttl_ms);
  }
  // A Connect of a hostile tenant to a cache of its own that no other attack touches.
  ConnectSpec hostile_spec_for(uint64_t id, uint32_t regions, uint64_t ttl_ms = 600'000) {
    ConnectSpec s;
    s.cache_id = id;
    s.regions = regions;
    s.token = "hostile-" + std::to_string(s.cache_id);
    const auto c = rc::capability::from_text(cap(s.cache_id, regions, ttl_ms));
    if (c) s.capability = *c;
    return s;
  }
  // The manager's Deallocate: drops the cache on the server. The lease is the backstop when this fails
  // under load (an admin connection may be refused or time out), so a failure is only counted.
  void deallocate(uint64_t id) {
    rc_admin* admin = nullptr;
    uint32_t dropped = 0;
    if (rc_admin_connect(tcp_.c_str(), key_.key.data(), key_.key.size(), 5000, &admin) == RC_OK)
      (void)rc_admin_drop_cache(admin, id, &dropped);
    if (admin != nullptr) rc_admin_close(admin);
    if (dropped == 0) missed_drops_.fetch_add(1, std::memory_order_relaxed);
  }
  void deallocate_hostile_pools() {
    std::lock_guard lock(mu_);
    for (const auto& [regions, pool] : hostile_pool_)
      for (uint64_t id : pool) deallocate(id);
  }
  rc_cache_options open_options(uint64_t id, uint32_t regions, const char* token, rc_config cfg, const char* const* caps,
                                uint32_t connect_ms = 5000) {
    rc_cache_options o = make_options(id, cfg, regions, token);
    o.capabilities = caps;
    o.connect_timeout_ms = static_cast<uint32_t>(rctest::scaled_ms(static_cast<int>(connect_ms)));
    o.op_timeout_ms = static_cast<uint32_t>(rctest::scaled_ms(10000));
    return o;
  }

  // ---- hostile threads ----
  void resize_attacker();
  void byte_attacker();
  void slow_readers();
  void departed_attacker();
  void churn_attacker();
  void capability_attacker();
  void lease_attacker();
  void squatter();

  // ---- the legitimate side ----
  void legit_opener();

  KeyFile key_;
  std::string server_id_;
  ServerProcess server_;
  std::string tcp_, shm_, abstract_;
  std::vector<uint64_t> legit_ids_;
  std::atomic<bool> stop_{false};
  Counter attacks_[kAttackKinds] = {{"resize"},   {"socket-byte"}, {"slow-reader"}, {"silent-reopen"}, {"departed"},
                                    {"churn"},    {"bad-capability"}, {"lease-end"}, {"squat"}};
  std::atomic<uint64_t> legit_opens_{0};
  std::atomic<uint64_t> shm_lease_disconnected_{0};
  std::atomic<uint64_t> lost_{0};
  std::atomic<uint64_t> missed_drops_{0};
  // Caches of the hostile tenants by region count, created as the attacks first connect (under mu_).
  static constexpr uint32_t kHostilePool = 8;
  std::map<uint32_t, std::vector<uint64_t>> hostile_pool_;
  std::mt19937_64 pool_rng_{11};
  std::mutex mu_;
  std::vector<std::string> anomalies_;
  uint64_t anomaly_count_ = 0;
  std::vector<std::string> legit_errors_;
  uint64_t legit_error_count_ = 0;
};

void Soak::resize_attacker() {
  bool abstract = false;
  for (int round = 0; running() && round < kMaxRounds; ++round) {
    const std::string path = (abstract ? abstract_ : shm_).substr(4);
    abstract = !abstract;
    const ResizeOutcome r = attack_resize_memfds(path, hostile_spec(1), wire::kVersion, kRegionSize, 3000);
    if (r.connected) count(kResize);
    if (!r.connected) {
      lost_handshake();
    } else if (r.region_grow != EPERM || r.region_shrink != EPERM || r.segment_shrink != EPERM) {
      anomaly("resize: ftruncate on a handed-over memfd gave " + errno_name(r.region_grow) + " / " +
              errno_name(r.region_shrink) + " / " + errno_name(r.segment_shrink) + ", not EPERM");
    }
    pause(100ms);
  }
}

void Soak::byte_attacker() {
  for (int i = 0; running() && i < kMaxRounds; ++i) {
    const std::string path = shm_.substr(4);
    const ConnectSpec spec = hostile_spec(2);
    bool ok = false;
    bool closed = false;
    switch (i % 3) {
      case 0: ok = attack_socket_byte(path, spec, wire::kVersion, ByteThen::CloseAll, 3000); break;
      case 1: ok = attack_socket_byte_and_exit(path, spec, wire::kVersion, 3000); break;
      default:
        ok = attack_socket_byte(path, spec, wire::kVersion, ByteThen::Stay, 3000, &closed);
        if (ok && !closed) anomaly("socket-byte: the server kept a connection whose client wrote on its shm socket");
        break;
    }
    if (ok) count(kSocketByte);
    if (!ok) lost_handshake();
    pause(150ms);
  }
}

void Soak::slow_readers() {
  for (int round = 0; running() && round < kMaxRounds; ++round) {
    std::vector<std::unique_ptr<SlowReader>> readers;
    for (int i = 0; i < 3; ++i) {
      auto r = std::make_unique<SlowReader>();
      std::string why;
      if (r->start(tcp_, hostile_spec(1), wire::kVersion, 4'000'000, kRegionSize, 3000, &why)) {
        readers.push_back(std::move(r));
        count(kSlowReader);
      } else if (running()) {
        lost_handshake();
      }
    }
    pause(4000ms);
  }
}

void Soak::departed_attacker() {
  std::unique_ptr<DepartedMapping> last;
  Clock::time_point left;
  for (int round = 0; running() && round < kMaxRounds; ++round) {
    if (last && Clock::now() - left > 3s) {
      if (!last->zeroed()) anomaly("departed: a departed client's mapping still holds data 3 s after its cache was deallocated");
      last.reset();
    }
    if (!last) {
      // Its own cache, deallocated once it left (a leased cache outlives its connections): the
      // mapping it kept must then hold nothing.
      const uint64_t id = next_id();
      last = std::make_unique<DepartedMapping>();
      if (!last->start(shm_.substr(4), hostile_spec_for(id, 1), wire::kVersion, kRegionSize, 3000)) {
        lost_handshake();
        last.reset();
      } else {
        deallocate(id);
        left = Clock::now();
        count(kDeparted);
      }
    }
    pause(200ms);
  }
}

void Soak::churn_attacker() {
  std::mt19937_64 rng(42);
  for (int round = 0; running() && round < kMaxRounds; ++round) {
    const int kind = static_cast<int>(rng() % 6);
    switch (kind) {
      case 0: {  // tcp connect and hang up
        Fd fd(connect_tcp(tcp_));
        break;
      }
      case 1: {  // shm connect and hang up
        Fd fd(connect_unix_seqpacket(shm_.substr(4)));
        break;
      }
      case 2: {  // half a Connect, then hang up
        Fd fd(connect_tcp(tcp_));
        if (fd.fd >= 0) {
          const auto f = connect_frame(hostile_spec(1));
          send_all(fd.fd, f.data(), 1 + rng() % (f.size() - 1));
        }
        break;
      }
      case 3: {  // garbage
        Fd fd(connect_tcp(tcp_));
        if (fd.fd >= 0) {
          std::vector<uint8_t> g(1 + rng() % 512);
          fill_random(g.data(), g.size(), rng());
          send_all(fd.fd, g.data(), g.size());
        }
        break;
      }
      case 4: {  // a whole Connect, hang up before the reply
        Fd fd(connect_unix_seqpacket(shm_.substr(4)));
        if (fd.fd >= 0) {
          const auto f = connect_frame(hostile_spec(1));
          send_packet(fd.fd, f.data(), f.size());
        }
        break;
      }
      default: {  // a library open and close with a valid capability, then the manager deallocates it
        Admission a = admission(1, kShortLeaseMs);
        const std::string& ep = rng() % 2 ? tcp_ : shm_;
        CacheHandle cache;
        const rc_status st = open_cache({ep}, open_options(a.id, 1, "churn", rc_config{0, 1, 1, 1}, a.caps()), &cache.c);
        if (st != RC_OK) {
          cache.leak();
          lost_handshake();
        }
        if (st == RC_OK) cache.close();
        deallocate(a.id);
        break;
      }
    }
    count(kChurn);
    pause(std::chrono::milliseconds(5 + rng() % 20));
  }
}

void Soak::capability_attacker() {
  KeyFile other_key;
  std::mt19937_64 rng(7);
  for (int i = 0; running() && i < kMaxRounds; ++i) {
    const uint64_t own = next_id();
    // Half of the time the target is a legitimate client's cache (squatting on its id).
    const uint64_t target = i % 2 == 0 ? own ^ 2 : legit_ids_[rng() % legit_ids_.size()];
    const uint64_t later = unix_now_ms() + 600'000;
    uint64_t id = own;
    uint32_t regions = 1;
    std::string text;
    const char* what = "";
    switch (i % 7) {
      case 0:
        what = "no capability";
        id = target;
        break;
      case 1:
        what = "forged (another key)";
        id = target;
        text = mint(other_key.key, target, server_id_, 4, later);
        break;
      case 2: {
        what = "tampered (its own, re-aimed at another id)";
        id = target;
        auto c = rc::capability::from_text(cap(own, 1, 600'000));
        if (c) {
          c->cache_id = target;
          c->regions = 4;
          text = rc::capability::to_text(*c);
        }
        break;
      }
      case 3:
        what = "expired";
        text = mint(key_.key, own, server_id_, 1, unix_now_ms() - 1000);
        break;
      case 4:
        what = "for another server";
        text = mint(key_.key, own, "another-server", 1, later);
        break;
      case 5:
        what = "for another cache (its own, used on another id)";
        id = target;
        text = cap(own, 4, 600'000);
        break;
      default:
        what = "more regions than granted";
        text = cap(own, 1, 600'000);
        regions = 3;
        break;
    }
    const char* caps[] = {text.c_str()};
    const std::string& ep = i % 3 == 0 ? shm_ : tcp_;
    CacheHandle cache;
    const rc_status st = open_cache(
        {ep}, open_options(id, regions, "squatter", rc_config{0, 1, 1, 1}, text.empty() ? nullptr : caps), &cache.c);
    count(kBadCapability);
    if (st == RC_OK) {
      anomaly(std::string("bad-capability: '") + what + "' was admitted over " + ep);
    } else {
      cache.leak();
      if (is_load_refusal(st))
        lost_handshake();
      else if (st != RC_E_AUTH)
        anomaly(std::string("bad-capability: '") + what + "' got " + sname(st) + ", not RC_E_AUTH: " + last_error());
    }
    pause(std::chrono::milliseconds(10 + rng() % 30));
  }
}

// A hostile tenant whose lease ends while it is connected: its operations must fail soon after with
// RC_E_EXPIRED (see below for one-sided shm), and its memory go back.
void Soak::lease_attacker() {
  for (int i = 0; running() && i < kMaxRounds; ++i) {
    const uint64_t id = next_id();
    const uint64_t lease_end = unix_now_ms() + 800;
    const std::string c = mint(key_.key, id, server_id_, 1, lease_end);
    const char* caps[] = {c.c_str()};
    const bool shm = i % 2 == 1;
    const rc_config cfg = shm && i % 4 == 3 ? rc_config{0, 0, 1, 1} : rc_config{0, 1, 4, 2};
    CacheHandle cache;
    if (open_cache({shm ? shm_ : tcp_}, open_options(id, 1, "lease", cfg, caps), &cache.c) != RC_OK) {
      cache.leak();
      lost_handshake();
      continue;
    }
    SessionHandle s;
    if (rc_session_open(cache.c, &s.s) != RC_OK) {
      lost_handshake();
      continue;
    }
    uint8_t buf[64];
    int32_t st = RC_OK;
    while (st == RC_OK && unix_now_ms() < lease_end + 3000) {
      st = sync_read(s.s, 0, buf, sizeof buf);
      if (st == RC_OK) std::this_thread::sleep_for(20ms);
    }
    count(kLeaseEnd);
    const int64_t late = static_cast<int64_t>(unix_now_ms()) - static_cast<int64_t>(lease_end);
    if (st == kHung) {
      anomaly("lease-end: an operation hung after the lease ended");
      s.leak();
      cache.leak();
      continue;
    }
    if (late < -50 || late > 2000) anomaly("lease-end: operations failed " + std::to_string(late) + " ms after the lease end");
    // RC_E_EXPIRED; a one-sided shm client may see the hang-up before the server's Notice
    // (RC_E_DISCONNECTED), which is counted apart.
    const bool one_sided = cfg.server_threads == 0;
    if (one_sided && st == RC_E_DISCONNECTED) {
      shm_lease_disconnected_.fetch_add(1);
    } else if (st != RC_E_EXPIRED) {
      anomaly(std::string("lease-end: operations over ") + (shm ? "shm" : "tcp") + (one_sided ? " (one-sided)" : "") +
              " failed with " + sname(st) + ", not RC_E_EXPIRED");
    }
  }
}

// Squatting on exclusive caches: another client of a tenant's exclusive cache is refused with
// RC_E_IN_USE; a legitimate cache's id cannot be opened without its capability.
void Soak::squatter() {
  for (int i = 0; running() && i < kMaxRounds; ++i) {
    Admission a = admission(1, kShortLeaseMs);
    const std::string& ep = i % 2 ? shm_ : tcp_;
    rc_cache_options o = open_options(a.id, 1, "squat", rc_config{0, 1, 1, 1}, a.caps());
    o.flags = RC_OPEN_EXCLUSIVE;
    CacheHandle owner;
    if (open_cache({ep}, o, &owner.c) != RC_OK) {
      owner.leak();
      lost_handshake();
      continue;
    }
    o.flags = i % 4 < 2 ? RC_OPEN_EXCLUSIVE : 0;
    CacheHandle second;
    const rc_status st = open_cache({ep}, o, &second.c);
    count(kSquat);
    if (st == RC_OK) {
      anomaly("squat: a second client got into an exclusive cache");
    } else {
      second.leak();
      if (is_load_refusal(st))
        lost_handshake();
      else if (st != RC_E_IN_USE)
        anomaly("squat: a second client of an exclusive cache got " + sname(st));
    }
    // The legitimate ids, exclusively and without their capabilities.
    rc_cache_options steal = open_options(legit_ids_[static_cast<std::size_t>(i) % legit_ids_.size()], 4, "test-token",
                                          rc_config{0, 1, 1, 1}, nullptr);
    steal.flags = RC_OPEN_EXCLUSIVE;
    CacheHandle thief;
    const rc_status ts = open_cache({ep}, steal, &thief.c);
    if (ts == RC_OK) {
      anomaly("squat: a legitimate cache's id was opened without its capability");
    } else {
      thief.leak();
    }
    owner.close();
    deallocate(a.id);
    pause(50ms);
  }
}

// The legitimate client also opens short-lived caches now and then: admission must keep working for
// it while the herd and the churn go on.
void Soak::legit_opener() {
  for (int i = 0; running() && i < kMaxRounds; ++i) {
    Admission a = admission(1, kShortLeaseMs);
    const std::string& ep = i % 2 ? shm_ : tcp_;
    CacheHandle cache;
    const rc_status st = open_cache({ep}, open_options(a.id, 1, "legit-short", rc_config{0, 1, 4, 2}, a.caps(), 3000), &cache.c);
    if (st != RC_OK) {
      cache.leak();
      legit_error("short-lived open over " + ep + ": " + sname(st) + ": " + last_error());
    } else {
      if (const auto works = cache_works(cache.c, 4096, static_cast<uint64_t>(i)); !works)
        legit_error("short-lived cache over " + ep + ": " + works.message());
      if (cache.close() != RC_OK) legit_error("short-lived cache close over " + ep);
      legit_opens_.fetch_add(1);
    }
    deallocate(a.id);
    pause(500ms);
  }
}

void Soak::run() {
  const int seconds = soak_seconds();
  Watchdog watchdog("Security.AbuseSoak", std::chrono::seconds(seconds + 90));
  watchdog.phase("starting the server");
  const std::string socket_path = "/tmp/rc-soak-" + std::to_string(::getpid()) + ".sock";
  ::unlink(socket_path.c_str());
  const std::string stderr_path = "/tmp/rc-soak-" + std::to_string(::getpid()) + ".log";
  ::unlink(stderr_path.c_str());
  ServerLaunch launch;
  launch.extra = {"--listen",        "shm:" + socket_path,
                  "--listen",        "shm:@rc-soak-" + std::to_string(::getpid()),
                  "--admission-key", key_.path,
                  "--server-id",     server_id_,
                  "--memory-limit",  std::to_string(kSoakMemoryLimit)};
  launch.stderr_path = stderr_path;  // thousands of refusals are logged: keep them out of the test output
  ASSERT_TRUE(server_.start("tcp:127.0.0.1:0", launch));
  tcp_ = server_.endpoint_of("tcp");
  for (const auto& e : server_.endpoints()) {
    if (e.rfind("shm:@", 0) == 0)
      abstract_ = e;
    else if (e.rfind("shm:", 0) == 0)
      shm_ = e;
  }
  ASSERT_FALSE(tcp_.empty() || shm_.empty() || abstract_.empty());

  // ---- the legitimate client: three caches, one worker each, all verified against shadows ----
  watchdog.phase("legitimate client");
  struct Legit {
    const char* name;
    CacheHandle cache;
    std::unique_ptr<LegitWorker> worker;
  };
  struct LegitSpec {
    const char* name;
    std::string endpoint;
    rc_config cfg;
  };
  const LegitSpec specs[] = {{"tcp", tcp_, {1, 1, 8, 4}}, {"shm two-sided", shm_, {1, 1, 16, 4}}, {"shm one-sided", shm_, {0, 0, 1, 1}}};
  std::vector<std::unique_ptr<Legit>> legit;
  for (const LegitSpec& spec : specs) {
    auto l = std::make_unique<Legit>();
    l->name = spec.name;
    Admission a = admission(4, 3'600'000);
    legit_ids_.push_back(a.id);
    rc_cache_options o = open_options(a.id, 4, "legit-secret", spec.cfg, a.caps());
    o.flags = RC_OPEN_EXCLUSIVE;  // as RemoteCacheDevice opens
    ASSERT_EQ(open_cache({spec.endpoint}, o, &l->cache.c), RC_OK) << spec.name << ": " << last_error();
    l->worker = std::make_unique<LegitWorker>(l->cache.c, 0, 4 * kRegionSize, 100 + legit.size(),
                                              std::string("legitimate ") + spec.name + " client");
    l->worker->start();
    legit.push_back(std::move(l));
  }

  // ---- RSS monitor ----
  std::atomic<uint64_t> peak_rss{0};
  std::atomic<bool> monitor_stop{false};
  std::thread monitor([&] {
    while (!monitor_stop.load()) {
      const uint64_t rss = proc_status_bytes(server_.pid(), "VmRSS");
      if (rss > peak_rss.load()) peak_rss.store(rss);
      std::this_thread::sleep_for(100ms);
    }
  });

  // ---- the attackers ----
  watchdog.phase("attacks");
  std::vector<std::string> herd_sources;
  for (int i = 2; i < 6; ++i) herd_sources.push_back("127.0.0." + std::to_string(i));
  herd_sources.push_back("");  // and some from the legitimate client's own address
  SilentHerd herd(tcp_, herd_sources, 100, 2ms);
  herd.start();
  std::vector<std::thread> hostile;
  hostile.emplace_back([this] { resize_attacker(); });
  hostile.emplace_back([this] { byte_attacker(); });
  hostile.emplace_back([this] { slow_readers(); });
  hostile.emplace_back([this] { departed_attacker(); });
  hostile.emplace_back([this] { churn_attacker(); });
  hostile.emplace_back([this] { capability_attacker(); });
  hostile.emplace_back([this] { lease_attacker(); });
  hostile.emplace_back([this] { squatter(); });
  std::thread opener([this] { legit_opener(); });

  const auto end = Clock::now() + std::chrono::seconds(seconds);
  bool died = false;
  while (Clock::now() < end) {
    if (!server_.alive()) {
      died = true;
      break;
    }
    bool legit_ok = true;
    for (const auto& l : legit) legit_ok = legit_ok && l->worker->ok();
    if (!legit_ok) break;
    std::this_thread::sleep_for(100ms);
  }

  watchdog.phase("stopping the attackers");
  stop_.store(true);
  for (auto& t : hostile) t.join();
  opener.join();
  herd.stop();
  attacks_[kSilentReopen].n.store(herd.dropped());
  const bool alive = server_.alive();

  // Attackers gone and their caches deallocated: only the legitimate caches are lent (3 x 4 regions),
  // once the short-lived ones whose deallocation failed under load have seen their leases end.
  watchdog.phase("memory after the attackers left");
  if (alive) deallocate_hostile_pools();
  const uint64_t legit_bytes = legit.size() * 4 * kRegionSize;
  const uint64_t lent_with_legit =
      alive ? server_.wait_memory_in_use(legit_bytes, static_cast<int>(kShortLeaseMs) + 5000) : ServerProcess::kNoAnswer;

  watchdog.phase("stopping the legitimate client");
  uint64_t legit_ops = 0, legit_reads = 0, legit_failures = 0;
  for (auto& l : legit) {
    const bool ok = l->worker->stop();
    legit_ops += l->worker->completed();
    legit_reads += l->worker->reads_verified();
    legit_failures += l->worker->failures() + (l->worker->hung() ? 1 : 0);
    if (!ok) legit_error(std::string(l->name) + ": " + std::to_string(l->worker->failures()) + " failures" +
                         (l->worker->hung() ? ", hung" : ""));
    if (!l->worker->hung()) {
      if (l->cache.close() != RC_OK) legit_error(std::string(l->name) + ": rc_cache_close failed");
    } else {
      l->cache.leak();
    }
  }
  if (alive)
    for (uint64_t id : legit_ids_) deallocate(id);
  const uint64_t lent_after = alive ? server_.wait_memory_in_use(0, 5000) : ServerProcess::kNoAnswer;
  monitor_stop.store(true);
  monitor.join();

  uint64_t attacks = 0;
  std::ostringstream kinds;
  for (const auto& a : attacks_) {
    attacks += a.n.load();
    kinds << (kinds.tellp() > 0 ? ", " : "") << a.name << " " << a.n.load();
  }
  std::printf("[ soak     ] %d s: %llu attacks run (%s); legitimate: %llu ops, %llu reads verified, %llu short-lived "
              "opens, %llu errors; hostile outcomes not as specified: %llu (hostile handshakes lost to load: %llu, one-sided shm lease ends seen as RC_E_DISCONNECTED: %llu, deallocations that found no cache: %llu); peak server RSS %.1f MiB (bound %llu MiB); "
              "lent after the attackers left %s, after all left %s\n",
              seconds, static_cast<unsigned long long>(attacks), kinds.str().c_str(),
              static_cast<unsigned long long>(legit_ops), static_cast<unsigned long long>(legit_reads),
              static_cast<unsigned long long>(legit_opens_.load()),
              static_cast<unsigned long long>(legit_error_count_ + legit_failures),
              static_cast<unsigned long long>(anomaly_count_), static_cast<unsigned long long>(lost_.load()),
              static_cast<unsigned long long>(shm_lease_disconnected_.load()),
              static_cast<unsigned long long>(missed_drops_.load()), static_cast<double>(peak_rss.load()) / MiB,
              static_cast<unsigned long long>(rss_bound() / MiB),
              lent_text(lent_with_legit).c_str(), lent_text(lent_after).c_str());
  std::fflush(stdout);

  EXPECT_FALSE(died) << "the server died during the soak: " << server_.exit_description();
  EXPECT_TRUE(alive) << server_.exit_description();
  EXPECT_EQ(legit_error_count_ + legit_failures, 0u) << "legitimate client errors";
  for (const auto& e : legit_errors_) ADD_FAILURE() << "legitimate client: " << e;
  EXPECT_EQ(anomaly_count_, 0u) << "attacks whose outcome was not the specified one";
  for (const auto& a : anomalies_) ADD_FAILURE() << a;
  EXPECT_EQ(lent_with_legit, legit_bytes) << "memory lent once the attackers left (the legitimate caches only)";
  EXPECT_EQ(lent_after, 0u) << "memory still lent after everyone left";
  EXPECT_LT(peak_rss.load(), rss_bound()) << "server RSS peaked at " << peak_rss.load() / MiB << " MiB";
  EXPECT_GT(legit_reads, 0u);
  EXPECT_GT(legit_opens_.load(), 0u);
  for (const auto& a : attacks_) EXPECT_GT(a.n.load(), 0u) << "attack '" << a.name << "' never ran";
  if (alive) {
    EXPECT_TRUE(server_.stop());
  }
  if (::testing::Test::HasFailure()) {
    std::ifstream log(stderr_path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(log, line);) {
      lines.push_back(line);
      if (lines.size() > 40) lines.erase(lines.begin());
    }
    std::fprintf(stderr, "---- last lines of the server's log (%s) ----\n", stderr_path.c_str());
    for (const auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
  } else {
    ::unlink(stderr_path.c_str());
  }
}

TEST(Security, AbuseSoak) {
  Soak soak;
  soak.run();
}

}  // namespace
