#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "transport/connect_codec.h"
#include "transport/socket_util.h"
#include "transport/tcp/framing.h"

namespace rc::transport::tcp {
namespace {

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The peer's address and port; "?" where getpeername cannot tell.
std::pair<std::string, uint16_t> peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {host, port};
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return {host, port};
}

// The peer's address alone (no port): what per-peer limits count.
std::string peer_address(int fd) { return "ip:" + peer_of(fd).first; }

std::string describe_peer(int fd) {
  const auto [host, port] = peer_of(fd);
  return "tcp:" + host + ":" + std::to_string(port);
}

// Blocking read of the next frame (of one of `kinds`) with a deadline and, optionally, a stop signal:
// for handshakes and admin connections. RC_E_TIMEOUT at the deadline, RC_E_CLOSED on `stop`.
Status read_frame_blocking(int fd, FrameReader& reader, std::span<const wire::Kind> kinds, uint64_t deadline_ns,
                           const EventFd* stop, std::span<const std::byte>& frame) {
  for (;;) {
    const Status st = reader.next_of(fd, kinds, frame);
    if (st != RC_E_BUSY) return st;
    if (!wait_readable(fd, stop, deadline_ns)) return now_ns() >= deadline_ns ? RC_E_TIMEOUT : RC_E_CLOSED;
  }
}

uint64_t deadline_in(uint32_t timeout_ms) { return now_ns() + uint64_t{timeout_ms} * 1'000'000; }

// ---- admin connections (either end) -------------------------------------------------------------

// Blocking sends and receives with deadlines on the non-blocking socket: admin frames are small and
// travel one at a time, so nothing needs to be queued.
class TcpMessageLink final : public MessageLink {
 public:
  TcpMessageLink(UniqueFd sock, FrameReader reader)
      : sock_(std::move(sock)), reader_(std::move(reader)), peer_(describe_peer(sock_.get())) {}

  Status send(std::span<const std::byte> frame, uint64_t deadline_ns) override {
    while (!frame.empty()) {
      const ssize_t n = ::send(sock_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        frame = frame.subspan(static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_writable(sock_.get(), deadline_ns)) return RC_E_TIMEOUT;
      } else {
        return RC_E_DISCONNECTED;
      }
    }
    return RC_OK;
  }

  Status receive(std::span<const std::byte>& frame, uint64_t deadline_ns, const EventFd* stop) override {
    return read_frame_blocking(sock_.get(), reader_, kMessageLinkKinds, deadline_ns, stop, frame);
  }

  std::string peer() const override { return peer_; }

 private:
  UniqueFd sock_;
  FrameReader reader_;
  std::string peer_;
};

// ---- client -----------------------------------------------------------------------------------

class TcpClientConnection final : public ClientConnection {
 public:
  TcpClientConnection(UniqueFd sock, const wire::ConnectReply& reply, FrameReader reader)
      : sock_(std::move(sock)), reply_(reply), reader_(std::move(reader)) {}

  const wire::ConnectReply& reply() const override { return reply_; }
  bool one_sided() const override { return false; }
  uint32_t max_inline() const override { return 0; }

  Status post_read(uint64_t, uint16_t, uint64_t, void*, uint32_t) override {
    return fail(RC_E_UNSUPPORTED, "tcp has no one-sided reads");
  }
  Status post_write(uint64_t, uint16_t, uint64_t, const void*, uint32_t) override {
    return fail(RC_E_UNSUPPORTED, "tcp has no one-sided writes");
  }
  std::size_t poll_completions(WorkCompletion*, std::size_t) override { return 0; }

  Status send_frame(std::span<const std::byte> frame) override {
    if (!out_.push(sock_.get(), frame)) return fail(RC_E_DISCONNECTED, "tcp connection to the server lost");
    return RC_OK;
  }

  Status poll_response(std::span<const std::byte>& frame) override {
    if (!out_.empty() && !out_.flush(sock_.get())) return fail(RC_E_DISCONNECTED, "tcp connection to the server lost");
    const Status st = reader_.next(sock_.get(), wire::Kind::Response, frame, true);
    if (st == RC_E_DISCONNECTED) return fail(st, "tcp connection closed by the server");
    if (st == RC_E_PROTOCOL) return fail(st, "tcp response stream does not parse");
    return st;
  }

  void release_response() override { reader_.consume(); }
  void arm_wait() override {}
  void disarm_wait() override {}
  void wait_fds(std::vector<int>& fds) const override { fds.push_back(sock_.get()); }
  Status check_alive() override { return stream_peer_alive(sock_.get()); }

