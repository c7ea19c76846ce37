#include "transport/socket_util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/clock.h"

namespace rc::transport {

void set_timeouts(int fd, uint32_t timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((timeout_ms % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int poll_timeout_ms(uint64_t deadline_ns) {
  const uint64_t now = now_ns();
  if (now >= deadline_ns) return 0;
  return static_cast<int>(std::min<uint64_t>((deadline_ns - now) / 1'000'000 + 1, INT_MAX));
}

bool wait_readable(int fd, const EventFd* stop, uint64_t deadline_ns) {
  for (;;) {
    if (now_ns() >= deadline_ns) return false;
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop != nullptr ? stop->fd() : -1, POLLIN, 0}};
    const int n = poll(fds, 2, poll_timeout_ms(deadline_ns));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (fds[0].revents != 0) return true;
    if ((fds[1].revents & POLLIN) != 0) return false;
  }
}

bool wait_writable(int fd, uint64_t deadline_ns) {
  for (;;) {
    if (now_ns() >= deadline_ns) return false;
    pollfd p{fd, POLLOUT, 0};
    const int n = poll(&p, 1, poll_timeout_ms(deadline_ns));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (p.revents != 0) return true;  // writable, or an error the next send reports
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
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
      status = RC_E_INTERNAL;  // out of descriptors or memory: let the caller log and go on
      return UniqueFd();
    }
  }
}

Status silent_peer_alive(int fd) {
  char probe[64];
  for (;;) {
    const ssize_t n = recv(fd, probe, sizeof probe, MSG_DONTWAIT);
    if (n > 0) return RC_E_PROTOCOL;
    if (n == 0) return RC_E_DISCONNECTED;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? RC_OK : RC_E_DISCONNECTED;
  }
}

Status stream_peer_alive(int fd) {
  char probe = 0;
  const ssize_t n = recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return RC_E_DISCONNECTED;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return RC_E_DISCONNECTED;
  return RC_OK;
}

}  // namespace rc::transport
