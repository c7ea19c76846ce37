// Raw rdma_cm peers for the verbs tests, written against libibverbs/librdmacm directly (not the product's
// transport): a client that speaks the verbs handshake itself, so that it can post RDMA READs and WRITEs
// with any address and key, write malformed frames into the server's request ring, or stay silent after
// connecting; and a listener that never answers. Only built where rdma-core is (RC_HAVE_VERBS).
#pragma once
#ifdef RC_HAVE_VERBS

#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <thread>

#include "harness.h"
#include "transport/verbs/verbs_transport.h"

namespace rctest::rawverbs {

using rc::transport::verbs::kHandshakeBytes;
using rc::transport::verbs::kSlotBytes;
using rc::transport::verbs::kSlots;
using rc::transport::verbs::RingInfo;

inline bool resolve_ipv4(const std::string& host, uint16_t port, sockaddr_in& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  std::memcpy(&out, res->ai_addr, sizeof out);
  out.sin_port = htons(port);
  freeaddrinfo(res);
  return true;
}

// "verbs:HOST:PORT" -> host, port.
inline bool split_endpoint(const std::string& endpoint, std::string& host, uint16_t& port) {
  const auto colon = endpoint.rfind(':');
  if (endpoint.rfind("verbs:", 0) != 0 || colon == std::string::npos || colon < 6) return false;
  host = endpoint.substr(6, colon - 6);
  port = static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1)));
  return true;
}

// Waits for the next rdma_cm event of `ec` (blocking channel) for up to `timeout_ms`; its type, or -1.
inline int next_event(rdma_event_channel* ec, int timeout_ms, rdma_cm_id** id = nullptr) {
  pollfd p{ec->fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return -1;
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ec, &ev) != 0) return -1;
  const int type = ev->event;
  if (id != nullptr) *id = ev->id;
  rdma_ack_cm_event(ev);
  return type;
}

