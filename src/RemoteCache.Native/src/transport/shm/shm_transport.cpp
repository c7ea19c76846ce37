#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "common/memfd.h"
#include "common/notifier.h"
#include "transport/connect_codec.h"
#include "transport/shm/shm_ring.h"
#include "transport/socket_util.h"

namespace rc::transport::shm {
namespace {

constexpr std::size_t kFixedFds = 3;  // segment, server doorbell, client doorbell
constexpr std::size_t kMaxFds = 253;  // SCM_MAX_FD
constexpr uint64_t kProbeEveryNs = 2'000'000;

bool make_address(const std::string& path, sockaddr_un& addr, socklen_t& len) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
  return true;
}

// A SOCK_SEQPACKET Unix socket and the address of `endpoint`; null with `status` set on failure.
UniqueFd open_socket(const Endpoint& endpoint, sockaddr_un& addr, socklen_t& len, Status& status) {
  if (!make_address(endpoint.path, addr, len)) {
    status = fail(RC_E_INVALID_ARGUMENT, "shm socket path too long");
    return UniqueFd();
  }
  UniqueFd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock) status = fail(RC_E_INTERNAL, std::string("socket: ") + std::strerror(errno));
  return sock;
}

Status send_with_fds(int sock, std::span<const std::byte> data, std::span<const int> fds, int flags = 0) {
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
  if (n != static_cast<ssize_t>(data.size())) return fail(RC_E_DISCONNECTED, "shm handshake send failed");
  return RC_OK;
}

// Receives one message and any fds riding with it (fds are returned owned).
ssize_t recv_with_fds(int sock, std::byte* buf, std::size_t cap, std::vector<UniqueFd>& fds) {
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxFds));
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return -2;
  return n;
}

// A read-only descriptor of the memfd behind `fd`, for a migration source: it can be mapped only
// PROT_READ. The inode's mode drops to owner-read first, so that the holder cannot reopen the fd for
// writing through /proc/self/fd (root still can: the holder is a server, trusted as such). The
// server's own descriptor and every client's were opened read-write and keep working.
UniqueFd read_only_copy(int fd) {
  if (fchmod(fd, S_IRUSR) != 0) return UniqueFd();
  return UniqueFd(open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC));
}

// The uid of the process at the other end of a Unix socket.
bool peer_uid(int sock, uid_t& uid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  uid = cred.uid;
  return true;
}

struct Mapping {
  void* base = MAP_FAILED;
  std::size_t size = 0;
  bool release = false;  // the server's mapping: free the pages for everyone when it goes
  Mapping() = default;
  Mapping(void* b, std::size_t s, bool r = false) : base(b), size(s), release(r) {}
  Mapping(Mapping&& o) noexcept : base(o.base), size(o.size), release(o.release) { o.base = MAP_FAILED; }
  ~Mapping() {
    if (base == MAP_FAILED) return;
    if (release) release_pages(base, size);
    munmap(base, size);
  }
};

// Every connection of a process to a server's cache carries the same region fds (each session has its
// own connections): mapped once and shared, a region has one set of page-table entries in the process,
// faulted in once for all its sessions rather than once per session (after a region moves, every
// session's first touches of its pages would fault again), and page-table memory does not grow with
// the sessions. Keyed by the memfd's identity: a mapping alive holds its file, so the key cannot be
// reused meanwhile.
class SharedRegions {
 public:
  static SharedRegions& instance() {
    static SharedRegions regions;
    return regions;
  }

