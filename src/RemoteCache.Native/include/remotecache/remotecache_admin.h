/*
 * remotecache_admin.h — the admin interface of a cache server, apart from remotecache.h's data path.
 *
 * The cache manager (or an operator, with the remotecache-admin command) connects to one of a
 * server's endpoints, proves that it holds the server's admission key, and asks the server what it
 * holds (rc_admin_stats, rc_admin_list_caches), tells it to drop caches (rc_admin_drop_cache) or
 * to keep them longer (rc_admin_extend_lease), or to pull a region of a cache from another server
 * (rc_admin_pull_region, for live migration).
 * Servers never call the manager; this is how the manager probes and commands them.
 *
 * Security (docs/admin.md). The admission key never travels: the server sends a random nonce, both
 * ends derive a session key from the admission key and both nonces, and every request and every
 * reply carries an HMAC-SHA256 under it over a per-connection sequence number and the frame, so a
 * recorded exchange can be neither replayed (on this connection or another) nor altered, and a
 * client with the wrong key learns nothing but RC_E_AUTH. A server started without an admission key
 * (open mode) refuses every admin connection with RC_E_AUTH: nobody could authenticate. A server
 * holds at most RC_MAX_ADMIN_CONNECTIONS admin connections, apart from its data connections; when
 * they are all taken, a new one displaces the oldest that has not authenticated yet, or is refused
 * with RC_E_LIMIT.
 *
 * Endpoints are the data path's: "tcp:HOST:PORT" or "shm:PATH" (the same listeners serve both).
 * verbs endpoints carry no admin connections (RC_E_UNSUPPORTED): use the server's tcp or shm one.
 *
 * Rules
 *  - Every function returns an rc_status; on failure rc_last_error() says why, for the calling thread.
 *  - Every call is bounded by the timeout given at rc_admin_connect: a dead or silent server makes it
 *    fail with RC_E_TIMEOUT or RC_E_DISCONNECTED, never hang. After a timeout or a reply that does
 *    not verify, the connection's state is unknown: later calls on the handle fail at once with
 *    RC_E_DISCONNECTED. Close it and connect again.
 *  - An rc_admin is internally locked: calls on one handle from several threads run one at a time
 *    (one request is in flight per connection). rc_admin_close must not race with other calls on
 *    the handle, and the handle is invalid after it.
 */
#ifndef REMOTECACHE_REMOTECACHE_ADMIN_H
#define REMOTECACHE_REMOTECACHE_ADMIN_H

#include <remotecache/remotecache.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RC_MAX_ADMIN_CONNECTIONS 4       /* admin connections a server holds at once, apart from data ones */
#define RC_DEFAULT_ADMIN_TIMEOUT_MS 5000 /* rc_admin_connect timeout_ms = 0 */
#define RC_DEFAULT_PULL_TIMEOUT_MS 60000 /* rc_pull_request.timeout_ms = 0 */
#define RC_MAX_PULL_ENDPOINT_BYTES 127   /* rc_pull_request.source_endpoint, NUL excluded */
/* rc_admin_extend_lease: how far past the server's clock a lease end may be (30 days), so that a
 * bad clock or a garbled value cannot pin a cache's memory for good. */
#define RC_MAX_LEASE_AHEAD_MS 2592000000ull

typedef struct rc_admin rc_admin;

/* What a server holds, as one snapshot. Set `size` to sizeof(rc_server_stats) before the call:
 * fields are only ever added at the end, a library fills the first `size` bytes it knows and sets
 * `size` to how many it filled, and refuses (RC_E_INVALID_ARGUMENT) a size below its first version. */
typedef struct rc_server_stats {
  uint32_t size;
  uint32_t server_threads;    /* server threads polling connections (the server's --threads) */
  uint64_t memory_limit;      /* bytes the server may lend in all */
  uint64_t memory_lent;       /* bytes lent now: idle leased caches included, dropped ones until their connections close */
  uint64_t region_size;       /* bytes per region */
  uint64_t uptime_ms;         /* since the server started */
  uint32_t caches;            /* live caches, idle ones included (not those dropped or past their lease) */
  uint32_t regions_lent;      /* memory_lent / region_size */
  uint32_t data_connections;  /* established data-path connections */
  uint32_t admin_connections; /* admin connections, the caller's included */
  char server_id[RC_MAX_SERVER_ID_BYTES + 1]; /* the id capabilities name, NUL-terminated */
} rc_server_stats;

/* One cache a server holds. Caches are named by (cache id, token), so several may share an id. With
 * an admission key a cache lives until its lease ends or it is dropped, whoever is connected, so a
 * cache may be listed with 0 connections (remotecache.h, rc_cache_open). */
typedef struct rc_admin_cache {
  uint64_t cache_id;
  uint64_t lease_end_unix_ms; /* when the server drops it (ms since 1970); 0 = no lease (open mode) */
  uint32_t regions;           /* regions lent to it */
  uint32_t connections;       /* its data connections; 0 while nobody is connected to a leased cache */
  uint32_t server_threads;    /* its s */
  uint32_t exclusive;         /* 1 when opened with RC_OPEN_EXCLUSIVE, else 0 */
} rc_admin_cache;

