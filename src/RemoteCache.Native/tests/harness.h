// Shared by the native test files: the server as a child process, RAII for library handles, an
// operation pipeline checked against a shadow copy, and raw-protocol helpers (tcp frames, shm
// handshakes with fd passing, the shm request ring) for tests that play a misbehaving client.
//
// The raw helpers speak wire version 2 (this tree) and, for the regression tests only, version 1:
// pointed at an older remotecache-server (RC_SERVER_PATH=... in the environment), a test can still
// run its attack against it, and ServerProcess::legacy() tells the test that the library client
// (version 2) cannot talk to that server.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <remotecache/remotecache.h>
#include <remotecache/remotecache_admin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/wire.h"               // raw-protocol helpers only
#include "transport/shm/shm_ring.h"    // the shm request ring, for raw shm clients
#include "test_util.h"

#ifndef RC_SERVER_PATH
#error "RC_SERVER_PATH must name the remotecache-server binary"
#endif

namespace rctest {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace wire = rc::wire;

inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * KiB;
inline constexpr uint64_t kRegionSize = 1 * MiB;  // the server's --region-size
inline constexpr uint64_t kMemoryLimit = 64 * MiB;

inline constexpr int32_t kHung = 1000;  // pseudo status: no completion arrived in time

inline std::string sname(int32_t st) {
  if (st == kHung) return "HUNG(no completion)";
  const char* n = rc_status_name(st);
  return n ? std::string(n) : "rc_status(" + std::to_string(st) + ")";
}

inline std::string last_error() {
  const char* e = rc_last_error();
  return e ? std::string(e) : std::string("<null>");
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::chrono::milliseconds ms(int v) { return std::chrono::milliseconds(v); }

// No completion for this long means the library hangs.
inline std::chrono::milliseconds hang_limit() { return ms(rctest::scaled_ms(30000)); }

inline void fill_random(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const uint64_t v = x * 0x2545F4914F6CDD1Dull;
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p[i] = static_cast<uint8_t>((x * 0x2545F4914F6CDD1Dull) >> 56);
  }
}

inline std::vector<uint8_t> pattern(uint64_t seed, uint64_t n) {
  std::vector<uint8_t> v(n);
  fill_random(v.data(), n, seed);
  return v;
}

inline uint64_t fresh_cache_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  }();
  return (base + 0x9E3779B97F4A7C15ull * ++counter) | 1;
}

// ---- child process bookkeeping -------------------------------------------------------------------

inline std::mutex g_children_mu;
inline std::set<pid_t> g_children;

inline void register_child(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_children_mu);
  g_children.insert(pid);
}
inline void unregister_child(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_children_mu);
  g_children.erase(pid);
}

// Aborts the test binary (after killing the servers it started) if a test runs far too long, so a
// library hang shows up with the phase it hung in rather than only as a ctest timeout.
class Watchdog {
 public:
  Watchdog(std::string name, std::chrono::milliseconds limit) : name_(std::move(name)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
      std::fprintf(stderr, "\n[watchdog] %s did not finish within %lld ms; phase: %s\n", name_.c_str(),
                   static_cast<long long>(limit.count()), phase_.c_str());
      {
        std::lock_guard<std::mutex> children(g_children_mu);
        for (pid_t p : g_children) ::kill(p, SIGKILL);
      }
      std::fflush(stderr);
      std::fflush(stdout);
      std::abort();
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void phase(std::string p) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = std::move(p);
  }

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string phase_ = "start";
  std::thread thread_;
};

// ---- the server as a child process ----------------------------------------------------------------

// The remotecache-server the tests run: RC_SERVER_PATH from the environment (to run a test against
// another build, e.g. an older one), else the one built with the tests.
inline std::string server_path() {
  const char* p = std::getenv("RC_SERVER_PATH");
  return p != nullptr && *p != '\0' ? std::string(p) : std::string(RC_SERVER_PATH);
}

struct ServerLaunch {
  std::vector<std::string> extra;  // more arguments (later ones override the defaults)
  uint64_t data_limit = 0;         // RLIMIT_DATA of the child in bytes; 0 = unlimited
  std::string stderr_path;         // the child's stderr goes here ("" = this process's stderr)
};

class ServerProcess {
 public:
  ServerProcess() = default;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() {
    kill_hard();
    for (const auto& p : socket_files_) ::unlink(p.c_str());
  }

  // Starts `remotecache-server --listen <listen> ...` and waits for its "ready" line.
  ::testing::AssertionResult start(const std::string& listen, std::vector<std::string> extra = {}) {
    ServerLaunch l;
    l.extra = std::move(extra);
    return start(listen, std::move(l));
  }
  ::testing::AssertionResult start(const std::string& listen, ServerLaunch launch_options) {
    launch_ = std::move(launch_options);
    note_socket_file(listen);
    for (std::size_t i = 0; i + 1 < launch_.extra.size(); ++i)
      if (launch_.extra[i] == "--listen") note_socket_file(launch_.extra[i + 1]);
    return launch(listen);
  }

  // Starts again on the endpoint the first run reported (the same port for tcp).
  ::testing::AssertionResult restart() {
    if (pid_ > 0) return ::testing::AssertionFailure() << "restart() while the server is running";
    if (endpoint_.empty()) return ::testing::AssertionFailure() << "restart() before a successful start()";
    return launch(endpoint_);
  }

  // The first endpoint as bound, and all of them in the order of the "listening" lines.
  const std::string& endpoint() const { return endpoint_; }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The endpoint of a transport ("tcp", "shm"), or "" when the server does not listen on one.
  std::string endpoint_of(const std::string& transport) const {
    for (const auto& e : endpoints_)
      if (e.rfind(transport + ":", 0) == 0) return e;
    return "";
  }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // The identity capabilities must name ("server id ..." line); empty for a server before wire v2.
  const std::string& server_id() const { return server_id_; }
  // A server from before wire version 2 (it prints no server id): the library cannot connect to it;
  // raw clients must speak version 1.
  bool legacy() const { return server_id_.empty(); }
  uint8_t wire_version() const { return legacy() ? 1 : wire::kVersion; }
  // Everything the server printed on stdout up to "ready".
  const std::string& banner() const { return banner_; }

