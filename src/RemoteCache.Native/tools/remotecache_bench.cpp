// remotecache-bench: drives a RemoteCache server through the public C API and reports throughput
// and latency for one (transport, op, size, c, s, b, q) configuration.
//
// Only <remotecache/remotecache.h> is used, so the numbers are what a real client would see.
// By default the server runs as a separate process (as in production) rather than embedded, so
// client and server threads do not share one address space, allocator or scheduler group.
#include <remotecache/remotecache.h>
#include <remotecache/remotecache_admin.h>

#include "size_arg.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kRegionSize = 64ull << 20;  // must match the --region-size given to the server
constexpr int kServerReadyTimeoutMs = 10000;
// Empty rc_poll calls before falling back to rc_wait(1 ms). Polling first matters when c = 0:
// then the application thread's poll is what moves requests and responses.
constexpr uint32_t kPollsBeforeWait = 4096;
// Ops older than op_timeout_ms (default 10 s) must fail by themselves; past this the library hung.
constexpr auto kDrainDeadline = std::chrono::seconds(15);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- options --------------------------------------------------------------------------------

enum class Op { Read, Write, Mix, Connect, Pull };
const char* op_name(Op op) {
  switch (op) {
    case Op::Read: return "read";
    case Op::Write: return "write";
    case Op::Mix: return "mix";
    case Op::Connect: return "connect";
    case Op::Pull: return "pull";
  }
  return "?";
}

struct Options {
  std::string transport = "shm";
  std::string connect;  // non-empty: use this server, spawn nothing
  Op op = Op::Read;
  uint64_t size = 8;
  uint32_t batch = 1, qdepth = 1, client_threads = 0, server_threads = 1, app_threads = 1;
  uint32_t window = 0;  // 0 until resolved to b*q
  uint32_t busy_threads = 0;
  double seconds = 3.0, warmup = 0.5;
  uint64_t cache_bytes = 256ull << 20;
  bool json = false;
  bool submit_time = false;
};

constexpr const char* kUsage =
    "usage: remotecache-bench [options]\n"
    "  --transport shm|tcp|verbs  transport of the spawned server (default shm; verbs listens on\n"
    "                             $RC_VERBS_ADDR, an RDMA-capable interface's IPv4 address)\n"
    "  --connect ENDPOINT         use a running server instead of spawning one\n"
    "  --op read|write|mix        operation (mix = 50/50; default read)\n"
    "  --op connect               time rc_cache_open instead: the open that creates a cache of\n"
    "                             --cache-bytes, then opens that join it while it stays open (for\n"
    "                             --seconds, at least 3); reports the first and the joins' p50\n"
    "  --op pull                  time a region pull (live migration) between two servers started in\n"
    "                             this process, over --transport, of one region of --cache-bytes;\n"
    "                             3 pulls, reports the median's MiB/s (--connect does not apply)\n"
    "  --size BYTES               bytes per operation (K/M/G suffixes; default 8)\n"
    "  --batch b  --qdepth q      batch size and queue depth (default 1, 1)\n"
    "  --client-threads c         client threads (default 0: application thread does the work)\n"
    "  --server-threads s         server threads (default 1)\n"
    "  --app-threads N            application threads, one session each (default 1)\n"
    "  --window W                 operations outstanding per app thread (default b*q)\n"
    "  --busy-threads N           N more threads that only burn CPU while the benchmark runs: other\n"
    "                             work competing for the cores (default 0)\n"
    "  --seconds T  --warmup T    measurement and warm-up time (default 3, 0.5)\n"
    "  --cache-bytes BYTES        cache size, rounded up to 64M regions (default 256M)\n"
    "  --json                     one JSON object per line instead of a table\n"
    "  --submit-time              also measure the time spent inside rc_read/rc_write (one more clock\n"
    "                             read per operation); shows how much of the latency the submitting\n"
    "                             call itself takes\n";

uint64_t parse_size(const std::string& flag, const std::string& text) {
  const auto value = rc::tools::parse_size(text);
  if (!value) throw UsageError(flag + ": not a size (a number with an optional K, M or G): '" + text + "'");
  return *value;
}

uint32_t parse_u32(const std::string& flag, const std::string& text, uint32_t min, uint32_t max) {
  const uint64_t value = parse_size(flag, text);
  if (value < min || value > max) {
    throw UsageError(flag + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<uint32_t>(value);
}

double parse_seconds(const std::string& flag, const std::string& text, bool allow_zero) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end != text.size() || !std::isfinite(value) || value < 0 || (!allow_zero && value == 0)) {
    throw UsageError(flag + ": bad duration '" + text + "'");
  }
  return value;
}

