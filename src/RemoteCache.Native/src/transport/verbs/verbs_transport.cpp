#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "transport/connect_codec.h"
#include "transport/socket_util.h"

namespace rc::transport::verbs {
namespace {

constexpr uint32_t kStageBytes = wire::kMaxChunk;  // one-sided requests are cut at kMaxChunk
constexpr uint32_t kSignalEvery = 16;
constexpr uint32_t kMaxSendWr = 2 * kSlots + 16;
constexpr uint32_t kMaxRecvWr = kSlots + 8;
constexpr uint64_t kMessageTag = uint64_t{1} << 63;  // wr_id of a message write: tag | WRs it retires
constexpr uint64_t kHandshakeTag = uint64_t{1} << 62;
constexpr uint64_t kRecvTag = uint64_t{1} << 61;  // every receive: a failed completion has no opcode to tell
constexpr uint64_t kProbeEveryNs = 2'000'000;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A clear error when this machine has no RDMA device at all (rdma_cm's own errors are less direct).
Status require_device() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list != nullptr) ibv_free_device_list(list);
  if (count > 0) return RC_OK;
  return fail(RC_E_UNSUPPORTED,
              "no RDMA device: ibv_get_device_list found none (the verbs transport needs an RDMA NIC, or "
              "Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE; tests/rdma-vm runs one in a VM)");
}

bool resolve(const Endpoint& ep, sockaddr_in& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(ep.host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  std::memcpy(&out, res->ai_addr, sizeof out);
  out.sin_port = htons(ep.port);
  freeaddrinfo(res);
  return true;
}

// Anonymous memory for registered buffers, unmapped on destruction.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes) : size_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  Buffer(Buffer&& o) noexcept : base_(o.base_), size_(o.size_) { o.base_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(size_, o.size_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  std::byte* data() const { return base_; }
  std::size_t size() const { return size_; }

 private:
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

// Waits for the next rdma_cm event on `ec` (non-blocking fd) until the deadline or `stop`; null on timeout.
rdma_cm_event* next_cm_event(rdma_event_channel* ec, uint64_t deadline_ns, const EventFd* stop) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ec, &ev) == 0) return ev;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return nullptr;
    if (!wait_readable(ec->fd, stop, deadline_ns)) return nullptr;
  }
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A TCP-port-space cm id on its own non-blocking event channel (the caller owns both).
Status new_cm_id(rdma_event_channel*& ec, rdma_cm_id*& id) {
  ec = rdma_create_event_channel();
  if (ec != nullptr && rdma_create_id(ec, &id, nullptr, RDMA_PS_TCP) == 0) {
    set_nonblocking(ec->fd);
    return RC_OK;
  }
  const Status st = fail(RC_E_INTERNAL, errno_text("verbs: rdma_create_id"));
  if (ec != nullptr) rdma_destroy_event_channel(ec);
  ec = nullptr;
  return st;
}

// A region's registration with one device: pinned once, whatever the number of connections granted it.
// It gives no remote access by itself (LOCAL_WRITE | MW_BIND): peers reach it only through the memory
// windows bound for their own queue pair.
class Registration {
 public:
  explicit Registration(ibv_mr* mr) : mr_(mr) {}
  ~Registration() { ibv_dereg_mr(mr_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ibv_mr* mr() const { return mr_; }

 private:
  ibv_mr* mr_;
};

constexpr int kWindowedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

// What a server shares between the connections it accepts on one RDMA device: the protection domain
// and each region's registration (Registration). Sharing a PD lets every queue pair use the one
// registration; what keeps a client to its own cache is that its rkeys are type 2 memory windows,
// which the device honours on the queue pair they were bound to and no other (a guessed or leaked key
// fails with a remote access error). Regions are registered as the server commits them (spares) or at
// their first grant, and forgotten when freed; a registration ends with its last holder.
class Domain {
 public:
  // The domain of `ctx`, made on first use. RC_E_UNSUPPORTED when the device has no type 2 memory windows.
  static std::shared_ptr<Domain> of(ibv_context* ctx, Status& status) {
    std::lock_guard lock(all_mutex());
    auto& all = domains();
    std::erase_if(all, [](const std::weak_ptr<Domain>& d) { return d.expired(); });
    for (const auto& weak : all) {
      if (auto d = weak.lock(); d->ctx_ == ctx) return d;
    }
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (pd == nullptr) {
      status = fail(RC_E_INTERNAL, errno_text("verbs: ibv_alloc_pd"));
      return nullptr;
    }
    // Probe for type 2 windows now, so that a device without them fails at listen, not at each connect.
    ibv_mw* probe = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (probe == nullptr) {
      ibv_dealloc_pd(pd);
      status = fail(RC_E_UNSUPPORTED, std::string("verbs: device ") + ibv_get_device_name(ctx->device) +
                                          " has no type 2 memory windows (ibv_alloc_mw: " + std::strerror(errno) +
                                          "); the server needs them to give each connection its own cache's memory "
                                          "and nothing else");
      return nullptr;
    }
    ibv_dealloc_mw(probe);
    auto d = std::shared_ptr<Domain>(new Domain(ctx, pd));
    all.push_back(d);
    status = RC_OK;
    return d;
  }

  ~Domain() {
    registrations_.clear();  // what no connection holds any more
    ibv_dealloc_pd(pd_);
  }
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

  ibv_pd* pd() const { return pd_; }

  // The registration of [base, +size), made now if there is none. Null (errno set) when the device refuses.
  std::shared_ptr<Registration> registration(std::byte* base, uint64_t size) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = registrations_.find(base); it != registrations_.end()) return it->second;
    }
    // Pinning a large region takes long (seconds for a GiB under emulation): not under the lock.
    ibv_mr* mr = ibv_reg_mr(pd_, base, size, kWindowedAccess);
    if (mr == nullptr) return nullptr;
    auto made = std::make_shared<Registration>(mr);
    std::lock_guard lock(mutex_);
    const auto it = registrations_.emplace(base, made).first;
    return it->second;  // another handshake registered it meanwhile: ours is deregistered on return
  }

  void forget(const std::byte* base) {
    std::lock_guard lock(mutex_);
    registrations_.erase(base);
  }

  uint32_t key_of(const std::byte* base) {
    std::lock_guard lock(mutex_);
    auto it = registrations_.find(base);
    // Its lkey: rxe gives a registration without remote access no rkey, and where a device does give one it
    // is the same number (rxe, mlx5), so the lkey is what a peer would have to guess.
    return it != registrations_.end() ? it->second->mr()->lkey : 0;
  }

  // Runs `f` on every live domain.
  template <typename F>
  static void each(F&& f) {
    std::vector<std::shared_ptr<Domain>> live;
    {
      std::lock_guard lock(all_mutex());
      for (const auto& weak : domains()) {
        if (auto d = weak.lock()) live.push_back(std::move(d));
      }
    }
    for (const auto& d : live) f(*d);
  }

 private:
  Domain(ibv_context* ctx, ibv_pd* pd) : ctx_(ctx), pd_(pd) {}
  static std::mutex& all_mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::weak_ptr<Domain>>& domains() {
    static std::vector<std::weak_ptr<Domain>> d;
    return d;
  }

  ibv_context* ctx_;
  ibv_pd* pd_;
  std::mutex mutex_;
  std::unordered_map<const std::byte*, std::shared_ptr<Registration>> registrations_;
};