  // Still running: not reaped, not a zombie, and signalable.
  bool alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_status_ = status;
      finish_reap();
      return false;
    }
    return ::kill(pid_, 0) == 0;
  }

  std::string exit_description() const { return describe_status(exit_status_); }

  // Bytes the server lends right now, from the line it prints on SIGUSR1; kNoAnswer when no line came.
  static constexpr uint64_t kNoAnswer = UINT64_MAX;
  uint64_t memory_in_use(int timeout_ms = 3000) {
    if (pid_ <= 0) return kNoAnswer;
    std::unique_lock<std::mutex> lock(lent_mu_);
    const uint64_t seen = lent_lines_;
    ::kill(pid_, SIGUSR1);
    if (!lent_cv_.wait_for(lock, ms(rctest::scaled_ms(timeout_ms)), [&] { return lent_lines_ > seen; }))
      return kNoAnswer;
    return lent_;
  }

  // Polls memory_in_use() until it equals `want` or the time passes; returns the last value seen.
  uint64_t wait_memory_in_use(uint64_t want, int timeout_ms) {
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(timeout_ms));
    for (;;) {
      const uint64_t v = memory_in_use();
      if (v == want || Clock::now() > deadline || !alive()) return v;
      std::this_thread::sleep_for(50ms);
    }
  }

  // SIGKILL and reap.
  void kill_hard() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exit_status_ = status;
    finish_reap();
  }

  // SIGTERM; the server must exit with status 0.
  ::testing::AssertionResult stop() {
    if (pid_ <= 0) return ::testing::AssertionFailure() << "stop() without a running server";
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(15000));
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (Clock::now() > deadline) {
        kill_hard();
        return ::testing::AssertionFailure() << "server did not exit within 15 s of SIGTERM";
      }
      std::this_thread::sleep_for(5ms);
    }
    exit_status_ = status;
    finish_reap();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "server did not stop cleanly on SIGTERM: " << describe_status(status);
  }

  static std::string describe_status(int status) {
    std::ostringstream o;
    if (WIFEXITED(status))
      o << "exit code " << WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      o << "killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
    else
      o << "wait status " << status;
    return o.str();
  }

 private:
  void note_socket_file(const std::string& listen) {
    if (listen.rfind("shm:", 0) == 0 && listen.size() > 4 && listen[4] != '@') socket_files_.push_back(listen.substr(4));
  }

  ::testing::AssertionResult launch(const std::string& listen) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return ::testing::AssertionFailure() << "pipe2: " << std::strerror(errno);
    int err_fd = -1;
    if (!launch_.stderr_path.empty()) {
      err_fd = ::open(launch_.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (err_fd < 0) return ::testing::AssertionFailure() << "open " << launch_.stderr_path << ": " << std::strerror(errno);
    }
    std::vector<std::string> args = {server_path(),    "--listen",  listen, "--region-size", std::to_string(kRegionSize),
                                     "--memory-limit", std::to_string(kMemoryLimit), "--threads", "2"};
    args.insert(args.end(), launch_.extra.begin(), launch_.extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const rlimit data_limit{launch_.data_limit, launch_.data_limit};

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::dup2(fds[1], STDOUT_FILENO);  // the duplicate does not inherit O_CLOEXEC
      if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
      if (data_limit.rlim_cur != 0) ::setrlimit(RLIMIT_DATA, &data_limit);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    if (err_fd >= 0) ::close(err_fd);
    if (pid < 0) {
      ::close(fds[0]);
      return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
    }
    pid_ = pid;
    out_fd_ = fds[0];
    register_child(pid);

    std::string buffer;
    std::string output;  // for diagnostics
    std::vector<std::string> endpoints;
    std::string server_id;
    bool ready = false;
    const auto deadline = Clock::now() + ms(rctest::scaled_ms(30000));
    while (!ready) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        kill_hard();
        return ::testing::AssertionFailure() << "server on " << listen << " printed no 'ready' within 30 s; output:\n"
                                             << output;
      }
      pollfd p{out_fd_, POLLIN, 0};
      const int pr = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (pr < 0 && errno != EINTR) break;
      if (pr <= 0) continue;
      char chunk[1024];
      const ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // EOF before ready: the server died.
        int status = 0;
        ::waitpid(pid_, &status, 0);
        exit_status_ = status;
        finish_reap();
        return ::testing::AssertionFailure() << "server on " << listen << " exited before 'ready' ("
                                             << describe_status(status) << "); output:\n"
                                             << output;
      }
      buffer.append(chunk, static_cast<std::size_t>(n));
      output.append(chunk, static_cast<std::size_t>(n));
      std::size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        std::string line = buffer.substr(0, nl);
        buffer.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("listening ", 0) == 0) endpoints.push_back(line.substr(10));
        if (line.rfind("server id ", 0) == 0) server_id = line.substr(10);
        if (line == "ready") ready = true;
      }
    }
    if (!ready) {
      kill_hard();
      return ::testing::AssertionFailure() << "reading the server's stdout failed: " << std::strerror(errno);
    }
    if (endpoints.empty()) {
      kill_hard();
      return ::testing::AssertionFailure() << "server printed 'ready' without a 'listening <endpoint>' line; output:\n"
                                           << output;
    }
    const std::string& endpoint = endpoints.front();
    if (endpoint.rfind(listen.substr(0, 4), 0) != 0) {
      kill_hard();
      return ::testing::AssertionFailure() << "server listening on '" << endpoint << "' for --listen " << listen;
    }
    for (const auto& e : endpoints) {
      if (e.rfind("tcp:", 0) == 0 && e.size() >= 2 && e.substr(e.size() - 2) == ":0") {
        kill_hard();
        return ::testing::AssertionFailure() << "server reported port 0: " << e;
      }
    }
    endpoint_ = endpoint;
    endpoints_ = endpoints;
    server_id_ = server_id;
    banner_ = output;
    // Keep draining stdout so the server never blocks on a full pipe; "lent" lines (SIGUSR1) are
    // kept for memory_in_use(), the rest is passed on to stderr.
    const int fd = out_fd_;
    drain_ = std::thread([this, fd, rest = std::move(buffer)]() mutable {
      char chunk[1024];
      for (;;) {
        std::size_t nl;
        while ((nl = rest.find('\n')) != std::string::npos) {
          const std::string line = rest.substr(0, nl + 1);
          rest.erase(0, nl + 1);
          unsigned long long lent = 0, limit = 0;
          if (std::sscanf(line.c_str(), "lent %llu of %llu bytes", &lent, &limit) == 2) {
            std::lock_guard<std::mutex> lock(lent_mu_);
            lent_ = lent;
            ++lent_lines_;
            lent_cv_.notify_all();
          } else {
            (void)!::write(STDERR_FILENO, line.data(), line.size());
          }
        }
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        rest.append(chunk, static_cast<std::size_t>(n));
      }
    });
    return ::testing::AssertionSuccess();
  }

  void finish_reap() {
    unregister_child(pid_);
    pid_ = -1;
    if (drain_.joinable()) drain_.join();
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int exit_status_ = 0;
  std::thread drain_;
  std::string endpoint_;
  std::vector<std::string> endpoints_;
  std::string server_id_;
  std::string banner_;
  std::vector<std::string> socket_files_;
  ServerLaunch launch_;
  std::mutex lent_mu_;
  std::condition_variable lent_cv_;
  uint64_t lent_ = 0;
  uint64_t lent_lines_ = 0;
};

