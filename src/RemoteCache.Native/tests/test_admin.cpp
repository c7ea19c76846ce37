// The admin interface (remotecache_admin.h): what rc_admin_* report and do against a real
// remotecache-server (child process), how the server refuses what it must (wrong keys, open mode,
// replayed, garbled and oversized requests, silent peers, too many admin connections) while it keeps
// serving its data clients, and that no call outlives its timeout when the server is dead or silent.
// Plus, in process: the registry's paging through AdminSession, and concurrent admin calls next to
// data traffic on an embedded server (for TSan).
#include <remotecache/remotecache_admin.h>

#include <filesystem>

#include "common/admin_codec.h"
#include "common/clock.h"
#include "harness.h"
#include "server/admin_session.h"
#include "server/registry.h"
#include "transport/connect_codec.h"

#ifndef RC_ADMIN_PATH
#error "RC_ADMIN_PATH must name the remotecache-admin binary"
#endif

namespace {

using namespace rctest;
namespace admin = rc::admin;

int reply_ms() { return rctest::scaled_ms(5000); }

std::string fresh_name(const char* tag) {
  static std::atomic<int> counter{0};
  return "rc-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(++counter);
}

std::string fresh_socket(const char* tag) {
  const std::string path = "/tmp/" + fresh_name(tag) + ".sock";
  ::unlink(path.c_str());
  return "shm:" + path;
}


std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}


rc_status admin_connect(const std::string& endpoint, const std::vector<uint8_t>& key, AdminHandle& out,
                        uint32_t timeout_ms = 0) {
  return rc_admin_connect(endpoint.c_str(), key.data(), key.size(),
                          timeout_ms != 0 ? timeout_ms : static_cast<uint32_t>(reply_ms()), &out.a);
}

rc_server_stats stats_of(rc_admin* a) {
  rc_server_stats s{};
  s.size = sizeof s;
  const rc_status st = rc_admin_stats(a, &s);
  EXPECT_EQ(st, RC_OK) << sname(st) << ": " << last_error();
  return s;
}

std::vector<rc_admin_cache> caches_of(rc_admin* a) {
  std::vector<rc_admin_cache> out(16);
  uint32_t count = 0;
  const rc_status st = rc_admin_list_caches(a, out.data(), static_cast<uint32_t>(out.size()), &count);
  EXPECT_EQ(st, RC_OK) << sname(st) << ": " << last_error();
  out.resize(st == RC_OK ? std::min<std::size_t>(count, out.size()) : 0);
  return out;
}

// Polls stats until memory_lent is `want` or the time passes; the last stats seen.
rc_server_stats wait_lent(rc_admin* a, uint64_t want, int timeout_ms) {
  const auto deadline = Clock::now() + ms(rctest::scaled_ms(timeout_ms));
  for (;;) {
    const rc_server_stats s = stats_of(a);
    if (s.memory_lent == want || Clock::now() > deadline) return s;
    std::this_thread::sleep_for(20ms);
  }
}

// The connections of a closed cache may still be closing on the server: waits until the listing
// shows the cache with `id` with 0 connections; the last listing of it.
std::optional<rc_admin_cache> wait_idle(rc_admin* a, uint64_t id, int timeout_ms) {
  const auto deadline = Clock::now() + ms(rctest::scaled_ms(timeout_ms));
  std::optional<rc_admin_cache> seen;
  for (;;) {
    seen.reset();
    for (const rc_admin_cache& c : caches_of(a))
      if (c.cache_id == id) seen = c;
    if ((seen && seen->connections == 0) || Clock::now() > deadline) return seen;
    std::this_thread::sleep_for(20ms);
  }
}

// SIGSTOP, returning once every thread of the process is stopped: kill() returns before the stop takes
// effect, and a request sent in between would still be answered.
::testing::AssertionResult pause_process(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return ::testing::AssertionFailure() << "SIGSTOP: " << std::strerror(errno);
  const auto deadline = Clock::now() + 10s;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (;;) {
    bool all_stopped = true;
    for (const auto& task : std::filesystem::directory_iterator(tasks)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size()) continue;  // the thread has gone
      const char state = stat[close + 2];
      all_stopped = all_stopped && (state == 'T' || state == 't');
    }
    if (all_stopped) return ::testing::AssertionSuccess();
    if (Clock::now() > deadline) return ::testing::AssertionFailure() << "not stopped 10 s after SIGSTOP";
    std::this_thread::sleep_for(1ms);
  }
}

// ---- raw admin connections, for the tests that play a misbehaving admin client ---------------------

// Either transport: a tcp stream (frames cut by their headers) or an shm seqpacket socket (one frame
// per message).
class RawAdmin {
 public:
  bool connect(const std::string& endpoint) {
    shm_ = endpoint.rfind("shm:", 0) == 0;
    fd_.fd = shm_ ? connect_unix_seqpacket(endpoint.substr(4)) : connect_tcp(endpoint);
    return fd_.fd >= 0;
  }

  bool send(std::span<const std::byte> frame) {
    if (shm_) return send_packet(fd_.fd, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size());
    return send_all(fd_.fd, frame.data(), frame.size());
  }

  // The next frame; nothing on timeout or when the server closed.
  std::optional<std::vector<std::byte>> receive(int timeout_ms) {
    if (shm_) {
      std::vector<uint8_t> buf(wire::kMaxAdminFrame);
      std::vector<int> fds;
      const ssize_t n = recv_packet(fd_.fd, buf, fds, timeout_ms);
      for (int f : fds) ::close(f);
      if (n <= 0) return std::nullopt;
      const auto* p = reinterpret_cast<const std::byte*>(buf.data());
      return std::vector<std::byte>(p, p + n);
    }
    wire::FrameHeader h{};
    if (!recv_exact(fd_.fd, &h, sizeof h, timeout_ms) || h.bytes < sizeof h || h.bytes > wire::kMaxFrame)
      return std::nullopt;
    std::vector<std::byte> frame(h.bytes);
    std::memcpy(frame.data(), &h, sizeof h);
    if (!recv_exact(fd_.fd, frame.data() + sizeof h, h.bytes - sizeof h, timeout_ms)) return std::nullopt;
    return frame;
  }

  // Hello and challenge: true once the server answered with RC_OK (the session key is then set).
  bool greet(const std::vector<uint8_t>& key) {
    wire::AdminHello hello{};
    hello.admin_version = wire::kAdminVersion;
    std::memset(hello.nonce, 0x42, sizeof hello.nonce);
    if (!send(admin::encode_hello(hello))) return false;
    const auto frame = receive(reply_ms());
    wire::AdminChallenge challenge{};
    if (!frame || admin::decode_challenge(*frame, challenge) != RC_OK) return false;
    session_key = admin::derive_session_key(key, challenge, hello);
    return true;
  }

  std::vector<std::byte> request(wire::AdminOp op, uint64_t seq, const wire::AdminRequest& r = {}) const {
    return admin::seal(session_key, wire::Kind::AdminRequest, op, seq, admin::bytes_of(r));
  }

