// The acceptor: accepts connections on the listeners and runs their Connect handshakes, apart from
// the server threads' polling loops. It is where the server decides who gets in:
//  - handshakes: at most kMaxHandshakes at once, kMaxHandshakesPerPeer from one peer, each with a
//    short deadline; when full, the oldest handshake still waiting for its Connect is evicted (a
//    client that sends its Connect at once, as real ones do, is never the oldest for long), so
//    silent peers cannot keep others out;
//  - established connections: at most max_connections in all and max_connections_per_peer from one
//    peer (IP address for tcp and verbs, uid for shm); beyond that RC_E_LIMIT names the limit;
//  - admission proper (capability, cache, memory) is the registry's;
//  - a connection that opens with an AdminHello goes to the admin service (admin_service.h), which
//    keeps its own limit: admin connections count against neither limit above.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/registry.h"
#include "transport/transport.h"

namespace rc::server {

struct ConnectionCounts;

// One established connection counted against the limits; counted until destroyed.
class ConnectionTicket {
 public:
  ConnectionTicket(std::shared_ptr<ConnectionCounts> counts, std::string peer)
      : counts_(std::move(counts)), peer_(std::move(peer)) {}
  ~ConnectionTicket();
  ConnectionTicket(const ConnectionTicket&) = delete;
  ConnectionTicket& operator=(const ConnectionTicket&) = delete;

 private:
  std::shared_ptr<ConnectionCounts> counts_;
  std::string peer_;
};

struct AcceptorLimits {
  uint32_t max_connections = RC_DEFAULT_MAX_CONNECTIONS;
  uint32_t max_connections_per_peer = RC_DEFAULT_MAX_CONNECTIONS_PER_PEER;
};

class Acceptor {
 public:
  // Takes an admitted connection (on the handshake's thread); `read_only`: a migration source's.
  using Deliver = std::function<void(std::unique_ptr<transport::ServerConnection>, std::shared_ptr<CacheState>,
                                     std::unique_ptr<ConnectionTicket>, bool read_only)>;

  Acceptor(Registry& registry, AcceptorLimits limits, Deliver deliver, transport::AdminHandoff admin);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Starts one accept thread per listener (the listeners must outlive stop()).
  void start(const std::vector<std::unique_ptr<transport::Listener>>& listeners);
  // Stops accepting, ends every handshake and waits for their threads.
  void stop();

  static constexpr uint32_t kMaxHandshakes = 64;
  static constexpr uint32_t kMaxHandshakesPerPeer = 16;

 private:
  struct Handshake;

  void accept_loop(transport::Listener& listener);
  // A slot for a new handshake, evicting an older silent one if need be; null when none can be had.
  std::shared_ptr<Handshake> take_slot(const std::string& peer);
  void run(std::shared_ptr<Handshake> slot, std::unique_ptr<transport::PendingConnection> pending);
  void release_slot(const std::shared_ptr<Handshake>& slot);

  Registry& registry_;
  const AcceptorLimits limits_;
  const Deliver deliver_;
  const transport::AdminHandoff admin_;
  std::shared_ptr<ConnectionCounts> counts_;
  std::vector<std::thread> accept_threads_;
  std::vector<transport::Listener*> listeners_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable idle_;
  std::list<std::shared_ptr<Handshake>> waiting_;  // oldest first; evicted ones leave at once
  uint32_t running_ = 0;                           // handshake threads, evicted ones included
};

}  // namespace rc::server