// One RC queue pair and everything it needs: its cm id and event channel, protection domain (its own,
// or on a server the device's shared Domain), completion queue (one for sends and receives) with its
// channel, its memory registrations and windows, and the shared registrations it was granted.
// Owns them all; tears down in reverse order. Used by one thread at a time.
class QueuePair {
 public:
  QueuePair(rdma_event_channel* ec, rdma_cm_id* id, std::shared_ptr<Domain> domain = nullptr)
      : ec_(ec), id_(id), domain_(std::move(domain)) {}
  ~QueuePair() {
    if (connected_) rdma_disconnect(id_);
    // Windows first: a bound type 2 window holds its queue pair, whose destruction would wait for it
    // (rxe waits, then warns, with the calling thread stuck).
    for (ibv_mw* mw : mws_) ibv_dealloc_mw(mw);
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
    granted_.clear();
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    if (cc_ != nullptr) ibv_destroy_comp_channel(cc_);
    if (pd_ != nullptr && domain_ == nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (ec_ != nullptr) rdma_destroy_event_channel(ec_);
  }
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  Status create() {
    pd_ = domain_ != nullptr ? domain_->pd() : ibv_alloc_pd(id_->verbs);
    cc_ = pd_ != nullptr ? ibv_create_comp_channel(id_->verbs) : nullptr;
    cq_ = cc_ != nullptr ? ibv_create_cq(id_->verbs, kMaxSendWr + kMaxRecvWr, nullptr, cc_, 0) : nullptr;
    if (cq_ == nullptr) return fail(RC_E_INTERNAL, errno_text("verbs: PD/CQ creation"));
    set_nonblocking(cc_->fd);
    // Ask for generous inline data and settle for what the device grants.
    for (uint32_t inline_bytes : {256u, 128u, 64u, 0u}) {
      ibv_qp_init_attr attr{};
      attr.send_cq = cq_;
      attr.recv_cq = cq_;
      attr.qp_type = IBV_QPT_RC;
      attr.sq_sig_all = 0;
      attr.cap.max_send_wr = kMaxSendWr;
      attr.cap.max_recv_wr = kMaxRecvWr;
      attr.cap.max_send_sge = 1;
      attr.cap.max_recv_sge = 1;
      attr.cap.max_inline_data = inline_bytes;
      if (rdma_create_qp(id_, pd_, &attr) == 0) {
        max_inline_ = attr.cap.max_inline_data;
        return RC_OK;
      }
    }
    return fail(RC_E_INTERNAL, errno_text("verbs: rdma_create_qp"));
  }

  ibv_mr* reg(void* addr, std::size_t bytes, int access) {
    ibv_mr* mr = addr != nullptr ? ibv_reg_mr(pd_, addr, bytes, access) : nullptr;
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  ibv_mr* reg(const Buffer& b, int access) { return reg(b.data(), b.size(), access); }

  // Lets the peer reach [addr, +bytes) of `mr` (registered with MW_BIND) with `access`, through a type 2
  // memory window bound to this queue pair alone; `rkey` is the window's key. Binds complete in order;
  // the `last` of a series is signaled, and wait_sent() then waits for them all.
  Status bind_window(ibv_mr* mr, const void* addr, uint64_t bytes, int access, bool last, uint64_t deadline_ns,
                     uint32_t& rkey) {
    ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
    if (mw == nullptr)
      return fail(RC_E_NO_MEMORY, errno_text("verbs: ibv_alloc_mw (the device's memory windows are used up)"));
    mws_.push_back(mw);
    ibv_send_wr wr{};
    wr.wr_id = kMessageTag;
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = ibv_mw_bind_info{mr, reinterpret_cast<uint64_t>(addr), bytes, static_cast<unsigned>(access)};
    Status st;
    while ((st = post_send(wr, last)) == RC_E_BUSY) {
      if (!wait_until([this] { return sq_used_ < kMaxSendWr; }, deadline_ns, nullptr)) return bind_failure();
    }
    rkey = wr.bind_mw.rkey;
    return st;
  }

  // Waits until every work request posted so far has completed (the last one was signaled).
  Status wait_sent(uint64_t deadline_ns) {
    return wait_until([this] { return sq_used_ == 0; }, deadline_ns, nullptr) ? RC_OK : bind_failure();
  }

  // Keeps a shared registration (and so its pinning) alive while this queue pair has windows on it.
  void hold(std::shared_ptr<Registration> r) { granted_.push_back(std::move(r)); }

  // Polls completions until `done()` holds, the queue pair breaks, the deadline passes or `stop` is
  // signalled (may be null); sleeps on the completion channel in between.
  template <typename Pred>
  bool wait_until(Pred done, uint64_t deadline_ns, const EventFd* stop) {
    for (;;) {
      reap();
      if (done()) return true;
      if (broken_ || now_ns() >= deadline_ns) return false;
      if (stop != nullptr) {
        pollfd p{stop->fd(), POLLIN, 0};
        if (poll(&p, 1, 0) > 0) return false;
      }
      arm();
      reap();
      if (done()) return true;
      if (!wait_readable(cc_->fd, stop, std::min(deadline_ns, now_ns() + 10'000'000))) continue;
      disarm();
    }
  }

  // Before connecting: the first receive takes the peer's handshake message (into `handshake`), the
  // next kSlots the immediates of the frames it writes into our ring (reposted as frames are consumed).
  Status post_initial_receives(const Buffer& handshake, uint32_t lkey) {
    if (Status st = post_recv(kHandshakeTag, handshake.data(), kHandshakeBytes, lkey); st != RC_OK) return st;
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (Status st = post_recv(0, nullptr, 0, 0); st != RC_OK) return st;
    }
    return RC_OK;
  }

  Status post_recv(uint64_t wr_id, void* addr, uint32_t bytes, uint32_t lkey) {
    ibv_sge sge{reinterpret_cast<uint64_t>(addr), bytes, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id | kRecvTag;
    wr.sg_list = bytes > 0 ? &sge : nullptr;
    wr.num_sge = bytes > 0 ? 1 : 0;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(id_->qp, &wr, &bad) == 0 ? RC_OK : fail(RC_E_DISCONNECTED, errno_text("verbs: post_recv"));
  }

  // Posts one send-queue work request. `force_signal` for WRs whose completion someone waits for;
  // the others are signaled every kSignalEvery, which also retires the unsignaled ones before them.
  Status post_send(ibv_send_wr& wr, bool force_signal) {
    if (sq_used_ >= kMaxSendWr) {
      reap();
      if (sq_used_ >= kMaxSendWr) return RC_E_BUSY;
    }
    const bool signal = force_signal || unsignaled_ + 1 >= kSignalEvery || sq_used_ + 2 >= kMaxSendWr;
    if (signal) {
      const uint64_t covered = unsignaled_ + 1;
      if ((wr.wr_id & (kMessageTag | kHandshakeTag)) != 0 || !force_signal) wr.wr_id = kMessageTag | covered;
      else covered_[wr.wr_id % kSlots] = covered;
      wr.send_flags |= IBV_SEND_SIGNALED;
      unsignaled_ = 0;
    } else {
      ++unsignaled_;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(id_->qp, &wr, &bad) != 0) return fail(RC_E_DISCONNECTED, errno_text("verbs: post_send"));
    ++sq_used_;
    return RC_OK;
  }

  // One single-buffer work request: RDMA READ, WRITE or WRITE WITH IMMEDIATE of [local, +length) at remote_addr
  // (rkey), or a SEND (remote_addr and rkey unused). The local bytes are in memory registered under lkey, or,
  // inline, copied into the work request by the provider.
  Status post_wr(ibv_wr_opcode opcode, uint64_t wr_id, const void* local, uint32_t length, uint32_t lkey,
                   bool inline_it, uint64_t remote_addr, uint32_t rkey, bool force_signal, uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = inline_it ? IBV_SEND_INLINE : 0;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return post_send(wr, force_signal);
  }

  // Drains the completion queue into the lists below. A failed completion breaks the connection:
  // after it, every outstanding request flushes with an error too.
  void reap() {
    ibv_wc wcs[32];
    for (int n; (n = ibv_poll_cq(cq_, 32, wcs)) > 0;) {
      for (int i = 0; i < n; ++i) on_completion(wcs[i]);
    }
  }

  void arm() { ibv_req_notify_cq(cq_, 0); }
  void disarm() {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (ibv_get_cq_event(cc_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
  void fds(std::vector<int>& out) const {
    out.push_back(cc_->fd);
    out.push_back(ec_->fd);
  }

  // rdma_cm events after the connection is up: a disconnect (the peer closed or died) breaks it.
  void watch_cm() {
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(ec_, &ev) == 0) {
      const auto type = ev->event;
      rdma_ack_cm_event(ev);
      if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
          type == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
        broken_ = true;
        connected_ = false;
      }
    }
  }

  Status alive() {
    watch_cm();
    reap();
    return broken_ ? fail(RC_E_DISCONNECTED, "verbs: the peer is gone (queue pair broken or disconnected)") : RC_OK;
  }

  // alive() for the hot path: rdma_cm is asked at most every kProbeEveryNs (it costs a system call);
  // a broken queue pair shows up in completions anyway.
  Status still_there() {
    const uint64_t now = coarse_now_ns();
    if (!broken_ && now - last_probe_ns_ < kProbeEveryNs) return RC_OK;
    last_probe_ns_ = now;
    return alive();
  }

  Status bind_failure() const {
    return broken_ ? fail(RC_E_INTERNAL, "verbs: binding a memory window failed (see the warning above)")
                   : fail(RC_E_TIMEOUT, "verbs: the device did not complete the memory window binds in time");
  }

  uint64_t last_probe_ns_ = 0;

  rdma_event_channel* ec_;
  rdma_cm_id* id_;
  std::shared_ptr<Domain> domain_;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* cc_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_mr*> mrs_;
  std::vector<ibv_mw*> mws_;
  std::vector<std::shared_ptr<Registration>> granted_;
  uint32_t max_inline_ = 0;
  bool connected_ = false;
  bool broken_ = false;

  uint32_t sq_used_ = 0;
  uint32_t unsignaled_ = 0;
  uint64_t covered_[kSlots] = {};          // send-queue WRs a signaled one-sided WR retires, by slot
  std::deque<uint32_t> arrivals_;          // lengths of frames written into our ring, in order
  std::deque<std::pair<uint64_t, Status>> one_sided_done_;  // (staging slot, status), in post order
  int64_t handshake_bytes_ = -1;           // a received handshake message's length

 private:
  void on_completion(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS) {
      if (!broken_ && wc.status != IBV_WC_WR_FLUSH_ERR)
        RC_LOG_WARN("verbs: work completion failed: %s", ibv_wc_status_str(wc.status));
      broken_ = true;
    }
    if ((wc.wr_id & kRecvTag) != 0) {
      if (wc.status != IBV_WC_SUCCESS) return;
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) arrivals_.push_back(ntohl(wc.imm_data));
      else handshake_bytes_ = wc.byte_len;
      return;
    }
    // A send-queue completion. Its status is known even when it failed (then its opcode is not).
    if ((wc.wr_id & kMessageTag) != 0) {
      sq_used_ -= static_cast<uint32_t>(std::min<uint64_t>(sq_used_, wc.wr_id & ~kMessageTag));
    } else if ((wc.wr_id & kHandshakeTag) != 0) {
      sq_used_ -= std::min<uint32_t>(sq_used_, 1);
    } else {
      const uint64_t slot = wc.wr_id % kSlots;
      sq_used_ -= static_cast<uint32_t>(std::min<uint64_t>(sq_used_, covered_[slot]));
      one_sided_done_.emplace_back(slot, wc.status == IBV_WC_SUCCESS ? RC_OK : RC_E_DISCONNECTED);
    }
  }
};

// Writes `frame` into slot `slot` of the peer's ring with RDMA WRITE WITH IMMEDIATE (imm = length),
// from our registered staging slot (or inline when it fits).
Status write_frame(QueuePair& qp, std::span<const std::byte> frame, std::byte* stage, uint32_t lkey,
                   const RingInfo& peer, uint32_t slot) {
  if (frame.size() > peer.slot_bytes) return fail(RC_E_INTERNAL, "verbs: frame larger than a ring slot");
  const bool inline_it = frame.size() <= qp.max_inline_;
  if (!inline_it) std::memcpy(stage, frame.data(), frame.size());
  const auto length = static_cast<uint32_t>(frame.size());
  return qp.post_wr(IBV_WR_RDMA_WRITE_WITH_IMM, kMessageTag, inline_it ? frame.data() : stage, length, lkey, inline_it,
                      peer.addr + uint64_t{slot} * peer.slot_bytes, peer.rkey, false, length);
}

Status send_message(QueuePair& qp, std::byte* buf, uint32_t bytes, uint32_t lkey) {
  return qp.post_wr(IBV_WR_SEND, kHandshakeTag, buf, bytes, lkey, false, 0, 0, true);
}

// Waits for the handshake message (a SEND into the first posted receive buffer).
bool wait_message(QueuePair& qp, uint64_t deadline_ns, const EventFd* stop) {
  return qp.wait_until([&qp] { return qp.handshake_bytes_ >= 0; }, deadline_ns, stop);
}

bool wait_cm(rdma_event_channel* ec, rdma_cm_event_type want, uint64_t deadline_ns, const EventFd* stop,
             std::string& got) {
  rdma_cm_event* ev = next_cm_event(ec, deadline_ns, stop);
  if (ev == nullptr) {
    got = "no event (timeout)";
    return false;
  }
  const auto type = ev->event;
  const int status = ev->status;
  rdma_ack_cm_event(ev);
  got = std::string(rdma_event_str(type)) + (status != 0 ? " (status " + std::to_string(status) + ")" : "");
  return type == want;
}

// ---- client -----------------------------------------------------------------------------------

class VerbsClientConnection final : public ClientConnection {
 public:
  VerbsClientConnection(std::unique_ptr<QueuePair> qp, Buffer handshake, Buffer responses, Buffer requests,
                        Buffer stage, const wire::ConnectReply& reply, std::vector<wire::RegionDescriptor> regions,
                        const RingInfo& server_ring, uint32_t request_lkey, uint32_t stage_lkey)
      : qp_(std::move(qp)),
        handshake_(std::move(handshake)),
        responses_(std::move(responses)),
        requests_(std::move(requests)),
        stage_(std::move(stage)),
        reply_(reply),
        regions_(std::move(regions)),
        server_ring_(server_ring),
        request_lkey_(request_lkey),
        stage_lkey_(stage_lkey) {
    for (uint32_t i = 0; i < kSlots; ++i) free_slots_.push_back(kSlots - 1 - i);
  }

