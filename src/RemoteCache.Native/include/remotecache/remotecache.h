/*
 * remotecache.h — the whole public API of libremotecache.
 *
 * A cache is a flat byte-addressable space [0, capacity) lent by one or more cache servers.
 * Applications read and write it asynchronously through sessions; completions are collected
 * by polling a per-session completion ring (no callbacks into the caller), so bindings such as
 * .NET need neither reverse P/Invoke nor an allocation per operation.
 *
 * Ownership and threading rules
 *  - Every function returns an rc_status (or a count where said). No C++ exception crosses
 *    this header. On failure, rc_last_error() returns text for the calling thread.
 *  - rc_cache_* and rc_server_* functions are thread-safe.
 *  - A session belongs to one thread at a time: rc_read, rc_write, rc_flush, rc_poll, rc_wait
 *    and rc_session_close on one session must not run concurrently (rc_wake is the exception).
 *    Use one session per application thread; requests of a session keep program order.
 *  - Buffers passed to rc_read / rc_write must stay valid and untouched until the operation's
 *    completion has been returned by rc_poll / rc_wait.
 *  - Close every session before closing its cache. Handles are invalid after close.
 *
 * Endpoints are strings: "tcp:HOST:PORT" or "shm:PATH" (PATH is a Unix socket path; a leading
 * '@' selects the abstract namespace). A server started with port 0 reports the port it bound.
 */
#ifndef REMOTECACHE_REMOTECACHE_H
#define REMOTECACHE_REMOTECACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RC_API __attribute__((visibility("default")))
#else
#define RC_API
#endif

/* The version of this header. A binding built against one version must not drive a library built
 * from another (struct layouts, limits and semantics may differ): it compares rc_api_version() of
 * the library it loaded with the RC_API_VERSION it was built against and refuses a mismatch. */
#define RC_API_VERSION 14 /* 4: admin interface (remotecache_admin.h); 5: rc_cache_grow/shrink; 6: commit_memory; 7: region pull (rc_capability_mint_migration, rc_admin_pull_region); 8: rc_server_memory_committed; 9: several regions per migration_begin and pull; 10: rc_cache_map_region_ahead; 11: rc_admin_extend_lease; 12: rc_cache_holder_status; 13: rc_server_memory_limit, rc_server_set_memory_limit, rc_server_drop_cache; 14: sealed caches (rc_cache_options.seal_key, seal_block_size; RC_E_INTEGRITY) */

/* Limits and defaults of the API, defined here once (bindings take them from this header). */
#define RC_MAX_TOKEN_BYTES 64            /* rc_cache_options.token, UTF-8 bytes */
#define RC_MAX_REGIONS_PER_SERVER 250    /* rc_cache_options.regions_per_server */
#define RC_MAX_ENDPOINTS 1024            /* servers of one cache */
#define RC_MAX_CLIENT_THREADS 64         /* rc_config.client_threads */
#define RC_MAX_SERVER_THREADS 256        /* rc_config.server_threads */
#define RC_MAX_BATCH_SIZE 256            /* rc_config.batch_size */
#define RC_MAX_QUEUE_DEPTH 64            /* rc_config.queue_depth */
#define RC_MAX_CAPABILITY_TEXT 256       /* a capability's text form, NUL included */
#define RC_MAX_SERVER_ID_BYTES 64        /* a server id (rc_server_options.server_id, capabilities), NUL excluded */
#define RC_DEFAULT_SESSION_CAPACITY 1024 /* rc_cache_options.session_capacity = 0 */
#define RC_DEFAULT_OP_TIMEOUT_MS 10000
#define RC_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define RC_DEFAULT_REGION_SIZE 1073741824ull  /* 1 GiB */
#define RC_DEFAULT_MEMORY_LIMIT 4294967296ull /* 4 GiB */
#define RC_DEFAULT_MAX_CONNECTIONS 1024
#define RC_DEFAULT_MAX_CONNECTIONS_PER_PEER 256
#define RC_DEFAULT_SHM_SOCKET_MODE 0600
#define RC_MIN_ADMISSION_KEY_BYTES 32
#define RC_MAX_SESSION_CAPACITY 65536    /* rc_cache_options.session_capacity */
#define RC_SEAL_KEY_BYTES 32             /* rc_cache_options.seal_key: an AES-256 key */
#define RC_DEFAULT_SEAL_BLOCK 4096       /* rc_cache_options.seal_block_size = 0 */
#define RC_MIN_SEAL_BLOCK 512            /* seal_block_size: a power of two in [RC_MIN_SEAL_BLOCK, RC_MAX_SEAL_BLOCK] */
#define RC_MAX_SEAL_BLOCK 65536
#define RC_SEAL_TRAILER_BYTES 32         /* stored after each sealed block: its nonce, tag and 4 reserved bytes */
#define RC_SEAL_KEY_CHECK_BYTES 1088     /* a sealed cache's key check at address 0: 2 x (RC_MIN_SEAL_BLOCK + trailer) */

