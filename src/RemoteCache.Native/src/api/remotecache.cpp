// The C boundary: argument checks, handle conversion, and a catch-all so that no C++ exception
// (std::bad_alloc, std::system_error from a failed syscall) ever crosses into the caller.
#include <remotecache/remotecache.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <cstring>

#include "api/api_guard.h"
#include "client/cache.h"
#include "client/session.h"
#include "common/capability.h"
#include "common/status.h"
#include "server/server.h"

namespace rc::api {

enum class ObjectKind { cache, session, server, count };

// Process-wide, so that rc_get_object_counts sees every handle of this library whatever thread made it.
std::atomic<uint64_t> g_live_objects[static_cast<int>(ObjectKind::count)];

// A member of every handle struct: the count follows the handle's lifetime rather than the API
// calls, so a failure path that frees a half-made handle (or never frees one) cannot skew it.
template <ObjectKind Kind>
class LiveObject {
 public:
  LiveObject() { g_live_objects[static_cast<int>(Kind)].fetch_add(1, std::memory_order_relaxed); }
  ~LiveObject() { g_live_objects[static_cast<int>(Kind)].fetch_sub(1, std::memory_order_relaxed); }
  LiveObject(const LiveObject&) = delete;
  LiveObject& operator=(const LiveObject&) = delete;
};

inline uint64_t live_objects(ObjectKind kind) {
  return g_live_objects[static_cast<int>(kind)].load(std::memory_order_relaxed);
}

}  // namespace rc::api

// `live` comes first so that it is destroyed last: a handle stops counting only once its threads
// and connections are gone, not while its destructor still runs.
struct rc_cache {
  rc::api::LiveObject<rc::api::ObjectKind::cache> live;
  std::unique_ptr<rc::client::Cache> impl;
  std::mutex sessions_mutex;
  // The open sessions, so that a refused rc_cache_close can say which ones keep the cache open.
  std::set<const rc_session*> sessions;
};
struct rc_session {
  rc::api::LiveObject<rc::api::ObjectKind::session> live;
  std::unique_ptr<rc::client::Session> impl;
  rc_cache* cache = nullptr;
};
struct rc_server {
  rc::api::LiveObject<rc::api::ObjectKind::server> live;
  std::unique_ptr<rc::server::Server> impl;
};

namespace {

// A refused rc_cache_close names at most this many sessions; a binding that leaked thousands
// needs the count, not thousands of addresses.
constexpr size_t kSessionsNamedOnRefusedClose = 8;

using rc::api::guarded;
using rc::api::null_argument;

rc_status mint_capability(const uint8_t* key, size_t key_length, uint64_t cache_id, const char* server_id,
                          uint32_t regions, uint64_t expires_unix_ms, uint8_t rights, char* out_text, size_t out_capacity) {
  if (key == nullptr) return null_argument("key");
  if (server_id == nullptr) return null_argument("server_id");
  if (out_text == nullptr) return null_argument("out_text");
  return guarded([&] {
    const std::string text = rc::capability::to_text(
        rc::capability::mint({key, key_length}, cache_id, server_id, regions, expires_unix_ms, rights));
    if (text.size() + 1 > out_capacity)
      return rc::fail(RC_E_INVALID_ARGUMENT, "out_text needs " + std::to_string(text.size() + 1) + " bytes");
    std::memcpy(out_text, text.c_str(), text.size() + 1);
    return RC_OK;
  });
}

// Called with the cache's sessions_mutex held and at least one session open.
rc_status refuse_close_with_open_sessions(const rc_cache& cache) {
  std::ostringstream text;
  text << "close every session before closing its cache: " << cache.sessions.size() << " session"
       << (cache.sessions.size() == 1 ? "" : "s") << " still open (";
  size_t named = 0;
  for (const rc_session* s : cache.sessions) {
    if (named == kSessionsNamedOnRefusedClose) {
      text << ", ...";
      break;
    }
    text << (named++ == 0 ? "" : ", ") << static_cast<const void*>(s);
  }
  text << ")";
  return rc::fail(RC_E_INVALID_ARGUMENT, text.str());
}

}  // namespace

