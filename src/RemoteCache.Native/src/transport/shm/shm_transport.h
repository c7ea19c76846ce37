// shm: client and server on one host. Regions are memfds the client maps, so one-sided reads and
// writes are plain memory copies with no server CPU; batches travel through two shared-memory
// rings per connection (shm_ring.h); eventfd doorbells wake a side that has gone to sleep. The
// Connect handshake runs over a SOCK_SEQPACKET Unix socket that also carries the fds, and stays
// open for the life of the connection: its hang-up is how each side learns the other is gone.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace rc::transport::shm {

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status);
std::unique_ptr<Listener> listen(const Endpoint& endpoint, const ListenOptions& options, Status& status);
// An admin connection (MessageLink) to the server at `endpoint`.
std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status);

}  // namespace rc::transport::shm
