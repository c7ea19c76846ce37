#include "transport/transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "transport/shm/shm_transport.h"
#include "transport/socket_util.h"
#include "transport/tcp/tcp_transport.h"
#ifdef RC_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif

namespace rc::transport {

[[maybe_unused]] constexpr const char* kNoVerbs =
    "this library was built without rdma-core: install libibverbs-dev and librdmacm-dev and rebuild "
    "for the verbs transport";

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status) {
  switch (endpoint.kind) {
    case TransportKind::Shm: return shm::connect(endpoint, params, status);
    case TransportKind::Tcp: return tcp::connect(endpoint, params, status);
#ifdef RC_HAVE_VERBS
    case TransportKind::Verbs: return verbs::connect(endpoint, params, status);
#else
    case TransportKind::Verbs: break;
#endif
  }
  status = fail(RC_E_UNSUPPORTED, kNoVerbs);
  return nullptr;
}

std::unique_ptr<Listener> listen(const Endpoint& endpoint, Status& status) {
  switch (endpoint.kind) {
    case TransportKind::Shm: return shm::listen(endpoint, status);
    case TransportKind::Tcp: return tcp::listen(endpoint, status);
#ifdef RC_HAVE_VERBS
    case TransportKind::Verbs: return verbs::listen(endpoint, status);
#else
    case TransportKind::Verbs: break;
#endif
  }
  status = fail(RC_E_UNSUPPORTED, kNoVerbs);
  return nullptr;
}

namespace {

void put_header(std::vector<std::byte>& out, wire::Kind kind, std::size_t bytes) {
  wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), 0,
                      static_cast<uint32_t>(bytes), 0, 0};
  std::memcpy(out.data(), &h, sizeof h);
}

}  // namespace

std::vector<std::byte> encode_connect_request(const wire::ConnectRequest& request) {
  std::vector<std::byte> out(sizeof(wire::FrameHeader) + sizeof request);
  put_header(out, wire::Kind::Connect, out.size());
  std::memcpy(out.data() + sizeof(wire::FrameHeader), &request, sizeof request);
  return out;
}

std::vector<std::byte> encode_connect_reply(const Grant& grant, std::span<const wire::RegionDescriptor> regions) {
  wire::ConnectReply reply{};
  reply.status = grant.status;
  reply.region_count = static_cast<uint32_t>(regions.size());
  reply.region_size = grant.region_size;
  reply.max_frame = wire::kMaxFrame;
  const std::size_t n = std::min(grant.message.size(), sizeof reply.message - 1);
  std::memcpy(reply.message, grant.message.data(), n);
  std::vector<std::byte> out(sizeof(wire::FrameHeader) + sizeof reply + regions.size_bytes());
  put_header(out, wire::Kind::ConnectReply, out.size());
  std::memcpy(out.data() + sizeof(wire::FrameHeader), &reply, sizeof reply);
  if (!regions.empty())
    std::memcpy(out.data() + sizeof(wire::FrameHeader) + sizeof reply, regions.data(), regions.size_bytes());
  return out;
}

bool decode_connect_request(std::span<const std::byte> frame, wire::ConnectRequest& out) {
  if (frame.size() != sizeof(wire::FrameHeader) + sizeof out) return false;
  const auto h = wire::read_header(frame.data());
  if (!wire::header_ok(h, wire::Kind::Connect, frame.size()) || h.bytes != frame.size()) return false;
  std::memcpy(&out, frame.data() + sizeof h, sizeof out);
  return out.token_length <= wire::kTokenMax;
}

Status decode_connect_reply(std::span<const std::byte> frame, wire::ConnectReply& out,
                            std::vector<wire::RegionDescriptor>& regions) {
  if (frame.size() < sizeof(wire::FrameHeader) + sizeof out)
    return fail(RC_E_PROTOCOL, "Connect reply too short");
  const auto h = wire::read_header(frame.data());
  if (!wire::header_ok(h, wire::Kind::ConnectReply, frame.size()) || h.bytes != frame.size())
    return fail(RC_E_PROTOCOL, "Connect reply has a bad header");
  std::memcpy(&out, frame.data() + sizeof h, sizeof out);
  out.message[sizeof out.message - 1] = '\0';
  if (out.status != RC_OK) {
    // Range-check the peer's integer before it becomes an enum value.
    const bool known = out.status >= RC_E_INTERNAL && out.status < RC_OK;
    return fail(known ? static_cast<Status>(out.status) : RC_E_PROTOCOL,
                std::string("server refused the connection: ") + out.message);
  }
  const std::size_t expected = sizeof h + sizeof out + std::size_t{out.region_count} * sizeof(wire::RegionDescriptor);
  if (frame.size() != expected || out.region_count == 0 || out.region_size == 0)
    return fail(RC_E_PROTOCOL, "Connect reply region list does not match its count");
  regions.resize(out.region_count);
  std::memcpy(regions.data(), frame.data() + sizeof h + sizeof out, regions.size() * sizeof(wire::RegionDescriptor));
  return RC_OK;
}

void set_timeouts(int fd, uint32_t timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((timeout_ms % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool wait_readable(int fd, const EventFd* stop, uint64_t deadline_ns) {
  for (;;) {
    const uint64_t now = now_ns();
    if (now >= deadline_ns) return false;
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop != nullptr ? stop->fd() : -1, POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>((deadline_ns - now) / 1'000'000 + 1));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return false;
    if (fds[0].revents != 0) return true;
  }
}

UniqueFd accept_or_stop(int listen_fd, const EventFd& stop, Status& status) {
  for (;;) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop.fd(), POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) {
      status = RC_E_CLOSED;
      return UniqueFd();
    }
    UniqueFd conn(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn) {
      status = RC_OK;
      return conn;
    }
    if (errno == EMFILE || errno == ENFILE) {
      status = RC_E_INTERNAL;  // out of descriptors: let the caller log and go on
      return UniqueFd();
    }
  }
}

}  // namespace rc::transport