  // What the server answered `frame` with: RC_OK for a verified reply of `seq`, else the Notice's
  // status (its message in `why`), or kHung when nothing came.
  // `payload`, when given, gets the verified reply's payload.
  int32_t exchange(std::span<const std::byte> frame, uint64_t seq, std::string& why,
                   std::vector<std::byte>* payload = nullptr) {
    if (!send(frame)) return RC_E_DISCONNECTED;
    const auto answer = receive(reply_ms());
    if (!answer) return kHung;
    if (wire::read_header(answer->data()).kind == static_cast<uint8_t>(wire::Kind::Notice)) {
      const rc_status st = rc::transport::decode_notice(*answer);
      why = last_error();
      return st;
    }
    admin::Opened reply;
    if (admin::open(session_key, *answer, wire::Kind::AdminReply, reply) != RC_OK || reply.seq != seq) {
      why = "a reply that does not verify";
      return RC_E_PROTOCOL;
    }
    if (payload != nullptr) payload->assign(reply.payload.begin(), reply.payload.end());
    return RC_OK;
  }

  PeerState closed(int timeout_ms) { return wait_closed(fd_.fd, timeout_ms); }

  admin::SessionKey session_key{};

 private:
  Fd fd_;
  bool shm_ = false;
};

// ---- fixtures --------------------------------------------------------------------------------------

class AdminBase : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    watchdog_ = std::make_unique<Watchdog>(std::string(info->test_suite_name()) + "." + info->name(), 110s);
    server_id_ = "rc-admin-test-" + std::to_string(::getpid());
    log_path_ = "/tmp/" + fresh_name("admin-log") + ".txt";
  }
  void TearDown() override {
    watchdog_.reset();
    ::unlink(log_path_.c_str());
  }
  void phase(const std::string& p) {
    if (watchdog_) watchdog_->phase(p);
  }

  // A server with the admission key (or open when `keyed` is false); its stderr goes to log_path_.
  ::testing::AssertionResult start(ServerProcess& server, const std::string& transport, bool keyed = true) {
    ServerLaunch launch;
    if (keyed) launch.extra = {"--admission-key", key_.path, "--server-id", server_id_};
    launch.stderr_path = log_path_;
    return server.start(transport == "tcp" ? std::string("tcp:127.0.0.1:0") : fresh_socket("admin"), launch);
  }

  // Opens a cache of `regions` regions with a capability for `granted` regions until `lease_end`.
  rc_status open_cache_with(const std::string& endpoint, uint64_t id, uint32_t regions, const char* token,
                            CacheHandle& cache, uint64_t lease_end, uint32_t granted = 0, uint32_t flags = 0,
                            rc_config cfg = rc_config{0, 1, 8, 4}) {
    const std::string capability = mint(key_.key, id, server_id_, granted != 0 ? granted : regions, lease_end);
    const char* caps[] = {capability.c_str()};
    rc_cache_options o = make_options(id, cfg, regions, token);
    o.connect_timeout_ms = static_cast<uint32_t>(reply_ms());
    o.capabilities = caps;
    o.flags = flags;
    const rc_status st = open_cache({endpoint}, o, &cache.c);
    if (st != RC_OK) cache.c = nullptr;
    return st;
  }

  static uint64_t an_hour_from_now() { return unix_now_ms() + 3600 * 1000; }

  KeyFile key_;
  std::string server_id_;
  std::string log_path_;
  std::unique_ptr<Watchdog> watchdog_;
};

class Admin : public AdminBase {};
class AdminP : public AdminBase, public ::testing::WithParamInterface<std::string> {};

std::string param_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

// ---- stats and listing -----------------------------------------------------------------------------