// ---- RAII for library handles --------------------------------------------------------------------

struct CacheHandle {
  rc_cache* c = nullptr;
  CacheHandle() = default;
  CacheHandle(const CacheHandle&) = delete;
  CacheHandle& operator=(const CacheHandle&) = delete;
  ~CacheHandle() {
    if (c != nullptr) rc_cache_close(c);
  }
  rc_status close() {
    const rc_status st = rc_cache_close(c);
    c = nullptr;
    return st;
  }
  void leak() { c = nullptr; }
};

struct SessionHandle {
  rc_session* s = nullptr;
  SessionHandle() = default;
  SessionHandle(const SessionHandle&) = delete;
  SessionHandle& operator=(const SessionHandle&) = delete;
  ~SessionHandle() {
    if (s != nullptr) rc_session_close(s);
  }
  rc_status close() {
    const rc_status st = rc_session_close(s);
    s = nullptr;
    return st;
  }
  void leak() { s = nullptr; }
};

inline rc_status open_cache(const std::vector<std::string>& endpoints, const rc_cache_options& o, rc_cache** out) {
  std::vector<const char*> eps;
  for (const auto& e : endpoints) eps.push_back(e.c_str());
  return rc_cache_open(eps.data(), eps.size(), &o, out);
}

inline rc_cache_options make_options(uint64_t id, const rc_config& cfg, uint32_t regions = 4, const char* token = "test-token") {
  rc_cache_options o{};
  o.cache_id = id;
  o.token = token;
  o.regions_per_server = regions;
  o.config = cfg;
  o.session_capacity = 0;
  o.op_timeout_ms = static_cast<uint32_t>(rctest::scaled_ms(20000));
  o.connect_timeout_ms = static_cast<uint32_t>(rctest::scaled_ms(10000));
  return o;
}

// ---- asynchronous operation tracking -------------------------------------------------------------

struct PendingOp {
  uint64_t tag = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  bool write = false;
  int phase = 0;
  bool check = false;
  std::vector<uint8_t> data;      // write source / read destination; never moves while pending
  std::vector<uint8_t> expected;  // reads with check: the shadow at submission time
};

// Submits operations on one session and reaps their completions; keeps every buffer alive until the
// library returns its completion. By default every completion must be RC_OK and every checked read
// must match; a custom handler replaces that.
class Pipeline {
 public:
  using Handler = std::function<void(const PendingOp&, int32_t status)>;

  Pipeline(rc_session* s, std::string label) : s_(s), label_(std::move(label)) {}
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline() {
    if (!pending_.empty() && !drain(hang_limit())) abandon();
  }

  void set_handler(Handler h) { handler_ = std::move(h); }
  void set_phase(int p) { phase_ = p; }

  rc_status write(uint64_t address, std::vector<uint8_t> data) {
    auto op = std::make_unique<PendingOp>();
    op->tag = next_tag_++;
    op->address = address;
    op->length = data.size();
    op->write = true;
    op->phase = phase_;
    op->data = std::move(data);
    const rc_status st = rc_write(s_, address, op->data.data(), op->length, op->tag);
    if (st == RC_OK) pending_.emplace(op->tag, std::move(op));
    return st;
  }

  // `expected` (length bytes) or null for an unchecked read.
  rc_status read(uint64_t address, uint64_t length, const uint8_t* expected) {
    auto op = std::make_unique<PendingOp>();
    op->tag = next_tag_++;
    op->address = address;
    op->length = length;
    op->phase = phase_;
    op->data.assign(length, 0xA5);
    if (expected != nullptr) {
      op->check = true;
      op->expected.assign(expected, expected + length);
    }
    const rc_status st = rc_read(s_, address, op->data.data(), length, op->tag);
    if (st == RC_OK) pending_.emplace(op->tag, std::move(op));
    return st;
  }

  // Collects completions, waiting up to timeout_ms for the first (0: rc_poll). Returns how many, or
  // -1 when rc_poll / rc_wait failed.
  int reap(int32_t timeout_ms) {
    rc_completion c[64];
    const int32_t n = timeout_ms == 0 ? rc_poll(s_, c, 64) : rc_wait(s_, c, 64, timeout_ms);
    if (n < 0) {
      fail() << (timeout_ms == 0 ? "rc_poll" : "rc_wait") << " returned " << sname(n) << ": " << last_error();
      return -1;
    }
    if (n > 64) {
      fail() << "rc_wait returned " << n << " completions for max 64";
      return -1;
    }
    for (int32_t i = 0; i < n; ++i) complete(c[i]);
    return n;
  }