  // The process's mapping of `fd` (size bytes, `protection`), made if it has none; null on failure
  // (errno says why).
  std::shared_ptr<const Mapping> map(int fd, std::size_t size, int protection) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return nullptr;
    const Key key{st.st_dev, st.st_ino, size, protection};
    std::lock_guard lock(mutex_);
    if (auto it = mappings_.find(key); it != mappings_.end())
      if (auto shared = it->second.lock()) return shared;
    void* base = mmap(nullptr, size, protection, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return nullptr;
    // The server asks for 2 MiB pages for its regions (transparent_hugepage/shmem_enabled = advise); a client's
    // mapping must ask too to map them whole: 512 page-table entries per GiB instead of 262 144, for the data path's
    // TLB and the L3 that caches those entries, and a moved region mapped in a millisecond instead of ~0.1 s.
    madvise(base, size, MADV_HUGEPAGE);
    std::erase_if(mappings_, [](const auto& entry) { return entry.second.expired(); });
    auto shared = std::make_shared<const Mapping>(base, size);
    mappings_[key] = shared;
    return shared;
  }

 private:
  using Key = std::tuple<dev_t, ino_t, std::size_t, int>;
  std::mutex mutex_;
  std::map<Key, std::weak_ptr<const Mapping>> mappings_;
};

// ---- admin connections (either end) -------------------------------------------------------------

// The whole admin exchange runs over the SOCK_SEQPACKET socket (no rings, no fds): one frame per
// message, so a message is sent or received whole or not at all.
class ShmMessageLink final : public MessageLink {
 public:
  ShmMessageLink(UniqueFd sock, std::string peer)
      : sock_(std::move(sock)), peer_(std::move(peer)), buf_(wire::kMaxAdminFrame) {}

