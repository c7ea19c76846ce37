#include "client/admin_client.h"

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/endpoint.h"
#include "transport/connect_codec.h"

namespace rc::client {
namespace {

bool is_notice(std::span<const std::byte> frame) {
  return frame.size() >= sizeof(wire::FrameHeader) &&
         wire::read_header(frame.data()).kind == static_cast<uint8_t>(wire::Kind::Notice);
}

}  // namespace

AdminClient::AdminClient(std::unique_ptr<transport::MessageLink> link, std::string endpoint, uint32_t timeout_ms)
    : link_(std::move(link)), endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms) {}

uint64_t AdminClient::deadline() const { return now_ns() + uint64_t{timeout_ms_} * 1'000'000; }

std::unique_ptr<AdminClient> AdminClient::connect(const std::string& endpoint, std::span<const uint8_t> key,
                                                  uint32_t timeout_ms, Status& status) {
  const auto ep = parse_endpoint(endpoint);
  if (!ep) {
    status = RC_E_INVALID_ARGUMENT;
    return nullptr;
  }
  const uint64_t deadline = now_ns() + uint64_t{timeout_ms} * 1'000'000;
  auto link = transport::connect_admin(*ep, deadline, status);
  if (!link) return nullptr;
  std::unique_ptr<AdminClient> client(new AdminClient(std::move(link), endpoint, timeout_ms));
  std::lock_guard lock(client->mutex_);
  status = client->authenticate(key, deadline);
  if (status != RC_OK) return nullptr;
  return client;
}

Status AdminClient::authenticate(std::span<const uint8_t> key, uint64_t deadline_ns) {
  wire::AdminHello hello{};
  hello.admin_version = wire::kAdminVersion;
  crypto::random_bytes(hello.nonce);
  const Status sent = link_->send(admin::encode_hello(hello), deadline_ns);
  if (sent != RC_OK) return broken(sent, "cannot send the admin hello to " + endpoint_);
  std::span<const std::byte> frame;
  const Status got = link_->receive(frame, deadline_ns, nullptr);
  if (got == RC_E_TIMEOUT)
    return broken(got, endpoint_ + " did not answer the admin hello within " + std::to_string(timeout_ms_) + " ms");
  if (got != RC_OK)
    return broken(RC_E_DISCONNECTED, endpoint_ + " closed the connection without a challenge: not a cache server, or "
                                                 "one that predates the admin interface");
  if (wire::read_header(frame.data()).kind == static_cast<uint8_t>(wire::Kind::ConnectReply)) {
    // Refused before its first frame was read (a limit of the server's handshakes).
    wire::ConnectReply reply{};
    std::vector<wire::RegionDescriptor> regions;
    const Status st = transport::decode_connect_reply(frame, reply, regions);
    return broken(st == RC_OK ? RC_E_PROTOCOL : st, endpoint_ + ": " + last_error());
  }
  wire::AdminChallenge challenge{};
  if (const Status st = admin::decode_challenge(frame, challenge); st != RC_OK) return broken(st, last_error());
  session_key_ = admin::derive_session_key(key, challenge, hello);
  std::vector<std::byte> payload;
  const Status st = call(wire::AdminOp::Ping, {}, deadline_ns, payload);
  if (st == RC_E_AUTH)
    return fail(st, endpoint_ + " does not accept this admission key: its admin interface refused the MAC of the "
                                "first request");
  if (st != RC_OK) return st;
  if (!payload.empty()) return broken(RC_E_PROTOCOL, endpoint_ + " answered the admin ping with a payload");
  return RC_OK;
}

Status AdminClient::broken(Status status, std::string why) {
  broken_ = status;
  broken_why_ = why;
  link_.reset();  // closes the connection: a late reply must never be taken for the next one's
  return fail(status, std::move(why));
}

Status AdminClient::call(wire::AdminOp op, const wire::AdminRequest& request, uint64_t deadline_ns,
                         std::vector<std::byte>& payload) {
  return call_with(op, admin::bytes_of(request), deadline_ns, payload);
}