  // Waits until at least one completion arrives; false (after reporting) if none arrives within limit.
  bool reap_some(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      if (pending_.empty()) return true;
      const int n = reap(100);
      if (n > 0) return true;
      if (n < 0) return false;
      if (Clock::now() > deadline) {
        fail() << "no completion for " << limit.count() << " ms with " << pending_.size()
               << " operations outstanding (rc_session_outstanding = " << rc_session_outstanding(s_)
               << "); oldest: " << describe(*pending_.begin()->second);
        return false;
      }
    }
  }

  // Reaps until nothing is pending; false on a hang.
  bool drain(std::chrono::milliseconds no_progress_limit) {
    while (!pending_.empty())
      if (!reap_some(no_progress_limit)) return false;
    return true;
  }

  // Gives up on pending operations: their buffers are leaked so the library can never write freed memory.
  void abandon() {
    for (auto& [tag, op] : pending_) (void)op.release();
    pending_.clear();
  }

  std::size_t pending() const { return pending_.size(); }
  uint64_t failures() const { return failures_; }
  uint64_t completed() const { return completed_; }
  uint64_t reads_verified() const { return reads_verified_; }
  const std::string& label() const { return label_; }
  rc_session* session() const { return s_; }

  static std::string describe(const PendingOp& op) {
    std::ostringstream o;
    o << (op.write ? "write" : "read") << " #" << op.tag << " [" << op.address << ", +" << op.length << ")";
    if (op.phase != 0) o << " phase " << op.phase;
    return o.str();
  }

  // Starts a failure message (only the first few are printed).
  struct Failure {
    std::ostringstream* o;
    template <typename T>
    Failure& operator<<(const T& v) {
      if (o) *o << v;
      return *this;
    }
  };
  class FailureSink {
   public:
    explicit FailureSink(Pipeline& p) : p_(p) {}
    ~FailureSink() {
      if (p_.failures_ <= kMaxReports) ADD_FAILURE() << p_.label_ << ": " << o_.str();
      if (p_.failures_ == kMaxReports + 1) ADD_FAILURE() << p_.label_ << ": more failures not shown";
    }
    template <typename T>
    FailureSink& operator<<(const T& v) {
      o_ << v;
      return *this;
    }

   private:
    Pipeline& p_;
    std::ostringstream o_;
  };
  FailureSink fail() {
    ++failures_;
    return FailureSink(*this);
  }

 private:
  static constexpr uint64_t kMaxReports = 8;

  void complete(const rc_completion& c) {
    auto it = pending_.find(c.tag);
    if (it == pending_.end()) {
      fail() << "completion for unknown or already completed tag " << c.tag << " (status " << sname(c.status) << ")";
      return;
    }
    std::unique_ptr<PendingOp> op = std::move(it->second);
    pending_.erase(it);
    ++completed_;
    if (handler_) {
      handler_(*op, c.status);
      return;
    }
    if (c.status != RC_OK) {
      fail() << describe(*op) << " completed with " << sname(c.status);
      return;
    }
    if (!op->write && op->check) {
      if (op->data == op->expected) {
        ++reads_verified_;
        return;
      }
      uint64_t first = 0;
      while (first < op->length && op->data[first] == op->expected[first]) ++first;
      uint64_t bad = 0;
      for (uint64_t i = 0; i < op->length; ++i) bad += op->data[i] != op->expected[i];
      fail() << describe(*op) << " returned wrong data: " << bad << " bytes differ, first at +" << first << " (address "
             << op->address + first << "): got 0x" << std::hex << int{op->data[first]} << ", expected 0x"
             << int{op->expected[first]} << std::dec;
    }
  }

  rc_session* s_;
  std::string label_;
  Handler handler_;
  int phase_ = 0;
  uint64_t next_tag_ = 1;
  uint64_t completed_ = 0;
  uint64_t failures_ = 0;
  uint64_t reads_verified_ = 0;
  std::map<uint64_t, std::unique_ptr<PendingOp>> pending_;
};

// Synchronous helpers; return the completion's status, a synchronous error, or kHung.
inline int32_t sync_write(rc_session* s, uint64_t address, const uint8_t* src, uint64_t length) {
  Pipeline pl(s, "sync_write");
  int32_t result = kHung;
  pl.set_handler([&](const PendingOp&, int32_t st) { result = st; });
  const rc_status st = pl.write(address, std::vector<uint8_t>(src, src + length));
  if (st != RC_OK) return st;
  if (!pl.drain(hang_limit())) {
    pl.abandon();
    return kHung;
  }
  return result;
}

inline int32_t sync_read(rc_session* s, uint64_t address, uint8_t* dst, uint64_t length) {
  Pipeline pl(s, "sync_read");
  int32_t result = kHung;
  pl.set_handler([&](const PendingOp& op, int32_t st) {
    result = st;
    if (st == RC_OK) std::memcpy(dst, op.data.data(), op.length);
  });
  const rc_status st = pl.read(address, length, nullptr);
  if (st != RC_OK) return st;
  if (!pl.drain(hang_limit())) {
    pl.abandon();
    return kHung;
  }
  return result;
}

// Reads [base, base + shadow.size()) in chunks and compares with the shadow.
inline ::testing::AssertionResult verify_all(rc_session* s, const std::vector<uint8_t>& shadow, uint64_t base,
                                             const std::string& label) {
  Pipeline pl(s, label + " verify_all");
  const uint64_t chunk = 256 * KiB;
  for (uint64_t off = 0; off < shadow.size(); off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, shadow.size() - off);
    const rc_status st = pl.read(base + off, n, shadow.data() + off);
    if (st != RC_OK) return ::testing::AssertionFailure() << "verify read submit: " << sname(st) << ": " << last_error();
    while (pl.pending() >= 8)
      if (!pl.reap_some(hang_limit())) break;
  }
  const bool drained = pl.drain(hang_limit());
  if (!drained) pl.abandon();
  if (!drained || pl.failures() != 0)
    return ::testing::AssertionFailure() << label << ": full verification failed (" << pl.failures() << " failures)";
  return ::testing::AssertionSuccess();
}

// A write then a read-back through a fresh session: the cache works.
inline ::testing::AssertionResult cache_works(rc_cache* cache, uint64_t address, uint64_t seed) {
  SessionHandle s;
  const rc_status so = rc_session_open(cache, &s.s);
  if (so != RC_OK) return ::testing::AssertionFailure() << "rc_session_open = " << sname(so) << ": " << last_error();
  const auto data = pattern(seed, 3000);
  const int32_t w = sync_write(s.s, address, data.data(), data.size());
  if (w != RC_OK) return ::testing::AssertionFailure() << "write = " << sname(w) << ": " << last_error();
  std::vector<uint8_t> back(data.size());
  const int32_t r = sync_read(s.s, address, back.data(), back.size());
  if (r != RC_OK) return ::testing::AssertionFailure() << "read = " << sname(r) << ": " << last_error();
  if (back != data) return ::testing::AssertionFailure() << "read-back differs from what was written";
  const rc_status sc = s.close();
  if (sc != RC_OK) return ::testing::AssertionFailure() << "rc_session_close = " << sname(sc);
  return ::testing::AssertionSuccess();
}

// Random I/O against a shadow of the window [base, base + shadow.size()).
struct RandomIo {
  uint64_t base = 0;
  uint64_t ops = 0;                        // submissions; 0 = until *stop
  uint32_t max_outstanding = 32;
  uint64_t max_len = 64 * KiB;
  const std::atomic<bool>* stop = nullptr;
  std::atomic<uint64_t>* progress = nullptr;  // completions so far
  uint64_t region_size = kRegionSize;         // where the region boundaries lie
};

struct RandomIoResult {
  uint64_t submitted = 0;
  bool hung = false;
};

