// tcp: framed batches over one TCP connection (TCP_NODELAY), both directions non-blocking with
// private in/out buffers. There is no one-sided path: the client sends a lone request as a
// one-entry batch, and the server always needs a thread to execute requests.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace rc::transport::tcp {

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status);
std::unique_ptr<Listener> listen(const Endpoint& endpoint, Status& status);
// An admin connection (MessageLink) to the server at `endpoint`.
std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status);

}  // namespace rc::transport::tcp