Status AdminClient::call_with(wire::AdminOp op, std::span<const std::byte> request, uint64_t deadline_ns,
                              std::vector<std::byte>& payload) {
  if (broken_ != RC_OK)
    return fail(RC_E_DISCONNECTED, "this admin connection to " + endpoint_ + " broke earlier (" + broken_why_ +
                                       "): close it and connect again");
  const uint64_t seq = next_seq_++;
  const Status sent = link_->send(admin::seal(session_key_, wire::Kind::AdminRequest, op, seq, request), deadline_ns);
  if (sent != RC_OK)
    return broken(sent == RC_E_TIMEOUT ? RC_E_TIMEOUT : RC_E_DISCONNECTED,
                  "cannot send an admin request to " + endpoint_ + (sent == RC_E_TIMEOUT ? ": it takes nothing" : ": gone"));
  std::span<const std::byte> frame;
  const Status got = link_->receive(frame, deadline_ns, nullptr);
  switch (got) {
    case RC_OK: break;
    case RC_E_TIMEOUT:
      return broken(got, endpoint_ + " did not answer within " + std::to_string(timeout_ms_) + " ms");
    case RC_E_PROTOCOL:
      return broken(got, endpoint_ + " sent bytes that are not admin frames of this wire version");
    default:
      return broken(RC_E_DISCONNECTED, endpoint_ + " closed the admin connection");
  }
  if (is_notice(frame)) {
    const Status why = transport::decode_notice(frame);
    return broken(why, endpoint_ + ": " + last_error());
  }
  admin::Opened reply;
  if (const Status st = admin::open(session_key_, frame, wire::Kind::AdminReply, reply); st != RC_OK) {
    return broken(st, st == RC_E_AUTH ? "the reply of " + endpoint_ + " does not verify: the server does not hold "
                                        "this admission key, or the reply was altered"
                                      : endpoint_ + " sent something that is not an admin reply");
  }
  if (reply.seq != seq || reply.op != static_cast<uint16_t>(op))
    return broken(RC_E_PROTOCOL, endpoint_ + " answered request " + std::to_string(seq) + " with reply " +
                                     std::to_string(reply.seq) + " of another op");
  payload.assign(reply.payload.begin(), reply.payload.end());
  return RC_OK;
}

Status AdminClient::stats(rc_server_stats& out) {
  std::lock_guard lock(mutex_);
  std::vector<std::byte> payload;
  if (const Status st = call(wire::AdminOp::Stats, {}, deadline(), payload); st != RC_OK) return st;
  wire::AdminStats s{};
  if (payload.size() != sizeof s) return broken(RC_E_PROTOCOL, endpoint_ + " sent stats of the wrong size");
  std::memcpy(&s, payload.data(), sizeof s);
  if (s.server_id_length > sizeof s.server_id)
    return broken(RC_E_PROTOCOL, endpoint_ + " sent a server id longer than its field");
  rc_server_stats filled{};
  filled.size = sizeof filled;
  filled.server_threads = s.server_threads;
  filled.memory_limit = s.memory_limit;
  filled.memory_lent = s.memory_lent;
  filled.region_size = s.region_size;
  filled.uptime_ms = s.uptime_ms;
  filled.caches = s.caches;
  filled.regions_lent = s.regions_lent;
  filled.data_connections = s.data_connections;
  filled.admin_connections = s.admin_connections;
  std::memcpy(filled.server_id, s.server_id, s.server_id_length);
  out = filled;
  return RC_OK;
}

Status AdminClient::list_caches(rc_admin_cache* out, uint32_t max, uint32_t& count) {
  std::lock_guard lock(mutex_);
  const uint64_t until = deadline();
  uint32_t written = 0;
  wire::AdminListHead head{};
  wire::AdminRequest request{};
  // Page by serial (creation order): a cache created meanwhile lands after the cursor, one dropped
  // meanwhile simply no longer appears.
  do {
    request.max_count = std::min(max - written, wire::kAdminListPage);
    std::vector<std::byte> payload;
    if (const Status st = call(wire::AdminOp::ListCaches, request, until, payload); st != RC_OK) return st;
    if (payload.size() < sizeof head) return broken(RC_E_PROTOCOL, endpoint_ + " sent a list without its head");
    std::memcpy(&head, payload.data(), sizeof head);
    if (head.count > request.max_count || payload.size() != sizeof head + head.count * sizeof(wire::AdminCacheEntry))
      return broken(RC_E_PROTOCOL, endpoint_ + " sent a list whose length does not match its count");
    for (uint32_t i = 0; i < head.count; ++i) {
      wire::AdminCacheEntry e{};
      std::memcpy(&e, payload.data() + sizeof head + i * sizeof e, sizeof e);
      if (e.serial <= request.after) return broken(RC_E_PROTOCOL, endpoint_ + " sent a list out of order");
      request.after = e.serial;
      out[written++] = rc_admin_cache{e.cache_id,       e.lease_end_unix_ms, e.regions,
                                      e.connections,    e.server_threads,
                                      (e.flags & wire::kAdminCacheExclusive) != 0 ? 1u : 0u};
    }
  } while (written < max && head.more > 0 && head.count > 0);
  count = written + head.more;
  return RC_OK;
}