inline RandomIoResult run_random_io(Pipeline& pl, std::vector<uint8_t>& shadow, const RandomIo& p, std::mt19937_64& rng) {
  RandomIoResult r;
  const uint64_t size = shadow.size();
  // Region boundaries strictly inside the window (window-relative).
  std::vector<uint64_t> boundaries;
  for (uint64_t b = (p.base / p.region_size + 1) * p.region_size; b < p.base + size; b += p.region_size)
    boundaries.push_back(b - p.base);
  const double log_max = std::log(static_cast<double>(std::min(p.max_len, size)));
  std::uniform_real_distribution<double> log_len(0.0, log_max);
  uint64_t seed = rng();

  auto more = [&] {
    return pl.failures() == 0 && (p.ops == 0 || r.submitted < p.ops) &&
           !(p.stop != nullptr && p.stop->load(std::memory_order_relaxed));
  };
  while (more() || pl.pending() != 0) {
    while (more() && pl.pending() < p.max_outstanding) {
      uint64_t len = static_cast<uint64_t>(std::exp(log_len(rng)));
      len = std::clamp<uint64_t>(len, 1, std::min(p.max_len, size));
      const uint64_t hi = size - len;
      uint64_t start;
      if (!boundaries.empty() && rng() % 2 == 0) {
        // Straddle (or touch) a region boundary.
        const uint64_t b = boundaries[rng() % boundaries.size()];
        const uint64_t back = rng() % (len + 1);
        start = b >= back ? b - back : 0;
      } else {
        start = rng() % (hi + 1);
      }
      start = std::min(start, hi);
      rc_status st;
      if (rng() % 2 == 0) {
        std::vector<uint8_t> data(len);
        fill_random(data.data(), len, ++seed);
        std::vector<uint8_t> copy = data;
        st = pl.write(p.base + start, std::move(data));
        if (st == RC_OK) std::memcpy(shadow.data() + start, copy.data(), len);
      } else {
        st = pl.read(p.base + start, len, shadow.data() + start);
      }
      if (st != RC_OK) {
        pl.fail() << "submission of [" << p.base + start << ", +" << len << ") failed synchronously with " << sname(st)
                  << ": " << last_error();
        break;
      }
      ++r.submitted;
      if (rng() % 16 == 0) {
        const rc_status fs = rc_flush(pl.session());
        if (fs != RC_OK) pl.fail() << "rc_flush returned " << sname(fs);
      }
    }
    if (pl.pending() == 0) continue;
    const uint32_t outstanding = rc_session_outstanding(pl.session());
    if (outstanding != pl.pending())
      pl.fail() << "rc_session_outstanding = " << outstanding << " but " << pl.pending() << " operations are pending";
    // Mix non-blocking polls with waits.
    if (pl.pending() < p.max_outstanding && rng() % 2 == 0 && more()) {
      if (pl.reap(0) < 0) break;
    } else if (!pl.reap_some(hang_limit())) {
      r.hung = true;
      pl.abandon();
      break;
    }
    if (p.progress != nullptr) p.progress->store(pl.completed(), std::memory_order_relaxed);
  }
  if (p.progress != nullptr) p.progress->store(pl.completed(), std::memory_order_relaxed);
  return r;
}

// A legitimate client's session on a thread: random reads and writes over [base, base + size) of a
// cache, every read checked against a shadow copy, until stop(); then one full verification.
class LegitWorker {
 public:
  LegitWorker(rc_cache* cache, uint64_t base, uint64_t size, uint64_t seed, std::string label)
      : cache_(cache), base_(base), shadow_(size, 0), seed_(seed), label_(std::move(label)) {}
  LegitWorker(const LegitWorker&) = delete;
  LegitWorker& operator=(const LegitWorker&) = delete;
  ~LegitWorker() { stop(); }

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  // Stops, waits, and returns whether every operation succeeded and every read matched.
  bool stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return ok();
  }
  bool ok() const { return failures_.load() == 0 && !hung_.load(); }
  uint64_t failures() const { return failures_.load(); }
  uint64_t completed() const { return completed_.load(); }
  uint64_t reads_verified() const { return verified_.load(); }
  bool hung() const { return hung_.load(); }
  const std::string& label() const { return label_; }

 private:
  void run() {
    SessionHandle s;
    const rc_status so = rc_session_open(cache_, &s.s);
    if (so != RC_OK) {
      ADD_FAILURE() << label_ << ": rc_session_open = " << sname(so) << ": " << last_error();
      failures_.fetch_add(1);
      return;
    }
    std::mt19937_64 rng(seed_);
    {
      Pipeline pl(s.s, label_);
      RandomIo p;
      p.base = base_;
      p.max_outstanding = 16;
      p.max_len = 16 * KiB;
      p.stop = &stop_;
      p.progress = &completed_;
      const RandomIoResult r = run_random_io(pl, shadow_, p, rng);
      hung_.store(r.hung);
      failures_.fetch_add(pl.failures());
      verified_.fetch_add(pl.reads_verified());
    }
    if (ok() && !verify_all(s.s, shadow_, base_, label_)) failures_.fetch_add(1);
    if (hung_.load()) {
      s.leak();  // the library may still write into buffers it owns
      return;
    }
    const rc_status sc = s.close();
    if (sc != RC_OK) {
      ADD_FAILURE() << label_ << ": rc_session_close = " << sname(sc);
      failures_.fetch_add(1);
    }
  }

  rc_cache* cache_;
  uint64_t base_;
  std::vector<uint8_t> shadow_;
  uint64_t seed_;
  std::string label_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> verified_{0};
  std::atomic<bool> hung_{false};
  std::thread thread_;
};

// ---- raw sockets ------------------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

inline bool parse_tcp(const std::string& endpoint, std::string& host, uint16_t& port) {
  if (endpoint.rfind("tcp:", 0) != 0) return false;
  const auto colon = endpoint.rfind(':');
  if (colon <= 4) return false;
  host = endpoint.substr(4, colon - 4);
  port = static_cast<uint16_t>(std::stoul(endpoint.substr(colon + 1)));
  return true;
}

inline int connect_tcp(const std::string& endpoint) {
  std::string host;
  uint16_t port = 0;
  if (!parse_tcp(endpoint, host, port)) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    ::close(fd);
    return -1;
  }
  // Not blocking for long when the server's accept queue is full (the kernel would retry for minutes).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    pollfd pf{fd, POLLOUT, 0};
    int so_error = errno;
    if (so_error == EINPROGRESS && ::poll(&pf, 1, rctest::scaled_ms(5000)) == 1) {
      socklen_t len = sizeof so_error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    }
    if (so_error != 0) {
      ::close(fd);
      return -1;
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

inline sockaddr_un unix_address(const std::string& path, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof(a.sun_path) - 1));
  if (!path.empty() && path[0] == '@') a.sun_path[0] = '\0';
  const bool abstract = !path.empty() && path[0] == '@';
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
  return a;
}

