// verbs: RDMA RC queue pairs on rdma-core (libibverbs + librdmacm), Redy §4.
//   - connection setup with rdma_cm; the Connect request and reply travel as two-sided SEND/RECV
//     messages right after the connection is established, the reply carrying each region's address
//     and rkey and the address and rkey of the server's request ring;
//   - the server registers each region once per device, in one protection domain shared by its
//     connections, and gives each admitted connection type 2 memory windows on them (and on its
//     request ring), bound to that connection's queue pair alone: a key is worthless on any other
//     queue pair, so no client reaches memory it was not granted (Domain in the .cpp);
//   - lone requests are one-sided RDMA READ / WRITE against those MRs (no server CPU), through a
//     registered staging slot, or inline when a write fits the device's max_inline_data;
//   - batches are RDMA WRITE WITH IMMEDIATE into a slot of the peer's message ring (requests into the
//     server's, responses back into the client's); the immediate value carries the frame length and
//     the receiver polls its completion queue for arrivals. A ring has one slot per request the
//     client may have in flight (q <= 64), so a slot is never overwritten before it was consumed;
//   - message writes are signaled selectively (every kSignalEvery-th, or when the send queue fills);
//     one-sided operations are always signaled, their completions are the caller's;
//   - a broken QP flushes every outstanding work request with an error completion, which reaches
//     the caller as RC_E_DISCONNECTED; rdma_cm's DISCONNECTED event ends waits.
// Without an RDMA device, connect and listen fail with RC_E_UNSUPPORTED and a message naming it.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace rc::transport::verbs {

// The handshake's layout: each side's message (Connect or ConnectReply) is followed by a RingInfo for the ring the
// peer writes into, of kSlots slots of kSlotBytes; a message is at most kHandshakeBytes.
inline constexpr uint32_t kSlots = 64;  // = the largest q: a ring slot per request in flight
inline constexpr uint32_t kSlotBytes = (wire::kMaxFrame + 4095u) & ~4095u;
inline constexpr uint32_t kHandshakeBytes = 16384;
struct RingInfo {
  uint64_t addr;
  uint32_t rkey;
  uint32_t slots;
  uint32_t slot_bytes;
  uint32_t reserved;
};

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status);
std::unique_ptr<Listener> listen(const Endpoint& endpoint, Status& status);

// transport::region_committed / region_released for the devices this process listens on.
void region_committed(const RegionMemory& region);
void region_released(const RegionMemory& region);

// The key of the device registration of the region at `base` (0 when it has none). It gives no remote
// access; tests use it as the best guess an attacker could make.
uint32_t registration_key(const void* base);

}  // namespace rc::transport::verbs