// Returns nullopt when --help was printed.
std::optional<Options> parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    constexpr uint32_t kMaxCount = 1u << 20;
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return std::nullopt;
    } else if (flag == "--json") {
      o.json = true;
    } else if (flag == "--submit-time") {
      o.submit_time = true;
    } else if (flag == "--transport") {
      o.transport = value();
      if (o.transport != "shm" && o.transport != "tcp" && o.transport != "verbs") {
        throw UsageError("--transport must be shm, tcp or verbs");
      }
    } else if (flag == "--connect") {
      o.connect = value();
    } else if (flag == "--op") {
      const std::string v = value();
      if (v == "read") o.op = Op::Read;
      else if (v == "write") o.op = Op::Write;
      else if (v == "mix") o.op = Op::Mix;
      else if (v == "connect") o.op = Op::Connect;
      else if (v == "pull") o.op = Op::Pull;
      else throw UsageError("--op must be read, write, mix, connect or pull");
    } else if (flag == "--size") {
      o.size = parse_size(flag, value());
      if (o.size == 0) throw UsageError("--size must be positive");
    } else if (flag == "--batch") {
      o.batch = parse_u32(flag, value(), 1, kMaxCount);  // the library validates its own limits
    } else if (flag == "--qdepth") {
      o.qdepth = parse_u32(flag, value(), 1, kMaxCount);
    } else if (flag == "--client-threads") {
      o.client_threads = parse_u32(flag, value(), 0, 4096);
    } else if (flag == "--server-threads") {
      o.server_threads = parse_u32(flag, value(), 0, 4096);
    } else if (flag == "--app-threads") {
      o.app_threads = parse_u32(flag, value(), 1, 4096);
    } else if (flag == "--busy-threads") {
      o.busy_threads = parse_u32(flag, value(), 0, 4096);
    } else if (flag == "--window") {
      o.window = parse_u32(flag, value(), 1, kMaxCount);
    } else if (flag == "--seconds") {
      o.seconds = parse_seconds(flag, value(), false);
    } else if (flag == "--warmup") {
      o.warmup = parse_seconds(flag, value(), true);
    } else if (flag == "--cache-bytes") {
      o.cache_bytes = parse_size(flag, value());
      if (o.cache_bytes == 0) throw UsageError("--cache-bytes must be positive");
    } else {
      throw UsageError("unknown option '" + flag + "'");
    }
  }
  if (o.window == 0) {
    const uint64_t bq = uint64_t{o.batch} * o.qdepth;
    if (bq > (1u << 20)) throw UsageError("--batch * --qdepth too large for the default window");
    o.window = static_cast<uint32_t>(bq);
  }
  return o;
}

// ---- latency histogram ----------------------------------------------------------------------

// Log-linear buckets (HdrHistogram layout): exact below 256 ns, then 128 linear sub-buckets per
// power of two, i.e. under 0.8% relative error up to 10 s, in 3584 counters (28 KiB per thread).
class Histogram {
 public:
  void record(int64_t ns) {
    const uint64_t v = std::min<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(ns, 0)), kMax);
    ++counts_[index_of(v)];
    ++count_;
    sum_ += v;
  }
  void merge(const Histogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
  }
  double percentile_us(double p) const {
    if (count_ == 0) return 0;
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(count_))));
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return static_cast<double>(value_of(i)) / 1000.0;
    }
    return static_cast<double>(kMax) / 1000.0;
  }
  double mean_us() const {
    return count_ == 0 ? 0 : static_cast<double>(sum_) / static_cast<double>(count_) / 1000.0;
  }

 private:
  static constexpr unsigned kSubBits = 8;
  static constexpr uint64_t kSub = 1u << kSubBits, kHalf = kSub / 2;
  static constexpr uint64_t kMax = 10'000'000'000;  // 10 s
  static constexpr size_t kBuckets = kSub + (std::bit_width(kMax) - kSubBits) * kHalf;

  static size_t index_of(uint64_t v) {
    if (v < kSub) return static_cast<size_t>(v);
    const unsigned shift = static_cast<unsigned>(std::bit_width(v)) - kSubBits;  // v >> shift in [128, 256)
    return static_cast<size_t>(kSub + (shift - 1) * kHalf + ((v >> shift) - kHalf));
  }
  static uint64_t value_of(size_t index) {  // bucket midpoint
    if (index < kSub) return index;
    const uint64_t j = index - kSub;
    const uint64_t shift = j / kHalf + 1;
    return ((j % kHalf + kHalf) << shift) + (uint64_t{1} << (shift - 1));
  }

  std::vector<uint64_t> counts_ = std::vector<uint64_t>(kBuckets);
  uint64_t count_ = 0, sum_ = 0;
};