inline int connect_unix_seqpacket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  socklen_t len = 0;
  sockaddr_un a = unix_address(path, len);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

inline bool recv_exact(int fd, void* data, std::size_t n, int timeout_ms) {
  auto* p = static_cast<uint8_t*>(data);
  const auto deadline = Clock::now() + ms(timeout_ms);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    const int pr = ::poll(&pf, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

enum class PeerState { Closed, Timeout };

// Reads and discards until the peer closes (EOF / reset) or the timeout passes.
inline PeerState wait_closed(int fd, int timeout_ms) {
  const auto deadline = Clock::now() + ms(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return PeerState::Timeout;
    pollfd pf{fd, POLLIN, 0};
    const int pr = ::poll(&pf, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return PeerState::Timeout;
    char buf[4096];
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return PeerState::Closed;
  }
}


// ---- raw protocol: Connect frames of wire version 1 and 2 -------------------------------------------

// The Connect payload of wire version 1 (servers before 4c3fa9a), for running attacks against them.
struct ConnectRequestV1 {
  uint64_t cache_id;
  uint32_t regions;
  uint32_t server_threads;
  uint32_t token_length;
  uint32_t reserved;
  char token[wire::kTokenMax];
};
static_assert(sizeof(ConnectRequestV1) == 88);

struct ConnectSpec {
  uint64_t cache_id = 0;
  uint32_t regions = 1;
  std::string token = "raw-token";
  uint32_t server_threads = 1;
  uint32_t flags = 0;                   // wire::kConnect* (version 2 only)
  std::array<uint8_t, 16> client_id{};  // version 2 only
  std::optional<wire::Capability> capability;
  uint32_t token_length_override = UINT32_MAX;
};

inline wire::FrameHeader frame_header(wire::Kind kind, uint32_t bytes, uint32_t count, uint64_t seq,
                                      uint8_t version = wire::kVersion) {
  return wire::FrameHeader{wire::kMagic, version, static_cast<uint8_t>(kind), 0, bytes, count, seq};
}

// header_ok for either wire version.
inline bool raw_header_ok(const wire::FrameHeader& h, wire::Kind kind, std::size_t available, uint8_t version) {
  return h.magic == wire::kMagic && h.version == version && h.kind == static_cast<uint8_t>(kind) &&
         h.bytes >= sizeof(wire::FrameHeader) && h.bytes <= wire::kMaxFrame && h.bytes <= available;
}

template <typename Payload>
std::vector<uint8_t> frame_of(wire::Kind kind, const Payload& payload, uint8_t version) {
  const wire::FrameHeader h = frame_header(kind, static_cast<uint32_t>(sizeof h + sizeof payload), 0, 0, version);
  std::vector<uint8_t> f(sizeof h + sizeof payload);
  std::memcpy(f.data(), &h, sizeof h);
  std::memcpy(f.data() + sizeof h, &payload, sizeof payload);
  return f;
}

inline std::vector<uint8_t> connect_frame(const ConnectSpec& s, uint8_t version = wire::kVersion) {
  const uint32_t token_length =
      s.token_length_override != UINT32_MAX ? s.token_length_override : static_cast<uint32_t>(s.token.size());
  const std::size_t copy = std::min<std::size_t>(s.token.size(), wire::kTokenMax);
  if (version == 1) {
    ConnectRequestV1 req{};
    req.cache_id = s.cache_id;
    req.regions = s.regions;
    req.server_threads = s.server_threads;
    req.token_length = token_length;
    std::memcpy(req.token, s.token.data(), copy);
    return frame_of(wire::Kind::Connect, req, 1);
  }
  wire::ConnectRequest req{};
  req.cache_id = s.cache_id;
  req.regions = s.regions;
  req.server_threads = s.server_threads;
  req.token_length = token_length;
  req.flags = s.flags;
  std::memcpy(req.client_id, s.client_id.data(), s.client_id.size());
  std::memcpy(req.token, s.token.data(), copy);
  if (s.capability) {
    req.capability_length = sizeof(wire::Capability);
    req.capability = *s.capability;
  }
  return frame_of(wire::Kind::Connect, req, version);
}

// A version 2 Connect (what the conformance suite's malformed-input tests start from).
inline std::vector<uint8_t> connect_frame(uint64_t cache_id, uint32_t regions, const std::string& token,
                                          uint32_t token_length_override = UINT32_MAX) {
  ConnectSpec s;
  s.cache_id = cache_id;
  s.regions = regions;
  s.token = token;
  s.token_length_override = token_length_override;
  return connect_frame(s);
}

struct RawReply {
  bool received = false;
  wire::FrameHeader header{};
  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  std::string message() const { return std::string(reply.message, strnlen(reply.message, sizeof reply.message)); }
};

// Parses a ConnectReply frame held whole in [data, data + n).
inline RawReply parse_connect_reply(const uint8_t* data, std::size_t n, uint8_t version) {
  RawReply r;
  if (n < sizeof r.header + sizeof r.reply) return r;
  std::memcpy(&r.header, data, sizeof r.header);
  if (!raw_header_ok(r.header, wire::Kind::ConnectReply, n, version) || r.header.bytes != n) return r;
  std::memcpy(&r.reply, data + sizeof r.header, sizeof r.reply);
  const std::size_t count = (n - sizeof r.header - sizeof r.reply) / sizeof(wire::RegionDescriptor);
  r.regions.resize(count);
  if (count > 0)
    std::memcpy(r.regions.data(), data + sizeof r.header + sizeof r.reply, count * sizeof(wire::RegionDescriptor));
  r.received = true;
  return r;
}

// Reads a ConnectReply from a tcp stream.
inline RawReply read_connect_reply(int fd, int timeout_ms, uint8_t version = wire::kVersion) {
  wire::FrameHeader h{};
  if (!recv_exact(fd, &h, sizeof h, timeout_ms)) return {};
  if (!raw_header_ok(h, wire::Kind::ConnectReply, h.bytes, version)) return {};
  if (h.bytes < sizeof(wire::FrameHeader) + sizeof(wire::ConnectReply)) return {};
  std::vector<uint8_t> whole(h.bytes);
  std::memcpy(whole.data(), &h, sizeof h);
  if (!recv_exact(fd, whole.data() + sizeof h, whole.size() - sizeof h, timeout_ms)) return {};
  return parse_connect_reply(whole.data(), whole.size(), version);
}

// A raw tcp connection that has done its handshake (fd < 0 when it could not connect).
struct RawTcp {
  Fd sock;
  RawReply reply;
  bool ok() const { return sock.fd >= 0 && reply.received && reply.reply.status == RC_OK; }
};

inline void raw_tcp_connect(RawTcp& out, const std::string& endpoint, const ConnectSpec& spec, uint8_t version,
                            int timeout_ms) {
  out.sock.reset();
  out.reply = RawReply{};
  out.sock.fd = connect_tcp(endpoint);
  if (out.sock.fd < 0) return;
  const auto f = connect_frame(spec, version);
  if (!send_all(out.sock.fd, f.data(), f.size())) return;
  out.reply = read_connect_reply(out.sock.fd, timeout_ms, version);
}

struct RawEntry {
  wire::Op op;
  uint16_t region;
  uint64_t offset;
  uint32_t length;
  std::vector<uint8_t> payload;
};

inline std::vector<uint8_t> batch_frame(uint64_t seq, const std::vector<RawEntry>& entries,
                                        uint8_t version = wire::kVersion) {
  std::vector<uint8_t> f(sizeof(wire::FrameHeader));
  for (const auto& e : entries) {
    const wire::RequestEntry re{static_cast<uint8_t>(e.op), 0, e.region, e.length, e.offset};
    const auto* p = reinterpret_cast<const uint8_t*>(&re);
    f.insert(f.end(), p, p + sizeof re);
    if (e.op == wire::Op::Write) {
      f.insert(f.end(), e.payload.begin(), e.payload.end());
      f.resize(f.size() + (wire::pad8(e.length) - e.length), 0);
    }
  }
  const wire::FrameHeader h =
      frame_header(wire::Kind::Batch, static_cast<uint32_t>(f.size()), static_cast<uint32_t>(entries.size()), seq, version);
  std::memcpy(f.data(), &h, sizeof h);
  return f;
}

struct RawResponse {
  bool received = false;
  wire::FrameHeader header{};
  std::vector<wire::ResponseEntry> entries;
  std::vector<std::vector<uint8_t>> payloads;
};

// Parses a Response frame held whole; read payloads are kept for the entries the caller says are reads.
inline RawResponse parse_response(const uint8_t* data, std::size_t n, const std::vector<bool>& is_read, uint8_t version) {
  RawResponse r;
  if (n < sizeof r.header) return r;
  std::memcpy(&r.header, data, sizeof r.header);
  if (!raw_header_ok(r.header, wire::Kind::Response, n, version)) return r;
  r.received = true;
  if (r.header.flags & wire::kFlagAllOk) return r;
  const uint8_t* rest = data + sizeof r.header;
  const std::size_t rest_n = r.header.bytes - sizeof r.header;
  std::size_t pos = 0;
  for (uint32_t i = 0; i < r.header.count && pos + sizeof(wire::ResponseEntry) <= rest_n; ++i) {
    wire::ResponseEntry e;
    std::memcpy(&e, rest + pos, sizeof e);
    pos += sizeof e;
    std::vector<uint8_t> payload;
    if (i < is_read.size() && is_read[i] && e.status == RC_OK) {
      const std::size_t padded = wire::pad8(e.length);
      if (pos + padded > rest_n) break;
      payload.assign(rest + pos, rest + pos + e.length);
      pos += padded;
    }
    r.entries.push_back(e);
    r.payloads.push_back(std::move(payload));
  }
  return r;
}

// Reads one Response frame from a tcp stream.
inline RawResponse read_response(int fd, const std::vector<bool>& is_read, int timeout_ms,
                                 uint8_t version = wire::kVersion) {
  wire::FrameHeader h{};
  if (!recv_exact(fd, &h, sizeof h, timeout_ms)) return {};
  if (!raw_header_ok(h, wire::Kind::Response, h.bytes, version)) return {};
  std::vector<uint8_t> whole(h.bytes);
  std::memcpy(whole.data(), &h, sizeof h);
  if (!recv_exact(fd, whole.data() + sizeof h, whole.size() - sizeof h, timeout_ms)) return {};
  return parse_response(whole.data(), whole.size(), is_read, version);
}

// ---- raw shm: datagrams with fds, the handshake, the request ring ------------------------------------

// Sends one datagram, with one fd attached when pass_fd >= 0.
inline ssize_t send_packet(int fd, const void* data, std::size_t len, int pass_fd = -1) {
  iovec iov{const_cast<void*>(data), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof control);
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  return ::sendmsg(fd, &m, MSG_NOSIGNAL);
}

// Receives one datagram and the fds riding with it (owned by the caller); -1 on timeout or error.
inline ssize_t recv_packet(int fd, std::vector<uint8_t>& data, std::vector<int>& fds, int timeout_ms) {
  pollfd pf{fd, POLLIN, 0};
  int pr;
  do {
    pr = ::poll(&pf, 1, timeout_ms);
  } while (pr < 0 && errno == EINTR);
  if (pr <= 0) return -1;
  iovec iov{data.data(), data.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * 253));
  m.msg_control = control.data();
  m.msg_controllen = control.size();
  const ssize_t n = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int f = -1;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      fds.push_back(f);
    }
  }
  return n;
}

