#include "server/admin_service.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "transport/connect_codec.h"
#include "transport/socket_util.h"

namespace rc::server {
namespace {

// Admin connections get the data handshake's deadline for their first authenticated request and for
// each send: a key holder answers at once, a peer without the key must not hold a slot for long.
uint64_t handshake_deadline() { return now_ns() + uint64_t{transport::kHandshakeTimeoutMs} * 1'000'000; }

}  // namespace

AdminService::AdminService(AdminContext context, std::vector<uint8_t> key)
    : context_(std::move(context)), key_(std::move(key)) {
  context_.admin_connections = [this] { return connections(); };
}

AdminService::~AdminService() { stop(); }

uint32_t AdminService::connections() const {
  std::lock_guard lock(mutex_);
  return static_cast<uint32_t>(slots_.size());
}

void AdminService::accept(std::unique_ptr<transport::MessageLink> link, std::span<const std::byte> hello) {
  auto session = std::make_unique<AdminSession>(context_, key_);
  AdminSession::Answer greeting = session->greet(hello);
  if (greeting.close) {
    log_refusal("admin greeting", link->peer(), "refusing an admin connection from " + link->peer() + ": " + greeting.refused);
    link->send(greeting.frame, handshake_deadline());
    return;
  }
  std::string why;
  std::shared_ptr<Slot> slot = take_slot(why);
  if (!slot) {
    log_refusal("admin limit", link->peer(), "refusing an admin connection from " + link->peer() + ": " + why);
    link->send(AdminSession::refusal(RC_E_LIMIT, why), handshake_deadline());
    return;
  }
  session->set_cancel(&slot->end);  // a pull under way ends with the connection
  try {
    std::thread([this, slot, owned_link = std::move(link), owned_session = std::move(session),
                 challenge = std::move(greeting.frame)]() mutable {
      serve(slot, *owned_link, *owned_session, challenge);
      owned_link.reset();
      owned_session.reset();
      // Detached: stop() waits for release_slot, not for the thread's exit, so libcrypto's state of
      // this thread (HMACs) is freed first, as the acceptor's handshake threads do.
      crypto::release_thread_state();
      release_slot(slot);
    }).detach();
  } catch (const std::exception& e) {
    RC_LOG_ERROR("refusing an admin connection: cannot start its thread: %s", e.what());
    release_slot(slot);
  }
}

std::shared_ptr<AdminService::Slot> AdminService::take_slot(std::string& why) {
  auto slot = std::make_shared<Slot>();
  std::lock_guard lock(mutex_);
  if (stopping_) {
    why = "the server is stopping";
    return nullptr;
  }
  if (slots_.size() >= RC_MAX_ADMIN_CONNECTIONS) {
    const auto victim = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s->authenticated; });
    if (victim == slots_.end()) {
      why = "the server has " + std::to_string(slots_.size()) + " authenticated admin connections, its limit";
      return nullptr;
    }
    (*victim)->evicted = true;
    (*victim)->end.signal();
    slots_.erase(victim);
  }
  slots_.push_back(slot);
  ++running_;
  return slot;
}

bool AdminService::mark_authenticated(const std::shared_ptr<Slot>& slot) {
  std::lock_guard lock(mutex_);
  if (slot->evicted) return false;
  slot->authenticated = true;
  return true;
}

bool AdminService::ended(const Slot& slot) const {
  std::lock_guard lock(mutex_);
  return slot.evicted || stopping_;
}

void AdminService::release_slot(const std::shared_ptr<Slot>& slot) {
  std::lock_guard lock(mutex_);
  slots_.remove(slot);
  if (--running_ == 0) idle_.notify_all();
}

void AdminService::serve(const std::shared_ptr<Slot>& slot, transport::MessageLink& link, AdminSession& session,
                         std::span<const std::byte> challenge) {
  const std::string peer = link.peer();
  if (link.send(challenge, handshake_deadline()) != RC_OK) {
    RC_LOG_INFO("admin connection %s: gone before its challenge", peer.c_str());
    return;
  }
  const uint64_t authenticate_by = handshake_deadline();
  for (;;) {
    std::span<const std::byte> frame;
    const Status st = link.receive(frame, session.authenticated() ? UINT64_MAX : authenticate_by, &slot->end);
    if (st == RC_E_PROTOCOL) {
      const char* why = "admin connection refused: bytes that are not admin frames of this wire version";
      RC_LOG_WARN("closing admin connection %s: %s", peer.c_str(), why);
      link.send(transport::encode_notice(RC_E_PROTOCOL, why), handshake_deadline());
      return;
    }
    if (st != RC_OK) {
      const char* why = st == RC_E_TIMEOUT  ? "sent no authenticated request in time"
                        : st == RC_E_CLOSED ? "displaced, or the server is stopping"
                                            : "peer closed";
      log(st == RC_E_TIMEOUT ? LogLevel::Warn : LogLevel::Info, "closing admin connection %s: %s", peer.c_str(), why);
      return;
    }
    if (ended(*slot)) {
      // A chatty peer's frames win over the end signal in receive(); they must not keep it alive.
      RC_LOG_INFO("closing admin connection %s: displaced, or the server is stopping", peer.c_str());
      return;
    }
    AdminSession::Answer answer = session.handle(frame);
    if (!answer.refused.empty()) RC_LOG_WARN("closing admin connection %s: %s", peer.c_str(), answer.refused.c_str());
    if (!answer.close && session.authenticated() && !mark_authenticated(slot)) {
      RC_LOG_INFO("closing admin connection %s: displaced by a newer one", peer.c_str());
      return;
    }
    if (link.send(answer.frame, handshake_deadline()) != RC_OK) {
      RC_LOG_INFO("closing admin connection %s: it does not take its replies", peer.c_str());
      return;
    }
    if (answer.close) return;
  }
}

void AdminService::stop() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  for (auto& s : slots_) s->end.signal();
  idle_.wait(lock, [&] { return running_ == 0; });
}

}  // namespace rc::server