/* rc_cache_options.flags */
#define RC_OPEN_EXCLUSIVE 1u /* the cache's first client becomes its only client */

/* Status codes. Zero is success; errors are negative and stable (bindings map them). */
typedef enum rc_status {
  RC_OK = 0,
  RC_E_INVALID_ARGUMENT = -1, /* a null handle, a bad option, a malformed endpoint */
  RC_E_OUT_OF_RANGE = -2,     /* [address, address + length) leaves the cache */
  RC_E_DISCONNECTED = -3,     /* the server holding the range is gone */
  RC_E_AUTH = -4,             /* the server refused the capability (or a uid on an abstract shm socket) */
  RC_E_NO_MEMORY = -5,        /* the server cannot lend that much memory */
  RC_E_BUSY = -6,             /* the session has session_capacity operations outstanding: poll, retry */
  RC_E_TIMEOUT = -7,          /* an operation or connect exceeded its deadline */
  RC_E_PROTOCOL = -8,         /* the peer sent something that does not parse */
  RC_E_CLOSED = -9,           /* the handle is being closed */
  RC_E_UNSUPPORTED = -10,     /* the transport or option is not available here */
  RC_E_INTERNAL = -11,        /* a bug or a system-call failure; see rc_last_error */
  RC_E_EXPIRED = -12,         /* the cache's lease ended, or its manager dropped it: the server freed it and its data */
  RC_E_IN_USE = -13,          /* the cache is open exclusively by another client */
  RC_E_LIMIT = -14,           /* a server limit (connections in all or from this peer) is reached */
  RC_E_INTEGRITY = -15        /* a sealed block did not authenticate (altered, moved, replayed, never written, or
                                 another key's): the client's own verdict, never a server's */
} rc_status;

/* The data-path configuration (Redy §5): chosen at open, changeable at run time. */
typedef struct rc_config {
  uint32_t client_threads; /* c: client threads, 0..RC_MAX_CLIENT_THREADS; 0 = the application thread */
  uint32_t server_threads; /* s: server threads polling this cache's connections; 0 = one-sided only */
  uint32_t batch_size;     /* b: requests per batch, 1..RC_MAX_BATCH_SIZE (a batch is also capped at 4 KiB) */
  uint32_t queue_depth;    /* q: messages in flight per connection, 1..RC_MAX_QUEUE_DEPTH */
} rc_config;

/* A cache on a server is named by (cache_id, token): clients that give the same id and the same
 * token share one cache; a different token names a different cache, so a wrong token and a cache
 * that does not exist get the same answer (a new, empty cache). With no token (NULL or "") the
 * library makes a random one, so such a cache is never shared with another rc_cache. */