// Stats describe the server (id, limits, threads, the caller's own admin connection) and follow a
// cache: memory lent rises when it opens and falls back when it closes; the listing shows it with
// its regions, connections, s and lease end.
TEST_P(AdminP, StatsAndListFollowACache) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  AdminHandle a;
  ASSERT_EQ(admin_connect(server.endpoint(), key_.key, a), RC_OK) << last_error();

  rc_server_stats s = stats_of(a.a);
  EXPECT_EQ(s.size, sizeof s);
  EXPECT_STREQ(s.server_id, server_id_.c_str());
  EXPECT_EQ(s.memory_limit, kMemoryLimit);
  EXPECT_EQ(s.region_size, kRegionSize);
  EXPECT_EQ(s.memory_lent, 0u);
  EXPECT_EQ(s.caches, 0u);
  EXPECT_EQ(s.regions_lent, 0u);
  EXPECT_EQ(s.data_connections, 0u);
  EXPECT_EQ(s.admin_connections, 1u);
  EXPECT_EQ(s.server_threads, 2u);  // the harness's --threads
  EXPECT_LT(s.uptime_ms, 120'000u);
  EXPECT_TRUE(caches_of(a.a).empty());

  phase("a cache opens");
  const uint64_t id = fresh_cache_id();
  const uint64_t lease_end = an_hour_from_now();
  CacheHandle cache;
  ASSERT_EQ(open_cache_with(server.endpoint(), id, 2, "stats", cache, lease_end), RC_OK) << last_error();
  ASSERT_TRUE(cache_works(cache.c, kRegionSize + 17, 1));
  s = stats_of(a.a);
  EXPECT_EQ(s.memory_lent, 2 * kRegionSize);
  EXPECT_EQ(s.regions_lent, 2u);
  EXPECT_EQ(s.caches, 1u);
  EXPECT_GE(s.data_connections, 1u);
  const auto list = caches_of(a.a);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].cache_id, id);
  EXPECT_EQ(list[0].regions, 2u);
  // A closed session's connection may still be closing on the server: the counts may differ by it.
  EXPECT_GE(list[0].connections, 1u);
  EXPECT_LE(list[0].connections, s.data_connections);
  EXPECT_EQ(list[0].server_threads, 1u);
  EXPECT_EQ(list[0].exclusive, 0u);
  EXPECT_EQ(list[0].lease_end_unix_ms, lease_end);

  phase("the cache closes");
  // Lease-lived (registry.h): it keeps its memory, listed with 0 connections, until its lease ends
  // or it is dropped.
  EXPECT_EQ(cache.close(), RC_OK);
  const auto idle = wait_idle(a.a, id, 5000);
  ASSERT_TRUE(idle.has_value()) << "a closed lease-lived cache is no longer listed";
  EXPECT_EQ(idle->connections, 0u);
  EXPECT_EQ(idle->regions, 2u);
  s = stats_of(a.a);
  EXPECT_EQ(s.memory_lent, 2 * kRegionSize) << "a closed lease-lived cache gave its memory back before its lease ended";
  EXPECT_EQ(s.caches, 1u);
  EXPECT_EQ(s.data_connections, 0u);
  phase("the manager drops it");
  uint32_t dropped = 0;
  ASSERT_EQ(rc_admin_drop_cache(a.a, id, &dropped), RC_OK) << last_error();
  EXPECT_EQ(dropped, 1u);
  s = stats_of(a.a);
  EXPECT_EQ(s.memory_lent, 0u) << "a dropped cache nobody is connected to is still lent";
  EXPECT_EQ(s.caches, 0u);
  EXPECT_TRUE(caches_of(a.a).empty());
  EXPECT_EQ(a.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// Caches are named by (id, token): every cache of an id is reported, oldest first; a short array
// gets the first ones and the total, and a NULL array of 0 just the total.
TEST_F(Admin, ListReportsEveryCacheOfAnId) {
  ServerProcess server;
  ASSERT_TRUE(start(server, "tcp"));
  const std::string ep = server.endpoint();
  const uint64_t id = fresh_cache_id();
  const uint64_t other = fresh_cache_id();
  CacheHandle a, b, c;
  ASSERT_EQ(open_cache_with(ep, id, 2, "token-a", a, an_hour_from_now(), 4), RC_OK) << last_error();
  ASSERT_EQ(open_cache_with(ep, id, 1, "token-b", b, an_hour_from_now(), 4, RC_OPEN_EXCLUSIVE), RC_OK) << last_error();
  ASSERT_EQ(open_cache_with(ep, other, 1, "token-c", c, an_hour_from_now()), RC_OK) << last_error();
  AdminHandle h;
  ASSERT_EQ(admin_connect(ep, key_.key, h), RC_OK) << last_error();

  const auto all = caches_of(h.a);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].cache_id, id);
  EXPECT_EQ(all[0].regions, 2u);
  EXPECT_EQ(all[0].exclusive, 0u);
  EXPECT_EQ(all[1].cache_id, id);
  EXPECT_EQ(all[1].regions, 1u);
  EXPECT_EQ(all[1].exclusive, 1u);
  EXPECT_EQ(all[2].cache_id, other);

  rc_admin_cache first{};
  uint32_t count = 0;
  ASSERT_EQ(rc_admin_list_caches(h.a, &first, 1, &count), RC_OK) << last_error();
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(first.cache_id, id);
  count = 0;
  ASSERT_EQ(rc_admin_list_caches(h.a, nullptr, 0, &count), RC_OK) << last_error();
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(rc_admin_list_caches(h.a, nullptr, 2, &count), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_admin_list_caches(h.a, &first, 1, nullptr), RC_E_INVALID_ARGUMENT);

  rc_server_stats small{};
  small.size = 8;
  EXPECT_EQ(rc_admin_stats(h.a, &small), RC_E_INVALID_ARGUMENT) << "a size below the first version was accepted";
  EXPECT_TRUE(contains(last_error(), "sizeof(rc_server_stats)")) << last_error();
  EXPECT_EQ(c.close(), RC_OK);
  EXPECT_EQ(b.close(), RC_OK);
  EXPECT_EQ(a.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// ---- drop ------------------------------------------------------------------------------------------

// Dropping an id drops every cache with it: their clients' operations fail with RC_E_EXPIRED saying
// the manager dropped the cache, their memory is lent back, and other caches go on untouched.
TEST_P(AdminP, DropFailsTheClientsAndFreesTheMemory) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  const uint64_t id = fresh_cache_id();
  const uint64_t other = fresh_cache_id();
  CacheHandle a, b, c;
  ASSERT_EQ(open_cache_with(ep, id, 2, "token-a", a, an_hour_from_now(), 4), RC_OK) << last_error();
  ASSERT_EQ(open_cache_with(ep, id, 1, "token-b", b, an_hour_from_now(), 4), RC_OK) << last_error();
  ASSERT_EQ(open_cache_with(ep, other, 1, "token-c", c, an_hour_from_now()), RC_OK) << last_error();
  SessionHandle sa;
  ASSERT_EQ(rc_session_open(a.c, &sa.s), RC_OK);
  ASSERT_TRUE(cache_works(a.c, 100, 1));
  AdminHandle h;
  ASSERT_EQ(admin_connect(ep, key_.key, h), RC_OK) << last_error();
  EXPECT_EQ(stats_of(h.a).memory_lent, 4 * kRegionSize);

  phase("drop");
  uint32_t dropped = 0;
  ASSERT_EQ(rc_admin_drop_cache(h.a, id, &dropped), RC_OK) << last_error();
  EXPECT_EQ(dropped, 2u);

  phase("the dropped cache's client");
  uint8_t buf[256];
  int32_t st = RC_OK;
  std::string why;
  const auto give_up = Clock::now() + ms(rctest::scaled_ms(5000));
  while (st == RC_OK && Clock::now() < give_up) {
    st = sync_read(sa.s, 0, buf, sizeof buf);
    why = last_error();
    if (st == RC_OK) std::this_thread::sleep_for(10ms);
  }
  std::printf("[ info     ] the client of the dropped cache got %s: %s\n", sname(st).c_str(), why.c_str());
  EXPECT_EQ(st, RC_E_EXPIRED) << why;
  EXPECT_TRUE(contains(why, "dropped by its manager")) << why;
  if (st == kHung) sa.leak();

  phase("memory and the other cache");
  const rc_server_stats s = wait_lent(h.a, kRegionSize, 5000);
  EXPECT_EQ(s.memory_lent, kRegionSize) << "the dropped caches' memory is still lent";
  EXPECT_EQ(s.caches, 1u);
  const auto left = caches_of(h.a);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].cache_id, other);
  EXPECT_TRUE(cache_works(c.c, 5, 2)) << "a cache with another id suffered from the drop";
  ASSERT_EQ(rc_admin_drop_cache(h.a, id, &dropped), RC_OK) << last_error();
  EXPECT_EQ(dropped, 0u) << "an id dropped twice";

  if (sa.s != nullptr) {
    EXPECT_EQ(sa.close(), RC_OK);
  }
  EXPECT_EQ(a.close(), RC_OK);
  EXPECT_EQ(b.close(), RC_OK);
  EXPECT_EQ(c.close(), RC_OK);
  EXPECT_TRUE(contains(read_file(log_path_), "dropped by its manager")) << read_file(log_path_);
  EXPECT_TRUE(server.stop());
}

// ---- extend lease ----------------------------------------------------------------------------------

