// Sealing of an encrypted cache's blocks (docs/encryption.md). The address space a client sees is cut into blocks of
// `block` bytes; each is stored as its AES-256-GCM ciphertext followed by a 32-byte trailer: the 12-byte nonce, the
// 16-byte tag and 4 reserved bytes (zero). The servers' first strides hold the key check (below); the blocks follow. The associated data is the cache id and the block's index, so a block
// copied to another place or another cache fails its check, and the tag pins one sealing: a client that remembers
// the tag of what it last wrote (PinTable) also detects an older version put back. Keys stay in this process.
#pragma once

#include <openssl/evp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include <remotecache/remotecache.h>

namespace rc::client::seal {

constexpr uint32_t kKeyBytes = RC_SEAL_KEY_BYTES;
constexpr uint32_t kNonceBytes = 12;
constexpr uint32_t kTagBytes = 16;
constexpr uint32_t kTrailerBytes = RC_SEAL_TRAILER_BYTES;  // nonce, tag, reserved bytes
static_assert(kTrailerBytes >= kNonceBytes + kTagBytes);
constexpr uint32_t kMinBlock = RC_MIN_SEAL_BLOCK;
constexpr uint32_t kMaxBlock = RC_MAX_SEAL_BLOCK;
constexpr uint64_t kKeyCheckIndex = UINT64_MAX;
constexpr uint32_t kKeyCheckBytes = kMinBlock + kTrailerBytes;  // one copy of the key check (below)
constexpr uint32_t kKeyCheckCopies = 2;
static_assert(kKeyCheckCopies * kKeyCheckBytes == RC_SEAL_KEY_CHECK_BYTES);

// Where the blocks of a client address range live in the servers' (physical) address space.
struct Layout {
  uint32_t block = 0;  // plaintext bytes per block: a power of two in [kMinBlock, kMaxBlock]

  static bool valid_block(uint32_t bytes) { return bytes >= kMinBlock && bytes <= kMaxBlock && (bytes & (bytes - 1)) == 0; }
  uint64_t stride() const { return uint64_t{block} + kTrailerBytes; }
  // Strides before block 0: the key check's copies.
  uint64_t header_strides() const { return (uint64_t{RC_SEAL_KEY_CHECK_BYTES} + stride() - 1) / stride(); }
  // The client's capacity in a physical space of `physical` bytes: whole blocks after the key check's strides.
  uint64_t capacity(uint64_t physical) const {
    const uint64_t strides = physical / stride();
    return strides > header_strides() ? (strides - header_strides()) * block : 0;
  }
  // Where block `index` starts in the servers' space.
  uint64_t physical(uint64_t index) const { return (index + header_strides()) * stride(); }
  uint64_t first_block(uint64_t address) const { return address / block; }
  // Blocks that [address, address + length) touches (length > 0).
  uint64_t block_count(uint64_t address, uint64_t length) const {
    return (address + length - 1) / block - address / block + 1;
  }
  bool aligned(uint64_t address, uint64_t length) const { return address % block == 0 && length % block == 0; }
};

// 96-bit nonces that never repeat under one key in practice: a random 64-bit prefix drawn by each source and a
// 32-bit counter after it; a fresh prefix every 2^32 nonces. Two sources collide only if two of their prefixes do
// (about P^2 / 2^65 for P prefixes drawn in the key's life).
class NonceSource {
 public:
  NonceSource();
  void next(uint8_t out[kNonceBytes]);
  // For tests: the counter's next value (a prefix is drawn when it wraps to 0).
  void set_counter_for_test(uint32_t next) { counter_ = next; }
  uint64_t prefix() const { return prefix_; }

 private:
  void draw_prefix();
  uint64_t prefix_ = 0;
  uint32_t counter_ = 0;
};

// Seals and opens blocks of one cache under one key. One per thread at a time (it holds OpenSSL contexts);
// construction throws std::runtime_error when libcrypto cannot set the key up.
class Sealer {
 public:
  Sealer(std::span<const uint8_t, kKeyBytes> key, uint64_t cache_id, uint32_t block);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  uint32_t block() const { return block_; }
  // Seals block `index` from `plain` (block bytes) into `out` (block + kTrailerBytes bytes).
  void seal(uint64_t index, const std::byte* plain, std::byte* out);
  // Opens block `index` from `sealed` into `plain`. False when it does not authenticate (altered, moved, from
  // another cache or key, never written): `plain` is then zeroed, so none of it can be used by mistake.
  bool open(uint64_t index, const std::byte* sealed, std::byte* plain);
  // What PinTable remembers of a sealed block: 8 bytes of its tag, never 0.
  uint64_t pin(const std::byte* sealed) const;

