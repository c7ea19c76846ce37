// The wire format shared by every transport's message path (tcp frames, shm and verbs message
// rings). Little-endian, fixed-width, versioned. A frame is a FrameHeader followed by `count`
// entries. A request entry is followed by its write payload; a response entry by its read
// payload; payloads are padded to 8 bytes so that entries stay aligned.
//
// Size rules: a batch holds at most kMaxBatchEntries entries and, unless it holds a single entry,
// at most kBatchBytes of request bytes and of response bytes (Redy §5: transfers stop paying off
// beyond 4 KiB). One entry moves at most kMaxChunk bytes; the client splits larger requests.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <remotecache/remotecache.h>
#include <remotecache/remotecache_admin.h>

namespace rc::wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

inline constexpr uint32_t kMagic = 0x31424352;  // "RCB1"
// 2: Connect carries flags, a client id and a capability; the server may send a Notice.
inline constexpr uint8_t kVersion = 2;
inline constexpr uint32_t kBatchBytes = 4096;
inline constexpr uint32_t kMaxChunk = 32 * 1024;
inline constexpr uint32_t kMaxBatchEntries = RC_MAX_BATCH_SIZE;
inline constexpr uint32_t kTokenMax = RC_MAX_TOKEN_BYTES;

// Notice: the server's last frame on a connection it closes on purpose (a lease ended, a cache
// dropped, an admin request refused), so that the client can report why instead of a bare
// disconnection.
//
// Admin*: the admin interface (remotecache_admin.h, docs/admin.md). A connection whose first frame
// is an AdminHello instead of a Connect is an admin connection: the server answers with an
// AdminChallenge, then each AdminRequest with an AdminReply. These kinds never appear on a data
// connection, so the data path's frames and its version (kVersion) are unchanged; a server that
// predates them closes a connection whose first frame is not a Connect.
enum class Kind : uint8_t {
  Connect = 1,
  ConnectReply = 2,
  Batch = 3,
  Response = 4,
  Notice = 5,
  AdminHello = 6,
  AdminChallenge = 7,
  AdminRequest = 8,
  AdminReply = 9,
};

enum class Op : uint8_t {
  Read = 1,
  Write = 2,
  SetServerThreads = 3,  // offset = new s for this connection's cache; no payload
};

// Response flag: every entry succeeded and none was a read, so the entries are omitted.
inline constexpr uint16_t kFlagAllOk = 1;

struct FrameHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t kind;
  uint16_t flags;
  uint32_t bytes;  // the whole frame, header included
  uint32_t count;  // entries
  uint64_t seq;    // connection-scoped, starts at 1, +1 per batch; a response echoes its batch's
};
static_assert(sizeof(FrameHeader) == 24);

struct RequestEntry {
  uint8_t op;
  uint8_t flags;
  uint16_t region;  // index into the regions granted to this connection
  uint32_t length;
  uint64_t offset;  // within the region
};
static_assert(sizeof(RequestEntry) == 16);

struct ResponseEntry {
  int32_t status;  // rc_status
  uint32_t length;
};
static_assert(sizeof(ResponseEntry) == 8);

// Largest frame either side may send: one entry of kMaxChunk, or a full small batch.
inline constexpr uint32_t kMaxFrame =
    sizeof(FrameHeader) + kMaxBatchEntries * sizeof(RequestEntry) + kMaxChunk + kBatchBytes;

constexpr uint32_t pad8(uint32_t n) { return (n + 7u) & ~7u; }

// Bytes an entry adds to a request frame and to its response frame.
constexpr uint32_t request_cost(Op op, uint32_t length) {
  return sizeof(RequestEntry) + (op == Op::Write ? pad8(length) : 0);
}
constexpr uint32_t response_cost(Op op, uint32_t length) {
  return sizeof(ResponseEntry) + (op == Op::Read ? pad8(length) : 0);
}