// A lease-lived cache nobody is connected to keeps its memory until its lease ends (registry.h);
// ExtendLease moves that end later without any client: the cache outlives its first lease with its
// data, a shorter extension keeps the later end (and still counts the cache), and an id the server
// does not hold counts 0 caches.
TEST_P(AdminP, ExtendLeaseKeepsAnIdleCachePastItsFirstLease) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  const uint64_t id = fresh_cache_id();
  const uint64_t first_end = unix_now_ms() + 2000;
  const auto data = pattern(31, 6000);
  const uint64_t at = kRegionSize - 3000;  // across the two regions
  {
    CacheHandle cache;
    ASSERT_EQ(open_cache_with(ep, id, 2, "extended", cache, first_end), RC_OK) << last_error();
    SessionHandle s;
    ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
    ASSERT_EQ(sync_write(s.s, at, data.data(), data.size()), RC_OK) << last_error();
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
  AdminHandle h;
  ASSERT_EQ(admin_connect(ep, key_.key, h), RC_OK) << last_error();
  const auto idle = wait_idle(h.a, id, 5000);
  ASSERT_TRUE(idle.has_value()) << "the closed lease-lived cache is no longer listed";
  EXPECT_EQ(idle->connections, 0u);
  EXPECT_EQ(idle->lease_end_unix_ms, first_end);

  phase("extend");
  const uint64_t later = an_hour_from_now();
  uint32_t caches = 99;
  ASSERT_EQ(rc_admin_extend_lease(h.a, id, later, &caches), RC_OK) << last_error();
  EXPECT_EQ(caches, 1u);
  auto listed = wait_idle(h.a, id, 0);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->lease_end_unix_ms, later);

  phase("a shorter extension");
  caches = 99;
  ASSERT_EQ(rc_admin_extend_lease(h.a, id, unix_now_ms() + 500, &caches), RC_OK) << last_error();
  EXPECT_EQ(caches, 1u) << "the cache whose later lease was kept is not counted";
  listed = wait_idle(h.a, id, 0);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->lease_end_unix_ms, later) << "ExtendLease shortened a lease";

  phase("an id the server does not hold");
  caches = 99;
  ASSERT_EQ(rc_admin_extend_lease(h.a, fresh_cache_id(), later, &caches), RC_OK) << last_error();
  EXPECT_EQ(caches, 0u);

  phase("past the first lease end");
  // The server checks leases every 250 ms: 1.5 s past the first end it would have dropped the cache.
  while (unix_now_ms() < first_end + 1500) std::this_thread::sleep_for(50ms);
  const rc_server_stats st = stats_of(h.a);
  EXPECT_EQ(st.memory_lent, 2 * kRegionSize) << "the idle cache was freed at its first lease end";
  EXPECT_EQ(st.caches, 1u);
  {
    CacheHandle again;
    ASSERT_EQ(open_cache_with(ep, id, 2, "extended", again, an_hour_from_now()), RC_OK) << last_error();
    SessionHandle s;
    ASSERT_EQ(rc_session_open(again.c, &s.s), RC_OK);
    std::vector<uint8_t> back(data.size(), 0xEE);
    ASSERT_EQ(sync_read(s.s, at, back.data(), back.size()), RC_OK) << last_error();
    EXPECT_TRUE(back == data) << "the cache kept past its first lease lost its data";
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(again.close(), RC_OK);
  }
  phase("drop the idle cache");
  ASSERT_TRUE(wait_idle(h.a, id, 5000).has_value());
  uint32_t dropped = 0;
  ASSERT_EQ(rc_admin_drop_cache(h.a, id, &dropped), RC_OK) << last_error();
  EXPECT_EQ(dropped, 1u);
  // Nobody is connected, so no connection's close frees it: the drop itself must.
  EXPECT_EQ(stats_of(h.a).memory_lent, 0u) << "a dropped idle cache's memory is still lent";
  EXPECT_TRUE(caches_of(h.a).empty());
  EXPECT_EQ(h.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// Lease ends the library refuses before sending (0, or more than RC_MAX_LEASE_AHEAD_MS ahead), one the
// server refuses in its reply (sent raw, past the library's check) without ending the session, and a
// request sealed with another key, which the server refuses as any admin request (RC_E_AUTH).
TEST_P(AdminP, ExtendLeaseRefusals) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  const uint64_t id = fresh_cache_id();
  CacheHandle cache;
  const uint64_t lease_end = an_hour_from_now();
  ASSERT_EQ(open_cache_with(ep, id, 1, "refusals", cache, lease_end), RC_OK) << last_error();
  AdminHandle h;
  ASSERT_EQ(admin_connect(ep, key_.key, h), RC_OK) << last_error();
  uint32_t caches = 99;
  EXPECT_EQ(rc_admin_extend_lease(h.a, id, 0, &caches), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "lease end of 0")) << last_error();
  const uint64_t too_far = unix_now_ms() + RC_MAX_LEASE_AHEAD_MS + 60'000;
  EXPECT_EQ(rc_admin_extend_lease(h.a, id, too_far, &caches), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "RC_MAX_LEASE_AHEAD_MS")) << last_error();
  EXPECT_EQ(rc_admin_extend_lease(h.a, id, lease_end, nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_admin_extend_lease(nullptr, id, lease_end, &caches), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(caches, 99u) << "a refused call wrote its result";
  ASSERT_EQ(rc_admin_extend_lease(h.a, id, lease_end, &caches), RC_OK) << "the handle broke after refusals: " << last_error();
  EXPECT_EQ(caches, 1u);

  phase("too far ahead, past the library: the server refuses it in its reply");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    wire::AdminRequest r{};
    r.cache_id = id;
    r.lease_end_unix_ms = unix_now_ms() + RC_MAX_LEASE_AHEAD_MS + 60'000;
    std::string why;
    std::vector<std::byte> payload;
    ASSERT_EQ(raw.exchange(raw.request(wire::AdminOp::ExtendLease, 1, r), 1, why, &payload), RC_OK) << why;
    wire::AdminExtendResult result{};
    ASSERT_EQ(payload.size(), sizeof result);
    std::memcpy(&result, payload.data(), sizeof result);
    EXPECT_EQ(result.status, RC_E_INVALID_ARGUMENT);
    EXPECT_EQ(result.caches, 0u);
    EXPECT_TRUE(contains(result.message, "past this server's clock")) << result.message;
    r.lease_end_unix_ms = lease_end + 1000;  // the session goes on
    ASSERT_EQ(raw.exchange(raw.request(wire::AdminOp::ExtendLease, 2, r), 2, why, &payload), RC_OK) << why;
    ASSERT_EQ(payload.size(), sizeof result);
    std::memcpy(&result, payload.data(), sizeof result);
    EXPECT_EQ(result.status, RC_OK);
    EXPECT_EQ(result.caches, 1u);
  }
  phase("sealed with another key");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    KeyFile other;
    ASSERT_TRUE(raw.greet(other.key));  // the challenge comes before any proof; the request carries it
    wire::AdminRequest r{};
    r.cache_id = id;
    r.lease_end_unix_ms = lease_end + 7 * 24 * 3600 * 1000ull;
    std::string why;
    EXPECT_EQ(raw.exchange(raw.request(wire::AdminOp::ExtendLease, 1, r), 1, why), RC_E_AUTH) << why;
  }
  const auto listed = caches_of(h.a);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].lease_end_unix_ms, lease_end + 1000) << "a refused or forged extension moved the lease";
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_EQ(h.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// ---- authentication --------------------------------------------------------------------------------

// A key that is not the server's is refused with RC_E_AUTH and a message that says so (the server
// logs what it refused); a short key never leaves the library; the server goes on serving.
// A session that sat idle while its cache shrank off a server, the manager dropped the share there, and the cache
// grew back onto that server reaches the new share, not its old channel to the dropped one (it got RC_E_EXPIRED on
// its first write after the re-grow).
TEST_P(AdminP, AnIdleSessionFollowsAShrinkAndAGrowBackOntoTheSameServer) {
  ServerProcess first, second;
  ASSERT_TRUE(start(first, GetParam()));
  ASSERT_TRUE(start(second, GetParam()));
  const uint64_t id = fresh_cache_id();
  const std::string capability = mint(key_.key, id, server_id_, 1, an_hour_from_now());
  const char* caps[] = {capability.c_str(), capability.c_str()};
  rc_cache_options o = make_options(id, rc_config{0, 1, 8, 4}, 1, "regrow");
  o.connect_timeout_ms = static_cast<uint32_t>(reply_ms());
  o.capabilities = caps;
  CacheHandle cache;
  ASSERT_EQ(open_cache({first.endpoint(), second.endpoint()}, o, &cache.c), RC_OK) << last_error();
  SessionHandle idle;
  ASSERT_EQ(rc_session_open(cache.c, &idle.s), RC_OK);
  const uint64_t on_second = kRegionSize + 100;
  const auto old_bytes = pattern(1, 4096);
  ASSERT_EQ(sync_write(idle.s, on_second, old_bytes.data(), old_bytes.size()), RC_OK) << last_error();

  phase("shrink, drop, grow back");
  ASSERT_EQ(rc_cache_shrink(cache.c, 1), RC_OK) << last_error();
  AdminHandle h;
  ASSERT_EQ(admin_connect(second.endpoint(), key_.key, h), RC_OK) << last_error();
  uint32_t dropped = 0;
  ASSERT_EQ(rc_admin_drop_cache(h.a, id, &dropped), RC_OK) << last_error();
  EXPECT_EQ(dropped, 1u) << "the idle session's channel kept the share until the drop";
  EXPECT_EQ(wait_lent(h.a, 0, 5000).memory_lent, 0u);
  const std::string second_endpoint = second.endpoint();
  const char* grow[] = {second_endpoint.c_str()};
  ASSERT_EQ(rc_cache_grow(cache.c, grow, 1, caps), RC_OK) << last_error();

  phase("the idle session writes to the new share");
  const auto new_bytes = pattern(2, 4096);
  ASSERT_EQ(sync_write(idle.s, on_second, new_bytes.data(), new_bytes.size()), RC_OK) << last_error();
  std::vector<uint8_t> back(new_bytes.size());
  ASSERT_EQ(sync_read(idle.s, on_second, back.data(), back.size()), RC_OK) << last_error();
  EXPECT_EQ(back, new_bytes);
  EXPECT_EQ(idle.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(first.stop());
  EXPECT_TRUE(second.stop());
}

TEST_P(AdminP, WrongKeyIsRefused) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  KeyFile other;
  AdminHandle wrong;
  const rc_status st = admin_connect(ep, other.key, wrong);
  const std::string why = last_error();
  EXPECT_EQ(st, RC_E_AUTH) << why;
  EXPECT_TRUE(contains(why, "admission key")) << why;
  EXPECT_EQ(wrong.a, nullptr);

  const std::vector<uint8_t> short_key(RC_MIN_ADMISSION_KEY_BYTES - 1, 7);
  AdminHandle too_short;
  EXPECT_EQ(admin_connect(ep, short_key, too_short), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "at least")) << last_error();
  EXPECT_EQ(rc_admin_connect(ep.c_str(), nullptr, 32, 0, &too_short.a), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_admin_connect(nullptr, key_.key.data(), key_.key.size(), 0, &too_short.a), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_admin_connect("nonsense", key_.key.data(), key_.key.size(), 0, &too_short.a), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(rc_admin_connect("verbs:127.0.0.1:1", key_.key.data(), key_.key.size(), 0, &too_short.a), RC_E_UNSUPPORTED);

  AdminHandle right;
  ASSERT_EQ(admin_connect(ep, key_.key, right), RC_OK) << last_error();
  CacheHandle cache;
  ASSERT_EQ(open_cache_with(ep, fresh_cache_id(), 1, "after", cache, an_hour_from_now()), RC_OK) << last_error();
  EXPECT_TRUE(cache_works(cache.c, 0, 3));
  EXPECT_EQ(stats_of(right.a).caches, 1u);
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(contains(read_file(log_path_), "MAC does not verify")) << read_file(log_path_);
  EXPECT_TRUE(server.stop());
}

// A server without an admission key cannot tell a manager from anyone else: it refuses every admin
// connection with RC_E_AUTH, saying it runs in open mode.
TEST_P(AdminP, OpenModeServerRefusesAdmin) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam(), false));
  AdminHandle h;
  EXPECT_EQ(admin_connect(server.endpoint(), key_.key, h), RC_E_AUTH);
  EXPECT_TRUE(contains(last_error(), "open mode")) << last_error();
  EXPECT_EQ(h.a, nullptr);
  CacheHandle cache;
  rc_cache_options o = make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 1);
  ASSERT_EQ(open_cache({server.endpoint()}, o, &cache.c), RC_OK) << last_error();
  EXPECT_TRUE(cache_works(cache.c, 0, 4));
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// Raw admin clients: a request replayed on its own connection or on another one, a garbled one, one
// asking for more caches than a reply holds, an unknown op, a data frame, a hello of another
// version and a silent peer are each refused (a Notice naming what and why, then the connection
// closes); a legitimate admin connection and a data client are not disturbed.
TEST_P(AdminP, ReplayedGarbledAndOversizedRequestsAreRefused) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  CacheHandle cache;
  ASSERT_EQ(open_cache_with(ep, fresh_cache_id(), 1, "bystander", cache, an_hour_from_now()), RC_OK) << last_error();
  AdminHandle legit;
  ASSERT_EQ(admin_connect(ep, key_.key, legit), RC_OK) << last_error();

  struct Refusal {
    int32_t status;
    std::string why;
  };
  const auto refused = [&](RawAdmin& raw, std::span<const std::byte> frame, uint64_t seq) {
    Refusal r;
    r.status = raw.exchange(frame, seq, r.why);
    EXPECT_EQ(raw.closed(reply_ms()), PeerState::Closed) << "the server kept a refused admin connection open";
    return r;
  };

  phase("a replay on the same connection");
  std::vector<std::byte> recorded;
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    recorded = raw.request(wire::AdminOp::Stats, 1);
    std::string why;
    ASSERT_EQ(raw.exchange(recorded, 1, why), RC_OK) << why;
    const Refusal r = refused(raw, recorded, 2);
    EXPECT_EQ(r.status, RC_E_AUTH) << r.why;
    EXPECT_TRUE(contains(r.why, "replayed")) << r.why;
  }
  phase("a replay on another connection");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    const Refusal r = refused(raw, recorded, 1);
    EXPECT_EQ(r.status, RC_E_AUTH) << r.why;
    EXPECT_TRUE(contains(r.why, "MAC")) << r.why;
  }
  phase("a garbled request");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    wire::AdminRequest drop{};
    drop.cache_id = 12345;
    auto frame = raw.request(wire::AdminOp::DropCache, 1, drop);
    frame[sizeof(wire::FrameHeader)] ^= std::byte{0x01};  // another cache id than was signed
    const Refusal r = refused(raw, frame, 1);
    EXPECT_EQ(r.status, RC_E_AUTH) << r.why;
    EXPECT_TRUE(contains(r.why, "MAC")) << r.why;
  }
  phase("an oversized count");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    wire::AdminRequest list{};
    list.max_count = 1'000'000;
    const Refusal r = refused(raw, raw.request(wire::AdminOp::ListCaches, 1, list), 1);
    EXPECT_EQ(r.status, RC_E_PROTOCOL) << r.why;
    EXPECT_TRUE(contains(r.why, "at most " + std::to_string(wire::kAdminListPage))) << r.why;
  }
  phase("an unknown op");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    const Refusal r = refused(raw, raw.request(static_cast<wire::AdminOp>(99), 1), 1);
    EXPECT_EQ(r.status, RC_E_PROTOCOL) << r.why;
    EXPECT_TRUE(contains(r.why, "unknown admin op 99")) << r.why;
  }
  phase("a data frame on an admin connection");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    const auto batch = batch_frame(1, {RawEntry{wire::Op::Read, 0, 0, 64, {}}});
    const auto* p = reinterpret_cast<const std::byte*>(batch.data());
    std::string why;
    raw.exchange({p, batch.size()}, 1, why);
    EXPECT_EQ(raw.closed(reply_ms()), PeerState::Closed);
  }
  phase("a hello of another admin version");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    wire::AdminHello hello{};
    hello.admin_version = wire::kAdminVersion + 1;
    ASSERT_TRUE(raw.send(admin::encode_hello(hello)));
    const auto frame = raw.receive(reply_ms());
    ASSERT_TRUE(frame.has_value());
    wire::AdminChallenge challenge{};
    EXPECT_EQ(admin::decode_challenge(*frame, challenge), RC_E_PROTOCOL);
    EXPECT_TRUE(contains(last_error(), "admin version")) << last_error();
    EXPECT_EQ(raw.closed(reply_ms()), PeerState::Closed);
  }
  phase("a silent peer after its hello");
  {
    RawAdmin raw;
    ASSERT_TRUE(raw.connect(ep));
    ASSERT_TRUE(raw.greet(key_.key));
    const auto t0 = Clock::now();
    EXPECT_EQ(raw.closed(rctest::scaled_ms(5000)), PeerState::Closed) << "a peer that never authenticates keeps its slot";
    EXPECT_GE(Clock::now() - t0, 500ms) << "dropped before the handshake timeout";
  }

  phase("the bystanders");
  EXPECT_TRUE(cache_works(cache.c, 10, 5)) << "the data client suffered from the admin abuse";
  rc_server_stats s = stats_of(legit.a);
  const auto settle = Clock::now() + ms(rctest::scaled_ms(3000));
  while (s.admin_connections != 1 && Clock::now() < settle) {  // a closed connection's slot goes just after
    std::this_thread::sleep_for(20ms);
    s = stats_of(legit.a);
  }
  EXPECT_EQ(s.caches, 1u);
  EXPECT_EQ(s.admin_connections, 1u) << "refused admin connections still count";
  EXPECT_EQ(cache.close(), RC_OK);
  const std::string log = read_file(log_path_);
  for (const char* named : {"replayed", "MAC does not verify", "at most", "unknown admin op", "not admin frames",
                            "admin version", "no authenticated request"})
    EXPECT_TRUE(contains(log, named)) << "the server's log does not name the refusal '" << named << "':\n" << log;
  EXPECT_TRUE(server.alive());
  EXPECT_TRUE(server.stop());
}