extern "C" {

uint32_t rc_api_version(void) { return RC_API_VERSION; }

const char* rc_last_error(void) { return rc::last_error(); }

const char* rc_status_name(int32_t status) { return rc::status_name(status); }

// Copies a C array of endpoint strings, refusing a null entry.
static rc_status endpoint_list(const char* const* endpoints, size_t count, std::vector<std::string>& out) {
  for (size_t i = 0; i < count; ++i) {
    if (endpoints[i] == nullptr) return null_argument("an endpoint");
    out.emplace_back(endpoints[i]);
  }
  return RC_OK;
}

rc_status rc_cache_open(const char* const* endpoints, size_t endpoint_count, const rc_cache_options* options,
                        rc_cache** out_cache) {
  if (out_cache == nullptr) return null_argument("out_cache");
  *out_cache = nullptr;
  if (endpoints == nullptr) return null_argument("endpoints");
  if (options == nullptr) return null_argument("options");
  return guarded([&] {
    std::vector<std::string> list;
    if (const rc_status st = endpoint_list(endpoints, endpoint_count, list); st != RC_OK) return st;
    rc_status st = RC_OK;
    auto impl = rc::client::Cache::open(list, *options, st);
    if (!impl) return st;
    auto handle = std::make_unique<rc_cache>();
    handle->impl = std::move(impl);
    *out_cache = handle.release();
    return RC_OK;
  });
}

uint64_t rc_cache_capacity(const rc_cache* cache) { return cache == nullptr ? 0 : cache->impl->client_capacity(); }

rc_status rc_cache_get_config(const rc_cache* cache, rc_config* out_config) {
  if (cache == nullptr) return null_argument("cache");
  if (out_config == nullptr) return null_argument("out_config");
  *out_config = cache->impl->config();
  return RC_OK;
}

rc_status rc_cache_reconfigure(rc_cache* cache, const rc_config* config) {
  if (cache == nullptr) return null_argument("cache");
  if (config == nullptr) return null_argument("config");
  return guarded([&] { return cache->impl->reconfigure(*config); });
}

rc_status rc_cache_renew(rc_cache* cache, const char* const* capabilities) {
  if (cache == nullptr) return null_argument("cache");
  if (capabilities == nullptr) return null_argument("capabilities");
  return guarded([&] { return cache->impl->renew(capabilities); });
}

rc_status rc_cache_grow(rc_cache* cache, const char* const* endpoints, size_t endpoint_count,
                        const char* const* capabilities) {
  if (cache == nullptr) return null_argument("cache");
  if (endpoints == nullptr && endpoint_count > 0) return null_argument("endpoints");
  return guarded([&] {
    std::vector<std::string> list;
    if (const rc_status st = endpoint_list(endpoints, endpoint_count, list); st != RC_OK) return st;
    return cache->impl->grow(list, capabilities);
  });
}

rc_status rc_cache_shrink(rc_cache* cache, size_t server_count) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->shrink(server_count); });
}

size_t rc_cache_server_count(const rc_cache* cache) { return cache == nullptr ? 0 : cache->impl->server_count(); }

size_t rc_cache_region_count(const rc_cache* cache) { return cache == nullptr ? 0 : cache->impl->region_count(); }

rc_status rc_cache_region_info(const rc_cache* cache, uint32_t region, rc_region_info* out_info) {
  if (cache == nullptr) return null_argument("cache");
  if (out_info == nullptr) return null_argument("out_info");
  return guarded([&] {
    rc::client::Cache::Placement p{};
    if (const rc_status st = cache->impl->region_placement(region, p); st != RC_OK) return st;
    *out_info = rc_region_info{p.holder, p.region, p.size, p.moving ? 1u : 0u, 0};
    return RC_OK;
  });
}

size_t rc_cache_holder_count(const rc_cache* cache) { return cache == nullptr ? 0 : cache->impl->holder_count(); }

rc_status rc_cache_holder_endpoint(const rc_cache* cache, uint32_t holder, char* out, size_t out_capacity) {
  if (cache == nullptr) return null_argument("cache");
  if (out == nullptr) return null_argument("out");
  return guarded([&] {
    std::string text;
    if (const rc_status st = cache->impl->holder_endpoint(holder, text); st != RC_OK) return st;
    if (text.size() + 1 > out_capacity)
      return rc::fail(RC_E_INVALID_ARGUMENT, "out needs " + std::to_string(text.size() + 1) + " bytes");
    std::memcpy(out, text.c_str(), text.size() + 1);
    return RC_OK;
  });
}

rc_status rc_cache_holder_status(rc_cache* cache, uint32_t holder) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->holder_status(holder); });
}