  // A byte waiting on an idle connection is no response (none is due): it is the notice the server closed with.
  Status check_idle() override {
    if (gone_ != RC_OK) return fail(gone_, message_);
    std::span<const std::byte> frame;
    const Status st = reader_.next(sock_.get(), wire::Kind::Notice, frame);
    if (st == RC_E_BUSY) return RC_OK;
    gone_ = st == RC_OK               ? decode_notice(frame)
            : st == RC_E_DISCONNECTED ? fail(st, "tcp connection closed by the server")
                                      : fail(RC_E_PROTOCOL, "the server sent bytes unasked that are no notice");
    message_ = last_error();
    return gone_;
  }

 private:
  UniqueFd sock_;
  wire::ConnectReply reply_;
  FrameReader reader_;
  Outbox out_;
  Status gone_ = RC_OK;  // sticky once check_idle found the server gone
  std::string message_;
};

// ---- server -----------------------------------------------------------------------------------

class TcpServerConnection final : public ServerConnection {
 public:
  TcpServerConnection(UniqueFd sock, FrameReader reader)
      : sock_(std::move(sock)), reader_(std::move(reader)), peer_(describe_peer(sock_.get())) {}

  Status next_request(std::span<const std::byte>& frame) override {
    if (!out_.empty() && !out_.flush(sock_.get())) return RC_E_DISCONNECTED;
    if (out_.size() > kOutboxLimit) return RC_E_BUSY;
    return reader_.next(sock_.get(), wire::Kind::Batch, frame);
  }

  Status send_response(std::span<const std::byte> frame) override {
    return out_.push(sock_.get(), frame) ? RC_OK : RC_E_DISCONNECTED;
  }

  bool flush() override { return out_.flush(sock_.get()) && out_.empty(); }
  bool needs_server_thread() const override { return true; }
  Status check_alive() override { return stream_peer_alive(sock_.get()); }
  void arm_wait() override {}
  void disarm_wait() override {}
  void wait_fds(std::vector<int>& fds) const override { fds.push_back(sock_.get()); }
  std::string peer() const override { return peer_; }

 private:
  UniqueFd sock_;
  FrameReader reader_;
  Outbox out_;
  std::string peer_;
};

class TcpPending final : public PendingConnection {
 public:
  explicit TcpPending(UniqueFd conn) : conn_(std::move(conn)), peer_key_(peer_address(conn_.get())) {
    set_nodelay(conn_.get());
    set_nonblocking(conn_.get());
  }

  std::string peer_key() const override { return peer_key_; }

