// fuzz-unseal: client::seal::Sealer, the check every block of an encrypted cache passes when it comes back from
// a memory host, on whatever the host hands back (grammar: fuzz_grammar.h). A block that does not authenticate
// must leave zeros; a sealed block must open to what was sealed, and no longer once any byte of it changed. A key
// check (its two copies) read back is never taken for one, and is fresh only when its second copy is zeros.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "client/seal.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"

using rc::client::seal::KeyCheck;
using rc::client::seal::kKeyBytes;
using rc::client::seal::kKeyCheckBytes;
using rc::client::seal::kKeyCheckCopies;
using rc::client::seal::kMinBlock;
using rc::client::seal::open_key_check;
using rc::client::seal::kTrailerBytes;
using rc::client::seal::Sealer;
using namespace rc::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Script in(data, size);
  const uint8_t mode = in.u8() % kUnsealModeCount;
  const uint32_t block = kUnsealBlocks[in.u8() % std::size(kUnsealBlocks)];
  const uint64_t index = in.u64();
  std::array<uint8_t, kKeyBytes> key{};
  key.fill(kUnsealKeyByte);
  Sealer sealer(key, kUnsealCacheId, block);
  const uint64_t stored_bytes = uint64_t{block} + kTrailerBytes;
  std::vector<std::byte> stored(stored_bytes), plain(block), back(block);

  if (mode == kUnsealOpen) {
    const auto raw = in.bytes(stored_bytes);
    std::memcpy(stored.data(), raw.data(), raw.size());
    std::memset(back.data(), 0x77, back.size());
    if (!sealer.open(index, stored.data(), back.data()))
      FUZZ_CHECK(std::all_of(back.begin(), back.end(), [](std::byte b) { return b == std::byte{0}; }));
    if (block == kMinBlock) {
      // The two copies of a key check: this block and the rest of the input. No input forges one; fresh means the
      // second copy is zeros.
      std::vector<std::byte> check(kKeyCheckCopies * kKeyCheckBytes);
      std::memcpy(check.data(), stored.data(), kKeyCheckBytes);
      const auto rest = in.bytes(kKeyCheckBytes);
      std::memcpy(check.data() + kKeyCheckBytes, rest.data(), rest.size());
      const KeyCheck verdict = open_key_check(sealer, kUnsealBlocks[0], check.data());
      FUZZ_CHECK(verdict.verdict == KeyCheck::Fresh || verdict.verdict == KeyCheck::WrongKey);
      const bool second_zero = std::all_of(check.begin() + kKeyCheckBytes, check.end(), [](std::byte b) { return b == std::byte{0}; });
      FUZZ_CHECK((verdict.verdict == KeyCheck::Fresh) == second_zero);
    }
    return 0;
  }

  const auto raw = in.bytes(block);
  std::memcpy(plain.data(), raw.data(), raw.size());
  sealer.seal(index, plain.data(), stored.data());
  FUZZ_CHECK(sealer.open(index, stored.data(), back.data()));
  FUZZ_CHECK(back == plain);
  const uint64_t at = in.u32() % stored_bytes;
  uint8_t mask = in.u8();
  if (mask == 0) mask = 1;
  stored[at] ^= std::byte{mask};
  std::memset(back.data(), 0x77, back.size());
  FUZZ_CHECK(!sealer.open(index, stored.data(), back.data()));
  FUZZ_CHECK(std::all_of(back.begin(), back.end(), [](std::byte b) { return b == std::byte{0}; }));
  return 0;
}
