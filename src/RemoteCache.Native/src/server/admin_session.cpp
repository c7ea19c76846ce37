#include "server/admin_session.h"

#include <algorithm>
#include <cstring>

#include "common/capability.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "transport/connect_codec.h"

namespace rc::server {
namespace {

std::vector<std::byte> stats_payload(const AdminContext& context) {
  const Registry& registry = *context.registry;
  const RegistryStats now = registry.stats();
  wire::AdminStats s{};
  s.memory_limit = registry.memory_limit();
  s.memory_lent = now.memory_lent;
  s.region_size = registry.region_size();
  s.uptime_ms = (now_ns() - context.started_ns) / 1'000'000;
  s.caches = now.caches;
  s.regions_lent = static_cast<uint32_t>(now.memory_lent / registry.region_size());
  s.data_connections = now.connections;
  s.admin_connections = context.admin_connections ? context.admin_connections() : 0;
  s.server_threads = context.server_threads;
  const std::string& id = registry.server_id();
  s.server_id_length = static_cast<uint32_t>(std::min(id.size(), sizeof s.server_id));
  std::memcpy(s.server_id, id.data(), s.server_id_length);
  const auto bytes = admin::bytes_of(s);
  return {bytes.begin(), bytes.end()};
}

std::vector<std::byte> list_payload(const Registry& registry, const wire::AdminRequest& request) {
  wire::AdminListHead head{};
  const std::vector<CacheInfo> caches = registry.list(request.after, request.max_count, head.more);
  head.count = static_cast<uint32_t>(caches.size());
  std::vector<std::byte> out(sizeof head + caches.size() * sizeof(wire::AdminCacheEntry));
  std::memcpy(out.data(), &head, sizeof head);
  std::byte* at = out.data() + sizeof head;
  for (const CacheInfo& c : caches) {
    const wire::AdminCacheEntry e{c.id,          c.serial,         c.lease_end_ms,
                                  c.regions,     c.connections,    c.server_threads,
                                  c.exclusive ? wire::kAdminCacheExclusive : 0u};
    std::memcpy(at, &e, sizeof e);
    at += sizeof e;
  }
  return out;
}

std::vector<std::byte> drop_payload(const AdminContext& context, uint64_t cache_id) {
  const wire::AdminDropResult result{static_cast<uint32_t>(context.registry->drop(cache_id)), 0};
  if (result.dropped > 0 && context.caches_dropped) context.caches_dropped();
  const auto bytes = admin::bytes_of(result);
  return {bytes.begin(), bytes.end()};
}

// A lease end past RC_MAX_LEASE_AHEAD_MS is refused in the reply, not as a protocol fault: the
// request is well formed, and the manager's clock may simply run ahead of this server's.
std::vector<std::byte> extend_payload(Registry& registry, const wire::AdminRequest& request) {
  wire::AdminExtendResult result{};
  const uint64_t now = capability::unix_now_ms();
  std::string why;
  if (request.lease_end_unix_ms == 0) {
    why = "a lease end of 0 (no lease) cannot extend a lease";
  } else if (request.lease_end_unix_ms > now && request.lease_end_unix_ms - now > RC_MAX_LEASE_AHEAD_MS) {
    why = "lease end " + std::to_string(request.lease_end_unix_ms) + " is over " + std::to_string(RC_MAX_LEASE_AHEAD_MS) +
          " ms past this server's clock (" + std::to_string(now) + ")";
  }
  if (why.empty()) {
    result.caches = static_cast<uint32_t>(registry.extend_lease(request.cache_id, request.lease_end_unix_ms));
  } else {
    result.status = RC_E_INVALID_ARGUMENT;
    std::memcpy(result.message, why.data(), std::min(why.size(), sizeof result.message - 1));
  }
  const auto bytes = admin::bytes_of(result);
  return {bytes.begin(), bytes.end()};
}

// Fields an op does not use must be 0, so that a later version can give them a meaning.
Status unused_field(const char* name) {
  return fail(RC_E_PROTOCOL, std::string("a request sets ") + name + ", which its op does not use");
}

Status payload_size(std::size_t got, std::size_t want) {
  return fail(RC_E_PROTOCOL, "a request payload of " + std::to_string(got) + " bytes, not " + std::to_string(want));
}

}  // namespace

AdminSession::AdminSession(AdminContext context, std::span<const uint8_t> key)
    : context_(std::move(context)), key_(key.begin(), key.end()) {}

std::vector<std::byte> AdminSession::refusal(Status status, std::string_view why) {
  return admin::encode_challenge(status, {}, why);
}

AdminSession::Answer AdminSession::greet(std::span<const std::byte> hello_frame) {
  if (state_ != State::AwaitingHello) return refuse(RC_E_PROTOCOL, "a second hello");
  state_ = State::Closed;  // unless the hello passes
  wire::AdminHello hello{};
  if (admin::decode_hello(hello_frame, hello) != RC_OK) {
    std::string why = last_error();
    return Answer{refusal(RC_E_PROTOCOL, why), true, "hello refused: " + why};
  }
  if (hello.admin_version != wire::kAdminVersion) {
    std::string why = "this server speaks admin version " + std::to_string(wire::kAdminVersion) + ", the client " +
                      std::to_string(hello.admin_version);
    return Answer{refusal(RC_E_PROTOCOL, why), true, "hello refused: " + why};
  }
  if (key_.empty()) {
    std::string why = "open mode (no admission key): nobody can authenticate to this server's admin interface";
    return Answer{refusal(RC_E_AUTH, why), true, "hello refused: " + why};
  }
  wire::AdminChallenge challenge{};
  crypto::random_bytes(challenge.nonce);
  session_key_ = admin::derive_session_key(key_, challenge, hello);
  state_ = State::Open;
  return Answer{admin::encode_challenge(RC_OK, challenge.nonce, ""), false, ""};
}

AdminSession::Answer AdminSession::refuse(Status status, std::string why) {
  state_ = State::Closed;
  std::string text = "admin request refused: " + why;
  return Answer{transport::encode_notice(status, text), true, std::move(text)};
}

AdminSession::Answer AdminSession::handle(std::span<const std::byte> frame) {
  if (state_ == State::AwaitingHello) return refuse(RC_E_PROTOCOL, "a request before the hello");
  if (state_ == State::Closed) return Answer{{}, true, ""};
  admin::Opened opened;
  // Structure, then MAC: nothing in a frame that does not verify deserves a closer look.
  if (const Status st = admin::open(session_key_, frame, wire::Kind::AdminRequest, opened); st != RC_OK)
    return refuse(st, last_error());
  if (opened.seq != next_seq_)
    return refuse(RC_E_AUTH, "sequence " + std::to_string(opened.seq) + ", expected " + std::to_string(next_seq_) +
                                 ": a replayed or reordered request");
  const auto op = static_cast<wire::AdminOp>(opened.op);
  std::vector<std::byte> payload;
  if (const Status st = execute(op, opened.payload, payload); st != RC_OK) return refuse(st, last_error());
  const uint64_t seq = next_seq_++;
  return Answer{admin::seal(session_key_, wire::Kind::AdminReply, op, seq, payload), false, ""};
}

Status AdminSession::execute(wire::AdminOp op, std::span<const std::byte> request, std::vector<std::byte>& payload) {
  if (op == wire::AdminOp::PullRegion) return execute_pull(request, payload);
  wire::AdminRequest r{};
  if (request.size() != sizeof r) return payload_size(request.size(), sizeof r);
  std::memcpy(&r, request.data(), sizeof r);
  if (r.reserved != 0) return unused_field("reserved");
  switch (op) {
    case wire::AdminOp::Ping:
    case wire::AdminOp::Stats:
      if (r.cache_id != 0 || r.after != 0 || r.max_count != 0) return unused_field("cache_id, after or max_count");
      if (op == wire::AdminOp::Stats) payload = stats_payload(context_);
      return RC_OK;
    case wire::AdminOp::ListCaches:
      if (r.cache_id != 0) return unused_field("cache_id");
      if (r.max_count > wire::kAdminListPage)
        return fail(RC_E_PROTOCOL, "a list asks for " + std::to_string(r.max_count) + " caches, at most " +
                                       std::to_string(wire::kAdminListPage) + " per reply");
      payload = list_payload(*context_.registry, r);
      return RC_OK;
    case wire::AdminOp::DropCache:
      if (r.after != 0 || r.max_count != 0) return unused_field("after or max_count");
      payload = drop_payload(context_, r.cache_id);
      return RC_OK;
    case wire::AdminOp::ExtendLease:
      if (r.max_count != 0) return unused_field("max_count");
      payload = extend_payload(*context_.registry, r);
      return RC_OK;
    case wire::AdminOp::PullRegion:
      break;  // taken above: its payload is its own
  }
  return fail(RC_E_PROTOCOL, "unknown admin op " + std::to_string(static_cast<unsigned>(op)));
}

Status AdminSession::execute_pull(std::span<const std::byte> request, std::vector<std::byte>& payload) {
  wire::AdminPullRequest r{};
  if (request.size() != sizeof r) return payload_size(request.size(), sizeof r);
  std::memcpy(&r, request.data(), sizeof r);
  const char* end = std::find(r.source_endpoint, r.source_endpoint + sizeof r.source_endpoint, '\0');
  if (end == r.source_endpoint + sizeof r.source_endpoint)
    return fail(RC_E_PROTOCOL, "a pull's source endpoint is not NUL-terminated text");
  if (end == r.source_endpoint) return fail(RC_E_PROTOCOL, "a pull names no source endpoint");
  if (r.reserved != 0) return fail(RC_E_PROTOCOL, "a pull's reserved field is not 0");
  // What fails from here on is the pull's, not the protocol's: the reply says so and the session goes on.
  wire::AdminPullResult result{};
  if (context_.pull_region) {
    result = context_.pull_region(r, cancel_);
  } else {
    result.status = RC_E_UNSUPPORTED;
    std::strncpy(result.message, "this admin session cannot pull regions", sizeof result.message - 1);
  }
  const auto bytes = admin::bytes_of(result);
  payload.assign(bytes.begin(), bytes.end());
  return RC_OK;
}

}  // namespace rc::server