typedef struct rc_cache_options {
  uint64_t cache_id;           /* names the cache on its servers, together with the token */
  const char* token;           /* shared secret, at most RC_MAX_TOKEN_BYTES; NULL or "" = random */
  uint32_t regions_per_server; /* regions requested from each server (region size is the server's) */
  rc_config config;
  uint32_t session_capacity;   /* operations outstanding per session, at most RC_MAX_SESSION_CAPACITY; 0 = default */
  uint32_t op_timeout_ms;      /* an operation older than this fails with RC_E_TIMEOUT; 0 = default */
  uint32_t connect_timeout_ms; /* 0 = RC_DEFAULT_CONNECT_TIMEOUT_MS */
  uint32_t flags;              /* RC_OPEN_EXCLUSIVE: no other client may open this cache (RC_E_IN_USE) */
  /* NULL, or one capability (text form, see rc_capability_mint) per endpoint, in endpoint order:
   * required by servers started with an admission key, ignored by open servers. */
  const char* const* capabilities;
  /* NULL, or RC_SEAL_KEY_BYTES bytes: a sealed cache. The address space is cut into blocks of seal_block_size
   * bytes, each encrypted and authenticated (AES-256-GCM) in this process before it leaves and checked when it
   * comes back, bound to its cache id and place. The servers' first RC_SEAL_KEY_CHECK_BYTES hold a key check,
   * read at open: a cache sealed under another key is refused (RC_E_INTEGRITY), one sealed in other blocks too
   * (RC_E_INVALID_ARGUMENT), and a fresh one (zeros) gets the check. With S = seal_block_size +
   * RC_SEAL_TRAILER_BYTES and H = ceil(RC_SEAL_KEY_CHECK_BYTES / S), block i is stored at (i + H) * S;
   * rc_cache_capacity counts the whole blocks. Writes cover whole blocks (RC_E_INVALID_ARGUMENT otherwise); a read
   * whose blocks do not authenticate completes with RC_E_INTEGRITY and zeros in its buffer. With
   * RC_OPEN_EXCLUSIVE the client also remembers what it wrote last to each block, so an older version put back is
   * detected. The key is copied at open; it never reaches a server. */
  const uint8_t* seal_key;
  uint32_t seal_block_size; /* 0 = RC_DEFAULT_SEAL_BLOCK */
  uint32_t reserved;        /* 0 */
} rc_cache_options;

/* A completed operation. status is an rc_status. */
typedef struct rc_completion {
  uint64_t tag;   /* the caller's tag given at rc_read / rc_write */
  int32_t status;
  uint32_t reserved;
} rc_completion;

typedef struct rc_cache rc_cache;
typedef struct rc_session rc_session;
typedef struct rc_server rc_server;

/* RC_API_VERSION of the header the library was built from (see RC_API_VERSION). */
RC_API uint32_t rc_api_version(void);

/* Text of the last error on the calling thread; valid until the next call on that thread. */
RC_API const char* rc_last_error(void);
/* Stable name of a status code ("RC_E_OUT_OF_RANGE", ...). */
RC_API const char* rc_status_name(int32_t status);

/* ---- cache ---------------------------------------------------------------------------- */

/* Connects to every endpoint and maps [0, capacity) onto their regions in endpoint order. */
RC_API rc_status rc_cache_open(const char* const* endpoints, size_t endpoint_count,
                               const rc_cache_options* options, rc_cache** out_cache);
RC_API uint64_t rc_cache_capacity(const rc_cache* cache);
RC_API rc_status rc_cache_get_config(const rc_cache* cache, rc_config* out_config);
/* Applies a new (c, s, b, q). Operations already submitted complete in order and no data is lost;
 * sessions move to the new client threads at their next submission. */
RC_API rc_status rc_cache_reconfigure(rc_cache* cache, const rc_config* config);
/* Presents new capabilities, one per holder in holder order (rc_cache_holder_count; without migrations
 * the holders are the endpoints, in endpoint order; NULL for a holder let go), e.g. after the manager
 * renewed the lease: each server extends the cache's lease to the new expiry, and later connections
 * present them. On failure the cache keeps working under its old lease. */
RC_API rc_status rc_cache_renew(rc_cache* cache, const char* const* capabilities);
/* Appends servers to the cache (Redy §3.3's grow): each is connected with the cache's id, token and
 * regions_per_server, and their regions extend the address space past the current capacity, in
 * the order given. capabilities: one per new endpoint when the cache was opened with capabilities,
 * NULL when it was not. All or nothing: on failure the cache is as it was and the new servers free
 * what they set aside. Sessions see the new capacity at their next submission; I/O in flight is
 * not disturbed. */
RC_API rc_status rc_cache_grow(rc_cache* cache, const char* const* endpoints, size_t endpoint_count,
                               const char* const* capabilities);
/* Keeps the first server_count servers (1..rc_cache_server_count) and cuts the address space after
 * their regions: from each session's next submission on, I/O past the new capacity fails with
 * RC_E_OUT_OF_RANGE. Operations already in flight to the dropped servers complete (or fail if their
 * server drops the cache first). A server's share is freed once no session uses it, in open mode;
 * with an admission key it lives until its lease ends or the manager drops it (docs/architecture.md,
 * "Life cycle"). */