// A capability: the admission of one cache on one server, signed by the key the server shares with
// the cache manager. Versioned on its own, since the manager mints it and outlives wire changes.
//
// `rights` took a byte that was reserved (zero) in version 1, so every capability minted before it
// has rights 0: an ordinary admission. A server that predates rights reads a migration capability
// (regions 0) as an admission of no regions, which admits nothing.
struct Capability {
  uint32_t magic;    // kCapabilityMagic
  uint8_t version;   // kCapabilityVersion
  uint8_t rights;    // 0 (a client's admission) or one kCapabilityRight*; signed like the rest
  uint8_t reserved[2];
  uint64_t cache_id;
  uint64_t expires_unix_ms;  // wall clock; the cache's lease ends here
  uint32_t regions;          // regions this cache may hold on the server
  uint32_t server_id_length;
  char server_id[RC_MAX_SERVER_ID_BYTES];  // the server's identity (rc_server_id)
  uint8_t nonce[16];         // makes every minted capability distinct
  uint8_t mac[32];           // HMAC-SHA256 over every byte before it
};
static_assert(sizeof(Capability) == 144);
inline constexpr uint32_t kCapabilityMagic = 0x31434352;  // "RCC1"
inline constexpr uint8_t kCapabilityVersion = 1;
inline constexpr std::size_t kCapabilitySigned = offsetof(Capability, mac);
// Lets a server pulling a region (Redy §6.2) open the live cache with the capability's id READ-ONLY,
// without its token, through a kConnectMigrationSource Connect; it grants no regions of its own and
// admits nothing else, and an ordinary capability never admits such a Connect.
inline constexpr uint8_t kCapabilityRightMigrationSource = 1;

// Connect flags.
inline constexpr uint32_t kConnectExclusive = 1;  // RC_OPEN_EXCLUSIVE
// The connecting party is a server pulling a region of the live cache with this id (an admin
// PullRegion on the target): the Connect carries a capability with kCapabilityRightMigrationSource,
// no token and regions 0, and is granted every region of that cache, read-only. It never creates a
// cache and is nobody's client (exclusivity and sharing ignore it).
inline constexpr uint32_t kConnectMigrationSource = 2;

// Connect: the first frame on a connection (payload of a Kind::Connect frame).
struct ConnectRequest {
  uint64_t cache_id;
  uint32_t regions;         // regions this cache wants on this server
  uint32_t server_threads;  // s
  uint32_t token_length;
  uint32_t flags;           // kConnect*
  uint8_t client_id[16];    // random per rc_cache: tells one client's connections from another's
  char token[kTokenMax];
  uint32_t capability_length;  // 0 or sizeof(Capability)
  uint32_t reserved;
  Capability capability;
};
static_assert(sizeof(ConnectRequest) == 256);

// Payload of a Kind::Notice frame.
struct Notice {
  int32_t status;  // rc_status
  uint32_t reserved;
  char message[96];
};
static_assert(sizeof(Notice) == 104);

// Describes one granted region to the client. For shm, key is the index of its fd in the
// reply's ancillary data; for verbs it is the rkey and addr the registered address.
struct RegionDescriptor {
  uint64_t addr;
  uint64_t key;
};

// ConnectReply flags.
// The regions are granted read-only (a migration source): shm passes read-only fds, which the client
// must map PROT_READ; verbs registers them for remote reads only; the executor refuses writes.
inline constexpr uint32_t kReplyReadOnly = 1;

struct ConnectReply {
  int32_t status;  // rc_status
  uint32_t region_count;
  uint64_t region_size;
  uint32_t max_frame;
  uint32_t flags;  // kReply*; was reserved (zero) before kReplyReadOnly, so older servers send none
  char message[96];  // why, when status is an error
  // followed by region_count RegionDescriptors
};
static_assert(sizeof(ConnectReply) == 120);

// ---- admin frames -------------------------------------------------------------------------------
//
// AdminHello and AdminChallenge are plain frames (header + payload). AdminRequest and AdminReply are
// sealed: header + payload + a kAdminMacBytes HMAC-SHA256 over the header and payload under the
// session key (HMAC-SHA256 of the admission key over kAdminKeyLabel, the server's nonce and the
// client's nonce). In both, `flags` holds the AdminOp, `count` is 0, and `seq` numbers the requests
// of the connection from 1 (a reply carries its request's). The server refuses a request that is not
// exactly the next one with a valid MAC by sending a Notice and closing the connection.
//
// Request payloads: AdminRequest for every op but PullRegion, whose payload is an AdminPullRequest.
// Reply payloads, by op: none (Ping), AdminStats, AdminListHead + entries, AdminDropResult,
// AdminPullResult, AdminExtendResult. A pull that fails (no such cache, a dead source, a refused capability...) is not a
// protocol fault: its reply carries the status and the reason, and the connection goes on.