rc_status rc_cache_add_holder(rc_cache* cache, const char* endpoint, const char* capability, uint32_t regions,
                              uint32_t* out_holder) {
  if (cache == nullptr) return null_argument("cache");
  if (endpoint == nullptr) return null_argument("endpoint");
  if (out_holder == nullptr) return null_argument("out_holder");
  return guarded([&] {
    std::size_t holder = 0;
    if (const rc_status st = cache->impl->add_holder(endpoint, capability, regions, holder); st != RC_OK) return st;
    *out_holder = static_cast<uint32_t>(holder);
    return RC_OK;
  });
}

rc_status rc_cache_migration_begin(rc_cache* cache, uint32_t region, uint32_t count, uint32_t flags, uint32_t timeout_ms) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->migration_begin(region, count, flags, timeout_ms); });
}

rc_status rc_cache_migration_commit(rc_cache* cache, uint32_t region, uint32_t holder, uint32_t holder_region) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->migration_commit(region, holder, holder_region); });
}

rc_status rc_cache_map_region_ahead(rc_cache* cache, uint32_t holder, uint32_t holder_region) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->map_region_ahead(holder, holder_region); });
}

rc_status rc_cache_migration_abort(rc_cache* cache, uint32_t region) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->migration_abort(region); });
}

rc_status rc_cache_remove_holder(rc_cache* cache, uint32_t holder) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] { return cache->impl->remove_holder(holder); });
}

rc_status rc_cache_close(rc_cache* cache) {
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] {
    {
      std::lock_guard<std::mutex> lock(cache->sessions_mutex);
      if (!cache->sessions.empty()) return refuse_close_with_open_sessions(*cache);
    }
    delete cache;
    return RC_OK;
  });
}

rc_status rc_session_open(rc_cache* cache, rc_session** out_session) {
  if (out_session == nullptr) return null_argument("out_session");
  *out_session = nullptr;
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] {
    auto impl = std::make_unique<rc::client::Session>(*cache->impl, cache->impl->session_capacity());
    const rc_status st = impl->open();
    if (st != RC_OK) return st;
    auto handle = std::make_unique<rc_session>();
    handle->impl = std::move(impl);
    handle->cache = cache;
    {
      std::lock_guard<std::mutex> lock(cache->sessions_mutex);
      cache->sessions.insert(handle.get());
    }
    *out_session = handle.release();
    return RC_OK;
  });
}

rc_status rc_read(rc_session* session, uint64_t address, void* dst, uint64_t length, uint64_t tag) {
  if (session == nullptr) return null_argument("session");
  return guarded([&] { return session->impl->read(address, dst, length, tag); });
}

rc_status rc_write(rc_session* session, uint64_t address, const void* src, uint64_t length, uint64_t tag) {
  if (session == nullptr) return null_argument("session");
  return guarded([&] { return session->impl->write(address, src, length, tag); });
}

rc_status rc_flush(rc_session* session) {
  if (session == nullptr) return null_argument("session");
  return guarded([&] { return session->impl->flush(); });
}

int32_t rc_poll(rc_session* session, rc_completion* out, uint32_t max) {
  if (session == nullptr) return null_argument("session");
  if (out == nullptr && max > 0) return null_argument("out");
  int32_t n = 0;
  const rc_status st = guarded([&] {
    n = session->impl->poll(out, max);
    return RC_OK;
  });
  return st == RC_OK ? n : st;
}

int32_t rc_wait(rc_session* session, rc_completion* out, uint32_t max, int32_t timeout_ms) {
  if (session == nullptr) return null_argument("session");
  if (out == nullptr && max > 0) return null_argument("out");
  int32_t n = 0;
  const rc_status st = guarded([&] {
    n = session->impl->wait(out, max, timeout_ms);
    return RC_OK;
  });
  return st == RC_OK ? n : st;
}

rc_status rc_wake(rc_session* session) {
  if (session == nullptr) return null_argument("session");
  session->impl->wake();
  return RC_OK;
}

uint32_t rc_session_outstanding(const rc_session* session) {
  return session == nullptr ? 0 : session->impl->outstanding();
}

rc_status rc_session_close(rc_session* session) {
  if (session == nullptr) return null_argument("session");
  return guarded([&] {
    session->impl->close();
    {
      std::lock_guard<std::mutex> lock(session->cache->sessions_mutex);
      session->cache->sessions.erase(session);
    }
    delete session;
    return RC_OK;
  });
}

rc_status rc_capability_mint(const uint8_t* key, size_t key_length, uint64_t cache_id, const char* server_id,
                             uint32_t regions, uint64_t expires_unix_ms, char* out_text, size_t out_capacity) {
  return mint_capability(key, key_length, cache_id, server_id, regions, expires_unix_ms, 0, out_text, out_capacity);
}

