// Sealed blocks (client/seal.h): what a memory host can do to a stored block — alter any byte of it, move it to
// another place or cache, put back an older version, hand over another key's block or zeros — is detected, and
// nothing of a block that fails its check reaches the reader.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <set>
#include <vector>

#include "client/seal.h"

namespace {

using rc::client::seal::kKeyBytes;
using rc::client::seal::kNonceBytes;
using rc::client::seal::kTrailerBytes;
using rc::client::seal::Layout;
using rc::client::seal::NonceSource;
using rc::client::seal::PinTable;
using rc::client::seal::Sealer;
using rc::client::seal::kKeyCheckBytes;
using rc::client::seal::kKeyCheckCopies;
using rc::client::seal::KeyCheck;
using rc::client::seal::kMinBlock;
using rc::client::seal::open_key_check;
using rc::client::seal::seal_key_check;

constexpr uint64_t kCacheId = 0x5eed;

std::array<uint8_t, kKeyBytes> key(uint8_t fill) {
  std::array<uint8_t, kKeyBytes> k{};
  for (uint32_t i = 0; i < kKeyBytes; ++i) k[i] = static_cast<uint8_t>(fill + i * 7);
  return k;
}

std::vector<std::byte> pattern(uint32_t bytes, uint8_t seed) {
  std::vector<std::byte> v(bytes);
  for (uint32_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(seed * 31 + i * 13);
  return v;
}

class SealTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  uint32_t block() const { return GetParam(); }
  std::vector<std::byte> sealed(Sealer& s, uint64_t index, const std::vector<std::byte>& plain) {
    std::vector<std::byte> out(block() + kTrailerBytes);
    s.seal(index, plain.data(), out.data());
    return out;
  }
};

TEST_P(SealTest, ASealedBlockOpensToWhatWasSealedAndIsNotThePlaintext) {
  Sealer s(key(1), kCacheId, block());
  const auto plain = pattern(block(), 3);
  const auto stored = sealed(s, 42, plain);
  EXPECT_NE(0, std::memcmp(stored.data(), plain.data(), block())) << "the stored bytes are the plaintext";
  std::vector<std::byte> back(block());
  ASSERT_TRUE(s.open(42, stored.data(), back.data()));
  EXPECT_EQ(plain, back);
}

TEST_P(SealTest, EveryAlteredByteIsDetectedAndTheReaderGetsZeros) {
  Sealer s(key(1), kCacheId, block());
  const auto plain = pattern(block(), 5);
  const auto stored = sealed(s, 7, plain);
  // Every byte of the trailer, and bytes spread over the ciphertext (every one for the smallest block).
  const uint32_t step = block() <= 512 ? 1 : 61;
  std::vector<uint32_t> offsets;
  for (uint32_t i = 0; i < block(); i += step) offsets.push_back(i);
  for (uint32_t i = 0; i < kTrailerBytes; ++i) offsets.push_back(block() + i);
  for (uint32_t at : offsets) {
    auto bad = stored;
    bad[at] ^= std::byte{0x01};
    std::vector<std::byte> back(block(), std::byte{0x77});
    EXPECT_FALSE(s.open(7, bad.data(), back.data())) << "a flipped bit at byte " << at << " passed";
    EXPECT_EQ(std::vector<std::byte>(block()), back) << "bytes of a block that failed reached the reader (byte " << at << ")";
  }
}

TEST_P(SealTest, ABlockMovedToAnotherPlaceOrCacheOrUnderAnotherKeyFails) {
  Sealer s(key(1), kCacheId, block());
  const auto stored = sealed(s, 9, pattern(block(), 9));
  std::vector<std::byte> back(block());
  EXPECT_FALSE(s.open(10, stored.data(), back.data())) << "moved to the next block";
  EXPECT_FALSE(s.open(9 + (uint64_t{1} << 40), stored.data(), back.data())) << "moved far";
  Sealer other_cache(key(1), kCacheId + 1, block());
  EXPECT_FALSE(other_cache.open(9, stored.data(), back.data())) << "the same place of another cache";
  Sealer other_key(key(2), kCacheId, block());
  EXPECT_FALSE(other_key.open(9, stored.data(), back.data())) << "another key";
}

TEST_P(SealTest, ZerosNeverOpen) {
  Sealer s(key(1), kCacheId, block());
  const std::vector<std::byte> zeros(block() + kTrailerBytes);
  std::vector<std::byte> back(block());
  EXPECT_FALSE(s.open(0, zeros.data(), back.data()));
}

TEST_P(SealTest, AnOlderVersionPutBackOpensButDoesNotMatchItsPin) {
  Sealer s(key(1), kCacheId, block());
  PinTable pins(16);
  const auto v1 = sealed(s, 3, pattern(block(), 1));
  pins.write_started(3);
  pins.write_finished(3, s.pin(v1.data()));
  const auto v2 = sealed(s, 3, pattern(block(), 2));
  pins.write_started(3);
  EXPECT_TRUE(pins.matches(3, s.pin(v1.data()))) << "while a write is in flight either version may be read";
  pins.write_finished(3, s.pin(v2.data()));
  std::vector<std::byte> back(block());
  ASSERT_TRUE(s.open(3, v1.data(), back.data())) << "the old version is a valid sealing in itself";
  EXPECT_FALSE(pins.matches(3, s.pin(v1.data()))) << "the replayed version matched the pin of the newer one";
  EXPECT_TRUE(pins.matches(3, s.pin(v2.data())));
  EXPECT_TRUE(pins.matches(4, s.pin(v1.data()))) << "an unpinned block is not a mismatch";
  EXPECT_TRUE(pins.matches(100, s.pin(v1.data()))) << "a block past the table is not pinned";
  pins.write_started(3);
  pins.write_finished(3, 0);
  EXPECT_TRUE(pins.matches(3, s.pin(v1.data()))) << "after a failed write either version may be there";
}

TEST_P(SealTest, SealingTheSameBlockTwiceGivesDifferentBytes) {
  Sealer s(key(1), kCacheId, block());
  const auto plain = pattern(block(), 4);
  EXPECT_NE(sealed(s, 1, plain), sealed(s, 1, plain)) << "a nonce was reused";
}

INSTANTIATE_TEST_SUITE_P(Blocks, SealTest, ::testing::Values(512u, 4096u, 65536u));

TEST(NonceSource, NoncesDoNotRepeatAndANewPrefixIsDrawnWhenTheCounterWraps) {
  NonceSource n;
  std::set<std::array<uint8_t, kNonceBytes>> seen;
  std::array<uint8_t, kNonceBytes> nonce{};
  for (int i = 0; i < 10000; ++i) {
    n.next(nonce.data());
    EXPECT_TRUE(seen.insert(nonce).second) << "nonce " << i << " repeated";
  }
  const uint64_t before = n.prefix();
  n.set_counter_for_test(UINT32_MAX);
  n.next(nonce.data());
  EXPECT_TRUE(seen.insert(nonce).second);
  EXPECT_NE(before, n.prefix()) << "the counter wrapped without a new prefix";
  n.next(nonce.data());
  EXPECT_TRUE(seen.insert(nonce).second);
}

TEST(SealLayout, BlocksAndCapacity) {
  EXPECT_FALSE(Layout::valid_block(256));
  EXPECT_FALSE(Layout::valid_block(3000));
  EXPECT_FALSE(Layout::valid_block(128 * 1024));
  EXPECT_TRUE(Layout::valid_block(512));
  const Layout l{4096};
  EXPECT_EQ(4096u + kTrailerBytes, l.stride());
  EXPECT_EQ(0u, l.capacity(4096));
  EXPECT_EQ(1u, l.header_strides()) << "both copies of the key check fit a 4 KiB block's stride";
  EXPECT_EQ(0u, l.capacity(2 * l.stride() - 1)) << "the first stride is the key check's";
  EXPECT_EQ(4096u, l.capacity(2 * l.stride()));
  EXPECT_EQ(l.stride(), l.physical(0));
  EXPECT_EQ(3 * l.stride(), l.physical(2));
  const Layout small{512};
  EXPECT_EQ(2u, small.header_strides()) << "two copies of 544 bytes take two strides of 544";
  EXPECT_EQ(2 * small.stride(), small.physical(0));
  EXPECT_EQ(512u, small.capacity(3 * small.stride()));
  EXPECT_EQ(2u, l.block_count(4095, 2));
  EXPECT_EQ(1u, l.block_count(4096, 4096));
  EXPECT_TRUE(l.aligned(8192, 4096));
  EXPECT_FALSE(l.aligned(8192, 512));
}

// The two copies as the servers hold them after a whole write of the check by `sealer`.
std::vector<std::byte> both_copies(Sealer& sealer, uint32_t block) {
  std::vector<std::byte> check(kKeyCheckCopies * kKeyCheckBytes);
  seal_key_check(sealer, block, check.data());
  std::copy_n(check.begin(), kKeyCheckBytes, check.begin() + kKeyCheckBytes);
  return check;
}

TEST(SealKeyCheck, TellsAFreshCacheTheRightKeyAnotherKeyAndAnotherBlockSize) {
  Sealer mine(key(1), kCacheId, kMinBlock);
  Sealer theirs(key(2), kCacheId, kMinBlock);
  std::vector<std::byte> zeros(kKeyCheckCopies * kKeyCheckBytes);
  EXPECT_EQ(KeyCheck::Fresh, open_key_check(mine, 4096, zeros.data()).verdict);
  const auto check = both_copies(mine, 4096);
  const KeyCheck ok = open_key_check(mine, 4096, check.data());
  EXPECT_EQ(KeyCheck::Matches, ok.verdict);
  EXPECT_EQ(-1, ok.repair_from);
  EXPECT_EQ(KeyCheck::WrongKey, open_key_check(theirs, 4096, check.data()).verdict);
  const KeyCheck other = open_key_check(mine, 512, check.data());
  EXPECT_EQ(KeyCheck::OtherBlockSize, other.verdict);
  EXPECT_EQ(4096u, other.block);
  Sealer other_cache(key(1), kCacheId + 1, kMinBlock);
  EXPECT_EQ(KeyCheck::WrongKey, open_key_check(other_cache, 4096, check.data()).verdict) << "another cache's check";
}

// A first writer killed mid-check: a torn first copy and a zero second one is fresh again; a torn second copy beside
// a whole first one is the key's, to repair; one altered copy is repaired from the other; both altered: another key.
TEST(SealKeyCheck, ACheckTornByAKilledWriterIsFreshOrRepairedNeverStuck) {
  Sealer mine(key(1), kCacheId, kMinBlock);
  const auto check = both_copies(mine, 4096);
  auto torn_first = check;
  std::fill(torn_first.begin() + kKeyCheckBytes / 2, torn_first.end(), std::byte{0});
  EXPECT_EQ(KeyCheck::Fresh, open_key_check(mine, 4096, torn_first.data()).verdict);
  auto torn_second = check;
  std::fill(torn_second.begin() + kKeyCheckBytes + 100, torn_second.end(), std::byte{0});
  const KeyCheck repair = open_key_check(mine, 4096, torn_second.data());
  EXPECT_EQ(KeyCheck::Matches, repair.verdict);
  EXPECT_EQ(0, repair.repair_from);
  auto first_altered = check;
  first_altered[7] ^= std::byte{1};
  const KeyCheck from_second = open_key_check(mine, 4096, first_altered.data());
  EXPECT_EQ(KeyCheck::Matches, from_second.verdict);
  EXPECT_EQ(1, from_second.repair_from);
  auto both_altered = first_altered;
  both_altered[kKeyCheckBytes + kMinBlock + 1] ^= std::byte{1};
  EXPECT_EQ(KeyCheck::WrongKey, open_key_check(mine, 4096, both_altered.data()).verdict);
}

TEST(Sealer, RefusesABlockSizeItCannotUse) {
  EXPECT_THROW(Sealer(key(1), kCacheId, 1000), std::invalid_argument);
}

}  // namespace