  Status send(std::span<const std::byte> frame, uint64_t deadline_ns) override {
    for (;;) {
      if (::send(sock_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
          static_cast<ssize_t>(frame.size()))
        return RC_OK;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return RC_E_DISCONNECTED;
      if (!wait_writable(sock_.get(), deadline_ns)) return RC_E_TIMEOUT;
    }
  }

  Status receive(std::span<const std::byte>& frame, uint64_t deadline_ns, const EventFd* stop) override {
    for (;;) {
      // MSG_TRUNC: the real length of a message longer than the buffer, which is then refused.
      const ssize_t n = recv(sock_.get(), buf_.data(), buf_.size(), MSG_DONTWAIT | MSG_TRUNC);
      if (n == 0) return RC_E_DISCONNECTED;
      if (n > 0) {
        const std::size_t size = static_cast<std::size_t>(n);
        if (size > buf_.size() || size < sizeof(wire::FrameHeader)) return RC_E_PROTOCOL;
        const auto h = wire::read_header(buf_.data());
        const bool ok = std::any_of(std::begin(kMessageLinkKinds), std::end(kMessageLinkKinds),
                                    [&](wire::Kind kind) { return wire::header_ok(h, kind, size); });
        if (!ok || h.bytes != size) return RC_E_PROTOCOL;
        frame = {buf_.data(), size};
        return RC_OK;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return RC_E_DISCONNECTED;
      if (!wait_readable(sock_.get(), stop, deadline_ns)) return now_ns() >= deadline_ns ? RC_E_TIMEOUT : RC_E_CLOSED;
    }
  }

  std::string peer() const override { return peer_; }

 private:
  UniqueFd sock_;
  std::string peer_;
  std::vector<std::byte> buf_;
};

// ---- client -----------------------------------------------------------------------------------

class ShmClientConnection final : public ClientConnection {
 public:
  ShmClientConnection(UniqueFd sock, const wire::ConnectReply& reply, Mapping segment,
                      std::vector<std::shared_ptr<const Mapping>> regions, UniqueFd server_bell, UniqueFd client_bell)
      : read_only_((reply.flags & wire::kReplyReadOnly) != 0),
        sock_(std::move(sock)),
        reply_(reply),
        segment_(std::move(segment)),
        regions_(std::move(regions)),
        server_bell_(server_bell.release()),
        client_bell_(client_bell.release()),
        header_(static_cast<SegmentHeader*>(segment_.base)),
        requests_(header_->request_head, header_->request_tail, ring_base(0), kRingBytes),
        responses_(header_->response_head, header_->response_tail, ring_base(1), kRingBytes) {}

  const wire::ConnectReply& reply() const override { return reply_; }
  bool one_sided() const override { return true; }
  uint32_t max_inline() const override { return 0; }
  // A one-sided operation is a memcpy: any length within the region, as many as memory holds.
  uint32_t max_one_sided_length() const override { return UINT32_MAX; }
  uint32_t max_one_sided_in_flight() const override { return UINT32_MAX; }

  // A small read is only started here: its lines are prefetched and the copy happens when the
  // completion is polled, as a NIC's DMA would overlap with the caller's work. With many reads in
  // flight the misses on the (random, 4 KiB-paged) region overlap instead of stalling each submit;
  // under FASTER's pending reads the copy at submit was the client's largest single cost.
  Status post_read(uint64_t wr_id, uint16_t region, uint64_t offset, void* dst, uint32_t length) override {
    if (const Status st = peer_still_there(); st != RC_OK) return st;
    std::byte* src = locate(region, offset, length);
    if (src == nullptr) return fail(RC_E_OUT_OF_RANGE, "one-sided read outside the granted region");
    done_.push_back(Done{wr_id, src, dst, length});
    if (length > kDeferredReadMax) {
      if (length >= kPopulatedReadMin) {
        populate_for_read(src, length);
        // A migration source's bulk reads fill a region nobody reads until it is committed: streamed
        // past the caches, they leave the data path's lines where they are.
        if (read_only_) {
          stream_copy(dst, src, length);
          done_.back().src = nullptr;
        }
      }
      finish(done_.back());
    } else {
      for (uint32_t line = 0; line < length; line += 64) __builtin_prefetch(src + line, 0, 3);
    }
    return RC_OK;
  }

  // One pass over the region's pages in the process's shared mapping (so for every session): the
  // pages a commit sends requests to are mapped before the first one, not faulted in one by one under
  // the data path. Read-write grants map for writing (existing pages skipped, missing ones allocated
  // as the first write would), read-only grants for reading.
  std::function<void()> map_ahead(uint16_t region) const override {
    if (region >= regions_.size()) return {};
    return [mapping = regions_[region], read_only = read_only_] {
      if (read_only)
        populate(mapping->base, mapping->size, MADV_POPULATE_READ);
      else
        populate_for_write(mapping->base, mapping->size);
    };
  }

  // Maps the source pages of a bulk read (a region pull's) in one call instead of one fault per page.
  static void populate_for_read(const std::byte* src, uint32_t length) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(src) & ~(page - 1);
    const auto end = reinterpret_cast<uintptr_t>(src) + length;
    populate(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
  }

  Status post_write(uint64_t wr_id, uint16_t region, uint64_t offset, const void* src,
                    uint32_t length) override {
    if (read_only_) return fail(RC_E_AUTH, "this shm connection is read-only (a migration source): its regions are mapped for reading");
    if (const Status st = peer_still_there(); st != RC_OK) return st;
    std::byte* dst = locate(region, offset, length);
    if (dst == nullptr) return fail(RC_E_OUT_OF_RANGE, "one-sided write outside the granted region");
    finish_reads();  // reads posted before this write must not see it
    std::memcpy(dst, src, length);
    done_.push_back(Done{wr_id, nullptr, nullptr, 0});
    return RC_OK;
  }

  std::size_t poll_completions(WorkCompletion* out, std::size_t max) override {
    const std::size_t n = std::min(max, done_.size());
    for (std::size_t i = 0; i < n; ++i) {
      finish(done_[i]);
      out[i] = WorkCompletion{done_[i].wr_id, RC_OK};
    }
    done_.erase(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(n));
    finished_reads_ = finished_reads_ > n ? finished_reads_ - n : 0;
    return n;
  }

  Status send_frame(std::span<const std::byte> frame) override {
    finish_reads();  // the server may apply this frame's writes before we poll: earlier reads go first
    const Status st = requests_.write(frame);
    if (st != RC_OK) return st;
    wake_if_sleeping(header_->server_sleeping, server_bell_);
    return RC_OK;
  }

  Status poll_response(std::span<const std::byte>& frame) override {
    const Status st = responses_.peek(frame);
    if (st != RC_E_PROTOCOL) return st;
    // A departing server releases the rings' pages: zeroed indices are its departure, not corruption.
    if (const Status gone = server_status(); gone != RC_OK) return fail(gone, message_);
    return fail(RC_E_PROTOCOL, "shm response ring corrupted");
  }

  void release_response() override { responses_.release(); }

  void arm_wait() override { header_->client_sleeping.store(1, std::memory_order_seq_cst); }
  void disarm_wait() override {
    header_->client_sleeping.store(0, std::memory_order_relaxed);
    client_bell_.drain();
  }
  void wait_fds(std::vector<int>& fds) const override {
    fds.push_back(client_bell_.fd());
    fds.push_back(sock_.get());
  }

  Status check_alive() override { return server_status(); }

 private:
  // The server says nothing on the socket after the handshake but a Notice before it closes a
  // connection on purpose (in the socket, not the rings, whose pages it releases as it closes).
  Status server_status() {
    if (gone_ != RC_OK) return gone_;
    std::byte buf[sizeof(wire::FrameHeader) + sizeof(wire::Notice)];
    const ssize_t n = recv(sock_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return RC_OK;
    gone_ = n > 0 ? decode_notice({buf, std::size_t(n)}) : fail(RC_E_DISCONNECTED, "the cache server is gone");
    message_ = last_error();
    return gone_;
  }

  // One-sided access never involves the server, and the mapping outlives it, so its death would go
  // unnoticed: probe the handshake socket every couple of milliseconds of one-sided traffic
  // (RDMA reports the same event as error completions once the QP breaks).
  Status peer_still_there() {
    if (gone_ != RC_OK) return fail(gone_, message_);
    const uint64_t now = coarse_now_ns();
    if (now - last_probe_ns_ < kProbeEveryNs) return RC_OK;
    last_probe_ns_ = now;
    return server_status();
  }

  // Posted one-sided operations, in order; a read's copy is pending while src is set.
  struct Done {
    uint64_t wr_id;
    const std::byte* src;
    void* dst;
    uint32_t length;
  };

  // Copies every read still deferred (they stay in done_ to be reported in order).
  void finish_reads() {
    for (std::size_t i = finished_reads_; i < done_.size(); ++i) finish(done_[i]);
    finished_reads_ = done_.size();
  }

  static void finish(Done& d) {
    if (d.src != nullptr) std::memcpy(d.dst, d.src, d.length);
    d.src = nullptr;
  }

  std::byte* ring_base(int which) {
    return static_cast<std::byte*>(segment_.base) + sizeof(SegmentHeader) + std::size_t(which) * kRingBytes;
  }

  std::byte* locate(uint16_t region, uint64_t offset, uint32_t length) const {
    if (region >= regions_.size()) return nullptr;
    const uint64_t size = regions_[region]->size;
    if (offset > size || length > size - offset) return nullptr;
    return static_cast<std::byte*>(regions_[region]->base) + offset;
  }

  const bool read_only_;  // the regions are mapped PROT_READ: a write would fault
  UniqueFd sock_;
  wire::ConnectReply reply_;
  Mapping segment_;
  std::vector<std::shared_ptr<const Mapping>> regions_;
  EventFd server_bell_;
  EventFd client_bell_;
  SegmentHeader* header_;
  RingWriter requests_;
  RingReader responses_;
  static constexpr uint32_t kDeferredReadMax = 1024;  // 16 lines; larger reads stream well on their own
  static constexpr uint32_t kPopulatedReadMin = 1u << 20;  // bulk reads (a region pull's) map their pages up front
  std::vector<Done> done_;
  std::size_t finished_reads_ = 0;  // done_[0, finished_reads_) hold no pending copy
  uint64_t last_probe_ns_ = 0;
  Status gone_ = RC_OK;  // why the server is gone, once it is
  std::string message_;
};

// ---- server -----------------------------------------------------------------------------------

class ShmServerConnection final : public ServerConnection {
 public:
  // The socket closes first: the client must see the hang-up before the rings' pages are released
  // (released pages read as zeros, which would look like a corrupted ring).
  ~ShmServerConnection() override { sock_.reset(); }

  ShmServerConnection(UniqueFd sock, Mapping segment, EventFd server_bell, EventFd client_bell)
      : sock_(std::move(sock)),
        segment_(std::move(segment)),
        server_bell_(std::move(server_bell)),
        client_bell_(std::move(client_bell)),
        header_(static_cast<SegmentHeader*>(segment_.base)),
        requests_(header_->request_head, header_->request_tail, ring_base(0), kRingBytes),
        responses_(header_->response_head, header_->response_tail, ring_base(1), kRingBytes),
        frame_(std::make_unique<std::byte[]>(wire::kMaxFrame)) {}

  Status next_request(std::span<const std::byte>& frame) override {
    if (!flush()) return RC_E_BUSY;
    std::span<const std::byte> in_ring;
    const Status st = requests_.peek(in_ring);
    if (st != RC_OK) return st;
    // Copy out of shared memory first: the client could rewrite a frame while it is parsed.
    std::memcpy(frame_.get(), in_ring.data(), in_ring.size());
    frame = {frame_.get(), in_ring.size()};
    requests_.release();
    return RC_OK;
  }

  Status send_response(std::span<const std::byte> frame) override {
    if (outbox_.empty()) {
      const Status st = responses_.write(frame);
      if (st == RC_OK) {
        wake_if_sleeping(header_->client_sleeping, client_bell_);
        return RC_OK;
      }
      if (st != RC_E_BUSY) return st;
    }
    outbox_.emplace_back(frame.begin(), frame.end());
    return RC_OK;
  }

  bool flush() override {
    bool wrote = false;
    while (!outbox_.empty()) {
      const auto& f = outbox_.front();
      if (responses_.write({f.data(), f.size()}) != RC_OK) break;
      outbox_.erase(outbox_.begin());
      wrote = true;
    }
    if (wrote) wake_if_sleeping(header_->client_sleeping, client_bell_);
    return outbox_.empty();
  }

  bool needs_server_thread() const override { return false; }
  // The client has nothing to say on its socket after the handshake: bytes there are a violation,
  // not a sign of life (they would otherwise keep a departed client's cache alive forever).
  Status check_alive() override { return silent_peer_alive(sock_.get()); }
  void arm_wait() override { header_->server_sleeping.store(1, std::memory_order_seq_cst); }
  void disarm_wait() override {
    header_->server_sleeping.store(0, std::memory_order_relaxed);
    server_bell_.drain();
  }
  void wait_fds(std::vector<int>& fds) const override {
    fds.push_back(server_bell_.fd());
    fds.push_back(sock_.get());
  }
  std::string peer() const override { return "shm#" + std::to_string(sock_.get()); }
  void send_notice(std::span<const std::byte> frame) override {
    (void)!send(sock_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

 private:
  std::byte* ring_base(int which) {
    return static_cast<std::byte*>(segment_.base) + sizeof(SegmentHeader) + std::size_t(which) * kRingBytes;
  }

  UniqueFd sock_;
  Mapping segment_;
  EventFd server_bell_;
  EventFd client_bell_;
  SegmentHeader* header_;
  RingReader requests_;
  RingWriter responses_;
  std::unique_ptr<std::byte[]> frame_;
  std::vector<std::vector<std::byte>> outbox_;
};

class ShmPending final : public PendingConnection {
 public:
  ShmPending(UniqueFd conn, uid_t uid) : conn_(std::move(conn)), uid_(uid) {}

  std::string peer_key() const override { return "uid:" + std::to_string(uid_); }

  void refuse(Status status, const std::string& message) override {
    send_with_fds(conn_.get(), encode_connect_reply(Grant{status, message, {}, 0}, {}), {}, MSG_DONTWAIT);
  }

  std::unique_ptr<ServerConnection> handshake(const HandshakeHandlers& handlers, const EventFd& stop,
                                              Status& status) override {
    std::byte buf[sizeof(wire::FrameHeader) + sizeof(wire::ConnectRequest)];
    std::vector<UniqueFd> ignored;
    wire::ConnectRequest request{};
    const bool readable = wait_readable(conn_.get(), &stop, now_ns() + uint64_t{kHandshakeTimeoutMs} * 1'000'000);
    if (!readable) {
      RC_LOG_WARN("shm: %s sent no Connect within %u ms", peer_key().c_str(), kHandshakeTimeoutMs);
      status = RC_E_TIMEOUT;
      return nullptr;
    }
    const ssize_t n = recv_with_fds(conn_.get(), buf, sizeof buf, ignored);
    const std::span<const std::byte> first{buf, n > 0 ? std::size_t(n) : 0};
    if (first.size() >= sizeof(wire::FrameHeader) &&
        wire::read_header(first.data()).kind == static_cast<uint8_t>(wire::Kind::AdminHello)) {
      handlers.admin(std::make_unique<ShmMessageLink>(std::move(conn_), "shm admin " + peer_key()), first);
      status = RC_OK;
      return nullptr;
    }
    status = decode_connect_request(first, request);
    if (status != RC_OK) {
      const std::string why = last_error();
      log_refusal("no valid Connect", peer_key(), "shm: refusing " + peer_key() + ": " + why);
      refuse(status, why);
      return nullptr;
    }
    return answer(handlers.admit(request), status);
  }

 private:
  std::unique_ptr<ServerConnection> answer(Grant grant, Status& status) {
    set_timeouts(conn_.get(), kHandshakeTimeoutMs);  // a client that never reads cannot pin us
    if (grant.status == RC_OK && grant.regions.size() + kFixedFds > kMaxFds) {
      grant = Grant{RC_E_INVALID_ARGUMENT, "too many regions for one shm connection", {}, 0};
    }
    std::vector<UniqueFd> read_only;  // the kernel holds its own references once they are sent
    for (std::size_t i = 0; grant.status == RC_OK && grant.read_only && i < grant.regions.size(); ++i) {
      read_only.push_back(read_only_copy(grant.regions[i].fd));
      if (!read_only.back())
        grant = Grant{RC_E_INTERNAL, std::string("cannot hand a region over read-only: ") + std::strerror(errno), {}, 0};
    }
    if (grant.status != RC_OK) {
      const auto reply = encode_connect_reply(grant, {});
      send_with_fds(conn_.get(), reply, {});
      status = grant.status;
      return nullptr;
    }
    try {
      UniqueFd seg_fd(sealed_memfd("remotecache-conn", kSegmentBytes));
      if (!seg_fd) throw std::system_error(errno, std::generic_category(), "memfd");
      void* base = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg_fd.get(), 0);
      if (base == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
      Mapping segment(base, kSegmentBytes, true);
      auto* header = new (base) SegmentHeader();
      header->ring_bytes = kRingBytes;
      EventFd server_bell;
      EventFd client_bell;

      std::vector<wire::RegionDescriptor> descriptors;
      std::vector<int> fds{seg_fd.get(), server_bell.fd(), client_bell.fd()};
      for (std::size_t i = 0; i < grant.regions.size(); ++i) {
        descriptors.push_back({0, kFixedFds + i});
        fds.push_back(grant.read_only ? read_only[i].get() : grant.regions[i].fd);
      }
      const auto reply = encode_connect_reply(grant, descriptors);
      status = send_with_fds(conn_.get(), reply, fds);
      if (status != RC_OK) return nullptr;
      set_timeouts(conn_.get(), 0);
      return std::make_unique<ShmServerConnection>(std::move(conn_), std::move(segment), std::move(server_bell),
                                                   std::move(client_bell));
    } catch (const std::exception& e) {
      RC_LOG_ERROR("shm: cannot set up a connection: %s", e.what());
      status = RC_E_INTERNAL;
      return nullptr;
    }
  }

  UniqueFd conn_;
  uid_t uid_;
};

class ShmListener final : public Listener {
 public:
  ShmListener(UniqueFd sock, std::string path, std::vector<uint32_t> allowed_uids)
      : sock_(std::move(sock)), path_(std::move(path)), allowed_uids_(std::move(allowed_uids)) {
    allowed_uids_.push_back(static_cast<uint32_t>(geteuid()));
  }
  ~ShmListener() override {
    if (!path_.empty() && path_[0] != '@') unlink(path_.c_str());
  }

  std::string endpoint() const override { return "shm:" + path_; }

  // A socket file is guarded by its permissions; an abstract socket has none, so the peer's uid is
  // checked against the allowed ones instead.
  std::unique_ptr<PendingConnection> accept(Status& status) override {
    for (;;) {
      UniqueFd conn = accept_or_stop(sock_.get(), stop_, status);
      if (!conn) return nullptr;
      uid_t uid = 0;
      if (!peer_uid(conn.get(), uid)) continue;
      auto pending = std::make_unique<ShmPending>(std::move(conn), uid);
      if (path_[0] != '@' || allowed(uid)) return pending;
      const std::string why = "uid " + std::to_string(uid) + " may not use the abstract endpoint shm:" + path_;
      log_refusal("uid not allowed", pending->peer_key(), "shm: refusing a connection: " + why);
      pending->refuse(RC_E_AUTH, why);
    }
  }

  void shutdown() override { stop_.signal(); }

 private:
  bool allowed(uid_t uid) const {
    return std::find(allowed_uids_.begin(), allowed_uids_.end(), static_cast<uint32_t>(uid)) != allowed_uids_.end();
  }

  UniqueFd sock_;
  std::string path_;
  std::vector<uint32_t> allowed_uids_;
  EventFd stop_;
};

}  // namespace

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status) {
  sockaddr_un addr{};
  socklen_t len = 0;
  UniqueFd sock = open_socket(endpoint, addr, len, status);
  if (!sock) return nullptr;
  set_timeouts(sock.get(), params.timeout_ms);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    status = fail(RC_E_DISCONNECTED, "cannot connect to " + endpoint.to_string() + ": " + std::strerror(errno));
    return nullptr;
  }
  const auto request = encode_connect_request(params.request);
  const Status sent = send_with_fds(sock.get(), request, {});

  // A server that refuses before reading the Connect (a uid not allowed, a limit) replies and closes
  // at once: the send may fail and the first receive may report the reset, yet the refusal, which
  // says why, is still queued. So the reply is looked for whatever the send did.
  std::vector<std::byte> buf(sizeof(wire::FrameHeader) + sizeof(wire::ConnectReply) +
                             kMaxFds * sizeof(wire::RegionDescriptor));
  std::vector<UniqueFd> fds;
  ssize_t n = recv_with_fds(sock.get(), buf.data(), buf.size(), fds);
  if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) n = recv_with_fds(sock.get(), buf.data(), buf.size(), fds);
  if (n <= 0) {
    const bool timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    status = sent != RC_OK ? sent
                           : fail(timed_out ? RC_E_TIMEOUT : RC_E_DISCONNECTED, "no Connect reply from " + endpoint.to_string());
    return nullptr;
  }
  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  status = decode_connect_reply({buf.data(), std::size_t(n)}, reply, regions);
  if (status != RC_OK) return nullptr;
  if (fds.size() != kFixedFds + regions.size()) {
    status = fail(RC_E_PROTOCOL, "shm Connect reply carries the wrong number of fds");
    return nullptr;
  }
  auto map = [](int fd, std::size_t size, int protection) {
    void* base = mmap(nullptr, size, protection, MAP_SHARED, fd, 0);
    return Mapping(base, size);
  };
  Mapping segment = map(fds[0].get(), kSegmentBytes, PROT_READ | PROT_WRITE);
  if (segment.base == MAP_FAILED) {
    status = fail(RC_E_INTERNAL, std::string("mmap of the connection segment: ") + std::strerror(errno));
    return nullptr;
  }
  std::vector<std::shared_ptr<const Mapping>> mapped;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const uint64_t key = regions[i].key;
    if (key < kFixedFds || key >= fds.size()) {
      status = fail(RC_E_PROTOCOL, "shm region descriptor names a bad fd");
      return nullptr;
    }
    // A read-only grant comes as read-only fds, which cannot be mapped for writing.
    const bool read_only = (reply.flags & wire::kReplyReadOnly) != 0;
    mapped.push_back(SharedRegions::instance().map(fds[key].get(), reply.region_size, read_only ? PROT_READ : PROT_READ | PROT_WRITE));
    if (!mapped.back()) {
      status = fail(RC_E_INTERNAL, std::string("mmap of a region: ") + std::strerror(errno));
      return nullptr;
    }
  }
  set_timeouts(sock.get(), 0);
  status = RC_OK;
  return std::make_unique<ShmClientConnection>(std::move(sock), reply, std::move(segment), std::move(mapped),
                                               std::move(fds[1]), std::move(fds[2]));
}