rc_status rc_capability_mint_migration(const uint8_t* key, size_t key_length, uint64_t cache_id, const char* server_id,
                                       uint64_t expires_unix_ms, char* out_text, size_t out_capacity) {
  // Regions 0: the capability admits its holder to a cache that exists, never to new regions.
  return mint_capability(key, key_length, cache_id, server_id, 0, expires_unix_ms,
                         rc::wire::kCapabilityRightMigrationSource, out_text, out_capacity);
}

rc_status rc_server_start(const rc_server_options* options, rc_server** out_server) {
  if (out_server == nullptr) return null_argument("out_server");
  *out_server = nullptr;
  if (options == nullptr) return null_argument("options");
  if (options->listen == nullptr && options->listen_count > 0) return null_argument("listen");
  return guarded([&] {
    rc::server::ServerOptions o;
    for (size_t i = 0; i < options->listen_count; ++i) {
      if (options->listen[i] == nullptr) return null_argument("a listen endpoint");
      o.listen.emplace_back(options->listen[i]);
    }
    if (options->region_size != 0) o.region_size = options->region_size;
    if (options->memory_limit != 0) o.memory_limit = options->memory_limit;
    o.max_threads = options->max_threads;
    if (options->max_connections != 0) o.max_connections = options->max_connections;
    if (options->max_connections_per_peer != 0) o.max_connections_per_peer = options->max_connections_per_peer;
    if (options->shm_socket_mode != 0) o.shm_socket_mode = options->shm_socket_mode;
    if (options->admission_key != nullptr)
      o.admission_key.assign(options->admission_key, options->admission_key + options->admission_key_length);
    else if (options->admission_key_length != 0)
      return null_argument("admission_key");
    if (options->server_id != nullptr) o.server_id = options->server_id;
    if (options->allowed_uids == nullptr && options->allowed_uid_count > 0) return null_argument("allowed_uids");
    for (size_t i = 0; i < options->allowed_uid_count; ++i) o.allowed_uids.push_back(options->allowed_uids[i]);
    if (options->commit_memory > 1)
      return rc::fail(RC_E_INVALID_ARGUMENT, "rc_server_options.commit_memory is 0 or 1, not " + std::to_string(options->commit_memory));
    o.commit_memory = options->commit_memory == 1;
    rc_status st = RC_OK;
    auto impl = rc::server::Server::start(o, st);
    if (!impl) return st;
    auto handle = std::make_unique<rc_server>();
    handle->impl = std::move(impl);
    *out_server = handle.release();
    return RC_OK;
  });
}

const char* rc_server_id(const rc_server* server) {
  return server == nullptr ? nullptr : server->impl->server_id().c_str();
}

const char* rc_server_endpoint(const rc_server* server, size_t index) {
  if (server == nullptr || index >= server->impl->endpoints().size()) return nullptr;
  return server->impl->endpoints()[index].c_str();
}

uint64_t rc_server_memory_in_use(const rc_server* server) {
  return server == nullptr ? 0 : server->impl->memory_in_use();
}

uint64_t rc_server_memory_committed(const rc_server* server) {
  return server == nullptr ? 0 : server->impl->memory_committed();
}

uint64_t rc_server_memory_limit(const rc_server* server) {
  return server == nullptr ? 0 : server->impl->memory_limit();
}

rc_status rc_server_set_memory_limit(rc_server* server, uint64_t bytes) {
  if (server == nullptr) return null_argument("server");
  return guarded([&] {
    server->impl->set_memory_limit(bytes);
    return RC_OK;
  });
}

rc_status rc_server_drop_cache(rc_server* server, uint64_t cache_id, size_t* dropped) {
  if (server == nullptr) return null_argument("server");
  return guarded([&] {
    const std::size_t n = server->impl->drop_cache(cache_id);
    if (dropped != nullptr) *dropped = n;
    return RC_OK;
  });
}

rc_status rc_server_stop(rc_server* server) {
  if (server == nullptr) return null_argument("server");
  return guarded([&] {
    delete server;
    return RC_OK;
  });
}

rc_status rc_get_object_counts(rc_object_counts* out) {
  if (out == nullptr) return null_argument("out");
  using rc::api::ObjectKind;
  out->caches = rc::api::live_objects(ObjectKind::cache);
  out->sessions = rc::api::live_objects(ObjectKind::session);
  out->servers = rc::api::live_objects(ObjectKind::server);
  return RC_OK;
}

}  // extern "C"