/* Connects to a server's endpoint and authenticates with its admission key (key_length at least
 * RC_MIN_ADMISSION_KEY_BYTES; the key never travels). timeout_ms bounds this call and every later
 * one on the handle; 0 = RC_DEFAULT_ADMIN_TIMEOUT_MS. RC_E_AUTH: the key is not the server's, or the
 * server runs in open mode; RC_E_LIMIT: the server has RC_MAX_ADMIN_CONNECTIONS authenticated admin
 * connections; RC_E_TIMEOUT / RC_E_DISCONNECTED: no server answered in time. */
RC_API rc_status rc_admin_connect(const char* endpoint, const uint8_t* key, size_t key_length, uint32_t timeout_ms,
                                  rc_admin** out_admin);

/* The server's stats now (see rc_server_stats for `size`). */
RC_API rc_status rc_admin_stats(rc_admin* admin, rc_server_stats* out_stats);

/* Lists the caches the server holds, oldest first: sets *out_count to how many there are and writes
 * the first min(max, *out_count) of them to out (which may be NULL when max is 0). When *out_count
 * is larger than max, call again with room for more. Large lists are fetched in several requests;
 * caches created or dropped meanwhile may or may not appear. */
RC_API rc_status rc_admin_list_caches(rc_admin* admin, rc_admin_cache* out, uint32_t max, uint32_t* out_count);

/* Drops every cache with this id (what the manager does when it deallocates one): their connections
 * get a last Notice and close, so their clients' operations fail with RC_E_EXPIRED ("dropped by its
 * manager"), and their memory is freed once those connections are gone. *out_dropped: how many
 * caches were dropped (0 when the server holds none with this id). */
RC_API rc_status rc_admin_drop_cache(rc_admin* admin, uint64_t cache_id, uint32_t* out_dropped);

/* Extends the lease of every cache with this id to lease_end_unix_ms (ms since 1970), connected to
 * or not: the server keeps such a cache's memory until its lease ends, and a manager that renews a
 * lease tells the servers here (a client's rc_cache_renew only reaches them while it is connected).
 * A lease is only ever extended: a cache whose lease already ends later keeps it, and is counted.
 * *out_caches: how many caches have the id (0 when the server holds none: nothing is created).
 * RC_E_INVALID_ARGUMENT: lease_end_unix_ms is 0, or more than RC_MAX_LEASE_AHEAD_MS past this
 * machine's clock or the server's (which refuses it, naming its own clock). */
RC_API rc_status rc_admin_extend_lease(rc_admin* admin, uint64_t cache_id, uint64_t lease_end_unix_ms,
                                       uint32_t* out_caches);

/* A region pull (Redy §6.2): the server the handle is connected to (the target) copies regions of a
 * cache from another server (the source) into regions of its own cache with the same id. */
typedef struct rc_pull_request {
  uint64_t cache_id;             /* the one live cache with this id on each server */
  uint32_t target_region;        /* index of the region to overwrite, within the target's cache */
  uint32_t source_region;        /* index of the region to copy, within the source's cache */
  const char* source_endpoint;   /* a tcp:, shm: or verbs: endpoint of the source, at most
                                    RC_MAX_PULL_ENDPOINT_BYTES, as the TARGET reaches it */
  const char* source_capability; /* text form, from rc_capability_mint_migration with the source's key */
  uint32_t timeout_ms;           /* bounds the pull on the target; 0 = RC_DEFAULT_PULL_TIMEOUT_MS */
  uint32_t max_mib_per_s;        /* paces the copy to at most this many MiB/s, leaving memory bandwidth and
                                    CPU to the data path; 0 = as fast as the transport goes */
  uint32_t regions;              /* consecutive regions copied, from source_region into target_region on,
                                    over one connection to the source; 0 = 1 */
  uint32_t reserved;             /* 0 */
} rc_pull_request;

typedef struct rc_pull_result {
  uint64_t bytes;      /* bytes copied: the regions' size on success */
  uint64_t elapsed_ns; /* the pull's time on the target */
  uint32_t one_sided;  /* 1: one-sided reads (shm, verbs); 0: batched reads on the message path (tcp) */
  uint32_t reserved;
} rc_pull_result;

/* Pulls regions [source_region, + regions) of the source's cache into [target_region, + regions) of
 * the target's cache, one after another. The target connects to the source once, as a migration
 * source (read-only, authorized by the capability), checks that the regions have the same size, and
 * copies them straight into its own memory. Each
 * server must hold exactly one live cache with cache_id (RC_E_INVALID_ARGUMENT otherwise); a region
 * range past its cache is RC_E_OUT_OF_RANGE; a capability the source refuses is RC_E_AUTH; a source
 * that dies or falls silent fails the pull (RC_E_DISCONNECTED, RC_E_TIMEOUT) within timeout_ms. The
 * target regions' old content is overwritten as the copy goes, so after a failure they may hold part of
 * the source's (result.bytes says how far it got): keep writers away from it while it moves. rc_last_error() names what failed, on which
 * server. This call waits up to the pull's timeout_ms plus the handle's timeout; a pull that fails
 * leaves the handle usable, a reply that never comes breaks it (as for every call). *out_result may
 * be NULL. */
RC_API rc_status rc_admin_pull_region(rc_admin* admin, const rc_pull_request* request, rc_pull_result* out_result);

/* Closes the connection and frees the handle. */
RC_API rc_status rc_admin_close(rc_admin* admin);

#ifdef __cplusplus
}
#endif

#endif /* REMOTECACHE_REMOTECACHE_ADMIN_H */
