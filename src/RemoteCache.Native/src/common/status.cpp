#include "common/status.h"

namespace rc {
namespace {
thread_local std::string t_last_error;
}

Status fail(Status status, std::string text) {
  t_last_error = std::move(text);
  return status;
}

void set_last_error(std::string text) { t_last_error = std::move(text); }

const char* last_error() { return t_last_error.c_str(); }

const char* status_name(int32_t status) {
  switch (status) {
    case RC_OK: return "RC_OK";
    case RC_E_INVALID_ARGUMENT: return "RC_E_INVALID_ARGUMENT";
    case RC_E_OUT_OF_RANGE: return "RC_E_OUT_OF_RANGE";
    case RC_E_DISCONNECTED: return "RC_E_DISCONNECTED";
    case RC_E_AUTH: return "RC_E_AUTH";
    case RC_E_NO_MEMORY: return "RC_E_NO_MEMORY";
    case RC_E_BUSY: return "RC_E_BUSY";
    case RC_E_TIMEOUT: return "RC_E_TIMEOUT";
    case RC_E_PROTOCOL: return "RC_E_PROTOCOL";
    case RC_E_CLOSED: return "RC_E_CLOSED";
    case RC_E_UNSUPPORTED: return "RC_E_UNSUPPORTED";
    case RC_E_INTERNAL: return "RC_E_INTERNAL";
    case RC_E_EXPIRED: return "RC_E_EXPIRED";
    case RC_E_IN_USE: return "RC_E_IN_USE";
    case RC_E_LIMIT: return "RC_E_LIMIT";
    case RC_E_INTEGRITY: return "RC_E_INTEGRITY";
    default: return "RC_E_UNKNOWN";
  }
}

}  // namespace rc

#if defined(__SANITIZE_THREAD__)
#define RC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RC_TSAN 1
#endif
#endif

#ifdef RC_TSAN
// Lent region memory is shared by design, exactly as RDMA-registered memory is: the server threads
// of a cache (and, over shm, its clients' one-sided copies) read and write it with plain memcpy,
// and the ordering a client relies on is established outside this process (it waits for a
// completion before it issues a conflicting request on another connection). TSan cannot see that
// ordering and reports these copies as races; nothing else is suppressed. Defined here, in an
// object every binary links, so that hand-run tests and servers behave as they do in CI.
extern "C" const char* __tsan_default_suppressions() {
  return "race:rc::server::execute_batch\n"
         "race:rc::transport::shm::(anonymous namespace)::ShmClientConnection::post_read\n"
         "race:rc::transport::shm::(anonymous namespace)::ShmClientConnection::post_write\n";
}
#endif