// A raw shm connection after its handshake: the socket, the reply and the fds the server handed over
// (segment, server doorbell, client doorbell, then the regions), all owned.
struct RawShm {
  Fd sock;
  RawReply reply;
  std::vector<int> fds;
  RawShm() = default;
  RawShm(const RawShm&) = delete;
  RawShm& operator=(const RawShm&) = delete;
  ~RawShm() { close_fds(); }
  bool ok() const { return reply.received && reply.reply.status == RC_OK && fds.size() >= 3; }
  int segment_fd() const { return fds.size() > 0 ? fds[0] : -1; }
  int server_bell_fd() const { return fds.size() > 1 ? fds[1] : -1; }
  int region_fd(std::size_t i) const {
    if (i >= reply.regions.size()) return -1;
    const uint64_t key = reply.regions[i].key;
    return key < fds.size() ? fds[key] : -1;
  }
  void close_fds() {
    for (int f : fds)
      if (f >= 0) ::close(f);
    fds.clear();
  }
};

inline void raw_shm_connect(RawShm& out, const std::string& path, const ConnectSpec& spec, uint8_t version,
                            int timeout_ms) {
  out.sock.reset();
  out.close_fds();
  out.reply = RawReply{};
  out.sock.fd = connect_unix_seqpacket(path);
  if (out.sock.fd < 0) return;
  const auto f = connect_frame(spec, version);
  if (send_packet(out.sock.fd, f.data(), f.size()) != static_cast<ssize_t>(f.size())) return;
  std::vector<uint8_t> buf(sizeof(wire::FrameHeader) + sizeof(wire::ConnectReply) + 253 * sizeof(wire::RegionDescriptor));
  const ssize_t n = recv_packet(out.sock.fd, buf, out.fds, timeout_ms);
  if (n <= 0) return;
  out.reply = parse_connect_reply(buf.data(), static_cast<std::size_t>(n), version);
}

