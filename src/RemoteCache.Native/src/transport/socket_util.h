// Small socket helpers shared by the stream-based transports (shm's handshake socket, tcp).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <span>
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

// How long a freshly accepted client has to send its Connect.
inline constexpr uint32_t kHandshakeTimeoutMs = 2000;

// Waits until `fd` is readable (true), or the deadline passes or `stop` fires (false).
bool wait_readable(int fd, const EventFd* stop, uint64_t deadline_ns);

// A Connect frame's payload; false when the bytes are not a well-formed Connect frame.
bool decode_connect_request(std::span<const std::byte> frame, wire::ConnectRequest& out);
// A ConnectReply frame; the status it carries (with its message as the last error) or a
// protocol error when it does not parse.
Status decode_connect_reply(std::span<const std::byte> frame, wire::ConnectReply& out,
                            std::vector<wire::RegionDescriptor>& regions);

}  // namespace rc::transport
