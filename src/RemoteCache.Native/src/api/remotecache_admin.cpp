// The C boundary of the admin interface: argument checks and handle conversion around
// client::AdminClient.
#include <remotecache/remotecache_admin.h>

#include <cstring>
#include <memory>
#include <string>

#include "api/api_guard.h"
#include "client/admin_client.h"
#include "common/capability.h"
#include "common/status.h"

struct rc_admin {
  std::unique_ptr<rc::client::AdminClient> impl;
};

namespace {

using rc::api::guarded;
using rc::api::null_argument;

// The size of the first version of rc_server_stats: a caller that knows less is refused.
constexpr uint32_t kStatsFirstSize = sizeof(rc_server_stats);

}  // namespace

extern "C" {

rc_status rc_admin_connect(const char* endpoint, const uint8_t* key, size_t key_length, uint32_t timeout_ms,
                           rc_admin** out_admin) {
  if (out_admin == nullptr) return null_argument("out_admin");
  *out_admin = nullptr;
  if (endpoint == nullptr) return null_argument("endpoint");
  if (key == nullptr) return null_argument("key");
  if (key_length < RC_MIN_ADMISSION_KEY_BYTES)
    return rc::fail(RC_E_INVALID_ARGUMENT, "an admission key has at least " + std::to_string(RC_MIN_ADMISSION_KEY_BYTES) +
                                               " bytes, this one " + std::to_string(key_length));
  return guarded([&] {
    rc_status st = RC_OK;
    auto impl = rc::client::AdminClient::connect(endpoint, {key, key_length},
                                                 timeout_ms != 0 ? timeout_ms : RC_DEFAULT_ADMIN_TIMEOUT_MS, st);
    if (!impl) return st;
    auto handle = std::make_unique<rc_admin>();
    handle->impl = std::move(impl);
    *out_admin = handle.release();
    return RC_OK;
  });
}

rc_status rc_admin_stats(rc_admin* admin, rc_server_stats* out_stats) {
  if (admin == nullptr) return null_argument("admin");
  if (out_stats == nullptr) return null_argument("out_stats");
  if (out_stats->size < kStatsFirstSize)
    return rc::fail(RC_E_INVALID_ARGUMENT, "rc_server_stats.size is " + std::to_string(out_stats->size) +
                                               "; set it to sizeof(rc_server_stats) (" + std::to_string(kStatsFirstSize) +
                                               ")");
  return guarded([&] {
    rc_server_stats stats{};
    const rc_status st = admin->impl->stats(stats);
    if (st != RC_OK) return st;
    // A caller built against a later header passes a larger struct; this library fills what it knows.
    std::memcpy(out_stats, &stats, sizeof stats);
    return RC_OK;
  });
}

rc_status rc_admin_list_caches(rc_admin* admin, rc_admin_cache* out, uint32_t max, uint32_t* out_count) {
  if (admin == nullptr) return null_argument("admin");
  if (out_count == nullptr) return null_argument("out_count");
  if (out == nullptr && max > 0) return null_argument("out");
  return guarded([&] { return admin->impl->list_caches(out, max, *out_count); });
}

rc_status rc_admin_drop_cache(rc_admin* admin, uint64_t cache_id, uint32_t* out_dropped) {
  if (admin == nullptr) return null_argument("admin");
  if (out_dropped == nullptr) return null_argument("out_dropped");
  return guarded([&] { return admin->impl->drop_cache(cache_id, *out_dropped); });
}

rc_status rc_admin_extend_lease(rc_admin* admin, uint64_t cache_id, uint64_t lease_end_unix_ms, uint32_t* out_caches) {
  if (admin == nullptr) return null_argument("admin");
  if (out_caches == nullptr) return null_argument("out_caches");
  if (lease_end_unix_ms == 0) return rc::fail(RC_E_INVALID_ARGUMENT, "a lease end of 0 (no lease) cannot extend a lease");
  // Checked here against this machine's clock too, so that an obvious mistake costs no round trip;
  // the server checks against its own.
  const uint64_t now = rc::capability::unix_now_ms();
  if (lease_end_unix_ms > now && lease_end_unix_ms - now > RC_MAX_LEASE_AHEAD_MS)
    return rc::fail(RC_E_INVALID_ARGUMENT, "lease end " + std::to_string(lease_end_unix_ms) + " is more than " +
                                               std::to_string(RC_MAX_LEASE_AHEAD_MS) + " ms (RC_MAX_LEASE_AHEAD_MS) past now (" +
                                               std::to_string(now) + ")");
  return guarded([&] { return admin->impl->extend_lease(cache_id, lease_end_unix_ms, *out_caches); });
}

rc_status rc_admin_pull_region(rc_admin* admin, const rc_pull_request* request, rc_pull_result* out_result) {
  if (admin == nullptr) return null_argument("admin");
  if (request == nullptr) return null_argument("request");
  if (request->source_endpoint == nullptr) return null_argument("request->source_endpoint");
  if (request->source_capability == nullptr) return null_argument("request->source_capability");
  const std::size_t endpoint_length = std::strlen(request->source_endpoint);
  if (endpoint_length == 0 || endpoint_length > RC_MAX_PULL_ENDPOINT_BYTES)
    return rc::fail(RC_E_INVALID_ARGUMENT, "rc_pull_request.source_endpoint has " + std::to_string(endpoint_length) +
                                               " bytes; 1 to " + std::to_string(RC_MAX_PULL_ENDPOINT_BYTES) + " are allowed");
  if (request->reserved != 0) return rc::fail(RC_E_INVALID_ARGUMENT, "rc_pull_request.reserved must be 0");
  return guarded([&] {
    const auto capability = rc::capability::from_text(request->source_capability);
    if (!capability)
      return rc::fail(RC_E_INVALID_ARGUMENT,
                      "rc_pull_request.source_capability is not the text form of a capability (rc_capability_mint_migration)");
    rc::wire::AdminPullRequest wire_request{};
    wire_request.cache_id = request->cache_id;
    wire_request.target_region = request->target_region;
    wire_request.source_region = request->source_region;
    wire_request.timeout_ms = request->timeout_ms;
    wire_request.max_mib_per_s = request->max_mib_per_s;
    wire_request.regions = request->regions;
    std::memcpy(wire_request.source_endpoint, request->source_endpoint, endpoint_length);
    wire_request.source_capability = *capability;
    rc_pull_result result{};
    const rc_status st = admin->impl->pull_region(wire_request, result);
    // A failed pull still says how far it got.
    if (out_result != nullptr) *out_result = result;
    return st;
  });
}

rc_status rc_admin_close(rc_admin* admin) {
  if (admin == nullptr) return null_argument("admin");
  return guarded([&] {
    delete admin;
    return RC_OK;
  });
}

}  // extern "C"