  const wire::ConnectReply& reply() const override { return reply_; }
  bool one_sided() const override { return true; }
  uint32_t max_inline() const override { return qp_->max_inline_; }
  // One-sided data goes through a staging slot of kStageBytes per operation in flight.
  uint32_t max_one_sided_length() const override { return kStageBytes; }
  uint32_t max_one_sided_in_flight() const override { return kSlots; }

  Status post_read(uint64_t wr_id, uint16_t region, uint64_t offset, void* dst, uint32_t length) override {
    return post_one_sided(IBV_WR_RDMA_READ, wr_id, region, offset, dst, length);
  }

  Status post_write(uint64_t wr_id, uint16_t region, uint64_t offset, const void* src, uint32_t length) override {
    // The server registered a read-only grant's regions without remote write: an RDMA WRITE would
    // fail with a remote access error and break the queue pair, so it is refused here.
    if ((reply_.flags & wire::kReplyReadOnly) != 0)
      return fail(RC_E_AUTH, "verbs: this connection is read-only (a migration source)");
    return post_one_sided(IBV_WR_RDMA_WRITE, wr_id, region, offset, const_cast<void*>(src), length);
  }

  std::size_t poll_completions(WorkCompletion* out, std::size_t max) override {
    qp_->reap();
    std::size_t n = 0;
    while (n < max && !qp_->one_sided_done_.empty()) {
      const auto [slot, status] = qp_->one_sided_done_.front();
      qp_->one_sided_done_.pop_front();
      Posted& p = posted_[slot];
      if (status == RC_OK && p.read_into != nullptr)
        std::memcpy(p.read_into, stage_.data() + slot * kStageBytes, p.length);
      out[n++] = WorkCompletion{p.wr_id, status};
      free_slots_.push_back(static_cast<uint32_t>(slot));
    }
    return n;
  }