Status AdminClient::drop_cache(uint64_t cache_id, uint32_t& dropped) {
  std::lock_guard lock(mutex_);
  wire::AdminRequest request{};
  request.cache_id = cache_id;
  std::vector<std::byte> payload;
  if (const Status st = call(wire::AdminOp::DropCache, request, deadline(), payload); st != RC_OK) return st;
  wire::AdminDropResult result{};
  if (payload.size() != sizeof result) return broken(RC_E_PROTOCOL, endpoint_ + " sent a drop result of the wrong size");
  std::memcpy(&result, payload.data(), sizeof result);
  dropped = result.dropped;
  return RC_OK;
}

Status AdminClient::extend_lease(uint64_t cache_id, uint64_t lease_end_unix_ms, uint32_t& caches) {
  std::lock_guard lock(mutex_);
  wire::AdminRequest request{};
  request.cache_id = cache_id;
  request.lease_end_unix_ms = lease_end_unix_ms;
  std::vector<std::byte> payload;
  if (const Status st = call(wire::AdminOp::ExtendLease, request, deadline(), payload); st != RC_OK) return st;
  wire::AdminExtendResult result{};
  if (payload.size() != sizeof result)
    return broken(RC_E_PROTOCOL, endpoint_ + " sent a lease extension result of the wrong size");
  std::memcpy(&result, payload.data(), sizeof result);
  result.message[sizeof result.message - 1] = '\0';
  if (result.status == RC_OK) {
    caches = result.caches;
    return RC_OK;
  }
  // Range-check the peer's integer before it becomes an rc_status.
  if (!is_known_status(result.status))
    return broken(RC_E_PROTOCOL,
                  endpoint_ + " answered a lease extension with an unknown status " + std::to_string(result.status));
  return fail(static_cast<Status>(result.status), endpoint_ + " refused the lease extension: " + result.message);
}

Status AdminClient::pull_region(const wire::AdminPullRequest& request, rc_pull_result& out) {
  std::lock_guard lock(mutex_);
  const uint32_t pull_ms = request.timeout_ms != 0 ? request.timeout_ms : RC_DEFAULT_PULL_TIMEOUT_MS;
  // The server bounds the pull by pull_ms; the handle's timeout covers getting the request there and
  // the reply back.
  const uint64_t deadline_ns = deadline() + uint64_t{pull_ms} * 1'000'000;
  std::vector<std::byte> payload;
  if (const Status st = call_with(wire::AdminOp::PullRegion, admin::bytes_of(request), deadline_ns, payload);
      st != RC_OK) {
    if (st != RC_E_TIMEOUT) return st;
    return fail(st, endpoint_ + " did not answer the pull within its " + std::to_string(pull_ms) + " ms plus " +
                        std::to_string(timeout_ms_) + " ms: close the handle and connect again");
  }
  wire::AdminPullResult result{};
  if (payload.size() != sizeof result) return broken(RC_E_PROTOCOL, endpoint_ + " sent a pull result of the wrong size");
  std::memcpy(&result, payload.data(), sizeof result);
  result.message[sizeof result.message - 1] = '\0';
  out = rc_pull_result{result.bytes, result.elapsed_ns, result.one_sided != 0 ? 1u : 0u, 0};
  if (result.status == RC_OK) return RC_OK;
  // Range-check the peer's integer before it becomes an rc_status.
  if (!is_known_status(result.status))
    return broken(RC_E_PROTOCOL, endpoint_ + " answered the pull with an unknown status " + std::to_string(result.status));
  return fail(static_cast<Status>(result.status), "the pull on " + endpoint_ + " failed: " + result.message);
}

}  // namespace rc::client