RC_API rc_status rc_cache_shrink(rc_cache* cache, size_t server_count);
/* The servers whose shares make up the address space now, as rc_cache_grow and rc_cache_shrink count
 * them (0 for a null handle). A share is the regions_per_server regions a server lent when it joined,
 * wherever migrations have moved them since. */
RC_API size_t rc_cache_server_count(const rc_cache* cache);
/* Fails with RC_E_INVALID_ARGUMENT while sessions are open, and changes nothing: the cache stays
 * open and usable, and rc_last_error() names the sessions still open (their handle addresses). */
RC_API rc_status rc_cache_close(rc_cache* cache);

/* ---- migration (Redy §6.2) -------------------------------------------------------------- */

/* A region of the address space is region_size bytes at address region * region_size (regions of one
 * cache share a size when its servers do). It lives on one "holder": a server the cache is connected
 * to. Holders are numbered in the order they joined (the servers of rc_cache_open, then of
 * rc_cache_grow and rc_cache_add_holder); a holder left with no region is let go (its connections close;
 * its server frees its share then in open mode, or when its lease ends or the manager drops it with an
 * admission key) but keeps its number, unless it was the last.
 *
 * Moving region r from its holder to another server, as the manager drives it:
 *  1. rc_cache_add_holder(target): connect the target, which lends regions of its own to this cache;
 *  2. rc_cache_migration_begin(r, 1): from now on writes to r wait in their sessions (as do requests that
 *     follow a waiting one and touch r); reads of r still go to the source. Returns once no request sent
 *     before can still change r on the source;
 *  3. the target copies r from the source (rc_admin_pull_region on the target, remotecache_admin.h);
 *  4. rc_cache_migration_commit(r, target, its region): r lives on the target from now on; waiting
 *     requests go there in order, at their session's next submission or poll. Or
 *     rc_cache_migration_abort(r): r stays where it was and waiting requests go there.
 * Other regions are not touched at any step. A request that waits longer than op_timeout_ms fails
 * with RC_E_TIMEOUT. After a server failed, the same steps without the copy place its regions on a new
 * server (their content is then gone: the region reads as zeros). */

typedef struct rc_region_info {
  uint32_t holder;        /* the holder it lives on */
  uint32_t holder_region; /* its index among the regions that holder lent this cache */
  uint64_t size;          /* bytes */
  uint32_t moving;        /* 1 between rc_cache_migration_begin and commit or abort */
  uint32_t reserved;
} rc_region_info;

/* Regions of the address space now. */
RC_API size_t rc_cache_region_count(const rc_cache* cache);
RC_API rc_status rc_cache_region_info(const rc_cache* cache, uint32_t region, rc_region_info* out_info);
/* Holders, let-go ones included. */
RC_API size_t rc_cache_holder_count(const rc_cache* cache);
/* The endpoint of a holder as given when it joined (NUL-terminated into out, which holds out_capacity bytes). */
RC_API rc_status rc_cache_holder_endpoint(const rc_cache* cache, uint32_t holder, char* out, size_t out_capacity);
/* Whether a holder's server is still there: RC_OK while it is connected; once it is gone, the status it
 * went with (RC_E_DISCONNECTED, or the refusal of the notice it closed with); RC_E_CLOSED for a holder
 * let go. One non-blocking probe of the holder's control connection: cheap enough to call every second.
 * A server that is unreachable without having closed its connections (a partition) still reads RC_OK:
 * its operations time out. */
RC_API rc_status rc_cache_holder_status(rc_cache* cache, uint32_t holder);
/* Connects a server that lends `regions` regions to this cache (created empty there) but holds none of
 * its address space until a commit places one on it. capability: required when the cache was opened
 * with capabilities, NULL when it was not. */
RC_API rc_status rc_cache_add_holder(rc_cache* cache, const char* endpoint, const char* capability, uint32_t regions,
                                     uint32_t* out_holder);
/* rc_cache_migration_begin flags */
#define RC_MIGRATION_PAUSE_READS 1u /* reads of the region wait too (no "unpaused reads": for comparisons) */

/* Starts moving regions [region, region + count) together (see above): one wait for the requests
 * already sent covers them all, so that a cache of many small regions moves them in batches; each is
 * committed or aborted on its own. count >= 1; none of them may be moving already. timeout_ms bounds
 * the wait (0 = op_timeout_ms); on RC_E_TIMEOUT none of them is moving any more and rc_last_error()
 * says how many sessions held requests back (a session that stops polling keeps its partly filled
 * batches). */