 private:
  void associated_data(uint64_t index, uint8_t out[16]) const;

  EVP_CIPHER_CTX* enc_ = nullptr;
  EVP_CIPHER_CTX* dec_ = nullptr;
  uint64_t cache_id_;
  uint32_t block_;
  NonceSource nonces_;
};

// The key check: a block of kMinBlock bytes sealed as index kKeyCheckIndex (no data block has it) over a plaintext
// naming the format and the cache's block size, stored twice at the start of the servers' space. It lets a client
// with another key, or another block size, be refused at open instead of failing every read; all zeros (memory never
// written) is a fresh cache, whose first client writes the check: the first copy, then the second, so that a client
// killed while writing leaves a torn first copy and a zero second one, which reads as fresh again (a torn second
// copy beside a whole first one is repaired).
struct KeyCheck {
  enum Verdict { Fresh, Matches, WrongKey, OtherBlockSize };
  Verdict verdict;
  uint32_t block = 0;     // Matches, OtherBlockSize: the cache's
  int repair_from = -1;   // Matches: the copy to write over the other, which does not hold it; -1: none
};

// `checker`: a Sealer for the key with blocks of kMinBlock. Seals one copy of the check of a cache with blocks of
// `block` bytes into out[kKeyCheckBytes].
void seal_key_check(Sealer& checker, uint32_t block, std::byte* out);
// What the two copies read from the servers (kKeyCheckCopies * kKeyCheckBytes at `in`) say to a client with
// `checker`'s key and blocks of `block`.
KeyCheck open_key_check(Sealer& checker, uint32_t block, const std::byte* in);

// What this client last wrote to each block, so that a block read back with another sealing — an older version
// put back, or a foreign one — is detected. Only for a cache with one client (RC_OPEN_EXCLUSIVE): another client's
// writes change blocks legitimately. A block's pin is set when a write of it completes; while a write of it is in
// flight, a read may see either version, so its pin is not checked then (its authentication still is). A write
// that failed leaves the block unpinned (either version may be there). Blocks past the table (after a grow) are not
// pinned. One word per block — the writes in flight in its low half, 32 bits of the pin above — so that a read's
// check costs one cache miss; an older version passes with odds of 2^-32, and each try the host makes fails a read.
class PinTable {
 public:
  explicit PinTable(uint64_t blocks) : blocks_(blocks), words_(std::make_unique<std::atomic<uint64_t>[]>(blocks)) {}

  void write_started(uint64_t block) {
    if (block < blocks_) words_[block].fetch_add(1, std::memory_order_acq_rel);
  }
  // `pin`: the written sealing's (Sealer::pin), or 0 when the write failed.
  void write_finished(uint64_t block, uint64_t pin) {
    if (block >= blocks_) return;
    const uint64_t pinned = pin_bits(pin);
    uint64_t word = words_[block].load(std::memory_order_acquire);
    while (!words_[block].compare_exchange_weak(word, pinned | ((word & kWritingMask) - 1), std::memory_order_acq_rel)) {
    }
  }
  // False when the block is pinned, no write of it is in flight, and `pin` is not its pin.
  bool matches(uint64_t block, uint64_t pin) const {
    if (block >= blocks_) return true;
    const uint64_t word = words_[block].load(std::memory_order_acquire);
    return (word & kWritingMask) != 0 || (word & ~kWritingMask) == 0 || (word & ~kWritingMask) == pin_bits(pin);
  }

 private:
  // Writes of one block in flight at once: fewer than 2^32 (each holds a session slot and its buffer).
  static constexpr int kWritingBits = 32;
  static constexpr uint64_t kWritingMask = (uint64_t{1} << kWritingBits) - 1;
  // A pin's bits in the word; never 0 for a pin (Sealer::pin sets its low bit), 0 for none.
  static uint64_t pin_bits(uint64_t pin) { return pin == 0 ? 0 : (pin | (uint64_t{1} << kWritingBits)) & ~kWritingMask; }

  uint64_t blocks_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace rc::client::seal
