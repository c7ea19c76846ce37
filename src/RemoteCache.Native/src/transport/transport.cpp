// The transport factory: an endpoint's kind picks the implementation.
#include "transport/transport.h"

#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#ifdef RC_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif

namespace rc::transport {

[[maybe_unused]] constexpr const char* kNoVerbs =
    "this library was built without rdma-core: install libibverbs-dev and librdmacm-dev and rebuild "
    "for the verbs transport";

std::unique_ptr<ClientConnection> connect(const Endpoint& endpoint, const ConnectParams& params,
                                          Status& status) {
  switch (endpoint.kind) {
    case TransportKind::Shm: return shm::connect(endpoint, params, status);
    case TransportKind::Tcp: return tcp::connect(endpoint, params, status);
#ifdef RC_HAVE_VERBS
    case TransportKind::Verbs: return verbs::connect(endpoint, params, status);
#else
    case TransportKind::Verbs: break;
#endif
  }
  status = fail(RC_E_UNSUPPORTED, kNoVerbs);
  return nullptr;
}

std::unique_ptr<Listener> listen(const Endpoint& endpoint, const ListenOptions& options, Status& status) {
  switch (endpoint.kind) {
    case TransportKind::Shm: return shm::listen(endpoint, options, status);
    case TransportKind::Tcp: return tcp::listen(endpoint, status);
#ifdef RC_HAVE_VERBS
    case TransportKind::Verbs: return verbs::listen(endpoint, status);
#else
    case TransportKind::Verbs: break;
#endif
  }
  status = fail(RC_E_UNSUPPORTED, kNoVerbs);
  return nullptr;
}

void region_committed([[maybe_unused]] const RegionMemory& region) {
#ifdef RC_HAVE_VERBS
  verbs::region_committed(region);
#endif
}

void region_released([[maybe_unused]] const RegionMemory& region) {
#ifdef RC_HAVE_VERBS
  verbs::region_released(region);
#endif
}

std::unique_ptr<MessageLink> connect_admin(const Endpoint& endpoint, uint64_t deadline_ns, Status& status) {
  switch (endpoint.kind) {
    case TransportKind::Shm: return shm::connect_admin(endpoint, deadline_ns, status);
    case TransportKind::Tcp: return tcp::connect_admin(endpoint, deadline_ns, status);
    case TransportKind::Verbs: break;
  }
  status = fail(RC_E_UNSUPPORTED, "the admin interface runs over a server's tcp or shm endpoints, not verbs: use one of those");
  return nullptr;
}

}  // namespace rc::transport