// ---- limits and timeouts ---------------------------------------------------------------------------

// RC_MAX_ADMIN_CONNECTIONS authenticated connections are all a server holds: the next one gets
// RC_E_LIMIT naming the limit, data clients still get in, and once one closes another connects.
// Peers that never authenticate cannot keep a key holder out: a new connection displaces them.
TEST_P(AdminP, AdminConnectionLimit) {
  ServerProcess server;
  ASSERT_TRUE(start(server, GetParam()));
  const std::string ep = server.endpoint();
  std::vector<std::unique_ptr<AdminHandle>> held;
  for (int i = 0; i < RC_MAX_ADMIN_CONNECTIONS; ++i) {
    held.push_back(std::make_unique<AdminHandle>());
    ASSERT_EQ(admin_connect(ep, key_.key, *held.back()), RC_OK) << "admin connection " << i << ": " << last_error();
  }
  EXPECT_EQ(stats_of(held[0]->a).admin_connections, static_cast<uint32_t>(RC_MAX_ADMIN_CONNECTIONS));
  {
    AdminHandle extra;
    EXPECT_EQ(admin_connect(ep, key_.key, extra), RC_E_LIMIT);
    EXPECT_TRUE(contains(last_error(), "limit")) << last_error();
  }
  CacheHandle cache;
  ASSERT_EQ(open_cache_with(ep, fresh_cache_id(), 1, "data", cache, an_hour_from_now()), RC_OK)
      << "the admin connections kept a data client out: " << last_error();
  EXPECT_TRUE(cache_works(cache.c, 0, 6));
  EXPECT_EQ(held.back()->close(), RC_OK);
  held.pop_back();
  {
    AdminHandle again;
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(3000));
    rc_status st = RC_E_LIMIT;
    while (st == RC_E_LIMIT && Clock::now() < deadline) {  // the server notices the close asynchronously
      st = admin_connect(ep, key_.key, again);
      if (st == RC_E_LIMIT) std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(st, RC_OK) << last_error();
  }
  held.clear();

  phase("peers without the key");
  std::vector<std::unique_ptr<RawAdmin>> squatters;
  KeyFile unknown;
  for (int i = 0; i < RC_MAX_ADMIN_CONNECTIONS; ++i) {
    // The slots of the connections just closed are freed as the server notices: retry until one is.
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(3000));
    bool greeted = false;
    while (!greeted && Clock::now() < deadline) {
      squatters.push_back(std::make_unique<RawAdmin>());
      greeted = squatters.back()->connect(ep) && squatters.back()->greet(unknown.key);
      if (!greeted) {
        squatters.pop_back();
        std::this_thread::sleep_for(20ms);
      }
    }
    ASSERT_TRUE(greeted) << "squatter " << i << " got no challenge";
  }
  for (int i = 0; i < 2; ++i) {
    AdminHandle keyed;
    EXPECT_EQ(admin_connect(ep, key_.key, keyed), RC_OK) << "peers without the key kept a key holder out: " << last_error();
  }
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

