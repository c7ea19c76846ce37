// The transport interface: what the client and server data paths need from a fabric, shaped after
// RDMA RC so that verbs maps onto it one-to-one:
//   - the server lends registered memory regions; Connect returns one descriptor (address, key)
//     per region — for verbs the MR's address and rkey, for shm the index of the region's fd;
//   - the client posts one-sided reads and writes against (region, offset) and reaps their work
//     completions by polling (a completion queue);
//   - batches travel as frames through a message path (RDMA WRITE into the peer's message ring
//     for verbs, a shared-memory ring for shm, a byte stream for tcp), strictly in order;
//   - inline data: a transport says how many bytes it carries inside a work request.
// A connection belongs to one thread at a time; nothing here locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/endpoint.h"
#include "common/notifier.h"
#include "common/status.h"
#include "common/wire.h"

namespace rc::transport {

// ---- admin connections ----------------------------------------------------------------------
//
// The admin interface (remotecache_admin.h) shares the data path's listeners: its connections open
// with an AdminHello instead of a Connect. Its exchange is small and strictly one request, one reply,
// so both ends drive it through a blocking link with deadlines rather than the polled data path.

class MessageLink {
 public:
  virtual ~MessageLink() = default;
  // Sends one whole frame. RC_E_TIMEOUT when the peer has not taken it by `deadline_ns` (now_ns()),
  // RC_E_DISCONNECTED once it is gone; either way the link is then unusable.
  virtual Status send(std::span<const std::byte> frame, uint64_t deadline_ns) = 0;
  // RC_OK with the next frame (one of kMessageLinkKinds, of this wire version; its size is the
  // caller's to check), valid until the next call. RC_E_TIMEOUT at the deadline, RC_E_CLOSED once
  // `stop` (may be null) is signalled, RC_E_DISCONNECTED when the peer hung up, RC_E_PROTOCOL for
  // bytes that are not such a frame.
  virtual Status receive(std::span<const std::byte>& frame, uint64_t deadline_ns, const EventFd* stop) = 0;
  // Who is at the other end, for logs.
  virtual std::string peer() const = 0;
};

// The kinds a MessageLink delivers: the admin frames, a Notice, and the ConnectReply with which a
// server refuses any connection before its first frame (a handshake limit).
inline constexpr wire::Kind kMessageLinkKinds[] = {wire::Kind::AdminHello,   wire::Kind::AdminChallenge,
                                                   wire::Kind::AdminRequest, wire::Kind::AdminReply,
                                                   wire::Kind::Notice,       wire::Kind::ConnectReply};

// Connects to a server for the admin interface (the caller then sends the AdminHello). On failure
// null with `status` set: RC_E_UNSUPPORTED for verbs endpoints.
std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status);

// ---- client side ----------------------------------------------------------------------------

struct WorkCompletion {
  uint64_t wr_id;
  Status status;
};

class ClientConnection {
 public:
  virtual ~ClientConnection() = default;

  // What the server granted (status RC_OK; failures never produce a connection).
  virtual const wire::ConnectReply& reply() const = 0;

  // Whether one-sided access needs no server CPU (shm, verbs); tcp says no and the client sends
  // lone requests as one-entry batches instead.
  virtual bool one_sided() const = 0;
  // Largest write carried inside the work request itself.
  virtual uint32_t max_inline() const = 0;

  // The longest one-sided operation post_read / post_write take, and how many may be in flight at
  // once. The data path never asks for more than kMaxChunk and q; a bulk copy (a region pull) asks
  // for as much as the transport allows.
  virtual uint32_t max_one_sided_length() const { return wire::kMaxChunk; }
  virtual uint32_t max_one_sided_in_flight() const { return RC_MAX_QUEUE_DEPTH; }

  virtual Status post_read(uint64_t wr_id, uint16_t region, uint64_t offset, void* dst, uint32_t length) = 0;
  virtual Status post_write(uint64_t wr_id, uint16_t region, uint64_t offset, const void* src,
                            uint32_t length) = 0;
  // Reaps finished one-sided operations.
  virtual std::size_t poll_completions(WorkCompletion* out, std::size_t max) = 0;

  // Sends one frame. RC_E_BUSY: no room right now (retry after polling responses); other errors
  // mean the connection is gone.
  virtual Status send_frame(std::span<const std::byte> frame) = 0;
  // RC_OK with `frame` set to the next response (valid until release_response), RC_E_BUSY when
  // none has arrived, an error when the connection is gone.
  virtual Status poll_response(std::span<const std::byte>& frame) = 0;
  virtual void release_response() = 0;

  // Idle waiting: arm_wait announces that the caller is about to block on wait_fds() (the peer
  // then signals them), disarm_wait retracts it. Readiness of any fd, including hang-up, ends
  // the wait.
  virtual void arm_wait() = 0;
  virtual void disarm_wait() = 0;
  virtual void wait_fds(std::vector<int>& fds) const = 0;

