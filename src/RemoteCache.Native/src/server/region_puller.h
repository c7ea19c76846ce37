// A region pull on the target server (Redy §6.2; the admin op PullRegion): the target connects to the
// source server as a migration source (read-only, authorized by a migration capability the manager
// minted with the source's key) and copies one region of the source's cache straight into the memory
// of one region of its own cache with the same id.
//
// The copy is pipelined: one-sided reads of up to kPullChunk bytes with kPullBytesInFlight in flight
// where the transport has a one-sided path (shm, verbs; each transport caps length and count), else
// one-entry Read batches of wire::kMaxChunk on the message path (tcp), RC_MAX_QUEUE_DEPTH of them in
// flight. It runs on the admin connection's thread and never outlives its deadline, a source silent
// for kSourceSilenceMs, the `cancel` signal (the server stopping), or the target cache being dropped.
#pragma once

#include <cstdint>

#include "common/notifier.h"
#include "common/wire.h"
#include "server/registry.h"

namespace rc::server {

inline constexpr uint32_t kPullChunk = 2u << 20;            // bytes per one-sided read
inline constexpr uint64_t kPullBytesInFlight = 32ull << 20;  // one-sided bytes in flight at most
inline constexpr uint32_t kSourceSilenceMs = 10'000;         // no progress for this long: the source is gone

// Runs one PullRegion. The result says what was copied, or (status, message) what failed and where;
// it is logged either way. `cancel` (may be null) ends a pull under way with RC_E_CLOSED.
wire::AdminPullResult pull_region(Registry& registry, const wire::AdminPullRequest& request, const EventFd* cancel);

}  // namespace rc::server