  Status send_frame(std::span<const std::byte> frame) override {
    if (qp_->broken_) return fail(RC_E_DISCONNECTED, "verbs: the connection is broken");
    if (sent_ - released_ >= kSlots) return RC_E_BUSY;  // every request slot awaits its response
    const uint32_t slot = static_cast<uint32_t>(sent_ % kSlots);
    const Status st = write_frame(*qp_, frame, requests_.data() + std::size_t{slot} * kSlotBytes, request_lkey_,
                                  server_ring_, slot);
    if (st == RC_OK) ++sent_;
    return st;
  }

  Status poll_response(std::span<const std::byte>& frame) override {
    // Reaps only while a response is awaited or the connection broke (a server's parting Notice is
    // then looked for): otherwise the caller's poll_completions has just reaped, and under emulated
    // RDMA a second ibv_poll_cq per poll is a measurable share of a one-sided read's turnaround.
    if (qp_->arrivals_.empty() && (sent_ != released_ || qp_->broken_)) qp_->reap();
    if (qp_->arrivals_.empty()) {
      return qp_->broken_ ? fail(RC_E_DISCONNECTED, "verbs: the connection is broken") : RC_E_BUSY;
    }
    const uint32_t length = qp_->arrivals_.front();
    if (length > kSlotBytes) return fail(RC_E_PROTOCOL, "verbs: response longer than a ring slot");
    frame = {responses_.data() + std::size_t(released_ % kSlots) * kSlotBytes, length};
    return RC_OK;
  }