std::unique_ptr<Listener> listen(const Endpoint& endpoint, const ListenOptions& options, Status& status) {
  sockaddr_un addr{};
  socklen_t len = 0;
  UniqueFd sock = open_socket(endpoint, addr, len, status);
  if (!sock) return nullptr;
  const bool file = endpoint.path[0] != '@';
  const mode_t mode = static_cast<mode_t>(options.shm_socket_mode & 0777);
  // A stale socket file from a server that died is replaced; any other file is left alone.
  struct stat st {};
  if (file && lstat(endpoint.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(endpoint.path.c_str());
  // On Linux the socket's own mode (less the umask) becomes the file's at bind, so the file is never
  // wider than asked, not even for a moment; chmod then undoes the umask for a deliberately wide mode.
  const bool ok = fchmod(sock.get(), mode) == 0 && bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  (!file || chmod(endpoint.path.c_str(), mode) == 0) && ::listen(sock.get(), 64) == 0;
  if (!ok) {
    status = fail(RC_E_INVALID_ARGUMENT, "cannot listen on " + endpoint.to_string() + ": " + std::strerror(errno));
    return nullptr;
  }
  status = RC_OK;
  return std::make_unique<ShmListener>(std::move(sock), endpoint.path, options.allowed_uids);
}

std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status) {
  sockaddr_un addr{};
  socklen_t len = 0;
  UniqueFd sock = open_socket(endpoint, addr, len, status);
  if (!sock) return nullptr;
  // A full accept queue makes a blocking connect wait: SO_SNDTIMEO bounds it.
  set_timeouts(sock.get(), static_cast<uint32_t>(std::max(1, poll_timeout_ms(deadline_ns))));
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const bool timed_out = errno == EAGAIN || errno == EINPROGRESS;
    status = fail(timed_out ? RC_E_TIMEOUT : RC_E_DISCONNECTED,
                  "cannot connect to " + endpoint.to_string() + ": " + std::strerror(errno));
    return nullptr;
  }
  set_timeouts(sock.get(), 0);
  status = RC_OK;
  return std::make_unique<ShmMessageLink>(std::move(sock), endpoint.to_string());
}

}  // namespace rc::transport::shm
