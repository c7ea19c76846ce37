#include "client/seal.h"

#include <openssl/crypto.h>

#include <cstring>
#include <stdexcept>

#include "common/crypto.h"

namespace rc::client::seal {
namespace {

constexpr uint32_t kReservedOffset = kNonceBytes + kTagBytes;
// The key check's plaintext: this magic (format 1), then the block size (little-endian), then zeros.
constexpr uint8_t kKeyCheckMagic[8] = {'R', 'C', 'S', 'E', 'A', 'L', 1, 0};

void store_le64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

EVP_CIPHER_CTX* keyed_context(std::span<const uint8_t, kKeyBytes> key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) throw std::runtime_error("libcrypto could not allocate an AES-GCM context");
  // The key schedule is set once; each block then sets only its nonce.
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1 || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1) {
    EVP_CIPHER_CTX_free(ctx);
    throw std::runtime_error("libcrypto could not set up AES-256-GCM");
  }
  return ctx;
}

}  // namespace

NonceSource::NonceSource() { draw_prefix(); }

void NonceSource::draw_prefix() {
  uint8_t bytes[8];
  rc::crypto::random_bytes(bytes);
  std::memcpy(&prefix_, bytes, sizeof prefix_);
  counter_ = 0;
}

void NonceSource::next(uint8_t out[kNonceBytes]) {
  store_le64(out, prefix_);
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<uint8_t>(counter_ >> (8 * i));
  if (++counter_ == 0) draw_prefix();
}

Sealer::Sealer(std::span<const uint8_t, kKeyBytes> key, uint64_t cache_id, uint32_t block)
    : cache_id_(cache_id), block_(block) {
  if (!Layout::valid_block(block)) throw std::invalid_argument("the sealed block size is not a power of two in [512, 65536]");
  enc_ = keyed_context(key, true);
  try {
    dec_ = keyed_context(key, false);
  } catch (...) {
    EVP_CIPHER_CTX_free(enc_);
    throw;
  }
}

Sealer::~Sealer() {
  EVP_CIPHER_CTX_free(enc_);  // clears the key schedule
  EVP_CIPHER_CTX_free(dec_);
}

void Sealer::associated_data(uint64_t index, uint8_t out[16]) const {
  store_le64(out, cache_id_);
  store_le64(out + 8, index);
}

void Sealer::seal(uint64_t index, const std::byte* plain, std::byte* out) {
  auto* trailer = reinterpret_cast<uint8_t*>(out) + block_;
  nonces_.next(trailer);
  uint8_t aad[16];
  associated_data(index, aad);
  int len = 0;
  int tail = 0;
  if (EVP_EncryptInit_ex(enc_, nullptr, nullptr, nullptr, trailer) != 1 ||
      EVP_EncryptUpdate(enc_, nullptr, &len, aad, sizeof aad) != 1 ||
      EVP_EncryptUpdate(enc_, reinterpret_cast<uint8_t*>(out), &len, reinterpret_cast<const uint8_t*>(plain),
                        static_cast<int>(block_)) != 1 ||
      EVP_EncryptFinal_ex(enc_, reinterpret_cast<uint8_t*>(out) + len, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(enc_, EVP_CTRL_GCM_GET_TAG, kTagBytes, trailer + kNonceBytes) != 1)
    // Encryption with a key that was set up cannot fail short of memory corruption: nothing to hand back.
    throw std::runtime_error("AES-256-GCM sealing failed in libcrypto");
  std::memset(trailer + kReservedOffset, 0, kTrailerBytes - kReservedOffset);
}

bool Sealer::open(uint64_t index, const std::byte* sealed, std::byte* plain) {
  const auto* trailer = reinterpret_cast<const uint8_t*>(sealed) + block_;
  bool ok = true;
  for (uint32_t i = kReservedOffset; i < kTrailerBytes; ++i) ok &= trailer[i] == 0;
  uint8_t aad[16];
  associated_data(index, aad);
  uint8_t tag[kTagBytes];
  std::memcpy(tag, trailer + kNonceBytes, kTagBytes);
  int len = 0;
  int tail = 0;
  ok = ok && EVP_DecryptInit_ex(dec_, nullptr, nullptr, nullptr, trailer) == 1 &&
       EVP_DecryptUpdate(dec_, nullptr, &len, aad, sizeof aad) == 1 &&
       EVP_DecryptUpdate(dec_, reinterpret_cast<uint8_t*>(plain), &len, reinterpret_cast<const uint8_t*>(sealed),
                         static_cast<int>(block_)) == 1 &&
       EVP_CIPHER_CTX_ctrl(dec_, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1 &&
       EVP_DecryptFinal_ex(dec_, reinterpret_cast<uint8_t*>(plain) + len, &tail) == 1;
  if (!ok) OPENSSL_cleanse(plain, block_);
  return ok;
}

uint64_t Sealer::pin(const std::byte* sealed) const {
  uint64_t v = 0;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(sealed) + block_ + kNonceBytes, sizeof v);
  return v | 1;
}

void seal_key_check(Sealer& checker, uint32_t block, std::byte* out) {
  std::byte plain[kMinBlock] = {};
  std::memcpy(plain, kKeyCheckMagic, sizeof kKeyCheckMagic);
  for (int i = 0; i < 4; ++i) plain[sizeof kKeyCheckMagic + i] = static_cast<std::byte>(block >> (8 * i));
  checker.seal(kKeyCheckIndex, plain, out);
}

namespace {

enum class Copy { Zero, Invalid, Valid };

// One copy of the key check: all zeros, not a check under this key, or one (its block size in `block`).
Copy open_copy(Sealer& checker, const std::byte* in, uint32_t& block) {
  bool zeros = true;
  for (uint32_t i = 0; i < kKeyCheckBytes; ++i) zeros &= in[i] == std::byte{0};
  if (zeros) return Copy::Zero;
  std::byte plain[kMinBlock];
  if (!checker.open(kKeyCheckIndex, in, plain) || std::memcmp(plain, kKeyCheckMagic, sizeof kKeyCheckMagic) != 0)
    return Copy::Invalid;
  block = 0;
  for (int i = 0; i < 4; ++i) block |= std::to_integer<uint32_t>(plain[sizeof kKeyCheckMagic + i]) << (8 * i);
  return Copy::Valid;
}

}  // namespace

KeyCheck open_key_check(Sealer& checker, uint32_t block, const std::byte* in) {
  static_assert(kKeyCheckCopies == 2);
  uint32_t blocks[2] = {};
  const Copy first = open_copy(checker, in, blocks[0]);
  const Copy second = open_copy(checker, in + kKeyCheckBytes, blocks[1]);
  if (first == Copy::Valid || second == Copy::Valid) {
    const int whole = first == Copy::Valid ? 0 : 1;
    const uint32_t theirs = blocks[whole];
    if (theirs != block) return {KeyCheck::OtherBlockSize, theirs};
    const bool other_holds_it = (whole == 0 ? second : first) == Copy::Valid && blocks[1 - whole] == theirs;
    return {KeyCheck::Matches, theirs, other_holds_it ? -1 : whole};
  }
  // Zeros after zeros or after a torn first copy: a fresh cache, or a first writer killed before it finished.
  if (second == Copy::Zero) return {KeyCheck::Fresh, block};
  return {KeyCheck::WrongKey};
}

}  // namespace rc::client::seal