  void release_response() override {
    qp_->arrivals_.pop_front();
    ++released_;
    qp_->post_recv(0, nullptr, 0, 0);  // the receive the next response's immediate consumes
  }

  void arm_wait() override { qp_->arm(); }
  void disarm_wait() override { qp_->disarm(); }
  void wait_fds(std::vector<int>& fds) const override { qp_->fds(fds); }
  Status check_alive() override { return qp_->alive(); }

 private:
  struct Posted {
    uint64_t wr_id = 0;
    void* read_into = nullptr;
    uint32_t length = 0;
  };

  Status post_one_sided(ibv_wr_opcode opcode, uint64_t wr_id, uint16_t region, uint64_t offset, void* buf,
                        uint32_t length) {
    if (qp_->still_there() != RC_OK) return fail(RC_E_DISCONNECTED, "verbs: the cache server is gone");
    if (region >= regions_.size() || offset > reply_.region_size || length > reply_.region_size - offset)
      return fail(RC_E_OUT_OF_RANGE, "one-sided access outside the granted region");
    if (length > kStageBytes) return fail(RC_E_INVALID_ARGUMENT, "verbs: one-sided request above kMaxChunk");
    if (free_slots_.empty()) return fail(RC_E_INTERNAL, "verbs: more one-sided requests in flight than q allows");
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    std::byte* stage = stage_.data() + std::size_t{slot} * kStageBytes;
    const bool write = opcode == IBV_WR_RDMA_WRITE;
    const bool inline_it = write && length <= qp_->max_inline_;
    if (write && !inline_it) std::memcpy(stage, buf, length);
    posted_[slot] = Posted{wr_id, write ? nullptr : buf, length};
    Status st = qp_->post_wr(opcode, slot, inline_it ? buf : stage, length, stage_lkey_, inline_it,
                               regions_[region].addr + offset, static_cast<uint32_t>(regions_[region].key), true);
    if (st == RC_E_BUSY) {
      st = fail(RC_E_INTERNAL, "verbs: send queue full");
    }
    if (st != RC_OK) free_slots_.push_back(slot);
    return st;
  }

  std::unique_ptr<QueuePair> qp_;
  Buffer handshake_;
  Buffer responses_;  // the ring the server writes responses into (registered, remote write)
  Buffer requests_;   // staging for request frames
  Buffer stage_;      // staging for one-sided data, one kStageBytes slot per request in flight
  wire::ConnectReply reply_;
  std::vector<wire::RegionDescriptor> regions_;
  RingInfo server_ring_;
  uint32_t request_lkey_;
  uint32_t stage_lkey_;
  uint64_t sent_ = 0;
  uint64_t released_ = 0;
  std::vector<uint32_t> free_slots_;
  Posted posted_[kSlots];
};

// ---- server -----------------------------------------------------------------------------------

class VerbsServerConnection final : public ServerConnection {
 public:
  VerbsServerConnection(std::unique_ptr<QueuePair> qp, Buffer handshake, Buffer requests, Buffer responses,
                        const RingInfo& client_ring, uint32_t response_lkey, std::string peer)
      : qp_(std::move(qp)),
        handshake_(std::move(handshake)),
        requests_(std::move(requests)),
        responses_(std::move(responses)),
        client_ring_(client_ring),
        response_lkey_(response_lkey),
        peer_(std::move(peer)),
        frame_(std::make_unique<std::byte[]>(kSlotBytes)) {}

  Status next_request(std::span<const std::byte>& frame) override {
    if (!flush()) return RC_E_BUSY;
    qp_->reap();
    if (qp_->arrivals_.empty())
      return qp_->broken_ ? fail(RC_E_DISCONNECTED, "verbs: the client is gone") : RC_E_BUSY;
    const uint32_t length = qp_->arrivals_.front();
    qp_->arrivals_.pop_front();
    if (length > kSlotBytes) return fail(RC_E_PROTOCOL, "verbs: request longer than a ring slot");
    // Copy out of the ring first: the client could rewrite the slot while the frame is parsed.
    std::memcpy(frame_.get(), requests_.data() + std::size_t(received_ % kSlots) * kSlotBytes, length);
    ++received_;
    qp_->post_recv(0, nullptr, 0, 0);
    frame = {frame_.get(), length};
    return RC_OK;
  }

  Status send_response(std::span<const std::byte> frame) override {
    if (outbox_.empty()) {
      const Status st = write_next(frame);
      if (st != RC_E_BUSY) return st;
    }
    outbox_.emplace_back(frame.begin(), frame.end());
    return RC_OK;
  }

