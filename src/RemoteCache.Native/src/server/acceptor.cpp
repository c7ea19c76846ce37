#include "server/acceptor.h"

#include <chrono>

#include "common/crypto.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "common/notifier.h"

namespace rc::server {

// Established connections per peer and in all, shared with the tickets (which may outlive the
// acceptor: server threads close their connections after it has stopped).
struct ConnectionCounts {
  std::mutex mutex;
  uint32_t total = 0;
  std::unordered_map<std::string, uint32_t> per_peer;
};

struct Acceptor::Handshake {
  std::string peer;
  EventFd evict;                    // ends the wait for the Connect
  std::atomic<bool> admitting{false};  // the Connect has arrived: no longer evictable
};

ConnectionTicket::~ConnectionTicket() {
  std::lock_guard lock(counts_->mutex);
  --counts_->total;
  auto it = counts_->per_peer.find(peer_);
  if (it != counts_->per_peer.end() && --it->second == 0) counts_->per_peer.erase(it);
}

Acceptor::Acceptor(Registry& registry, AcceptorLimits limits, Deliver deliver, transport::AdminHandoff admin)
    : registry_(registry),
      limits_(limits),
      deliver_(std::move(deliver)),
      admin_(std::move(admin)),
      counts_(std::make_shared<ConnectionCounts>()) {}

Acceptor::~Acceptor() { stop(); }

void Acceptor::start(const std::vector<std::unique_ptr<transport::Listener>>& listeners) {
  for (const auto& l : listeners) {
    transport::Listener* raw = l.get();
    listeners_.push_back(raw);
    accept_threads_.emplace_back([this, raw] { accept_loop(*raw); });
  }
}

void Acceptor::stop() {
  if (stopping_.exchange(true)) return;
  for (auto* l : listeners_) l->shutdown();
  for (auto& t : accept_threads_) t.join();
  std::unique_lock lock(mutex_);
  for (auto& h : waiting_) h->evict.signal();
  idle_.wait(lock, [&] { return running_ == 0; });
}

void Acceptor::accept_loop(transport::Listener& listener) {
  while (!stopping_.load()) {
    Status st = RC_OK;
    std::unique_ptr<transport::PendingConnection> pending;
    try {
      pending = listener.accept(st);
    } catch (const std::exception& e) {
      RC_LOG_ERROR("%s: accepting failed: %s", listener.endpoint().c_str(), e.what());
    }
    if (!pending) {
      if (st == RC_E_CLOSED) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors or memory
      continue;
    }
    const std::string peer = pending->peer_key();
    std::shared_ptr<Handshake> slot = take_slot(peer);
    if (!slot) {
      const std::string why = "too many connections from " + peer + " are in their handshake";
      log_refusal("handshake limit", peer, "refusing a connection: " + why);
      pending->refuse(RC_E_LIMIT, why);
      continue;
    }
    try {
      std::thread([this, slot, p = std::move(pending)]() mutable { run(slot, std::move(p)); }).detach();
    } catch (const std::exception& e) {
      RC_LOG_ERROR("refusing a connection from %s: cannot start its handshake: %s", peer.c_str(), e.what());
      release_slot(slot);  // the pending connection went with the lambda and is closed
    }
  }
}

std::shared_ptr<Acceptor::Handshake> Acceptor::take_slot(const std::string& peer) {
  auto slot = std::make_shared<Handshake>();
  slot->peer = peer;
  std::lock_guard lock(mutex_);
  uint32_t from_peer = 0;
  for (const auto& h : waiting_) from_peer += h->peer == peer ? 1 : 0;
  const bool peer_full = from_peer >= kMaxHandshakesPerPeer;
  if (peer_full || waiting_.size() >= kMaxHandshakes) {
    // Evict the oldest that is still waiting for its Connect (of this peer, when the peer is full).
    auto victim = waiting_.end();
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if ((*it)->admitting.load() || (peer_full && (*it)->peer != peer)) continue;
      victim = it;
      break;
    }
    if (victim == waiting_.end()) return nullptr;
    (*victim)->evict.signal();
    waiting_.erase(victim);
  }
  waiting_.push_back(slot);
  ++running_;
  return slot;
}

void Acceptor::release_slot(const std::shared_ptr<Handshake>& slot) {
  std::lock_guard lock(mutex_);
  waiting_.remove(slot);
  if (--running_ == 0) idle_.notify_all();
}

void Acceptor::run(std::shared_ptr<Handshake> slot, std::unique_ptr<transport::PendingConnection> pending) {
  std::shared_ptr<CacheState> cache;
  std::unique_ptr<ConnectionTicket> ticket;
  bool read_only = false;
  const transport::Admit admit = [&](const wire::ConnectRequest& request) -> transport::Grant {
    slot->admitting.store(true);
    {
      std::lock_guard lock(counts_->mutex);
      uint32_t& from_peer = counts_->per_peer[slot->peer];
      std::string why;
      if (counts_->total >= limits_.max_connections)
        why = "the server has " + std::to_string(counts_->total) + " connections, its limit";
      else if (from_peer >= limits_.max_connections_per_peer)
        why = "the server has " + std::to_string(from_peer) + " connections from " + slot->peer + ", its limit per peer";
      if (!why.empty()) {
        if (from_peer == 0) counts_->per_peer.erase(slot->peer);
        log_refusal("connection limit", slot->peer, "refusing a connection: " + why);
        return transport::Grant{RC_E_LIMIT, why, {}, 0};
      }
      ++from_peer;
      ++counts_->total;
    }
    ticket = std::make_unique<ConnectionTicket>(counts_, slot->peer);
    transport::Grant grant = registry_.attach(request, cache);
    read_only = grant.read_only;
    if (grant.status != RC_OK) {
      ticket.reset();
      log_refusal(rc_status_name(grant.status), slot->peer, "refusing a connection from " + slot->peer + ": " + grant.message);
    }
    return grant;
  };
  try {
    Status st = RC_OK;
    const transport::HandshakeHandlers handlers{admit, [&](std::unique_ptr<transport::MessageLink> link,
                                                           std::span<const std::byte> hello) {
                                                  slot->admitting.store(true);
                                                  admin_(std::move(link), hello);
                                                }};
    std::unique_ptr<transport::ServerConnection> link = pending->handshake(handlers, slot->evict, st);
    pending.reset();
    if (link && !stopping_.load()) deliver_(std::move(link), std::move(cache), std::move(ticket), read_only);
  } catch (const std::exception& e) {
    RC_LOG_ERROR("a handshake with %s failed: %s", slot->peer.c_str(), e.what());
  }
  if (cache) registry_.detach(cache);  // admitted, but the reply failed or the server is stopping
  ticket.reset();
  // This thread is detached: stop() waits for release_slot, not for the thread's exit, so its libcrypto state
  // (from checking a capability) is freed first; a process exiting right after stop() left it behind (LeakSanitizer).
  crypto::release_thread_state();
  release_slot(slot);
}

}  // namespace rc::server