inline constexpr uint32_t kAdminVersion = 1;  // of the admin exchange, apart from kVersion
inline constexpr std::size_t kAdminServerNonceBytes = 32;
inline constexpr std::size_t kAdminClientNonceBytes = 16;
inline constexpr std::size_t kAdminMacBytes = 32;
inline constexpr char kAdminKeyLabel[] = "remotecache admin v1";  // its NUL excluded from the MAC
// Caches per ListCaches reply; the client pages through longer lists.
inline constexpr uint32_t kAdminListPage = 512;

enum class AdminOp : uint16_t {
  Ping = 1,        // no payload either way: proves both ends hold the key (rc_admin_connect)
  Stats = 2,       // reply: AdminStats
  ListCaches = 3,  // request: AdminRequest.after / max_count; reply: AdminListHead + entries
  DropCache = 4,   // request: AdminRequest.cache_id; reply: AdminDropResult
  // request: AdminPullRequest; reply: AdminPullResult. The server (the migration target) connects to
  // the source endpoint as a migration source (kConnectMigrationSource) and copies one region of the
  // source's cache into one of its own cache with the same id, within the request's deadline.
  PullRegion = 5,
  // request: AdminRequest.cache_id / lease_end_unix_ms; reply: AdminExtendResult. Moves the lease end
  // of the live caches with this id later (never earlier), so that the manager can keep a cache
  // nobody is connected to (registry.h) for as long as it has promised. A server older than this op
  // refuses it as unknown (a protocol fault that closes the connection), which the client reports.
  ExtendLease = 6,
};

struct AdminHello {
  uint32_t admin_version;  // kAdminVersion
  uint32_t reserved;
  uint8_t nonce[kAdminClientNonceBytes];  // binds the server's replies to this connection
};
static_assert(sizeof(AdminHello) == 24);

struct AdminChallenge {
  int32_t status;  // RC_OK, or why the server refuses (open mode, a limit, a bad hello); it then closes
  uint32_t admin_version;
  uint8_t nonce[kAdminServerNonceBytes];
  char message[96];  // why, when status is an error
};
static_assert(sizeof(AdminChallenge) == 136);

// Payload of every AdminRequest but a PullRegion's (the fields its op does not use are 0).
struct AdminRequest {
  uint64_t cache_id;  // DropCache, ExtendLease
  // The second word means what the op says: two names for one field, so that ExtendLease fit the
  // version-1 layout (a server that does not know the op never reads it as a cursor).
  union {
    uint64_t after;              // ListCaches: the serial of the last cache of the previous page; 0 = from the start
    uint64_t lease_end_unix_ms;  // ExtendLease: the new lease end, ms since 1970, at most RC_MAX_LEASE_AHEAD_MS ahead
  };
  uint32_t max_count;  // ListCaches: caches wanted, at most kAdminListPage
  uint32_t reserved;
};
static_assert(sizeof(AdminRequest) == 24);

struct AdminStats {
  uint64_t memory_limit;
  uint64_t memory_lent;
  uint64_t region_size;
  uint64_t uptime_ms;
  uint32_t caches;
  uint32_t regions_lent;
  uint32_t data_connections;
  uint32_t admin_connections;
  uint32_t server_threads;
  uint32_t server_id_length;
  char server_id[RC_MAX_SERVER_ID_BYTES];
};
static_assert(sizeof(AdminStats) == 120);

struct AdminListHead {
  uint32_t count;  // entries that follow
  uint32_t more;   // caches after the last entry (in serial order) not in this reply
};
static_assert(sizeof(AdminListHead) == 8);

inline constexpr uint32_t kAdminCacheExclusive = 1;  // AdminCacheEntry.flags

struct AdminCacheEntry {
  uint64_t cache_id;
  uint64_t serial;  // creation order on this server, from 1: the cursor of the next page
  uint64_t lease_end_unix_ms;
  uint32_t regions;
  uint32_t connections;
  uint32_t server_threads;
  uint32_t flags;  // kAdminCache*
};
static_assert(sizeof(AdminCacheEntry) == 40);

struct AdminDropResult {
  uint32_t dropped;
  uint32_t reserved;
};
static_assert(sizeof(AdminDropResult) == 8);

struct AdminExtendResult {
  int32_t status;    // RC_OK, or why the server refused the lease end (RC_E_INVALID_ARGUMENT: too far ahead)
  uint32_t caches;   // live caches with the id, whose lease now ends no earlier than the one asked for
  char message[96];  // why, when status is an error
};
static_assert(sizeof(AdminExtendResult) == 104);

// A PullRegion's source endpoint: text, NUL-padded, with at least one NUL.
inline constexpr std::size_t kAdminEndpointBytes = RC_MAX_PULL_ENDPOINT_BYTES + 1;

