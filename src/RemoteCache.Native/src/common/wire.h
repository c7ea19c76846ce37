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

namespace rc::wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

inline constexpr uint32_t kMagic = 0x31424352;  // "RCB1"
// 2: Connect carries flags, a client id and a capability; the server may send a Notice.
inline constexpr uint8_t kVersion = 2;
inline constexpr uint32_t kBatchBytes = 4096;
inline constexpr uint32_t kMaxChunk = 32 * 1024;
inline constexpr uint32_t kMaxBatchEntries = RC_MAX_BATCH_SIZE;
inline constexpr uint32_t kTokenMax = RC_MAX_TOKEN_BYTES;

// Notice: the server's last frame on a connection it closes on purpose (a lease ended), so that the
// client can report why instead of a bare disconnection.
enum class Kind : uint8_t { Connect = 1, ConnectReply = 2, Batch = 3, Response = 4, Notice = 5 };

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
struct Capability {
  uint32_t magic;    // kCapabilityMagic
  uint8_t version;   // kCapabilityVersion
  uint8_t reserved[3];
  uint64_t cache_id;
  uint64_t expires_unix_ms;  // wall clock; the cache's lease ends here
  uint32_t regions;          // regions this cache may hold on the server
  uint32_t server_id_length;
  char server_id[64];        // the server's identity (rc_server_id)
  uint8_t nonce[16];         // makes every minted capability distinct
  uint8_t mac[32];           // HMAC-SHA256 over every byte before it
};
static_assert(sizeof(Capability) == 144);
inline constexpr uint32_t kCapabilityMagic = 0x31434352;  // "RCC1"
inline constexpr uint8_t kCapabilityVersion = 1;
inline constexpr std::size_t kCapabilitySigned = offsetof(Capability, mac);

// Connect flags.
inline constexpr uint32_t kConnectExclusive = 1;  // RC_OPEN_EXCLUSIVE

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

struct ConnectReply {
  int32_t status;  // rc_status
  uint32_t region_count;
  uint64_t region_size;
  uint32_t max_frame;
  uint32_t reserved;
  char message[96];  // why, when status is an error
  // followed by region_count RegionDescriptors
};
static_assert(sizeof(ConnectReply) == 120);

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
