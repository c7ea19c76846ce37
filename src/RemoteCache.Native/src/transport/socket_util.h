// Small socket helpers shared by the stream-based transports (shm's handshake socket, tcp).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/notifier.h"
#include "common/status.h"
#include "common/wire.h"

namespace rc::transport {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// SO_RCVTIMEO / SO_SNDTIMEO; 0 clears them.
void set_timeouts(int fd, uint32_t timeout_ms);

// Waits for a connection on `listen_fd` or a signal on `stop`. Null with RC_E_CLOSED on stop.
UniqueFd accept_or_stop(int listen_fd, const EventFd& stop, Status& status);

// How long a freshly accepted client has to send its Connect (a real client sends it at once).
inline constexpr uint32_t kHandshakeTimeoutMs = 1000;

// Waits until `fd` is readable (true), or the deadline passes or `stop` fires (false). Data that
// has arrived wins over `stop`, so an evicted handshake still reads a Connect already there.
bool wait_readable(int fd, const EventFd* stop, uint64_t deadline_ns);
// Waits until `fd` can take more bytes (true), or the deadline passes (false).
bool wait_writable(int fd, uint64_t deadline_ns);
// Milliseconds from now to `deadline_ns` (now_ns() clock), rounded up, for poll(): 0 once it has
// passed, at most INT_MAX (a deadline of UINT64_MAX waits as long as poll can).
int poll_timeout_ms(uint64_t deadline_ns);

// Liveness of a stream whose peer has nothing to say after the handshake (shm's socket): RC_OK
// while it is open and silent, RC_E_DISCONNECTED once closed, RC_E_PROTOCOL when bytes arrived
// (they are consumed, so they can never pass for life).
Status silent_peer_alive(int fd);
// Liveness of a stream that carries data (tcp): only end-of-stream or an error mean gone.
Status stream_peer_alive(int fd);

}  // namespace rc::transport
