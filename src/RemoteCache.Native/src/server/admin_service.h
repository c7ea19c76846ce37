// The server's admin connections (remotecache_admin.h): the acceptor hands over every connection
// that opens with an AdminHello, and each admitted one gets a thread that runs its AdminSession.
//
// They are kept apart from data connections and limited on their own: at most
// RC_MAX_ADMIN_CONNECTIONS at once. One that has not authenticated within the handshake timeout is
// dropped, and when all are taken a new one displaces the oldest that has not authenticated yet, so
// peers without the key can delay a key holder by a round trip at most; only when every one has
// authenticated is a new one refused (RC_E_LIMIT). Their threads block in poll, never spin.
#pragma once

#include <remotecache/remotecache_admin.h>

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/notifier.h"
#include "server/admin_session.h"
#include "transport/transport.h"

namespace rc::server {

class AdminService {
 public:
  // `context.admin_connections` is filled in here. `key` empty: open mode (every hello refused).
  AdminService(AdminContext context, std::vector<uint8_t> key);
  ~AdminService();
  AdminService(const AdminService&) = delete;
  AdminService& operator=(const AdminService&) = delete;

  // Takes a connection whose first frame was `hello` (on the acceptor's handshake thread): answers
  // a refusal at once, or starts the connection's session thread.
  void accept(std::unique_ptr<transport::MessageLink> link, std::span<const std::byte> hello);
  // Ends every admin connection and waits for their threads; accept() refuses from then on.
  void stop();
  // Admin connections held now.
  uint32_t connections() const;

 private:
  struct Slot {
    EventFd end;                 // ends the session's waits (eviction, stop)
    bool authenticated = false;  // guarded by mutex_
    bool evicted = false;        // guarded by mutex_
  };

  // A slot for a new connection, displacing the oldest unauthenticated one if need be; null with
  // `why` when there is none.
  std::shared_ptr<Slot> take_slot(std::string& why);
  // Records that the session authenticated; false if it was displaced meanwhile.
  bool mark_authenticated(const std::shared_ptr<Slot>& slot);
  // Whether the session must end: displaced, or the service is stopping.
  bool ended(const Slot& slot) const;
  void release_slot(const std::shared_ptr<Slot>& slot);
  void serve(const std::shared_ptr<Slot>& slot, transport::MessageLink& link, AdminSession& session,
             std::span<const std::byte> challenge);

  AdminContext context_;
  const std::vector<uint8_t> key_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::list<std::shared_ptr<Slot>> slots_;  // oldest first; displaced ones leave at once
  uint32_t running_ = 0;                    // session threads, displaced ones included
  bool stopping_ = false;
};

}  // namespace rc::server
