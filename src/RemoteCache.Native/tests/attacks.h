// The attacks of issue 12 as routines, shared by the regression tests (test_security.cpp) and the
// abuse soak (test_abuse_soak.cpp). Each plays a hostile client through raw sockets (wire version 1
// or 2, so that it also runs against a server from before wire v2) and reports what it saw; judging
// the server (alive, memory lent, RSS, CPU) is the caller's.
#pragma once

#include "harness.h"

namespace rctest {

inline int errno_of(int rc) { return rc == 0 ? 0 : errno; }

inline std::string errno_name(int e) { return e == 0 ? std::string("success") : std::string(std::strerror(e)); }

// ---- bug 1: an shm client resizes the memfds it was handed --------------------------------------------

struct ResizeOutcome {
  bool connected = false;
  std::string refusal;    // why the handshake failed, when it did
  int region_seals = -1;  // fcntl(F_GET_SEALS) of the region / segment memfd
  int segment_seals = -1;
  int region_grow = 0;    // errno of ftruncate (0: the resize succeeded)
  int region_shrink = 0;
  int segment_shrink = 0;
  bool region_read_answered = false;  // the server answered a read of the region afterwards
};

// Two connections of one raw client: the first grows, then shrinks its region memfd to 0 and asks
// the server (through the request ring) to read the region; the second shrinks its ring segment to
// 0 and rings the server's doorbell. A server that passed unsealed memfds dies of SIGBUS.
inline ResizeOutcome attack_resize_memfds(const std::string& path, const ConnectSpec& spec, uint8_t version,
                                          uint64_t region_size, int timeout_ms) {
  ResizeOutcome out;
  {
    RawShm c;
    raw_shm_connect(c, path, spec, version, timeout_ms);
    if (!c.ok() || c.region_fd(0) < 0) {
      out.refusal = c.reply.received ? sname(c.reply.reply.status) + ": " + c.reply.message() : "no Connect reply";
      return out;
    }
    out.connected = true;
    const int region = c.region_fd(0);
    out.region_seals = ::fcntl(region, F_GET_SEALS);
    out.region_grow = errno_of(::ftruncate(region, static_cast<off_t>(2 * region_size)));
    out.region_shrink = errno_of(::ftruncate(region, 0));
    RawShmRings rings(c);
    std::vector<uint8_t> response;
    const auto batch = batch_frame(1,
                                   {RawEntry{wire::Op::Read, 0, 0, 1024, {}},
                                    RawEntry{wire::Op::Write, 0, region_size / 2, 8, std::vector<uint8_t>(8, 0x5A)}},
                                   version);
    out.region_read_answered = rings.exchange(batch, response, timeout_ms);
  }
  {
    RawShm c;
    raw_shm_connect(c, path, spec, version, timeout_ms);
    if (!c.ok()) return out;
    out.segment_seals = ::fcntl(c.segment_fd(), F_GET_SEALS);
    out.segment_shrink = errno_of(::ftruncate(c.segment_fd(), 0));
    const uint64_t one = 1;
    (void)!::write(c.server_bell_fd(), &one, sizeof one);  // make a sleeping server look at the ring
    std::this_thread::sleep_for(100ms);
  }
  return out;
}

inline bool fully_sealed(int seals) {
  const int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  return seals >= 0 && (seals & want) == want;
}

// ---- bug 2: an shm client writes on its socket ---------------------------------------------------------

enum class ByteThen { CloseAll, Stay };

// Connects (creating the cache of `spec`), writes one byte on the shm socket, then hangs up (CloseAll)
// or stays connected (Stay: returns once the server closed the socket, or after timeout_ms). Returns
// whether the handshake worked; `closed_by_server` tells, for Stay, whether the server hung up.
inline bool attack_socket_byte(const std::string& path, const ConnectSpec& spec, uint8_t version, ByteThen then,
                               int timeout_ms, bool* closed_by_server = nullptr) {
  RawShm c;
  raw_shm_connect(c, path, spec, version, timeout_ms);
  if (!c.ok()) return false;
  const char byte = 'x';
  if (::send(c.sock.fd, &byte, 1, MSG_NOSIGNAL) != 1) return false;
  if (then == ByteThen::Stay) {
    const PeerState s = wait_closed(c.sock.fd, timeout_ms);
    if (closed_by_server != nullptr) *closed_by_server = s == PeerState::Closed;
  }
  return true;
}

// The same from a child process that exits right after the byte (the kernel closes what it held).
// Returns whether the child's handshake worked.
inline bool attack_socket_byte_and_exit(const std::string& path, const ConnectSpec& spec, uint8_t version,
                                        int timeout_ms) {
  const auto frame = connect_frame(spec, version);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: raw system calls only (and malloc, which glibc makes safe after fork).
    const int fd = connect_unix_seqpacket(path);
    if (fd < 0) ::_exit(2);
    if (send_packet(fd, frame.data(), frame.size()) != static_cast<ssize_t>(frame.size())) ::_exit(3);
    std::vector<uint8_t> buf(64 * 1024);
    std::vector<int> fds;
    const ssize_t n = recv_packet(fd, buf, fds, timeout_ms);
    if (n <= 0) ::_exit(4);
    const RawReply r = parse_connect_reply(buf.data(), static_cast<std::size_t>(n), version);
    if (!r.received || r.reply.status != RC_OK) ::_exit(5);
    const char byte = 'x';
    (void)!::send(fd, &byte, 1, MSG_NOSIGNAL);
    ::_exit(0);
  }
  if (pid < 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// ---- bug 3: a tcp client that reads its responses slowly but steadily -------------------------------

// Its own cache (one region); on a thread, keeps the server busy with batches of one kMaxChunk read
// each and drains the responses at `bytes_per_sec`, never all of them.
class SlowReader {
 public:
  SlowReader() = default;
  SlowReader(const SlowReader&) = delete;
  SlowReader& operator=(const SlowReader&) = delete;
  ~SlowReader() { stop(); }

  // False (with `why`) when the handshake fails.
  bool start(const std::string& endpoint, const ConnectSpec& spec, uint8_t version, uint64_t bytes_per_sec,
             uint64_t region_size, int timeout_ms, std::string* why = nullptr) {
    raw_tcp_connect(conn_, endpoint, spec, version, timeout_ms);
    if (!conn_.ok()) {
      if (why != nullptr)
        *why = conn_.reply.received ? sname(conn_.reply.reply.status) + ": " + conn_.reply.message() : "no Connect reply";
      return false;
    }
    ::fcntl(conn_.sock.fd, F_SETFL, ::fcntl(conn_.sock.fd, F_GETFL) | O_NONBLOCK);
    thread_ = std::thread([this, version, bytes_per_sec, region_size] { run(version, bytes_per_sec, region_size); });
    return true;
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    conn_.sock.reset();
  }

  uint64_t bytes_read() const { return read_.load(); }
  uint64_t batches_sent() const { return sent_.load(); }
  bool server_closed() const { return closed_.load(); }

 private:
  void run(uint8_t version, uint64_t bytes_per_sec, uint64_t region_size) {
    constexpr auto kTick = 5ms;
    const uint64_t per_tick = std::max<uint64_t>(1, bytes_per_sec / 200);
    std::vector<uint8_t> out;  // unsent request bytes
    std::size_t out_pos = 0;
    uint64_t seq = 1;
    std::vector<uint8_t> in(per_tick);
    const int fd = conn_.sock.fd;
    while (!stop_.load()) {
      // Keep requests queued: the server decides how many it reads.
      for (int i = 0; i < 64; ++i) {
        if (out_pos == out.size()) {
          const uint64_t offset = (seq * 4096) % (region_size - wire::kMaxChunk);
          out = batch_frame(seq, {RawEntry{wire::Op::Read, 0, offset, wire::kMaxChunk, {}}}, version);
          out_pos = 0;
          ++seq;
        }
        const ssize_t n = ::send(fd, out.data() + out_pos, out.size() - out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0) break;
        out_pos += static_cast<std::size_t>(n);
        if (out_pos == out.size()) sent_.fetch_add(1);
      }
      // Read this tick's share, not more.
      const ssize_t r = ::recv(fd, in.data(), in.size(), MSG_DONTWAIT);
      if (r > 0) read_.fetch_add(static_cast<uint64_t>(r));
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        closed_.store(true);
        return;
      }
      std::this_thread::sleep_for(kTick);
    }
  }

  RawTcp conn_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> read_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<bool> closed_{false};
};

// ---- bug 4: silent tcp connections, reopened as they are dropped ---------------------------------------

// Connects from a given local address (e.g. 127.0.0.2, to play another host), without blocking.
inline int connect_tcp_from(const std::string& endpoint, const std::string& source) {
  std::string host;
  uint16_t port = 0;
  if (!parse_tcp(endpoint, host, port)) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// `count` tcp connections that never say a word, each reopened as soon as the server drops it
// (after `pace`, to spare the CPU in a long soak); connection i comes from
// sources[i % sources.size()] ("" = the default address).
class SilentHerd {
 public:
  SilentHerd(std::string endpoint, std::vector<std::string> sources, std::size_t count,
             std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : endpoint_(std::move(endpoint)), sources_(std::move(sources)), count_(count), pace_(pace) {
    if (sources_.empty()) sources_.push_back("");
  }
  SilentHerd(const SilentHerd&) = delete;
  SilentHerd& operator=(const SilentHerd&) = delete;
  ~SilentHerd() { stop(); }

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  uint64_t opened() const { return opened_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  std::size_t open_now() const { return open_now_.load(); }

 private:
  void run() {
    std::vector<int> fds(count_, -1);
    std::vector<pollfd> pfds(count_);
    while (!stop_.load()) {
      std::size_t open = 0;
      for (std::size_t i = 0; i < count_; ++i) {
        if (fds[i] < 0) {
          fds[i] = connect_tcp_from(endpoint_, sources_[i % sources_.size()]);
          if (fds[i] >= 0) opened_.fetch_add(1);
        }
        pfds[i] = pollfd{fds[i], POLLIN, 0};
        open += fds[i] >= 0 ? 1 : 0;
      }
      open_now_.store(open);
      if (pace_.count() > 0) std::this_thread::sleep_for(pace_);
      const int n = ::poll(pfds.data(), pfds.size(), 20);
      if (n <= 0) continue;
      for (std::size_t i = 0; i < count_; ++i) {
        if (fds[i] < 0 || pfds[i].revents == 0) continue;
        char buf[256];
        const ssize_t r = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) continue;
        ::close(fds[i]);  // dropped by the server: come back at once
        fds[i] = -1;
        dropped_.fetch_add(1);
      }
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    open_now_.store(0);
  }

  std::string endpoint_;
  std::vector<std::string> sources_;
  std::size_t count_;
  std::chrono::milliseconds pace_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<std::size_t> open_now_{0};
};

// ---- a departed shm client that keeps its mappings ----------------------------------------------------

// Connects, maps its regions, fills them (one-sided, as the library's shm client writes), then hangs
// up and closes every fd it got, keeping only the mappings.
class DepartedMapping {
 public:
  bool start(const std::string& path, const ConnectSpec& spec, uint8_t version, uint64_t region_size, int timeout_ms) {
    RawShm c;
    raw_shm_connect(c, path, spec, version, timeout_ms);
    if (!c.ok()) return false;
    for (std::size_t i = 0; i < c.reply.regions.size(); ++i) {
      auto m = std::make_unique<Mapped>(c.region_fd(i), region_size);
      if (!m->ok()) return false;
      fill_random(m->bytes(), region_size, 1000 + i);
      maps_.push_back(std::move(m));
    }
    return !maps_.empty();  // the socket and every fd close here
  }

  // Whether every byte of every mapping reads zero now (the server released the pages).
  bool zeroed() const {
    for (const auto& m : maps_) {
      const auto* p = m->bytes();
      for (std::size_t i = 0; i < m->size; i += 8) {
        uint64_t v;
        std::memcpy(&v, p + i, sizeof v);
        if (v != 0) return false;
      }
    }
    return true;
  }

  void release() { maps_.clear(); }

 private:
  std::vector<std::unique_ptr<Mapped>> maps_;
};

}  // namespace rctest