// No call outlives its timeout: a peer that accepts and says nothing, a port nobody listens on, a
// server that stops answering (SIGSTOP) and one that died each fail the call within the timeout
// (plus scheduling slack); a handle whose call timed out then fails at once.
TEST_F(Admin, DeadOrSilentServersFailWithinTheTimeout) {
  const uint32_t timeout_ms = 400;
  const auto slack = ms(rctest::scaled_ms(1500));
  phase("a peer that accepts and says nothing");
  {
    Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(listener.fd, 4), 0);
    ASSERT_EQ(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    const std::string ep = "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    AdminHandle h;
    const auto t0 = Clock::now();
    EXPECT_EQ(admin_connect(ep, key_.key, h, timeout_ms), RC_E_TIMEOUT) << last_error();
    const auto took = Clock::now() - t0;
    EXPECT_GE(took, ms(static_cast<int>(timeout_ms) - 50));
    EXPECT_LE(took, ms(static_cast<int>(timeout_ms)) + slack);
  }
  phase("a port nobody listens on");
  {
    Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(probe.fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(probe.fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    const std::string ep = "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));  // bound, never listening
    AdminHandle h;
    const auto t0 = Clock::now();
    EXPECT_EQ(admin_connect(ep, key_.key, h, timeout_ms), RC_E_DISCONNECTED) << last_error();
    EXPECT_LE(Clock::now() - t0, ms(static_cast<int>(timeout_ms)) + slack);
  }
  phase("a server that stops answering");
  ServerProcess server;
  ASSERT_TRUE(start(server, "tcp"));
  AdminHandle paused, killed;
  ASSERT_EQ(admin_connect(server.endpoint(), key_.key, paused, timeout_ms), RC_OK) << last_error();
  ASSERT_EQ(admin_connect(server.endpoint(), key_.key, killed, timeout_ms), RC_OK) << last_error();
  ASSERT_TRUE(pause_process(server.pid()));
  {
    rc_server_stats s{};
    s.size = sizeof s;
    const auto t0 = Clock::now();
    EXPECT_EQ(rc_admin_stats(paused.a, &s), RC_E_TIMEOUT) << last_error();
    const auto took = Clock::now() - t0;
    EXPECT_GE(took, ms(static_cast<int>(timeout_ms) - 50));
    EXPECT_LE(took, ms(static_cast<int>(timeout_ms)) + slack);
    const auto t1 = Clock::now();
    uint32_t dropped = 0;
    EXPECT_EQ(rc_admin_drop_cache(paused.a, 1, &dropped), RC_E_DISCONNECTED) << "a timed-out handle was used again";
    EXPECT_TRUE(contains(last_error(), "connect again")) << last_error();
    EXPECT_LE(Clock::now() - t1, 100ms);
  }
  ASSERT_EQ(::kill(server.pid(), SIGCONT), 0);
  phase("a server that died");
  server.kill_hard();
  {
    uint32_t count = 0;
    const auto t0 = Clock::now();
    EXPECT_EQ(rc_admin_list_caches(killed.a, nullptr, 0, &count), RC_E_DISCONNECTED) << last_error();
    EXPECT_LE(Clock::now() - t0, ms(static_cast<int>(timeout_ms)) + slack);
  }
}

// ---- the remotecache-admin command -----------------------------------------------------------------


// remotecache-admin prints stats and caches as text and JSON, drops caches, and reports failures
// with exit status 1 and the reason.
TEST_F(Admin, CommandPrintsStatsCachesAndDrops) {
  ServerProcess server;
  ASSERT_TRUE(start(server, "tcp"));
  const std::string ep = server.endpoint();
  const uint64_t id = fresh_cache_id();
  CacheHandle cache;
  ASSERT_EQ(open_cache_with(ep, id, 2, "tool", cache, an_hour_from_now()), RC_OK) << last_error();
  const std::vector<std::string> base = {"--connect", ep, "--key", key_.path};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return run_tool(RC_ADMIN_PATH, args);
  };

  Command c = with({"stats"});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "server id        " + server_id_)) << c.out;
  EXPECT_TRUE(contains(c.out, "memory lent      " + std::to_string(2 * kRegionSize) + " of")) << c.out;
  c = with({"--json", "stats"});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "\"server_id\":\"" + server_id_ + "\"")) << c.out;
  EXPECT_TRUE(contains(c.out, "\"caches\":1,")) << c.out;
  c = with({"caches"});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, std::to_string(id))) << c.out;
  EXPECT_TRUE(contains(c.out, "1 cache\n")) << c.out;
  c = with({"--json", "caches"});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "{\"cache_id\":" + std::to_string(id) + ",\"regions\":2,")) << c.out;
  c = with({"drop", std::to_string(id)});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "dropped 1 cache with id " + std::to_string(id))) << c.out;
  c = with({"--json", "drop", std::to_string(id)});
  EXPECT_EQ(c.exit_code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "\"dropped\":0")) << c.out;

  KeyFile other;
  c = run_tool(RC_ADMIN_PATH, {"--connect", ep, "--key", other.path, "stats"});
  EXPECT_EQ(c.exit_code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "RC_E_AUTH")) << c.out;
  c = with({"drop"});
  EXPECT_EQ(c.exit_code, 2) << c.out;
  c = with({"frobnicate"});
  EXPECT_EQ(c.exit_code, 2) << c.out;
  EXPECT_EQ(cache.close(), RC_OK);
  EXPECT_TRUE(server.stop());
}