// ---- server process -------------------------------------------------------------------------

// The signal handler needs these to stop the server when the bench itself is interrupted;
// PR_SET_PDEATHSIG covers the case where the bench dies without running any handler.
volatile sig_atomic_t g_server_pid = 0;
char g_socket_path[128];

extern "C" void on_fatal_signal(int sig) {
  if (g_server_pid > 0) kill(static_cast<pid_t>(g_server_pid), SIGTERM);
  if (g_socket_path[0] != '\0') unlink(g_socket_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

std::string server_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error(std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  std::string self(buf, static_cast<size_t>(n));
  std::string exe = self.substr(0, self.rfind('/') + 1) + "remotecache-server";
  if (access(exe.c_str(), X_OK) != 0) throw std::runtime_error(exe + ": " + std::strerror(errno));
  return exe;
}

// Owns a spawned remotecache-server: the destructor always stops it, so every error path
// (exceptions included) leaves no server behind.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    std::vector<char*> argv;  // built before fork: the child must not allocate
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the bench died before prctl took effect
      execv(argv[0], argv.data());
      const char msg[] = "remotecache-bench: exec remotecache-server failed\n";
      const ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    pid_ = pid;
    g_server_pid = pid;
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  ~ServerProcess() {
    stop(0);
    if (forwarder_.joinable()) forwarder_.join();
    if (fd_ >= 0) close(fd_);
    if (g_socket_path[0] != '\0') unlink(g_socket_path);  // in case the server could not remove it
  }

  // Reads `listening <endpoint>` lines up to `ready`; returns the first endpoint.
  std::string wait_ready() {
    std::string buf;
    std::vector<std::string> endpoints;
    const auto deadline = Clock::now() + std::chrono::milliseconds(kServerReadyTimeoutMs);
    for (;;) {
      for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("listening ", 0) == 0) {
          endpoints.push_back(line.substr(10));
        } else if (line == "ready") {
          if (endpoints.empty()) throw std::runtime_error("server said ready without listening on anything");
          start_forwarder(std::move(buf));
          return endpoints.front();
        } else {
          std::fprintf(stderr, "[server] %s\n", line.c_str());
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw std::runtime_error("server not ready after " + std::to_string(kServerReadyTimeoutMs) + " ms");
      pollfd p{fd_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(left));
      if (r <= 0) {
        if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
        continue;
      }
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("read server stdout: ") + std::strerror(errno));
      if (n == 0) throw std::runtime_error("server exited before ready (" + describe(stop(1000)) + ")");
      buf.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  // The server may keep printing; someone must read its stdout or it blocks on a full pipe.
  void start_forwarder(std::string pending) {
    forwarder_ = std::thread([fd = fd_, pending = std::move(pending)] {
      if (!pending.empty()) std::fwrite(pending.data(), 1, pending.size(), stderr);
      char chunk[4096];
      for (ssize_t n; (n = read(fd, chunk, sizeof chunk)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        std::fwrite(chunk, 1, static_cast<size_t>(n), stderr);
      }
    });
  }

  // Gives the server grace_ms to exit on its own, then SIGTERM, then SIGKILL; returns wait status.
  int stop(int grace_ms) {
    if (pid_ <= 0) return status_;
    auto wait_until = [&](std::chrono::milliseconds budget) {
      const auto end = Clock::now() + budget;
      do {
        if (waitpid(pid_, &status_, WNOHANG) == pid_) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } while (Clock::now() < end);
      return false;
    };
    if (!wait_until(std::chrono::milliseconds(grace_ms))) {
      kill(pid_, SIGTERM);
      if (!wait_until(std::chrono::seconds(5))) {
        std::fprintf(stderr, "remotecache-bench: server ignored SIGTERM for 5 s; killing it\n");
        kill(pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
      }
    }
    pid_ = 0;
    g_server_pid = 0;
    return status_;
  }

  static std::string describe(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

  pid_t pid_ = 0;
  int fd_ = -1;
  int status_ = 0;
  std::thread forwarder_;
};

std::string listen_endpoint(const std::string& transport) {
  if (transport == "shm") return "shm:" + std::string(g_socket_path);
  if (transport == "verbs") {
    // rdma_cm needs the address of an RDMA-capable interface (loopback has no RDMA device).
    const char* addr = std::getenv("RC_VERBS_ADDR");
    return "verbs:" + std::string(addr != nullptr ? addr : "127.0.0.1") + ":0";
  }
  return transport + ":127.0.0.1:0";
}

// ---- workers --------------------------------------------------------------------------------

enum Phase : int { kWarmup, kMeasure, kStop };

struct Shared {
  explicit Shared(uint32_t app_threads) : start(static_cast<std::ptrdiff_t>(app_threads) + 1) {}
  rc_cache* cache = nullptr;
  uint64_t capacity = 0;
  std::atomic<int> phase{kWarmup};
  std::atomic<bool> abort{false};  // a worker cannot continue: end the run early
  std::barrier<> start;
};

struct ErrorLog {
  uint64_t count = 0;
  int32_t first_status = RC_OK;
  int64_t first_at_ns = 0;
  std::string first_text;

  void add(int32_t status, const std::string& what, bool with_last_error = true) {
    ++count;
    if (first_status != RC_OK) return;
    first_status = status;
    first_at_ns = now_ns();
    first_text = what;
    if (with_last_error) first_text += std::string(": ") + rc_last_error();
  }
};

// xorshift64*: a few cycles per address, so the RNG never shows up next to a 1-µs operation.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed != 0 ? seed : 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }

 private:
  uint64_t s_;
};

class Worker {
 public:
  // Allocates here, on the main thread, so an allocation failure surfaces before threads start.
  Worker(Shared& shared, const Options& opt, uint64_t seed)
      : shared_(shared), opt_(opt), rng_(seed), buffers_(opt.window * opt.size, std::byte{0x5a}),
        submit_ns_(opt.window), in_flight_(opt.window), completions_(opt.window),
        aligned_slots_(shared.capacity / opt.size) {
    for (uint64_t slot = opt.window; slot-- > 0;) free_slots_.push_back(slot);
  }

  void run() {
    const rc_status st = rc_session_open(shared_.cache, &session_);
    if (st != RC_OK) {
      errors.add(st, "rc_session_open");
      shared_.abort = true;
    }
    shared_.start.arrive_and_wait();  // every thread starts the clock together
    if (st != RC_OK) return;
    while (shared_.phase.load(std::memory_order_relaxed) != kStop) {
      if (!fill_window() || !collect()) {
        shared_.abort = true;
        break;
      }
    }
    drain();
  }

  Histogram latency;
  Histogram submit;  // time inside rc_read/rc_write, with --submit-time
  uint64_t ops = 0;  // successful completions inside the measurement window
  ErrorLog errors;
  bool session_leaked = false;

 private:
  // Submits until W are outstanding or the session says BUSY. False on a fatal submit error.
  bool fill_window() {
    while (!free_slots_.empty()) {
      const uint64_t slot = free_slots_.back();
      const uint64_t address = (rng_.next() % aligned_slots_) * opt_.size;
      std::byte* buf = buffers_.data() + slot * opt_.size;
      const bool write = opt_.op == Op::Write || (opt_.op == Op::Mix && (rng_.next() & 1) != 0);
      submit_ns_[slot] = now_ns();
      const rc_status st = write ? rc_write(session_, address, buf, opt_.size, slot)
                                 : rc_read(session_, address, buf, opt_.size, slot);
      if (opt_.submit_time && st == RC_OK && shared_.phase.load(std::memory_order_relaxed) == kMeasure)
        submit.record(now_ns() - submit_ns_[slot]);
      if (st == RC_E_BUSY) break;
      if (st != RC_OK) {
        errors.add(st, write ? "rc_write" : "rc_read");
        return false;
      }
      in_flight_[slot] = write ? kWriting : kReading;
      free_slots_.pop_back();
    }
    return true;
  }

  bool collect() {
    const auto max = static_cast<uint32_t>(completions_.size());
    int32_t n = rc_poll(session_, completions_.data(), max);
    // With c > 0 polling moves nothing: waiting at once leaves the cores to the client threads.
    const uint32_t polls_before_wait = opt_.client_threads > 0 ? 1 : kPollsBeforeWait;
    if (n == 0 && ++idle_polls_ >= polls_before_wait) n = rc_wait(session_, completions_.data(), max, 1);
    if (n < 0) {
      errors.add(n, "rc_poll/rc_wait");
      return false;
    }
    if (n == 0) return true;
    idle_polls_ = 0;
    const int64_t now = now_ns();  // one clock read per batch of completions
    const bool measuring = shared_.phase.load(std::memory_order_relaxed) == kMeasure;
    for (int32_t i = 0; i < n; ++i) complete(completions_[static_cast<size_t>(i)], now, measuring);
    return true;
  }

  void complete(const rc_completion& c, int64_t now, bool measuring) {
    if (c.tag >= in_flight_.size() || in_flight_[c.tag] == kIdle) {
      errors.add(RC_E_PROTOCOL, "completion for tag " + std::to_string(c.tag) + " that is not in flight", false);
      return;
    }
    const bool was_write = in_flight_[c.tag] == kWriting;
    in_flight_[c.tag] = kIdle;
    free_slots_.push_back(c.tag);
    if (c.status != RC_OK) {
      errors.add(c.status, was_write ? "write completion" : "read completion");
    } else if (measuring) {
      ++ops;
      latency.record(now - submit_ns_[c.tag]);
    }
  }

  // Buffers must outlive their operations, so every outstanding op is collected before close.
  void drain() {
    const auto deadline = Clock::now() + kDrainDeadline;
    const auto max = static_cast<uint32_t>(completions_.size());
    while (rc_session_outstanding(session_) > 0 && Clock::now() < deadline) {
      const int32_t n = rc_wait(session_, completions_.data(), max, 100);
      if (n < 0) {
        errors.add(n, "rc_wait while draining");
        break;
      }
      for (int32_t i = 0; i < n; ++i) complete(completions_[static_cast<size_t>(i)], 0, false);
    }
    if (const uint32_t left = rc_session_outstanding(session_); left > 0) {
      // Closing would block on ops that never finish; leave the session (and cache) open.
      errors.add(RC_E_TIMEOUT, std::to_string(left) + " operations still outstanding after draining", false);
      session_leaked = true;
      return;
    }
    if (const rc_status st = rc_session_close(session_); st != RC_OK) errors.add(st, "rc_session_close");
  }

  Shared& shared_;
  const Options& opt_;
  Rng rng_;
  std::vector<std::byte> buffers_;   // slot i's buffer is [i*size, (i+1)*size); the tag is i
  std::vector<int64_t> submit_ns_;
  enum : uint8_t { kIdle, kReading, kWriting };
  std::vector<uint8_t> in_flight_;   // per slot; also catches duplicate or unknown completions
  std::vector<uint64_t> free_slots_;
  std::vector<rc_completion> completions_;
  uint64_t aligned_slots_;
  uint32_t idle_polls_ = 0;
  rc_session* session_ = nullptr;
};

// ---- run ------------------------------------------------------------------------------------

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Throws, naming `what`, the status and the library's last error, unless `st` is RC_OK.
void check(rc_status st, const std::string& what) {
  if (st != RC_OK) throw std::runtime_error(what + ": " + rc_status_name(st) + ": " + rc_last_error());
}

rc_cache* open_cache(const Options& opt, const std::string& endpoint, uint64_t cache_id = random_u64()) {
  const uint64_t regions = (opt.cache_bytes + kRegionSize - 1) / kRegionSize;
  if (regions > UINT32_MAX) throw std::runtime_error("--cache-bytes too large");
  // Twice the window so a full window never hits BUSY while completions wait to be polled.
  const uint64_t capacity = std::max<uint64_t>(1024, std::bit_ceil(2 * uint64_t{opt.window}));
  rc_cache_options o{};
  o.cache_id = cache_id;
  o.token = "bench";
  o.regions_per_server = static_cast<uint32_t>(regions);
  o.config = rc_config{opt.client_threads, opt.server_threads, opt.batch, opt.qdepth};
  o.session_capacity = static_cast<uint32_t>(std::min<uint64_t>(capacity, UINT32_MAX));
  // Over verbs the server registers (pins) every region of the cache before it replies: 256 MiB took more
  // than the default 5 s once in an emulated (qemu TCG) guest. A refused or dead server still fails at once.
  o.connect_timeout_ms = 30000;
  const char* endpoints[] = {endpoint.c_str()};
  rc_cache* cache = nullptr;
  check(rc_cache_open(endpoints, 1, &o, &cache), "rc_cache_open(" + endpoint + ")");
  return cache;
}

void sleep_unless_aborted(double seconds, const std::atomic<bool>& abort) {
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!abort.load() && Clock::now() < end) {
    std::this_thread::sleep_for(std::min<Clock::duration>(end - Clock::now(), std::chrono::milliseconds(10)));
  }
}

struct Report {
  std::string transport;
  double seconds = 0;
  uint64_t ops = 0;
  Histogram latency;
  Histogram submit;
  ErrorLog errors;
};

std::string submit_json(const Options& opt, const Report& r) {
  if (!opt.submit_time) return "";
  char text[96];
  std::snprintf(text, sizeof text, ",\"submit_p50_us\":%.3f,\"submit_mean_us\":%.3f", r.submit.percentile_us(0.50),
                r.submit.mean_us());
  return text;
}

void print_report(const Options& opt, const Report& r) {
  const double ops_per_sec = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
  const double p50 = r.latency.percentile_us(0.50), p99 = r.latency.percentile_us(0.99);
  const double p999 = r.latency.percentile_us(0.999);
  if (opt.json) {
    std::printf("{\"transport\":\"%s\",\"op\":\"%s\",\"size\":%" PRIu64 ",\"batch\":%u,\"qdepth\":%u,"
                "\"client_threads\":%u,\"server_threads\":%u,\"app_threads\":%u,\"window\":%u,"
                "\"busy_threads\":%u,\"seconds\":%.3f,\"ops\":%" PRIu64 ",\"ops_per_sec\":%.1f,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                "\"p999_us\":%.3f,\"mean_us\":%.3f,\"errors\":%" PRIu64 "%s}\n",
                r.transport.c_str(), op_name(opt.op), opt.size, opt.batch, opt.qdepth, opt.client_threads,
                opt.server_threads, opt.app_threads, opt.window, opt.busy_threads, r.seconds, r.ops, ops_per_sec, p50, p99,
                p999, r.latency.mean_us(), r.errors.count, submit_json(opt, r).c_str());
  } else {
    std::printf("%-9s %-5s %8s %4s %3s %3s %3s %4s %12s %9s %9s %9s\n", "transport", "op", "size", "b", "q",
                "c", "s", "app", "ops/s", "p50_us", "p99_us", "p999_us");
    std::printf("%-9s %-5s %8" PRIu64 " %4u %3u %3u %3u %4u %12.0f %9.2f %9.2f %9.2f\n", r.transport.c_str(),
                op_name(opt.op), opt.size, opt.batch, opt.qdepth, opt.client_threads, opt.server_threads,
                opt.app_threads, ops_per_sec, p50, p99, p999);
    if (opt.submit_time) {
      std::printf("inside rc_%s: p50 %.2f us, mean %.2f us\n", op_name(opt.op), r.submit.percentile_us(0.50),
                  r.submit.mean_us());
    }
  }
  std::fflush(stdout);
}

// --op connect: how long rc_cache_open takes to create a cache, then to join it (a new client's connection
// to a cache that exists: over verbs, what a connection costs the server beyond the cache itself).
int run_connect(const Options& opt, const std::string& transport, const std::string& endpoint) {
  const uint64_t id = random_u64();
  auto timed_open = [&](double& ms) {
    const int64_t t0 = now_ns();
    rc_cache* c = open_cache(opt, endpoint, id);
    ms = static_cast<double>(now_ns() - t0) / 1e6;
    return c;
  };
  double first_ms = 0;
  rc_cache* first = timed_open(first_ms);
  std::vector<double> joins;
  const int64_t end = now_ns() + static_cast<int64_t>(opt.seconds * 1e9);
  try {
    while (joins.size() < 3 || now_ns() < end) {
      double ms = 0;
      rc_cache* c = timed_open(ms);
      joins.push_back(ms);
      rc_cache_close(c);
    }
  } catch (...) {
    rc_cache_close(first);
    throw;
  }
  rc_cache_close(first);
  std::sort(joins.begin(), joins.end());
  const double p50 = joins[joins.size() / 2];
  if (opt.json) {
    std::printf("{\"transport\":\"%s\",\"op\":\"connect\",\"cache_bytes\":%" PRIu64
                ",\"first_ms\":%.3f,\"join_p50_ms\":%.3f,\"join_min_ms\":%.3f,\"joins\":%zu}\n",
                transport.c_str(), opt.cache_bytes, first_ms, p50, joins.front(), joins.size());
  } else {
    std::printf("%-9s %-8s %12s %10s %12s %12s %6s\n", "transport", "op", "cache_bytes", "first_ms", "join_p50_ms",
                "join_min_ms", "joins");
    std::printf("%-9s %-8s %12" PRIu64 " %10.2f %12.2f %12.2f %6zu\n", transport.c_str(), "connect", opt.cache_bytes,
                first_ms, p50, joins.front(), joins.size());
  }
  std::fflush(stdout);
  return 0;
}

// ---- --op pull ------------------------------------------------------------------------------

// A server in this process, stopped on destruction.
struct EmbeddedServer {
  rc_server* server = nullptr;
  EmbeddedServer(const std::vector<std::string>& listen, uint64_t region_size, const std::vector<uint8_t>& key,
                 const std::string& id) {
    std::vector<const char*> l;
    for (const auto& e : listen) l.push_back(e.c_str());
    rc_server_options o{};
    o.listen = l.data();
    o.listen_count = l.size();
    o.region_size = region_size;
    o.memory_limit = region_size;
    o.admission_key = key.data();
    o.admission_key_length = key.size();
    o.server_id = id.c_str();
    check(rc_server_start(&o, &server), "starting server " + id);
  }
  ~EmbeddedServer() { rc_server_stop(server); }
  EmbeddedServer(const EmbeddedServer&) = delete;
  EmbeddedServer& operator=(const EmbeddedServer&) = delete;
  std::string endpoint(size_t i) const { return rc_server_endpoint(server, i); }
};

// One operation on `session`, waited for.
void wait_one(rc_session* session, const std::string& what) {
  rc_completion c{};
  if (rc_wait(session, &c, 1, 30000) != 1) throw std::runtime_error(what + ": no completion within 30 s");
  check(static_cast<rc_status>(c.status), what);
}

// One region of --cache-bytes on a source server, pulled by a target server over --transport (the admin
// connection goes over tcp): the time the target reports for the copy, the median of three pulls.
int run_pull(const Options& opt) {
  std::vector<uint8_t> key(32);
  std::random_device rd;
  for (auto& b : key) b = static_cast<uint8_t>(rd());
  const uint64_t region = opt.cache_bytes;
  auto data_endpoint = [&](const char* role) {
    if (opt.transport != "shm") return listen_endpoint(opt.transport);
    return "shm:/tmp/rc-bench-pull-" + std::to_string(getpid()) + "-" + role + ".sock";
  };
  EmbeddedServer source({"tcp:127.0.0.1:0", data_endpoint("source")}, region, key, "source");
  EmbeddedServer target({"tcp:127.0.0.1:0", data_endpoint("target")}, region, key, "target");
  const uint64_t id = random_u64();
  const uint64_t expires = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count()) +
      3600'000;
  auto open_on = [&](const std::string& server_id, const std::string& endpoint) {
    char cap[512];
    check(rc_capability_mint(key.data(), key.size(), id, server_id.c_str(), 1, expires, cap, sizeof cap), "minting");
    const char* caps[] = {cap};
    const char* eps[] = {endpoint.c_str()};
    rc_cache_options o{};
    o.cache_id = id;
    o.token = "bench-pull";
    o.regions_per_server = 1;
    o.config = rc_config{0, 1, 1, 1};
    o.connect_timeout_ms = 60000;  // the first connection over verbs pins the region
    o.capabilities = caps;
    rc_cache* c = nullptr;
    check(rc_cache_open(eps, 1, &o, &c), "opening the cache on " + endpoint);
    return c;
  };
  rc_cache* on_source = open_on("source", source.endpoint(1));
  rc_cache* on_target = open_on("target", target.endpoint(1));
  // Distinct words spread over the region: the pull must carry every one of them.
  constexpr uint64_t kSamples = 256;
  rc_session* s = nullptr;
  check(rc_session_open(on_source, &s), "a session on the source");
  std::vector<uint64_t> words(kSamples);
  for (uint64_t i = 0; i < kSamples; ++i) {
    words[i] = splitmix64(id + i);
    check(rc_write(s, (region / kSamples) * i, &words[i], 8, i), "writing a sample");
    wait_one(s, "writing a sample");
  }
  rc_session_close(s);

  char mig[512];
  check(rc_capability_mint_migration(key.data(), key.size(), id, "source", expires, mig, sizeof mig), "minting");
  rc_admin* admin = nullptr;
  const std::string admin_ep = target.endpoint(0);
  check(rc_admin_connect(admin_ep.c_str(), key.data(), key.size(), 0, &admin), "admin connect to the target");
  const std::string source_data = source.endpoint(1);
  std::vector<double> seconds;
  bool one_sided = false;
  for (int round = 0; round < 3; ++round) {
    rc_pull_request r{};
    r.cache_id = id;
    r.source_endpoint = source_data.c_str();
    r.source_capability = mig;
    rc_pull_result result{};
    check(rc_admin_pull_region(admin, &r, &result), "pulling from " + source_data);
    seconds.push_back(static_cast<double>(result.elapsed_ns) / 1e9);
    one_sided = result.one_sided != 0;
  }
  rc_admin_close(admin);

  check(rc_session_open(on_target, &s), "a session on the target");
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kSamples; ++i) {
    uint64_t got = 0;
    check(rc_read(s, (region / kSamples) * i, &got, 8, i), "reading a sample");
    wait_one(s, "reading a sample");
    wrong += got != words[i] ? 1 : 0;
  }
  rc_session_close(s);
  rc_cache_close(on_target);
  rc_cache_close(on_source);
  if (wrong != 0) throw std::runtime_error(std::to_string(wrong) + " of " + std::to_string(kSamples) +
                                           " sampled words differ on the target after the pull");

  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double mib_per_s = static_cast<double>(region) / 1048576.0 / median;
  if (opt.json) {
    std::printf("{\"transport\":\"%s\",\"op\":\"pull\",\"bytes\":%" PRIu64
                ",\"seconds\":%.4f,\"min_seconds\":%.4f,\"mib_per_s\":%.1f,\"one_sided\":%s}\n",
                opt.transport.c_str(), region, median, seconds.front(), mib_per_s, one_sided ? "true" : "false");
  } else {
    std::printf("%-9s %-5s %12s %10s %10s %9s\n", "transport", "op", "bytes", "seconds", "MiB/s", "one-sided");
    std::printf("%-9s %-5s %12" PRIu64 " %10.4f %10.1f %9s\n", opt.transport.c_str(), "pull", region, median,
                mib_per_s, one_sided ? "yes" : "no");
  }
  std::fflush(stdout);
  return 0;
}

int run(const Options& opt) {
  if (opt.op == Op::Pull) return run_pull(opt);
  std::optional<ServerProcess> server;  // declared first: destroyed (stopped) last
  std::string endpoint = opt.connect;
  Report report;
  report.transport = endpoint.empty() ? opt.transport : endpoint.substr(0, endpoint.find(':'));
  if (endpoint.empty()) {
    std::snprintf(g_socket_path, sizeof g_socket_path, "/tmp/rc-bench-%d.sock", static_cast<int>(getpid()));
    unlink(g_socket_path);  // a stale file from an earlier process with our pid would block bind
    if (opt.transport != "shm") g_socket_path[0] = '\0';
    server.emplace(std::vector<std::string>{server_executable(), "--listen", listen_endpoint(opt.transport),
                                            "--region-size", "64M", "--memory-limit", "2G", "--threads",
                                            std::to_string(std::max<uint32_t>(1, opt.server_threads))});
    endpoint = server->wait_ready();
  }
  if (opt.op == Op::Connect) return run_connect(opt, report.transport, endpoint);

  Shared shared(opt.app_threads);
  shared.cache = open_cache(opt, endpoint);
  shared.capacity = rc_cache_capacity(shared.cache);
  std::vector<std::unique_ptr<Worker>> workers;
  try {
    if (shared.capacity < opt.size) {
      throw std::runtime_error("--size " + std::to_string(opt.size) + " exceeds the cache capacity " +
                               std::to_string(shared.capacity));
    }
    const uint64_t seed = random_u64();
    for (uint32_t i = 0; i < opt.app_threads; ++i) workers.push_back(std::make_unique<Worker>(shared, opt, splitmix64(seed + i)));
  } catch (...) {
    rc_cache_close(shared.cache);
    throw;
  }

  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->run(); });
  std::atomic<bool> busy_stop{false};
  for (uint32_t i = 0; i < opt.busy_threads; ++i) {
    threads.emplace_back([&busy_stop] {
      while (!busy_stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  shared.start.arrive_and_wait();
  sleep_unless_aborted(opt.warmup, shared.abort);
  const int64_t t0 = now_ns();
  shared.phase = kMeasure;
  sleep_unless_aborted(opt.seconds, shared.abort);
  shared.phase = kStop;
  report.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  busy_stop = true;
  for (std::thread& t : threads) t.join();

  bool leaked = false;
  for (const auto& w : workers) {
    report.ops += w->ops;
    report.latency.merge(w->latency);
    report.submit.merge(w->submit);
    leaked = leaked || w->session_leaked;
    const ErrorLog& e = w->errors;
    if (e.count == 0) continue;
    const bool earlier = report.errors.first_status == RC_OK || e.first_at_ns < report.errors.first_at_ns;
    const uint64_t total = report.errors.count + e.count;
    if (earlier) report.errors = e;
    report.errors.count = total;
  }
  if (leaked) {
    std::fprintf(stderr, "remotecache-bench: sessions left open after a failed drain; cache not closed\n");
  } else if (const rc_status st = rc_cache_close(shared.cache); st != RC_OK) {
    report.errors.add(st, "rc_cache_close");
  }

  print_report(opt, report);
  if (report.errors.count > 0) {
    std::fprintf(stderr, "remotecache-bench: %" PRIu64 " errors; first: %s (%s)\n", report.errors.count,
                 rc_status_name(report.errors.first_status), report.errors.first_text.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    std::optional<Options> parsed = parse_args(argc, argv);
    if (!parsed) return 0;
    opt = *parsed;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "remotecache-bench: %s (see --help)\n", e.what());
    return 2;
  }
  install_signal_handlers();
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remotecache-bench: %s\n", e.what());
    return 1;
  }
}