RC_API rc_status rc_cache_migration_begin(rc_cache* cache, uint32_t region, uint32_t count, uint32_t flags,
                                          uint32_t timeout_ms);
/* Places a moving region on region holder_region of holder (same size, not holding another region). */
RC_API rc_status rc_cache_migration_commit(rc_cache* cache, uint32_t region, uint32_t holder, uint32_t holder_region);
/* Maps region holder_region of holder into this process now, for all its sessions: shm maps the
 * region's pages in one pass (~0.1 s per GiB on a small VM), so that the requests after the commit do
 * not fault them in one by one on the data path; tcp and verbs map nothing and return at once. A mover
 * calls it for the target's region while the target copies it (it blocks the calling thread only, not
 * the sessions). Pages the target does not have yet are allocated here, as the first write would. */
RC_API rc_status rc_cache_map_region_ahead(rc_cache* cache, uint32_t holder, uint32_t holder_region);
/* Ends a migration with the region where it was. */
RC_API rc_status rc_cache_migration_abort(rc_cache* cache, uint32_t region);
/* Lets go of a holder that holds no region (the target of an aborted migration). */
RC_API rc_status rc_cache_remove_holder(rc_cache* cache, uint32_t holder);

/* ---- sessions ------------------------------------------------------------------------- */

RC_API rc_status rc_session_open(rc_cache* cache, rc_session** out_session);
/* Starts a read of [address, address + length) into dst. RC_OK means submitted: the result comes
 * as a completion with the same tag. A synchronous error means nothing was submitted. */
RC_API rc_status rc_read(rc_session* session, uint64_t address, void* dst, uint64_t length, uint64_t tag);
RC_API rc_status rc_write(rc_session* session, uint64_t address, const void* src, uint64_t length,
                          uint64_t tag);
/* Sends a partly filled batch now instead of waiting for it to fill. */
RC_API rc_status rc_flush(rc_session* session);
/* Copies up to max finished completions into out; returns how many (>= 0) or a negative rc_status.
 * Flushes partly filled batches first. Never blocks. */
RC_API int32_t rc_poll(rc_session* session, rc_completion* out, uint32_t max);
/* Like rc_poll but waits up to timeout_ms (-1 = no limit) for at least one completion. Returns 0
 * on timeout, when nothing is outstanding, or when rc_wake was called. */
RC_API int32_t rc_wait(rc_session* session, rc_completion* out, uint32_t max, int32_t timeout_ms);
/* Makes a concurrent or the next rc_wait on this session return (with what it has, possibly 0).
 * The one session function that may be called from any thread, at any time while it is open:
 * bindings use it to take a session back from a thread blocked in rc_wait. */
RC_API rc_status rc_wake(rc_session* session);
/* Operations submitted and not yet returned by rc_poll / rc_wait. */
RC_API uint32_t rc_session_outstanding(const rc_session* session);
/* Waits for outstanding operations (discarding their completions), then frees the session. */
RC_API rc_status rc_session_close(rc_session* session);

/* ---- capabilities ---------------------------------------------------------------------- */

/* Mints a capability: admission of cache_id on the server named server_id with at most `regions`
 * regions, until expires_unix_ms (wall clock, ms since 1970), signed with HMAC-SHA256 under `key`
 * (the server's admission key, at least RC_MIN_ADMISSION_KEY_BYTES). Writes its NUL-terminated text
 * form (at most RC_MAX_CAPABILITY_TEXT bytes) to out_text. The cache manager mints these; the
 * remotecache-capability command does the same for operators and tests. */
RC_API rc_status rc_capability_mint(const uint8_t* key, size_t key_length, uint64_t cache_id,
                                    const char* server_id, uint32_t regions, uint64_t expires_unix_ms,
                                    char* out_text, size_t out_capacity);

/* Mints a migration capability (Redy §6.2): it lets its holder — a target server pulling a region,
 * to which the manager hands it with rc_admin_pull_region — open the live cache with cache_id on the
 * server named server_id READ-ONLY, without the cache's token, until expires_unix_ms. Mint it with
 * that (the source) server's admission key. It grants no regions of its own and admits no client: a
 * server refuses it in an ordinary Connect (RC_E_AUTH), and refuses an ordinary capability where a
 * migration one is needed. Text form and sizes as for rc_capability_mint. */