  void refuse(Status status, const std::string& message) override {
    const auto reply = encode_connect_reply(Grant{status, message, {}, 0}, {});
    (void)!send(conn_.get(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  std::unique_ptr<ServerConnection> handshake(const HandshakeHandlers& handlers, const EventFd& stop,
                                              Status& status) override {
    static constexpr wire::Kind kFirstFrame[] = {wire::Kind::Connect, wire::Kind::AdminHello};
    FrameReader reader;
    std::span<const std::byte> frame;
    status = read_frame_blocking(conn_.get(), reader, kFirstFrame, deadline_in(kHandshakeTimeoutMs), &stop, frame);
    if (status == RC_E_PROTOCOL) {
      // Answered as shm answers it: a Connect of another wire version is told which version this server speaks.
      wire::ConnectRequest ignored{};
      (void)decode_connect_request(reader.buffered(), ignored);
      const std::string why = last_error();
      log_refusal("no valid Connect", peer_key_, "tcp: refusing " + describe_peer(conn_.get()) + ": " + why);
      refuse(status, why);
      return nullptr;
    }
    if (status != RC_OK) {
      const char* why = status == RC_E_TIMEOUT || status == RC_E_CLOSED
                            ? "sent no Connect in time (or was evicted by newer connections)"
                                                  : "hung up before its Connect";
      log_refusal(why, peer_key_, "tcp: dropping " + describe_peer(conn_.get()) + ": it " + why);
      return nullptr;
    }
    if (wire::read_header(frame.data()).kind == static_cast<uint8_t>(wire::Kind::AdminHello)) {
      const std::vector<std::byte> hello(frame.begin(), frame.end());
      reader.consume();
      handlers.admin(std::make_unique<TcpMessageLink>(std::move(conn_), std::move(reader)), hello);
      status = RC_OK;
      return nullptr;
    }
    wire::ConnectRequest request{};
    status = decode_connect_request(frame, request);
    if (status != RC_OK) {
      const std::string why = last_error();
      log_refusal("no valid Connect", peer_key_, "tcp: refusing " + describe_peer(conn_.get()) + ": " + why);
      refuse(status, why);
      return nullptr;
    }
    reader.consume();
    const Grant grant = handlers.admit(request);
    std::vector<wire::RegionDescriptor> descriptors;
    if (grant.status == RC_OK)
      for (std::size_t i = 0; i < grant.regions.size(); ++i) descriptors.push_back({0, i});
    const auto reply = encode_connect_reply(grant, descriptors);
    auto link = std::make_unique<TcpServerConnection>(std::move(conn_), std::move(reader));
    if (link->send_response(reply) != RC_OK) {
      status = RC_E_DISCONNECTED;
      return nullptr;
    }
    status = grant.status;
    if (grant.status != RC_OK) {
      link->flush();  // a refusal is small enough for a fresh socket's buffer
      return nullptr;
    }
    return link;
  }

 private:
  UniqueFd conn_;
  std::string peer_key_;
};

class TcpListener final : public Listener {
 public:
  TcpListener(UniqueFd sock, std::string endpoint) : sock_(std::move(sock)), endpoint_(std::move(endpoint)) {}

  std::string endpoint() const override { return endpoint_; }

  std::unique_ptr<PendingConnection> accept(Status& status) override {
    UniqueFd conn = accept_or_stop(sock_.get(), stop_, status);
    if (!conn) return nullptr;
    return std::make_unique<TcpPending>(std::move(conn));
  }

  void shutdown() override { stop_.signal(); }

 private:
  UniqueFd sock_;
  std::string endpoint_;
  EventFd stop_;
};

addrinfo* resolve(const Endpoint& endpoint, bool passive, Status& status) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string port = std::to_string(endpoint.port);
  const int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "cannot resolve " + endpoint.host + ": " + gai_strerror(rc));
    return nullptr;
  }
  return result;
}

// A connected non-blocking socket with TCP_NODELAY, or an invalid one with `status` set.
UniqueFd connect_socket(const Endpoint& endpoint, uint64_t deadline_ns, Status& status) {
  addrinfo* ai = resolve(endpoint, false, status);
  if (ai == nullptr) return UniqueFd();
  UniqueFd sock(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  int rc = sock ? ::connect(sock.get(), ai->ai_addr, ai->ai_addrlen) : -1;
  const int err = errno;
  freeaddrinfo(ai);
  if (rc != 0 && err == EINPROGRESS) {
    pollfd p{sock.get(), POLLOUT, 0};
    if (poll(&p, 1, poll_timeout_ms(deadline_ns)) != 1) {
      status = fail(RC_E_TIMEOUT, "timed out connecting to " + endpoint.to_string());
      return UniqueFd();
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    rc = so_error == 0 ? 0 : -1;
    errno = so_error;
  }
  if (rc != 0) {
    status = fail(RC_E_DISCONNECTED, "cannot connect to " + endpoint.to_string() + ": " + std::strerror(errno));
    return UniqueFd();
  }
  set_nodelay(sock.get());
  status = RC_OK;
  return sock;
}

}  // namespace

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status) {
  UniqueFd sock = connect_socket(endpoint, deadline_in(params.timeout_ms), status);
  if (!sock) return nullptr;
  const auto request = encode_connect_request(params.request);
  Outbox out;
  if (!out.push(sock.get(), request) || !out.flush(sock.get()) || !out.empty()) {
    status = fail(RC_E_DISCONNECTED, "cannot send Connect to " + endpoint.to_string());
    return nullptr;
  }
  FrameReader reader;
  std::span<const std::byte> frame;
  static constexpr wire::Kind kReply[] = {wire::Kind::ConnectReply};
  status = read_frame_blocking(sock.get(), reader, kReply, deadline_in(params.timeout_ms), nullptr, frame);
  if (status != RC_OK) {
    status = fail(status == RC_E_TIMEOUT ? RC_E_TIMEOUT : RC_E_DISCONNECTED,
                  "no Connect reply from " + endpoint.to_string());
    return nullptr;
  }
  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  status = decode_connect_reply(frame, reply, regions);
  if (status != RC_OK) return nullptr;
  reader.consume();
  return std::make_unique<TcpClientConnection>(std::move(sock), reply, std::move(reader));
}

std::unique_ptr<Listener> listen(const Endpoint& endpoint, Status& status) {
  addrinfo* ai = resolve(endpoint, true, status);
  if (ai == nullptr) return nullptr;
  UniqueFd sock(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  if (sock) setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = sock && bind(sock.get(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(sock.get(), 128) == 0;
  const int err = errno;
  freeaddrinfo(ai);
  if (!ok) {
    status = fail(RC_E_INVALID_ARGUMENT, "cannot listen on " + endpoint.to_string() + ": " + std::strerror(err));
    return nullptr;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  Endpoint actual = endpoint;
  actual.port = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                                 : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  status = RC_OK;
  return std::make_unique<TcpListener>(std::move(sock), actual.to_string());
}

std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status) {
  UniqueFd sock = connect_socket(endpoint, deadline_ns, status);
  if (!sock) return nullptr;
  return std::make_unique<TcpMessageLink>(std::move(sock), FrameReader());
}

}  // namespace rc::transport::tcp
