// One admin connection's exchange on the server (remotecache_admin.h, docs/admin.md), apart from its
// I/O and threads so that it can be fuzzed on its own: answers the hello with a challenge, then
// checks every request — its structure, then its MAC, then its sequence number, then its fields —
// and executes it against the registry. The first request it refuses ends the connection: the
// answer is then a Notice naming what was refused and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/admin_codec.h"
#include "common/notifier.h"
#include "common/status.h"
#include "server/registry.h"

namespace rc::server {

// What admin requests read and change besides the registry.
struct AdminContext {
  Registry* registry = nullptr;
  uint32_t server_threads = 0;
  uint64_t started_ns = 0;                      // now_ns() when the server started
  std::function<uint32_t()> admin_connections;  // admin connections the server holds now
  std::function<void()> caches_dropped;         // wakes the threads that close dropped caches' connections
  // Runs a PullRegion (server/region_puller.h) until it ends or `cancel` fires; null: this session
  // answers every pull RC_E_UNSUPPORTED (a session run apart from a server, as the fuzzer does).
  std::function<wire::AdminPullResult(const wire::AdminPullRequest&, const EventFd* cancel)> pull_region = nullptr;
};

class AdminSession {
 public:
  // `key`: the admission key; empty in open mode, where every hello is refused.
  AdminSession(AdminContext context, std::span<const uint8_t> key);

  struct Answer {
    std::vector<std::byte> frame;  // to send: a challenge, a reply, or the Notice of a refusal
    bool close = false;            // the connection ends once `frame` is sent
    std::string refused;           // what was refused and why (for the server's log); empty if nothing
  };

  // The answer to the connection's first frame: a challenge (with a refusal status and close set
  // for a malformed hello, another admin version, or open mode).
  Answer greet(std::span<const std::byte> hello);
  // The answer to a frame after the challenge.
  Answer handle(std::span<const std::byte> frame);

  // Whether a request has verified (the peer holds the key).
  bool authenticated() const { return next_seq_ > 1; }

  // The signal that ends the connection (displaced, the server stopping): it also ends a pull under way.
  void set_cancel(const EventFd* cancel) { cancel_ = cancel; }

  // The challenge of a connection the server turns away before any exchange (a limit).
  static std::vector<std::byte> refusal(Status status, std::string_view why);

 private:
  Answer refuse(Status status, std::string why);
  // The reply payload of a verified request, or a refusal (RC_E_PROTOCOL) for a payload or fields
  // that do not fit its op.
  Status execute(wire::AdminOp op, std::span<const std::byte> request, std::vector<std::byte>& payload);
  Status execute_pull(std::span<const std::byte> request, std::vector<std::byte>& payload);

  enum class State { AwaitingHello, Open, Closed };

  AdminContext context_;
  std::vector<uint8_t> key_;
  State state_ = State::AwaitingHello;
  admin::SessionKey session_key_{};
  uint64_t next_seq_ = 1;
  const EventFd* cancel_ = nullptr;
};

}  // namespace rc::server