  bool flush() override {
    while (!outbox_.empty()) {
      const auto& f = outbox_.front();
      if (write_next({f.data(), f.size()}) != RC_OK) break;
      outbox_.pop_front();
    }
    return outbox_.empty();
  }

  bool needs_server_thread() const override { return false; }
  Status check_alive() override { return qp_->alive(); }
  void arm_wait() override { qp_->arm(); }
  void disarm_wait() override { qp_->disarm(); }
  void wait_fds(std::vector<int>& fds) const override { qp_->fds(fds); }
  std::string peer() const override { return peer_; }

 private:
  Status write_next(std::span<const std::byte> frame) {
    if (qp_->broken_) return fail(RC_E_DISCONNECTED, "verbs: the client is gone");
    const uint32_t slot = static_cast<uint32_t>(sent_ % kSlots);
    const Status st = write_frame(*qp_, frame, responses_.data() + std::size_t{slot} * kSlotBytes, response_lkey_,
                                  client_ring_, slot);
    if (st == RC_OK) ++sent_;
    return st;
  }

  std::unique_ptr<QueuePair> qp_;
  Buffer handshake_;
  Buffer requests_;   // the ring clients write requests into
  Buffer responses_;  // staging for response frames
  RingInfo client_ring_;
  uint32_t response_lkey_;
  std::string peer_;
  std::unique_ptr<std::byte[]> frame_;
  std::deque<std::vector<std::byte>> outbox_;
  uint64_t received_ = 0;
  uint64_t sent_ = 0;
};

constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

rdma_conn_param connection_parameters() {
  rdma_conn_param p{};
  p.responder_resources = 16;
  p.initiator_depth = 16;
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // receives are reposted as frames are consumed; wait rather than fail
  return p;
}

class VerbsPending final : public PendingConnection {
 public:
  VerbsPending(rdma_cm_id* id, std::string host) : id_(id), host_(std::move(host)), peer_("verbs:" + host_) {}

  std::string peer_key() const override { return "ip:" + host_; }

  // rdma_cm refuses with a reject, which the client reports as a refused connection; the reason
  // is in the server's log.
  void refuse(Status, const std::string&) override {}
  ~VerbsPending() override {
    if (id_ != nullptr) {
      rdma_reject(id_, nullptr, 0);
      rdma_destroy_id(id_);
    }
  }