// A verbs client with its own PD, CQ and buffers; each step is explicit so that a test can stop anywhere.
class RawClient {
 public:
  RawClient() = default;
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient() {
    if (established_) rdma_disconnect(id_);
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    for (ibv_mr* mr : {handshake_mr_, ring_mr_, data_mr_})
      if (mr != nullptr) ibv_dereg_mr(mr);
    if (scq_ != nullptr) ibv_destroy_cq(scq_);
    if (rcq_ != nullptr) ibv_destroy_cq(rcq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (ec_ != nullptr) rdma_destroy_event_channel(ec_);
  }

  // rdma_cm connect to a "verbs:HOST:PORT" endpoint, receives posted; says nothing yet. "" or why not.
  std::string connect(const std::string& endpoint, int timeout_ms = 5000) {
    std::string host;
    uint16_t port = 0;
    sockaddr_in addr{};
    if (!split_endpoint(endpoint, host, port) || !resolve_ipv4(host, port, addr)) return "bad endpoint " + endpoint;
    ec_ = rdma_create_event_channel();
    if (ec_ == nullptr || rdma_create_id(ec_, &id_, nullptr, RDMA_PS_TCP) != 0) return "rdma_create_id failed";
    if (rdma_resolve_addr(id_, nullptr, reinterpret_cast<sockaddr*>(&addr), timeout_ms) != 0 ||
        next_event(ec_, timeout_ms) != RDMA_CM_EVENT_ADDR_RESOLVED)
      return "address not resolved";
    if (rdma_resolve_route(id_, timeout_ms) != 0 || next_event(ec_, timeout_ms) != RDMA_CM_EVENT_ROUTE_RESOLVED)
      return "route not resolved";
    pd_ = ibv_alloc_pd(id_->verbs);
    // Separate queues for sends and receives: waiting for a send never swallows the reply.
    scq_ = pd_ != nullptr ? ibv_create_cq(id_->verbs, 128, nullptr, nullptr, 0) : nullptr;
    rcq_ = scq_ != nullptr ? ibv_create_cq(id_->verbs, 128, nullptr, nullptr, 0) : nullptr;
    if (rcq_ == nullptr) return "PD/CQ creation failed";
    ibv_qp_init_attr qa{};
    qa.send_cq = scq_;
    qa.recv_cq = rcq_;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 64;
    qa.cap.max_recv_wr = kSlots + 8;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id_, pd_, &qa) != 0) return "rdma_create_qp failed";
    handshake_.resize(kHandshakeBytes);
    ring_.resize(std::size_t{kSlots} * kSlotBytes);
    data_.resize(1 << 20);
    // ints, not the enumerators: ibv_reg_mr is a macro that masks its flags with another enum's.
    constexpr int local = IBV_ACCESS_LOCAL_WRITE;
    constexpr int remote = local | IBV_ACCESS_REMOTE_WRITE;
    handshake_mr_ = ibv_reg_mr(pd_, handshake_.data(), handshake_.size(), local);
    ring_mr_ = ibv_reg_mr(pd_, ring_.data(), ring_.size(), remote);
    data_mr_ = ibv_reg_mr(pd_, data_.data(), data_.size(), local);
    if (handshake_mr_ == nullptr || ring_mr_ == nullptr || data_mr_ == nullptr) return "ibv_reg_mr failed";
    if (!post_recv(handshake_.data(), kHandshakeBytes, handshake_mr_->lkey)) return "post_recv failed";
    for (uint32_t i = 0; i < kSlots; ++i)
      if (!post_recv(nullptr, 0, 0)) return "post_recv failed";
    rdma_conn_param p{};
    p.responder_resources = p.initiator_depth = 16;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_connect(id_, &p) != 0) return "rdma_connect failed";
    const int ev = next_event(ec_, timeout_ms);
    if (ev != RDMA_CM_EVENT_ESTABLISHED)
      return std::string("not established: ") + (ev < 0 ? "timeout" : rdma_event_str(static_cast<rdma_cm_event_type>(ev)));
    established_ = true;
    return "";
  }

  // Sends `message` as the handshake SEND.
  bool send(const std::vector<uint8_t>& message) {
    if (message.size() > handshake_.size()) return false;
    std::memcpy(handshake_.data(), message.data(), message.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(handshake_.data()), static_cast<uint32_t>(message.size()), handshake_mr_->lkey};
    return post(IBV_WR_SEND, sge, 0, 0, 0) && wait_send(5000) == IBV_WC_SUCCESS;
  }

  // The Connect frame of `spec` followed by this client's response ring (`geometry_slots` to lie about it).
  bool send_connect(const ConnectSpec& spec, uint32_t geometry_slots = kSlots) {
    auto m = connect_frame(spec);
    const RingInfo ring{reinterpret_cast<uint64_t>(ring_.data()), ring_mr_->rkey, geometry_slots, kSlotBytes, 0};
    const auto* r = reinterpret_cast<const uint8_t*>(&ring);
    m.insert(m.end(), r, r + sizeof ring);
    return send(m);
  }

  // Waits for the server's handshake reply: the ConnectReply and the request ring behind it.
  bool receive_reply(RawReply& reply, int timeout_ms = 5000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc{};
      if (ibv_poll_cq(rcq_, 1, &wc) > 0) {
        if (wc.status != IBV_WC_SUCCESS) return false;
        if (wc.opcode != IBV_WC_RECV) continue;
        wire::FrameHeader h{};
        if (wc.byte_len < sizeof h + sizeof server_ring_) return false;
        std::memcpy(&h, handshake_.data(), sizeof h);
        if (h.bytes + sizeof server_ring_ != wc.byte_len) return false;
        reply = parse_connect_reply(handshake_.data(), h.bytes, wire::kVersion);
        std::memcpy(&server_ring_, handshake_.data() + h.bytes, sizeof server_ring_);
        return reply.received;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
  }

  // connect, send_connect and receive_reply: "" when the server answered (whatever it said), else why not.
  std::string open(const std::string& endpoint, const ConnectSpec& spec, RawReply& reply) {
    if (std::string why = connect(endpoint); !why.empty()) return why;
    if (!send_connect(spec)) return "the Connect was not sent";
    if (!receive_reply(reply)) return "no Connect reply";
    return "";
  }

  // One RDMA READ (into `out`) or WRITE (of `in`) of `length` bytes at (addr, rkey); the completion status.
  ibv_wc_status read(uint64_t addr, uint32_t rkey, uint32_t length, std::vector<uint8_t>& out) {
    ibv_sge sge{reinterpret_cast<uint64_t>(data_.data()), length, data_mr_->lkey};
    std::memset(data_.data(), 0, length);
    if (!post(IBV_WR_RDMA_READ, sge, addr, rkey, 0)) return IBV_WC_GENERAL_ERR;
    const ibv_wc_status st = wait_send(5000);
    out.assign(data_.begin(), data_.begin() + length);
    return st;
  }
  ibv_wc_status write(uint64_t addr, uint32_t rkey, const std::vector<uint8_t>& in) {
    std::memcpy(data_.data(), in.data(), in.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(data_.data()), static_cast<uint32_t>(in.size()), data_mr_->lkey};
    if (!post(IBV_WR_RDMA_WRITE, sge, addr, rkey, 0)) return IBV_WC_GENERAL_ERR;
    return wait_send(5000);
  }

  // Writes `frame` into slot `slot` of the server's request ring announcing `imm` bytes (the length a
  // well-behaved client puts there).
  ibv_wc_status write_frame(const std::vector<uint8_t>& frame, uint32_t slot, uint32_t imm) {
    std::memcpy(data_.data(), frame.data(), frame.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(data_.data()), static_cast<uint32_t>(frame.size()), data_mr_->lkey};
    if (!post(IBV_WR_RDMA_WRITE_WITH_IMM, sge, server_ring_.addr + uint64_t{slot} * server_ring_.slot_bytes,
              server_ring_.rkey, imm))
      return IBV_WC_GENERAL_ERR;
    return wait_send(5000);
  }

  // Whether the server ends the connection (rdma_cm DISCONNECTED, or the queue pair breaks) within `timeout_ms`.
  bool ended_by_server(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (next_event(ec_, 10) == RDMA_CM_EVENT_DISCONNECTED) return true;
      ibv_wc wc{};
      if (ibv_poll_cq(rcq_, 1, &wc) > 0 && wc.status != IBV_WC_SUCCESS) return true;
    }
    return false;
  }

  const RingInfo& server_ring() const { return server_ring_; }

 private:
  bool post_recv(void* addr, uint32_t length, uint32_t lkey) {
    ibv_sge sge{reinterpret_cast<uint64_t>(addr), length, lkey};
    ibv_recv_wr wr{};
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(id_->qp, &wr, &bad) == 0;
  }

  bool post(ibv_wr_opcode op, ibv_sge& sge, uint64_t addr, uint32_t rkey, uint32_t imm) {
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id_->qp, &wr, &bad) == 0;
  }

  // The status of the next send completion.
  ibv_wc_status wait_send(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc{};
      if (ibv_poll_cq(scq_, 1, &wc) > 0) return wc.status;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return IBV_WC_RESP_TIMEOUT_ERR;
  }

  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* scq_ = nullptr;
  ibv_cq* rcq_ = nullptr;
  ibv_mr* handshake_mr_ = nullptr;
  ibv_mr* ring_mr_ = nullptr;
  ibv_mr* data_mr_ = nullptr;
  std::vector<uint8_t> handshake_, ring_, data_;
  RingInfo server_ring_{};
  bool established_ = false;
};

