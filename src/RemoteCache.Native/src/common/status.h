// Internal status handling: the rc_status codes of the public header, plus a thread-local
// error text so that failures deep in the stack can explain themselves at the C boundary.
#pragma once

#include <remotecache/remotecache.h>

#include <string>

namespace rc {

using Status = rc_status;

// Records `text` as the calling thread's last error and returns `status`, so call sites can write
// `return fail(RC_E_AUTH, "...")`.
Status fail(Status status, std::string text);
// Whether a peer's integer is one of the rc_status values a peer may send (before it becomes one): not
// RC_E_INTEGRITY, which only the client's own check of a sealed block gives.
constexpr bool is_known_status(int32_t status) { return status <= RC_OK && status >= RC_E_LIMIT; }
void set_last_error(std::string text);
const char* last_error();
const char* status_name(int32_t status);

}  // namespace rc