// A shared mapping, unmapped when it goes.
struct Mapped {
  void* base = MAP_FAILED;
  std::size_t size = 0;
  Mapped() = default;
  Mapped(int fd, std::size_t n) : size(n) { base = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() { reset(); }
  bool ok() const { return base != MAP_FAILED; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(base); }
  void reset() {
    if (base != MAP_FAILED) ::munmap(base, size);
    base = MAP_FAILED;
  }
};

// The client's side of a raw shm connection's rings: sends Batch frames and reads the responses,
// as the library's shm client does (a server polls, or sleeps until its doorbell rings).
class RawShmRings {
 public:
  explicit RawShmRings(const RawShm& conn)
      : segment_(conn.segment_fd(), rc::transport::shm::kSegmentBytes), bell_(conn.server_bell_fd()) {
    if (!segment_.ok()) return;
    header_ = reinterpret_cast<rc::transport::shm::SegmentHeader*>(segment_.base);
    auto* rings = segment_.bytes() + sizeof(rc::transport::shm::SegmentHeader);
    requests_.emplace(header_->request_head, header_->request_tail, reinterpret_cast<std::byte*>(rings),
                      rc::transport::shm::kRingBytes);
    responses_.emplace(header_->response_head, header_->response_tail,
                       reinterpret_cast<std::byte*>(rings + rc::transport::shm::kRingBytes),
                       rc::transport::shm::kRingBytes);
  }
  bool ok() const { return header_ != nullptr; }

  // Sends a frame and waits for the next response frame; false on timeout or a broken ring.
  bool exchange(const std::vector<uint8_t>& frame, std::vector<uint8_t>& response, int timeout_ms) {
    if (!ok()) return false;
    if (requests_->write({reinterpret_cast<const std::byte*>(frame.data()), frame.size()}) != RC_OK) return false;
    if (header_->server_sleeping.load() != 0) {
      const uint64_t one = 1;
      (void)!::write(bell_, &one, sizeof one);
    }
    const auto deadline = Clock::now() + ms(timeout_ms);
    while (Clock::now() < deadline) {
      std::span<const std::byte> got;
      const Status st = responses_->peek(got);
      if (st == RC_OK) {
        response.assign(reinterpret_cast<const uint8_t*>(got.data()), reinterpret_cast<const uint8_t*>(got.data()) + got.size());
        responses_->release();
        return true;
      }
      if (st != RC_E_BUSY) return false;
      std::this_thread::sleep_for(200us);
    }
    return false;
  }

 private:
  using Status = rc::Status;
  Mapped segment_;
  int bell_;
  rc::transport::shm::SegmentHeader* header_ = nullptr;
  std::optional<rc::transport::shm::RingWriter> requests_;
  std::optional<rc::transport::shm::RingReader> responses_;
};

// ---- /proc, keys, capabilities ---------------------------------------------------------------------

// A "Field:   N kB" line of /proc/<pid>/status, in bytes; 0 when it cannot be read.
inline uint64_t proc_status_bytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
  }
  return 0;
}

// utime + stime of a process, in clock ticks.
inline uint64_t proc_cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(all.substr(close + 2));
  std::string f;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
    if (i == 15) {
      stime = std::strtoull(f.c_str(), nullptr, 10);
      break;
    }
  }
  return utime + stime;
}

// The share of one core a process used over the next `window_ms`.
inline double cpu_share(pid_t pid, int window_ms) {
  const uint64_t t0 = proc_cpu_ticks(pid);
  const auto c0 = Clock::now();
  std::this_thread::sleep_for(ms(window_ms));
  const uint64_t t1 = proc_cpu_ticks(pid);
  const double secs = std::chrono::duration<double>(Clock::now() - c0).count();
  return static_cast<double>(t1 - t0) / static_cast<double>(::sysconf(_SC_CLK_TCK)) / secs;
}

inline uint64_t unix_now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// An admission key in a file of the given mode, removed when it goes.
struct KeyFile {
  std::string path;
  std::vector<uint8_t> key;
  explicit KeyFile(mode_t mode = 0600, std::size_t bytes = 32) : key(bytes) {
    static std::atomic<int> counter{0};
    path = "/tmp/rc-test-key-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    std::random_device rd;
    for (auto& b : key) b = static_cast<uint8_t>(rd());
    ::unlink(path.c_str());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)!::write(fd, key.data(), key.size());
      ::fchmod(fd, mode);
      ::close(fd);
    }
  }
  KeyFile(const KeyFile&) = delete;
  KeyFile& operator=(const KeyFile&) = delete;
  ~KeyFile() { ::unlink(path.c_str()); }
};

// A capability's text form (rc_capability_mint); "" on failure (the test then fails on the open).
inline std::string mint(const std::vector<uint8_t>& key, uint64_t cache_id, const std::string& server_id,
                        uint32_t regions, uint64_t expires_unix_ms) {
  char text[RC_MAX_CAPABILITY_TEXT] = {};
  if (rc_capability_mint(key.data(), key.size(), cache_id, server_id.c_str(), regions, expires_unix_ms, text,
                         sizeof text) != RC_OK)
    return "";
  return text;
}

// A command's exit status and output (stdout and stderr), for the tests of the command-line tools.
struct Command {
  int exit_code = -1;
  std::string out;
};

inline Command run_tool(const char* tool, const std::vector<std::string>& args) {
  std::string line = tool;
  for (const auto& a : args) line += " '" + a + "'";
  line += " 2>&1";
  Command c;
  FILE* p = ::popen(line.c_str(), "r");
  if (p == nullptr) return c;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) c.out.append(buf, n);
  const int status = ::pclose(p);
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return c;
}

// An admin handle closed at the end of its scope (close() to check the status).
struct AdminHandle {
  rc_admin* a = nullptr;
  AdminHandle() = default;
  AdminHandle(const AdminHandle&) = delete;
  AdminHandle& operator=(const AdminHandle&) = delete;
  ~AdminHandle() {
    if (a != nullptr) rc_admin_close(a);
  }
  rc_status close() {
    const rc_status st = rc_admin_close(a);
    a = nullptr;
    return st;
  }
};

}  // namespace rctest
