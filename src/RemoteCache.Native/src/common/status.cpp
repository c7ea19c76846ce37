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
    default: return "RC_E_UNKNOWN";
  }
}

}  // namespace rc
