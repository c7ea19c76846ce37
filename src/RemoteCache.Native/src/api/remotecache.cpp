// The C boundary: argument checks, handle conversion, and a catch-all so that no C++ exception
// (std::bad_alloc, std::system_error from a failed syscall) ever crosses into the caller.
#include <remotecache/remotecache.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <cstring>

#include "client/cache.h"
#include "client/session.h"
#include "common/capability.h"
#include "common/status.h"
#include "server/server.h"

struct rc_cache {
  std::unique_ptr<rc::client::Cache> impl;
};
struct rc_session {
  rc::client::Session* impl;
  rc_cache* cache;
};
struct rc_server {
  std::unique_ptr<rc::server::Server> impl;
};

namespace {

template <typename Fn>
rc_status guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return rc::fail(RC_E_INTERNAL, "out of memory");
  } catch (const std::invalid_argument& e) {
    return rc::fail(RC_E_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return rc::fail(RC_E_INTERNAL, e.what());
  } catch (...) {
    return rc::fail(RC_E_INTERNAL, "unknown failure");
  }
}

rc_status null_argument(const char* what) {
  return rc::fail(RC_E_INVALID_ARGUMENT, std::string(what) + " is null");
}

}  // namespace

extern "C" {

const char* rc_last_error(void) { return rc::last_error(); }

const char* rc_status_name(int32_t status) { return rc::status_name(status); }

rc_status rc_cache_open(const char* const* endpoints, size_t endpoint_count, const rc_cache_options* options,
                        rc_cache** out_cache) {
  if (out_cache == nullptr) return null_argument("out_cache");
  *out_cache = nullptr;
  if (endpoints == nullptr) return null_argument("endpoints");
  if (options == nullptr) return null_argument("options");
  return guarded([&] {
    std::vector<std::string> list;
    for (size_t i = 0; i < endpoint_count; ++i) {
      if (endpoints[i] == nullptr) return null_argument("an endpoint");
      list.emplace_back(endpoints[i]);
    }
    rc_status st = RC_OK;
    auto impl = rc::client::Cache::open(list, *options, st);
    if (!impl) return st;
    *out_cache = new rc_cache{std::move(impl)};
    return RC_OK;
  });
}

uint64_t rc_cache_capacity(const rc_cache* cache) { return cache == nullptr ? 0 : cache->impl->capacity(); }

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

rc_status rc_cache_close(rc_cache* cache) {
  if (cache == nullptr) return null_argument("cache");
  if (cache->impl->sessions.load() != 0)
    return rc::fail(RC_E_INVALID_ARGUMENT, "close every session before closing its cache");
  return guarded([&] {
    delete cache;
    return RC_OK;
  });
}

rc_status rc_session_open(rc_cache* cache, rc_session** out_session) {
  if (out_session == nullptr) return null_argument("out_session");
  *out_session = nullptr;
  if (cache == nullptr) return null_argument("cache");
  return guarded([&] {
    auto session = std::make_unique<rc::client::Session>(*cache->impl, cache->impl->session_capacity());
    const rc_status st = session->open();
    if (st != RC_OK) return st;
    cache->impl->sessions.fetch_add(1);
    *out_session = new rc_session{session.release(), cache};
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
    session->cache->impl->sessions.fetch_sub(1);
    delete session->impl;
    delete session;
    return RC_OK;
  });
}

rc_status rc_capability_mint(const uint8_t* key, size_t key_length, uint64_t cache_id, const char* server_id,
                             uint32_t regions, uint64_t expires_unix_ms, char* out_text, size_t out_capacity) {
  if (key == nullptr) return null_argument("key");
  if (server_id == nullptr) return null_argument("server_id");
  if (out_text == nullptr) return null_argument("out_text");
  return guarded([&] {
    const std::string text =
        rc::capability::to_text(rc::capability::mint({key, key_length}, cache_id, server_id, regions, expires_unix_ms));
    if (text.size() + 1 > out_capacity)
      return rc::fail(RC_E_INVALID_ARGUMENT, "out_text needs " + std::to_string(text.size() + 1) + " bytes");
    std::memcpy(out_text, text.c_str(), text.size() + 1);
    return RC_OK;
  });
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
    rc_status st = RC_OK;
    auto impl = rc::server::Server::start(o, st);
    if (!impl) return st;
    *out_server = new rc_server{std::move(impl)};
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

rc_status rc_server_stop(rc_server* server) {
  if (server == nullptr) return null_argument("server");
  return guarded([&] {
    delete server;
    return RC_OK;
  });
}

}  // extern "C"