  // Admin connections are not carried over verbs: an AdminHello fails to decode as a Connect.
  std::unique_ptr<ServerConnection> handshake(const HandshakeHandlers& handlers, const EventFd& stop,
                                              Status& status) override {
    const uint64_t deadline = now_ns() + uint64_t{kHandshakeTimeoutMs} * 1'000'000;
    std::shared_ptr<Domain> domain = Domain::of(id_->verbs, status);
    if (domain == nullptr) return nullptr;
    rdma_event_channel* ec = rdma_create_event_channel();
    if (ec == nullptr || rdma_migrate_id(id_, ec) != 0) {
      if (ec != nullptr) rdma_destroy_event_channel(ec);
      status = fail(RC_E_INTERNAL, errno_text("verbs: rdma_migrate_id"));
      return nullptr;
    }
    set_nonblocking(ec->fd);
    auto qp = std::make_unique<QueuePair>(ec, id_, domain);
    id_ = nullptr;  // owned by qp now
    if ((status = qp->create()) != RC_OK) return nullptr;

    Buffer handshake(kHandshakeBytes);
    Buffer requests(std::size_t{kSlots} * kSlotBytes);
    Buffer responses(std::size_t{kSlots} * kSlotBytes);
    ibv_mr* hs_mr = qp->reg(handshake, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* req_mr = qp->reg(requests, kWindowedAccess);  // the client writes it through a window
    ibv_mr* resp_mr = qp->reg(responses, IBV_ACCESS_LOCAL_WRITE);
    if (hs_mr == nullptr || req_mr == nullptr || resp_mr == nullptr) {
      status = fail(RC_E_INTERNAL, errno_text("verbs: registering connection buffers"));
      return nullptr;
    }
    if ((status = qp->post_initial_receives(handshake, hs_mr->lkey)) != RC_OK) return nullptr;
    rdma_conn_param param = connection_parameters();
    if (rdma_accept(qp->id_, &param) != 0) {
      status = fail(RC_E_DISCONNECTED, errno_text("verbs: rdma_accept"));
      return nullptr;
    }
    std::string got;
    if (!wait_cm(ec, RDMA_CM_EVENT_ESTABLISHED, deadline, &stop, got)) {
      status = fail(RC_E_DISCONNECTED, "verbs: connection from " + peer_ + " not established: " + got);
      return nullptr;
    }
    qp->connected_ = true;
    if (!wait_message(*qp, deadline, &stop)) {
      RC_LOG_WARN("verbs: %s sent no Connect within %u ms", peer_.c_str(), kHandshakeTimeoutMs);
      status = RC_E_PROTOCOL;
      return nullptr;
    }
    const std::size_t frame_bytes = sizeof(wire::FrameHeader) + sizeof(wire::ConnectRequest);
    wire::ConnectRequest request{};
    RingInfo client_ring{};
    if (qp->handshake_bytes_ != static_cast<int64_t>(frame_bytes + sizeof(RingInfo)) ||
        decode_connect_request({handshake.data(), frame_bytes}, request) != RC_OK) {
      log_refusal("no valid Connect", peer_, "verbs: refusing " + peer_ + ": its first message was not a valid Connect");
      status = RC_E_PROTOCOL;
      return nullptr;
    }
    std::memcpy(&client_ring, handshake.data() + frame_bytes, sizeof client_ring);
    if (client_ring.slots != kSlots || client_ring.slot_bytes != kSlotBytes) {
      log_refusal("ring geometry", peer_, "verbs: refusing " + peer_ + ": its response ring has another geometry");
      status = RC_E_PROTOCOL;
      return nullptr;
    }

    Grant grant = handlers.admit(request);
    std::vector<wire::RegionDescriptor> descriptors;
    uint32_t ring_rkey = 0;
    if (grant.status == RC_OK) {
      const Status bound = bind_grant(*qp, *domain, grant, requests, req_mr, descriptors, ring_rkey);
      if (bound != RC_OK) {
        grant = Grant{bound, last_error(), {}, 0};
        descriptors.clear();
        if (qp->broken_) {
          status = bound;
          return nullptr;
        }
      }
    }
    const auto reply = encode_connect_reply(grant, descriptors);
    const RingInfo ring{reinterpret_cast<uint64_t>(requests.data()), ring_rkey, kSlots, kSlotBytes, 0};
    if (reply.size() + sizeof ring > kHandshakeBytes) {
      status = fail(RC_E_INVALID_ARGUMENT, "verbs: too many regions for one Connect reply");
      return nullptr;
    }
    std::memcpy(handshake.data(), reply.data(), reply.size());
    std::memcpy(handshake.data() + reply.size(), &ring, sizeof ring);
    status = send_message(*qp, handshake.data(), static_cast<uint32_t>(reply.size() + sizeof ring), hs_mr->lkey);
    if (status != RC_OK) return nullptr;
    if (grant.status != RC_OK) {
      // Destroying the queue pair at once can flush the refusal unsent (Soft-RoCE did: the client then timed out
      // waiting for a reply instead of hearing the reason): it goes once the send completed, within the handshake's time.
      qp->wait_until([&q = *qp] { return q.sq_used_ == 0; }, deadline, &stop);
      status = grant.status;
      return nullptr;
    }
    return std::make_unique<VerbsServerConnection>(std::move(qp), std::move(handshake), std::move(requests),
                                                   std::move(responses), client_ring, resp_mr->lkey, peer_);
  }

 private:
  // Gives the admitted client its grant: a window on each region's shared registration (read-only for a
  // migration source, where the device itself then refuses RDMA WRITEs) and one on the request ring,
  // all bound to its queue pair alone. Fills the descriptors and the ring's key.
  static Status bind_grant(QueuePair& qp, Domain& domain, const Grant& grant, const Buffer& ring, ibv_mr* ring_mr,
                           std::vector<wire::RegionDescriptor>& descriptors, uint32_t& ring_rkey) {
    const int access = grant.read_only ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    for (const RegionMemory& r : grant.regions) {
      std::shared_ptr<Registration> reg = domain.registration(r.base, r.size);
      if (reg == nullptr) return fail(RC_E_NO_MEMORY, errno_text("verbs: cannot register a region with the RDMA device"));
      qp.hold(reg);
    }
    // Registering may have taken long (a first grant of a large region): the binds get their own deadline.
    const uint64_t deadline = now_ns() + uint64_t{kHandshakeTimeoutMs} * 1'000'000;
    for (std::size_t i = 0; i < grant.regions.size(); ++i) {
      const RegionMemory& r = grant.regions[i];
      uint32_t rkey = 0;
      if (Status st = qp.bind_window(qp.granted_[i]->mr(), r.base, r.size, access, false, deadline, rkey); st != RC_OK)
        return st;
      descriptors.push_back({reinterpret_cast<uint64_t>(r.base), rkey});
    }
    if (Status st = qp.bind_window(ring_mr, ring.data(), ring.size(), IBV_ACCESS_REMOTE_WRITE, true, deadline, ring_rkey);
        st != RC_OK)
      return st;
    return qp.wait_sent(deadline);
  }

 public:

 private:
  rdma_cm_id* id_;
  std::string host_;
  std::string peer_;
};

class VerbsListener final : public Listener {
 public:
  VerbsListener(rdma_event_channel* ec, rdma_cm_id* id, std::string endpoint, std::shared_ptr<Domain> domain)
      : ec_(ec), id_(id), endpoint_(std::move(endpoint)), domain_(std::move(domain)) {}
  ~VerbsListener() override {
    rdma_destroy_id(id_);
    rdma_destroy_event_channel(ec_);
  }

  std::string endpoint() const override { return endpoint_; }

  std::unique_ptr<PendingConnection> accept(Status& status) override {
    for (;;) {
      rdma_cm_event* ev = next_cm_event(ec_, UINT64_MAX, &stop_);
      if (ev == nullptr) {
        status = RC_E_CLOSED;
        return nullptr;
      }
      if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(ev);
        continue;
      }
      rdma_cm_id* child = ev->id;
      char host[INET6_ADDRSTRLEN] = "?";
      const sockaddr* peer = rdma_get_peer_addr(child);
      if (peer != nullptr && peer->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(peer)->sin_addr, host, sizeof host);
      rdma_ack_cm_event(ev);
      status = RC_OK;
      return std::make_unique<VerbsPending>(child, host);
    }
  }

  void shutdown() override { stop_.signal(); }