  // Cheap liveness probe used while responses are overdue.
  virtual Status check_alive() = 0;
  // Liveness probe of a connection with nothing outstanding (a cache's control connection between its
  // requests): whatever the server sends on it unasked is the notice it closes with.
  virtual Status check_idle() { return check_alive(); }

  // Work that maps `region` of the grant into this process ahead of its first use (a migration's
  // target, while the region is copied), so that the requests after the commit do not fault page by
  // page; empty when the transport maps nothing (tcp, verbs). It holds what it needs: it runs without
  // the caller's locks and may outlive the connection.
  virtual std::function<void()> map_ahead(uint16_t /*region*/) const { return {}; }
};

struct ConnectParams {
  wire::ConnectRequest request{};
  uint32_t timeout_ms = RC_DEFAULT_CONNECT_TIMEOUT_MS;
};

// Connects and performs the Connect handshake. On failure returns null with `status` set.
std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status);

// ---- server side ----------------------------------------------------------------------------

// A region as the server core owns it: a memfd mapping, zero-filled by the kernel on creation.
struct RegionMemory {
  int fd;
  std::byte* base;
  uint64_t size;
};

// A region's life as the transports need to know it (verbs registers region memory with the device): a
// committed spare is registered ahead of its first connection; a region about to be freed is forgotten
// (a registration ends with the last connection holding it). No-ops for the other transports.
void region_committed(const RegionMemory& region);
void region_released(const RegionMemory& region);

// The core's answer to a Connect.
struct Grant {
  Status status = RC_OK;
  std::string message;
  std::vector<RegionMemory> regions;
  uint64_t region_size = 0;
  // A migration source: the transport hands the regions over for reading only (shm: read-only fds,
  // verbs: MRs without remote write) and the reply says so (wire::kReplyReadOnly).
  bool read_only = false;
};
using Admit = std::function<Grant(const wire::ConnectRequest&)>;

// Takes over a connection whose first frame was an AdminHello (`hello`, valid during the call).
using AdminHandoff = std::function<void(std::unique_ptr<MessageLink> link, std::span<const std::byte> hello)>;

// What a handshake does with the first frame: a Connect goes to `admit`; an AdminHello goes to
// `admin` on the transports that carry admin connections (tcp, shm), and is refused on the others.
struct HandshakeHandlers {
  Admit admit;
  AdminHandoff admin;
};

class ServerConnection {
 public:
  virtual ~ServerConnection() = default;

  // RC_OK with `frame` = the next request, in server-private memory (a client cannot change it
  // while it is parsed) and valid until the next call; RC_E_BUSY when there is none or the
  // outbox is still full; an error once the peer is gone or broke the framing.
  virtual Status next_request(std::span<const std::byte>& frame) = 0;
  // Queues a response; it is copied, and delivered in order even if the peer is slow to drain.
  virtual Status send_response(std::span<const std::byte> frame) = 0;
  // Pushes queued responses; false while some remain.
  virtual bool flush() = 0;

  // Whether requests can only be executed by a server thread (no one-sided path).
  virtual bool needs_server_thread() const = 0;
  // Probes whether the peer is still there (after its fds reported a hang-up).
  virtual Status check_alive() = 0;
  virtual void arm_wait() = 0;
  virtual void disarm_wait() = 0;
  virtual void wait_fds(std::vector<int>& fds) const = 0;
  virtual std::string peer() const = 0;
  // Sends a Notice just before the server closes the connection on purpose (best effort).
  virtual void send_notice(std::span<const std::byte> frame) {
    if (send_response(frame) == RC_OK) flush();
  }
};

// An accepted connection whose Connect handshake has not run yet. The server runs handshakes off
// the accept thread, so a client that connects and says nothing delays nobody else.
class PendingConnection {
 public:
  virtual ~PendingConnection() = default;
  // Who is connecting, for per-peer limits: "ip:ADDR" (tcp, verbs) or "uid:N" (shm).
  virtual std::string peer_key() const = 0;
  // Refuses before any handshake (a limit, a uid not allowed): best effort, never blocks.
  virtual void refuse(Status status, const std::string& message) = 0;
  // Reads the Connect, asks `handlers.admit`, replies. Gives up after a short deadline or once
  // `stop` is signalled; null with the status on failure. An AdminHello instead goes to
  // `handlers.admin` with the connection: null with RC_OK.
  virtual std::unique_ptr<ServerConnection> handshake(const HandshakeHandlers& handlers, const EventFd& stop,
                                                      Status& status) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual std::string endpoint() const = 0;
  // Blocks until a client connects or until shutdown() (then null with RC_E_CLOSED).
  virtual std::unique_ptr<PendingConnection> accept(Status& status) = 0;
  virtual void shutdown() = 0;
};

// What a listener enforces before any handshake (shm only; other transports ignore it).
struct ListenOptions {
  uint32_t shm_socket_mode = RC_DEFAULT_SHM_SOCKET_MODE;  // socket files
  std::vector<uint32_t> allowed_uids;                     // abstract sockets, besides the server's own uid
};

std::unique_ptr<Listener> listen(const Endpoint& endpoint, const ListenOptions& options, Status& status);

}  // namespace rc::transport
