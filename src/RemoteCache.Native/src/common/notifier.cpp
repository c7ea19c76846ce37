#include "common/notifier.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rc {

EventFd::EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

EventFd::~EventFd() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFd::signal() const {
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated, i.e. already signalled: nothing to do.
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
}

void EventFd::drain() const {
  uint64_t value = 0;
  [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof value);
}

}  // namespace rc
