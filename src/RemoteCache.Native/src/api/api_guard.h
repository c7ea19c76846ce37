// Shared by the C API's translation units: the catch-all that keeps every C++ exception
// (std::bad_alloc, std::system_error from a failed syscall) from crossing into the caller, and the
// one wording of a null argument.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "common/status.h"

namespace rc::api {

template <typename Fn>
rc_status guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return rc::fail(RC_E_INTERNAL, "out of memory");
  } catch (const std::invalid_argument& e) {
    return rc::fail(RC_E_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return rc::fail(RC_E_INTERNAL, e.what());
  } catch (...) {
    return rc::fail(RC_E_INTERNAL, "unknown failure");
  }
}

inline rc_status null_argument(const char* what) {
  return rc::fail(RC_E_INVALID_ARGUMENT, std::string(what) + " is null");
}

}  // namespace rc::api