// An rdma_cm listener that takes connection requests and never completes them, or (`accept`) accepts them
// with a queue pair and then never sends the handshake reply.
class SilentListener {
 public:
  explicit SilentListener(bool accept) : accept_(accept) {}
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  ~SilentListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (rdma_cm_id* c : children_) {
      if (c->qp != nullptr) rdma_destroy_qp(c);
      rdma_destroy_id(c);
    }
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (ec_ != nullptr) rdma_destroy_event_channel(ec_);
  }

  // Listens on HOST, any port: "verbs:HOST:PORT", or "" when it cannot.
  std::string start(const std::string& host) {
    sockaddr_in addr{};
    if (!resolve_ipv4(host, 0, addr)) return "";
    ec_ = rdma_create_event_channel();
    if (ec_ == nullptr || rdma_create_id(ec_, &id_, nullptr, RDMA_PS_TCP) != 0) return "";
    if (rdma_bind_addr(id_, reinterpret_cast<sockaddr*>(&addr)) != 0 || rdma_listen(id_, 16) != 0) return "";
    thread_ = std::thread([this] { run(); });
    return "verbs:" + host + ":" + std::to_string(ntohs(rdma_get_src_port(id_)));
  }

 private:
  void run() {
    while (!stop_) {
      rdma_cm_id* child = nullptr;
      if (next_event(ec_, 50, &child) != RDMA_CM_EVENT_CONNECT_REQUEST) continue;
      children_.push_back(child);
      if (!accept_) continue;
      if (pd_ == nullptr) pd_ = ibv_alloc_pd(child->verbs);
      ibv_qp_init_attr qa{};
      qa.qp_type = IBV_QPT_RC;
      qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
      qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
      if (pd_ == nullptr || rdma_create_qp(child, pd_, &qa) != 0) continue;
      rdma_conn_param p{};
      p.responder_resources = p.initiator_depth = 1;
      rdma_accept(child, &p);
    }
  }

  bool accept_;
  std::atomic<bool> stop_{false};
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::vector<rdma_cm_id*> children_;
  std::thread thread_;
};

}  // namespace rctest::rawverbs

#endif  // RC_HAVE_VERBS