INSTANTIATE_TEST_SUITE_P(Transports, AdminP, ::testing::Values("tcp", "shm"), param_name);

// ---- in process --------------------------------------------------------------------------------------

std::string hex(std::span<const uint8_t> bytes) {
  std::string out;
  char two[3];
  for (const uint8_t b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

// The admin frames' kinds, layouts and limits, and a known answer for the session key and a sealed Ping (computed
// with Python's hmac module), so that a change to the format or the derivation breaks here, not in the field.
TEST(AdminWire, FormatAndMacsArePinned) {
  EXPECT_EQ(static_cast<int>(wire::Kind::AdminHello), 6);
  EXPECT_EQ(static_cast<int>(wire::Kind::AdminChallenge), 7);
  EXPECT_EQ(static_cast<int>(wire::Kind::AdminRequest), 8);
  EXPECT_EQ(static_cast<int>(wire::Kind::AdminReply), 9);
  EXPECT_EQ(wire::kVersion, 2) << "the admin frames did not change the data path's version";
  EXPECT_EQ(wire::kAdminVersion, 1u);
  EXPECT_EQ(sizeof(wire::AdminHello), 24u);
  EXPECT_EQ(sizeof(wire::AdminChallenge), 136u);
  EXPECT_EQ(sizeof(wire::AdminRequest), 24u);
  EXPECT_EQ(sizeof(wire::AdminStats), 120u);
  EXPECT_EQ(sizeof(wire::AdminCacheEntry), 40u);
  EXPECT_EQ(wire::kAdminListPage, 512u);
  EXPECT_LE(wire::kMaxAdminFrame, wire::kMaxFrame);
  EXPECT_EQ(sizeof(rc_server_stats), 128u);
  EXPECT_EQ(offsetof(rc_server_stats, server_id), 56u);
  EXPECT_EQ(sizeof(rc_admin_cache), 32u);

  const std::vector<uint8_t> key(32, 0x11);
  wire::AdminChallenge challenge{};
  std::memset(challenge.nonce, 0x22, sizeof challenge.nonce);
  wire::AdminHello hello{};
  std::memset(hello.nonce, 0x33, sizeof hello.nonce);
  const admin::SessionKey session = admin::derive_session_key(key, challenge, hello);
  EXPECT_EQ(hex(session), "fa0e1e8b802615b09f581f03086544b6b373b095f79697c6f84423e495847b2d");
  const auto ping = admin::seal(session, wire::Kind::AdminRequest, wire::AdminOp::Ping, 1, admin::bytes_of(wire::AdminRequest{}));
  ASSERT_EQ(ping.size(), 80u);
  const auto* p = reinterpret_cast<const uint8_t*>(ping.data());
  EXPECT_EQ(hex({p, 24}), "524342310208010050000000000000000100000000000000");
  EXPECT_EQ(hex({p + 48, 32}), "6eff2e5875f12ae9ed47b2011a06e681fde3ca114d672c85713d75d39cc78629");
}

// ListCaches pages by creation order: with more caches than a reply holds, consecutive pages give
// every cache once, oldest first, with `more` counting what is left; a cache dropped between pages
// leaves the listing, one created meanwhile joins its end.
TEST(AdminPaging, PagesGiveEveryCacheOnceInOrder) {
  constexpr uint64_t kSmallRegion = 4096;
  const uint32_t total = wire::kAdminListPage * 2 + 37;
  rc::server::Registry registry(kSmallRegion, uint64_t{total + 8} * kSmallRegion, rc::server::Admission{{}, "paging"}, false);
  std::vector<std::shared_ptr<rc::server::CacheState>> attached;
  const auto attach = [&](uint64_t id) {
    wire::ConnectRequest r{};
    r.cache_id = id;
    r.regions = 1;
    r.server_threads = 1;
    std::shared_ptr<rc::server::CacheState> cache;
    ASSERT_EQ(registry.attach(r, cache).status, RC_OK);
    attached.push_back(cache);
  };
  for (uint32_t i = 0; i < total; ++i) attach(1000 + i);

  const std::vector<uint8_t> key(32, 0x33);
  rc::server::AdminContext context{&registry, 1, rc::now_ns(), nullptr, nullptr};
  rc::server::AdminSession session(context, key);
  wire::AdminHello hello{};
  hello.admin_version = wire::kAdminVersion;
  const auto greeting = session.greet(admin::encode_hello(hello));
  ASSERT_FALSE(greeting.close) << greeting.refused;
  wire::AdminChallenge challenge{};
  ASSERT_EQ(admin::decode_challenge(greeting.frame, challenge), RC_OK);
  const admin::SessionKey session_key = admin::derive_session_key(key, challenge, hello);
  uint64_t seq = 0;
  const auto page = [&](uint64_t after, uint32_t max, wire::AdminListHead& head) {
    wire::AdminRequest r{};
    r.after = after;
    r.max_count = max;
    const auto answer = session.handle(admin::seal(session_key, wire::Kind::AdminRequest, wire::AdminOp::ListCaches, ++seq,
                                                   admin::bytes_of(r)));
    EXPECT_FALSE(answer.close) << answer.refused;
    admin::Opened reply;
    EXPECT_EQ(admin::open(session_key, answer.frame, wire::Kind::AdminReply, reply), RC_OK);
    std::memcpy(&head, reply.payload.data(), sizeof head);
    std::vector<wire::AdminCacheEntry> entries(head.count);
    EXPECT_EQ(reply.payload.size(), sizeof head + head.count * sizeof(wire::AdminCacheEntry));
    std::memcpy(entries.data(), reply.payload.data() + sizeof head, entries.size() * sizeof(wire::AdminCacheEntry));
    return entries;
  };

  std::vector<uint64_t> seen;
  uint64_t after = 0;
  wire::AdminListHead head{};
  bool dropped_midway = false;
  do {
    const auto entries = page(after, wire::kAdminListPage, head);
    for (const auto& e : entries) {
      EXPECT_GT(e.serial, after);
      after = e.serial;
      seen.push_back(e.cache_id);
    }
    if (!dropped_midway) {
      // Between pages: one cache not listed yet goes, a new one comes.
      EXPECT_EQ(head.more, total - wire::kAdminListPage);
      EXPECT_EQ(registry.drop(1000 + wire::kAdminListPage + 5), 1u);
      attach(5000);
      dropped_midway = true;
    }
  } while (head.more > 0);
  std::vector<uint64_t> expected;
  for (uint32_t i = 0; i < total; ++i)
    if (i != wire::kAdminListPage + 5) expected.push_back(1000 + i);
  expected.push_back(5000);
  EXPECT_EQ(seen, expected);

  for (auto& c : attached) registry.detach(c);
  EXPECT_EQ(registry.memory_in_use(), 0u);
}

// An embedded server (same process, so TSan sees both ends) keyed for admin: threads share one
// rc_admin for stats and listings while others open, use and close caches and the manager drops
// some; every call succeeds or fails only as the drop explains, and all memory comes back.
TEST(AdminEmbedded, ConcurrentAdminCallsNextToDataTraffic) {
  Watchdog watchdog("AdminEmbedded.ConcurrentAdminCallsNextToDataTraffic", 110s);
  const std::vector<uint8_t> key(32, 0x5c);
  const char* listen[] = {"tcp:127.0.0.1:0"};
  rc_server_options so{};
  so.listen = listen;
  so.listen_count = 1;
  so.region_size = 64 * KiB;
  so.memory_limit = 16 * MiB;
  so.max_threads = 2;
  so.admission_key = key.data();
  so.admission_key_length = key.size();
  so.server_id = "embedded-admin";
  rc_server* server = nullptr;
  ASSERT_EQ(rc_server_start(&so, &server), RC_OK) << last_error();
  const std::string ep = rc_server_endpoint(server, 0);

  AdminHandle shared;
  ASSERT_EQ(admin_connect(ep, key, shared), RC_OK) << last_error();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> admin_calls{0};
  std::atomic<uint64_t> admin_failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::vector<rc_admin_cache> list(64);
      while (!stop.load()) {
        rc_status st;
        if (t == 0) {
          rc_server_stats s{};
          s.size = sizeof s;
          st = rc_admin_stats(shared.a, &s);
          if (st == RC_OK && s.memory_lent > s.memory_limit) admin_failures.fetch_add(1);
        } else {
          uint32_t count = 0;
          st = rc_admin_list_caches(shared.a, list.data(), static_cast<uint32_t>(list.size()), &count);
        }
        if (st != RC_OK) admin_failures.fetch_add(1);
        admin_calls.fetch_add(1);
      }
    });
  }
  std::atomic<uint64_t> opened{0};
  std::atomic<uint64_t> unexpected{0};
  constexpr uint64_t kIds = 4;
  const uint64_t base_id = fresh_cache_id() & ~uint64_t{0xff};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      uint64_t round = 0;
      while (!stop.load()) {
        const uint64_t id = base_id + (round++ % kIds);
        const std::string cap = mint(key, id, "embedded-admin", 8, unix_now_ms() + 60'000);
        const char* caps[] = {cap.c_str()};
        rc_cache_options o = make_options(id, rc_config{0, 1, 4, 2}, 1, t == 0 ? "first" : "second");
        o.capabilities = caps;
        CacheHandle cache;
        const rc_status st = open_cache({ep}, o, &cache.c);
        if (st != RC_OK) {
          cache.c = nullptr;
          if (st != RC_E_EXPIRED) unexpected.fetch_add(1);  // dropped while it opened
          continue;
        }
        opened.fetch_add(1);
        SessionHandle s;
        if (rc_session_open(cache.c, &s.s) == RC_OK) {
          uint8_t buf[512] = {};
          const int32_t w = sync_write(s.s, 0, buf, sizeof buf);
          // A drop in between fails the operation with RC_E_EXPIRED; nothing else may go wrong.
          if (w != RC_OK && w != RC_E_EXPIRED) unexpected.fetch_add(1);
          EXPECT_EQ(s.close(), RC_OK);
        }
        EXPECT_EQ(cache.close(), RC_OK);
      }
    });
  }
  threads.emplace_back([&] {
    AdminHandle manager;
    if (admin_connect(ep, key, manager) != RC_OK) {
      unexpected.fetch_add(1);
      return;
    }
    uint64_t round = 0;
    while (!stop.load()) {
      uint32_t dropped = 0;
      if (rc_admin_drop_cache(manager.a, base_id + (round++ % kIds), &dropped) != RC_OK) unexpected.fetch_add(1);
      std::this_thread::sleep_for(5ms);
    }
  });
  std::this_thread::sleep_for(ms(rctest::under_sanitizer() ? 3000 : 1500));
  stop.store(true);
  for (auto& t : threads) t.join();
  std::printf("[ info     ] %llu admin calls, %llu caches opened\n", static_cast<unsigned long long>(admin_calls.load()),
              static_cast<unsigned long long>(opened.load()));
  EXPECT_EQ(admin_failures.load(), 0u) << last_error();
  EXPECT_EQ(unexpected.load(), 0u);
  EXPECT_GT(admin_calls.load(), 10u);
  EXPECT_GT(opened.load(), 2u);
  // Lease-lived caches the manager has not dropped outlive their clients (src/server/registry.h):
  // drop them all, which frees the ones nobody is connected to at once, the others with their
  // last connection.
  for (uint64_t i = 0; i < kIds; ++i) {
    uint32_t dropped = 0;
    EXPECT_EQ(rc_admin_drop_cache(shared.a, base_id + i, &dropped), RC_OK) << last_error();
  }
  const rc_server_stats s = wait_lent(shared.a, 0, 5000);
  EXPECT_EQ(s.memory_lent, 0u);
  EXPECT_EQ(shared.close(), RC_OK);
  EXPECT_EQ(rc_server_stop(server), RC_OK);
}

}  // namespace