 private:
  rdma_event_channel* ec_;
  rdma_cm_id* id_;
  std::string endpoint_;
  // Bound to one device: its domain lives as long as the listener, so that committed regions are
  // registered ahead of their first connection (null for a wildcard address: made at the first handshake).
  std::shared_ptr<Domain> domain_;
  EventFd stop_;
};

}  // namespace

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status) {
  if ((status = require_device()) != RC_OK) return nullptr;
  sockaddr_in addr{};
  if (!resolve(endpoint, addr)) {
    status = fail(RC_E_INVALID_ARGUMENT, "verbs: cannot resolve " + endpoint.host);
    return nullptr;
  }
  const uint64_t deadline = now_ns() + uint64_t{params.timeout_ms} * 1'000'000;
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
  if ((status = new_cm_id(ec, id)) != RC_OK) return nullptr;
  auto qp = std::make_unique<QueuePair>(ec, id);
  const std::string target = endpoint.to_string();
  std::string got;
  const int resolve_ms = static_cast<int>(std::max<uint32_t>(params.timeout_ms, 100));
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), resolve_ms) != 0 ||
      !wait_cm(ec, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, nullptr, got)) {
    status = fail(RC_E_DISCONNECTED, "verbs: cannot resolve an RDMA route to " + target + ": " +
                                         (got.empty() ? errno_text("rdma_resolve_addr") : got));
    return nullptr;
  }
  if (rdma_resolve_route(id, resolve_ms) != 0 || !wait_cm(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, nullptr, got)) {
    status = fail(RC_E_DISCONNECTED, "verbs: cannot resolve a route to " + target + ": " + got);
    return nullptr;
  }
  if ((status = qp->create()) != RC_OK) return nullptr;

  Buffer handshake(kHandshakeBytes);
  Buffer responses(std::size_t{kSlots} * kSlotBytes);
  Buffer requests(std::size_t{kSlots} * kSlotBytes);
  Buffer stage(std::size_t{kSlots} * kStageBytes);
  ibv_mr* hs_mr = qp->reg(handshake, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* resp_mr = qp->reg(responses, kRemoteAccess);
  ibv_mr* req_mr = qp->reg(requests, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* stage_mr = qp->reg(stage, IBV_ACCESS_LOCAL_WRITE);
  if (hs_mr == nullptr || resp_mr == nullptr || req_mr == nullptr || stage_mr == nullptr) {
    status = fail(RC_E_INTERNAL, errno_text("verbs: registering connection buffers"));
    return nullptr;
  }
  if ((status = qp->post_initial_receives(handshake, hs_mr->lkey)) != RC_OK) return nullptr;
  rdma_conn_param param = connection_parameters();
  if (rdma_connect(id, &param) != 0 || !wait_cm(ec, RDMA_CM_EVENT_ESTABLISHED, deadline, nullptr, got)) {
    status = fail(RC_E_DISCONNECTED, "verbs: cannot connect to " + target + ": " + (got.empty() ? errno_text("rdma_connect") : got));
    return nullptr;
  }
  qp->connected_ = true;

  const auto request = encode_connect_request(params.request);
  const RingInfo ring{reinterpret_cast<uint64_t>(responses.data()), resp_mr->rkey, kSlots, kSlotBytes, 0};
  std::memcpy(handshake.data(), request.data(), request.size());
  std::memcpy(handshake.data() + request.size(), &ring, sizeof ring);
  // The reply lands in the same buffer; the send is done with it before the server can answer.
  if ((status = send_message(*qp, handshake.data(), static_cast<uint32_t>(request.size() + sizeof ring), hs_mr->lkey)) != RC_OK)
    return nullptr;
  if (!wait_message(*qp, deadline, nullptr)) {
    status = fail(qp->broken_ ? RC_E_DISCONNECTED : RC_E_TIMEOUT, "verbs: no Connect reply from " + target);
    return nullptr;
  }
  const auto bytes = static_cast<std::size_t>(qp->handshake_bytes_);
  if (bytes < sizeof(wire::FrameHeader) + sizeof(RingInfo)) {
    status = fail(RC_E_PROTOCOL, "verbs: Connect reply too short");
    return nullptr;
  }
  const auto header = wire::read_header(handshake.data());
  const std::size_t reply_bytes = std::min<std::size_t>(header.bytes, bytes);
  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  status = decode_connect_reply({handshake.data(), reply_bytes}, reply, regions);
  if (status != RC_OK) return nullptr;
  RingInfo server_ring{};
  if (bytes != reply_bytes + sizeof server_ring) {
    status = fail(RC_E_PROTOCOL, "verbs: Connect reply lacks the request ring");
    return nullptr;
  }
  std::memcpy(&server_ring, handshake.data() + reply_bytes, sizeof server_ring);
  if (server_ring.slots != kSlots || server_ring.slot_bytes != kSlotBytes) {
    status = fail(RC_E_PROTOCOL, "verbs: the server's request ring has another geometry");
    return nullptr;
  }
  const uint32_t req_lkey = req_mr->lkey, stage_lkey = stage_mr->lkey;
  status = RC_OK;
  return std::make_unique<VerbsClientConnection>(std::move(qp), std::move(handshake), std::move(responses),
                                                 std::move(requests), std::move(stage), reply, std::move(regions),
                                                 server_ring, req_lkey, stage_lkey);
}

std::unique_ptr<Listener> listen(const Endpoint& endpoint, Status& status) {
  if ((status = require_device()) != RC_OK) return nullptr;
  sockaddr_in addr{};
  if (!resolve(endpoint, addr)) {
    status = fail(RC_E_INVALID_ARGUMENT, "verbs: cannot resolve " + endpoint.host);
    return nullptr;
  }
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
  if ((status = new_cm_id(ec, id)) != RC_OK) return nullptr;
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0 || rdma_listen(id, 64) != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "cannot listen on " + endpoint.to_string() + ": " +
                                             errno_text("rdma_bind_addr/rdma_listen") +
                                             " (is the address on an RDMA-capable interface?)");
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ec);
    return nullptr;
  }
  std::shared_ptr<Domain> domain;
  if (id->verbs != nullptr && (domain = Domain::of(id->verbs, status)) == nullptr) {
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ec);
    return nullptr;
  }
  const uint16_t port = ntohs(rdma_get_src_port(id));
  status = RC_OK;
  return std::make_unique<VerbsListener>(ec, id, "verbs:" + endpoint.host + ":" + std::to_string(port),
                                         std::move(domain));
}

void region_committed(const RegionMemory& region) {
  Domain::each([&](Domain& d) {
    if (d.registration(region.base, region.size) == nullptr)
      RC_LOG_WARN("verbs: cannot register a committed region ahead (%s); its first connection registers it",
                  std::strerror(errno));
  });
}

void region_released(const RegionMemory& region) {
  Domain::each([&](Domain& d) { d.forget(region.base); });
}

uint32_t registration_key(const void* base) {
  uint32_t key = 0;
  Domain::each([&](Domain& d) {
    if (key == 0) key = d.key_of(static_cast<const std::byte*>(base));
  });
  return key;
}

}  // namespace rc::transport::verbs