RC_API rc_status rc_capability_mint_migration(const uint8_t* key, size_t key_length, uint64_t cache_id,
                                              const char* server_id, uint64_t expires_unix_ms, char* out_text,
                                              size_t out_capacity);

/* ---- embedded server (tests, single-host use) ------------------------------------------ */

typedef struct rc_server_options {
  const char* const* listen; /* endpoints to listen on */
  size_t listen_count;
  uint64_t region_size;      /* bytes per region; 0 = RC_DEFAULT_REGION_SIZE */
  uint64_t memory_limit;     /* bytes the server may lend in all; 0 = RC_DEFAULT_MEMORY_LIMIT */
  uint32_t max_threads;      /* server threads at most; 0 = hardware threads */
  uint32_t max_connections;          /* established connections in all; 0 = default */
  uint32_t max_connections_per_peer; /* from one peer (tcp/verbs: IP address, shm: uid); 0 = default */
  uint32_t shm_socket_mode;          /* permission bits of shm socket files; 0 = RC_DEFAULT_SHM_SOCKET_MODE */
  /* Admission key: NULL = open mode (any client that reaches the server is admitted). Otherwise a
   * Connect needs a capability signed with this key (RC_E_AUTH without one). */
  const uint8_t* admission_key;
  size_t admission_key_length;
  const char* server_id;             /* the identity capabilities name (at most RC_MAX_SERVER_ID_BYTES);
                                        NULL = the first endpoint as bound */
  const uint32_t* allowed_uids;      /* abstract shm endpoints admit these uids besides the server's own */
  size_t allowed_uid_count;
  /* 1: a low-priority thread keeps spare regions whose pages are already allocated, within
   * memory_limit and leaving an eighth of the host's memory available; new caches take them first,
   * so that writes into a new cache (a fill, a FASTER log) run at the transport's rate instead of
   * faulting in and zeroing every page. An idle server then holds that memory. 0: a cache's pages
   * are taken as they are first written. */
  uint32_t commit_memory;
} rc_server_options;

RC_API rc_status rc_server_start(const rc_server_options* options, rc_server** out_server);
/* The identity capabilities for this server must name. */
RC_API const char* rc_server_id(const rc_server* server);
/* The i-th listening endpoint as bound (a port of 0 resolved); NULL past the end. */
RC_API const char* rc_server_endpoint(const rc_server* server, size_t index);
/* Bytes currently lent to caches. */
RC_API uint64_t rc_server_memory_in_use(const rc_server* server);
/* Bytes committed ahead for new caches and not lent yet (commit_memory's spare regions; 0 without it). */
RC_API uint64_t rc_server_memory_committed(const rc_server* server);
/* Bytes the server may lend (memory_limit, or what rc_server_set_memory_limit set last). */
RC_API uint64_t rc_server_memory_limit(const rc_server* server);
/* Lends at most `bytes` from now on (its host wants memory back, or has more to spare): a cache that
 * would not fit is refused with RC_E_NO_MEMORY; caches already lent keep their memory (drop one to give
 * it back), spare regions beyond the limit (commit_memory) are freed now. 0 takes no new cache. */
RC_API rc_status rc_server_set_memory_limit(rc_server* server, uint64_t bytes);
/* Drops every cache with this id, as its host needs the memory: its connections get a last Notice
 * (RC_E_EXPIRED, naming the host) and close, and its memory is freed as they do (at once when none is
 * connected). Sets *dropped (may be NULL) to how many caches had the id. */
RC_API rc_status rc_server_drop_cache(rc_server* server, uint64_t cache_id, size_t* dropped);
/* Closes every connection (clients see RC_E_DISCONNECTED) and frees the server. */
RC_API rc_status rc_server_stop(rc_server* server);

/* ---- diagnostics ----------------------------------------------------------------------- */

/* Native objects of this library alive in this process: counted when an open / start succeeds,
 * uncounted when rc_cache_close / rc_session_close / rc_server_stop frees the object. Bindings'
 * tests use it to check that every handle they created was released. */
typedef struct rc_object_counts {
  uint64_t caches;
  uint64_t sessions;
  uint64_t servers;
} rc_object_counts;

RC_API rc_status rc_get_object_counts(rc_object_counts* out);

#ifdef __cplusplus
}
#endif

#endif /* REMOTECACHE_REMOTECACHE_H */