// Payload of a PullRegion request.
struct AdminPullRequest {
  uint64_t cache_id;       // the one live cache with this id on the target, and on the source
  uint32_t target_region;  // index within the target's cache
  uint32_t source_region;  // index within the source's cache
  uint32_t timeout_ms;     // bounds the whole pull; 0 = RC_DEFAULT_PULL_TIMEOUT_MS
  uint32_t max_mib_per_s;  // paces the copy; 0 = unpaced
  uint32_t regions;        // consecutive regions from source_region / target_region on; 0 = 1
  uint32_t reserved;       // 0
  char source_endpoint[kAdminEndpointBytes];
  Capability source_capability;  // kCapabilityRightMigrationSource, minted with the source's key
};
static_assert(sizeof(AdminPullRequest) == 304);

struct AdminPullResult {
  int32_t status;       // RC_OK, or why the pull failed (the region may then be partly written)
  uint32_t one_sided;   // 1: the copy used one-sided reads; 0: batched reads on the message path
  uint64_t bytes;       // copied
  uint64_t elapsed_ns;  // from the request's arrival to its reply
  char message[256];    // what failed and on which server, when status is an error (it quotes the source's reason)
};
static_assert(sizeof(AdminPullResult) == 280);

// The largest admin frame: a full ListCaches reply. It fits the data path's frame limit, so tcp's
// FrameReader carries admin frames too.
inline constexpr uint32_t kMaxAdminFrame = sizeof(FrameHeader) + sizeof(AdminListHead) +
                                           kAdminListPage * sizeof(AdminCacheEntry) + kAdminMacBytes;
static_assert(kMaxAdminFrame <= kMaxFrame);
static_assert(sizeof(FrameHeader) + sizeof(AdminPullRequest) + kAdminMacBytes <= kMaxAdminFrame);

inline FrameHeader read_header(const std::byte* p) {
  FrameHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

// Structural check of a frame header against the bytes that carry it.
inline bool header_ok(const FrameHeader& h, Kind kind, std::size_t available) {
  return h.magic == kMagic && h.version == kVersion && h.kind == static_cast<uint8_t>(kind) &&
         h.bytes >= sizeof(FrameHeader) && h.bytes <= kMaxFrame && h.bytes <= available;
}

// Appends request entries to a caller-owned buffer of at least kMaxFrame bytes.
class BatchWriter {
 public:
  explicit BatchWriter(std::byte* buffer) : buf_(buffer) { reset(); }

  void reset() {
    used_ = sizeof(FrameHeader);
    count_ = 0;
    response_bytes_ = sizeof(FrameHeader);
  }
  uint32_t count() const { return count_; }
  uint32_t bytes() const { return used_; }
  uint32_t response_bytes() const { return response_bytes_; }

  // Whether an entry fits under the batch rules (a lone entry always fits).
  bool fits(Op op, uint32_t length, uint32_t max_entries) const {
    if (count_ == 0) return true;
    if (count_ >= max_entries || count_ >= kMaxBatchEntries) return false;
    return used_ + request_cost(op, length) <= sizeof(FrameHeader) + kBatchBytes &&
           response_bytes_ + response_cost(op, length) <= sizeof(FrameHeader) + kBatchBytes;
  }

  void add(Op op, uint16_t region, uint64_t offset, uint32_t length, const void* payload) {
    RequestEntry e{static_cast<uint8_t>(op), 0, region, length, offset};
    std::memcpy(buf_ + used_, &e, sizeof e);
    used_ += sizeof e;
    if (op == Op::Write) {
      std::memcpy(buf_ + used_, payload, length);
      const uint32_t padded = pad8(length);
      if (padded != length) std::memset(buf_ + used_ + length, 0, padded - length);
      used_ += padded;
    }
    response_bytes_ += response_cost(op, length);
    ++count_;
  }

  // Writes the header; the frame is buffer[0, bytes()).
  std::span<const std::byte> finish(uint64_t seq) {
    FrameHeader h{kMagic, kVersion, static_cast<uint8_t>(Kind::Batch), 0, used_, count_, seq};
    std::memcpy(buf_, &h, sizeof h);
    return {buf_, used_};
  }

 private:
  std::byte* buf_;
  uint32_t used_ = 0;
  uint32_t count_ = 0;
  uint32_t response_bytes_ = 0;
};

}  // namespace rc::wire
