// Sealed caches through the C API against the real server (rc_cache_options.seal_key): data written comes back,
// reads of any range work, writes of part of a block are refused, and what the memory host can do — alter bytes,
// move a block, put an older version back, serve another key's blocks or never-written memory — completes the read
// with RC_E_INTEGRITY and zeros, never with wrong bytes. The host's side is played by a plain client of the same
// cache (it sees the servers' address space: the sealed blocks and their trailers) and, for a cache with one
// client, by writing the shm regions this process has mapped.
#include <sys/mman.h>

#include <fstream>
#include <random>
#include <sstream>

#include "harness.h"

namespace {

using namespace rctest;

constexpr uint32_t kBlock = 4096;
constexpr uint64_t kStride = kBlock + RC_SEAL_TRAILER_BYTES;
constexpr uint64_t kKeyCheckBytes = 2 * (RC_MIN_SEAL_BLOCK + RC_SEAL_TRAILER_BYTES);  // both copies
// Where the host holds client block i: after the key check's stride (both copies fit one of a 4 KiB block).
constexpr uint64_t host_address(uint64_t block) { return (block + 1) * kStride; }
constexpr uint32_t kRegions = 4;

std::array<uint8_t, RC_SEAL_KEY_BYTES> test_key(uint8_t seed) {
  std::array<uint8_t, RC_SEAL_KEY_BYTES> k{};
  for (uint32_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(seed * 17 + i);
  return k;
}

// A read straight into `dst` (the harness's reads copy out only on success): what a failed read leaves there.
int32_t read_into(rc_session* s, uint64_t address, uint8_t* dst, uint64_t length) {
  if (const rc_status st = rc_read(s, address, dst, length, 99); st != RC_OK) return st;
  const auto deadline = std::chrono::steady_clock::now() + hang_limit();
  rc_completion c{};
  while (std::chrono::steady_clock::now() < deadline) {
    const int32_t n = rc_wait(s, &c, 1, 100);
    if (n != 0) return n < 0 ? n : c.status;
  }
  return kHung;
}

class SealedCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    watchdog_ = std::make_unique<Watchdog>(std::string(info->test_suite_name()) + "." + info->name(), std::chrono::seconds(110));
    std::string listen = "tcp:127.0.0.1:0";
    if (GetParam() == "shm") {
      static std::atomic<int> counter{0};
      listen = "shm:/tmp/rc-sealed-" + std::to_string(getpid()) + "-" + std::to_string(++counter) + ".sock";
      ::unlink(listen.c_str() + 4);
    }
    ASSERT_TRUE(server_.start(listen));
    id_ = fresh_cache_id();
  }

  void TearDown() override {
    if (server_.running()) {
      EXPECT_TRUE(server_.stop());
    }
    watchdog_.reset();
  }

  rc_cache_options sealed_options(const std::array<uint8_t, RC_SEAL_KEY_BYTES>& key, rc_config cfg = {0, 1, 8, 4},
                                  uint32_t flags = 0) {
    rc_cache_options o = make_options(id_, cfg, kRegions);
    o.seal_key = key.data();
    o.seal_block_size = kBlock;
    o.flags = flags;
    return o;
  }

  ::testing::AssertionResult open(CacheHandle& cache, const rc_cache_options& o) {
    const rc_status st = open_cache({server_.endpoint()}, o, &cache.c);
    if (st != RC_OK) return ::testing::AssertionFailure() << "rc_cache_open = " << sname(st) << ": " << last_error();
    return ::testing::AssertionSuccess();
  }

  // A plain client of the same cache: the memory host's view (sealed blocks and trailers).
  ::testing::AssertionResult open_host_view(CacheHandle& cache, SessionHandle& s) {
    if (auto r = open(cache, make_options(id_, {0, 1, 8, 4}, kRegions)); !r) return r;
    const rc_status st = rc_session_open(cache.c, &s.s);
    if (st != RC_OK) return ::testing::AssertionFailure() << "rc_session_open = " << sname(st);
    return ::testing::AssertionSuccess();
  }

  static std::vector<uint8_t> filled(uint64_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

  ServerProcess server_;
  uint64_t id_ = 0;
  std::unique_ptr<Watchdog> watchdog_;
};

TEST_P(SealedCache, WholeBlockWritesComeBackThroughReadsOfAnyRange) {
  const auto key = test_key(1);
  for (const rc_config& cfg : {rc_config{0, 1, 1, 1}, rc_config{0, 1, 16, 4}, rc_config{1, 1, 32, 8}, rc_config{0, 0, 1, 1}}) {
    SCOPED_TRACE("c=" + std::to_string(cfg.client_threads) + " s=" + std::to_string(cfg.server_threads));
    id_ = fresh_cache_id();
    CacheHandle cache;
    ASSERT_TRUE(open(cache, sealed_options(key, cfg)));
    const uint64_t capacity = rc_cache_capacity(cache.c);
    EXPECT_EQ(capacity, (kRegions * kRegionSize / kStride - 1) * kBlock)
        << "the client's capacity is the whole blocks after the key check's";
    SessionHandle s;
    ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK) << last_error();
    // Every block written (a read of never-written memory is RC_E_INTEGRITY), in writes of 1-8 blocks.
    std::vector<uint8_t> shadow(capacity);
    fill_random(shadow.data(), shadow.size(), 7);
    std::mt19937_64 rng(11);
    for (uint64_t at = 0; at < capacity;) {
      const uint64_t n = std::min<uint64_t>((rng() % 8 + 1) * kBlock, capacity - at);
      ASSERT_EQ(sync_write(s.s, at, shadow.data() + at, n), RC_OK) << "write at " << at << ": " << last_error();
      at += n;
    }
    for (int i = 0; i < 400; ++i) {
      const uint64_t length = rng() % (3 * kBlock) + 1;
      const uint64_t at = rng() % (capacity - length);
      std::vector<uint8_t> back(length);
      ASSERT_EQ(sync_read(s.s, at, back.data(), length), RC_OK) << "read [" << at << ", +" << length << ")";
      ASSERT_TRUE(std::equal(back.begin(), back.end(), shadow.begin() + static_cast<std::ptrdiff_t>(at)))
          << "read [" << at << ", +" << length << ") returned other bytes";
    }
    EXPECT_TRUE(verify_all(s.s, shadow, 0, "whole cache"));
    EXPECT_EQ(s.close(), RC_OK);
    EXPECT_EQ(cache.close(), RC_OK);
  }
}

TEST_P(SealedCache, RefusesPartBlockWritesRangesPastTheBlocksAndBadOptions) {
  const auto key = test_key(1);
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(key)));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  const auto data = filled(kBlock, 1);
  EXPECT_EQ(rc_write(s.s, 100, data.data(), kBlock, 1), RC_E_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "whole blocks of 4096 bytes")) << last_error();
  EXPECT_EQ(rc_write(s.s, 0, data.data(), 512, 1), RC_E_INVALID_ARGUMENT);
  std::vector<uint8_t> back(kBlock);
  EXPECT_EQ(rc_read(s.s, rc_cache_capacity(cache.c) - 1, back.data(), 2, 1), RC_E_OUT_OF_RANGE)
      << "the trailers' bytes past the last whole block are not the client's";
  EXPECT_EQ(rc_session_outstanding(s.s), 0u) << "a refused request left something behind";
  EXPECT_EQ(s.close(), RC_OK);
  EXPECT_EQ(cache.close(), RC_OK);

  const auto refused = [&](rc_cache_options o, const std::string& says) {
    o.cache_id = fresh_cache_id();
    CacheHandle c;
    const rc_status st = open_cache({server_.endpoint()}, o, &c.c);
    EXPECT_EQ(st, RC_E_INVALID_ARGUMENT) << says;
    EXPECT_TRUE(contains(last_error(), says)) << last_error();
  };
  auto o = sealed_options(key);
  o.seal_block_size = 1000;
  refused(o, "power of two");
  o.seal_block_size = 256;
  refused(o, "power of two");
  o = make_options(id_, {0, 1, 8, 4}, kRegions);
  o.seal_block_size = 4096;
  refused(o, "seal_key is not");
  o = sealed_options(key);
  o.reserved = 1;
  refused(o, "reserved");
}

TEST_P(SealedCache, NeverWrittenBlocksReportIntegrityWithZeros) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(1))));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  auto back = filled(kBlock, 0x77);
  EXPECT_EQ(read_into(s.s, 0, back.data(), 100), RC_E_INTEGRITY) << "a never-written block";
  auto expected = filled(kBlock, 0x77);
  std::fill_n(expected.begin(), 100, 0);
  EXPECT_EQ(back, expected) << "the read's own range is zeroed, nothing past it touched";
}

TEST_P(SealedCache, AnotherKeyOrBlockSizeIsRefusedAtOpen) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(1))));
  CacheHandle other;
  EXPECT_EQ(open_cache({server_.endpoint()}, sealed_options(test_key(2)), &other.c), RC_E_INTEGRITY);
  EXPECT_TRUE(contains(last_error(), "does not open with this key")) << last_error();
  const auto key = test_key(1);  // outlives the options that point at it
  auto small = sealed_options(key);
  small.seal_block_size = 512;
  EXPECT_EQ(open_cache({server_.endpoint()}, small, &other.c), RC_E_INVALID_ARGUMENT) << last_error();
  EXPECT_TRUE(contains(last_error(), "sealed in blocks of 4096 bytes, not 512")) << last_error();
  CacheHandle again;
  EXPECT_TRUE(open(again, sealed_options(test_key(1)))) << "the right key still opens it";
}

// The host (or a client that zeroed the check) lets another key in: every block sealed under the old key then
// fails its read under the new one, and each key's client still reads what it wrote.
TEST_P(SealedCache, AKeyChangedUnderALiveCacheReportsIntegrityForOldData) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(1))));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  const auto data = filled(2 * kBlock, 5);
  ASSERT_EQ(sync_write(s.s, 0, data.data(), data.size()), RC_OK);

  CacheHandle host;
  SessionHandle hs;
  ASSERT_TRUE(open_host_view(host, hs));
  const auto zeros = filled(kKeyCheckBytes, 0);
  ASSERT_EQ(sync_write(hs.s, 0, zeros.data(), zeros.size()), RC_OK);

  CacheHandle other;
  ASSERT_TRUE(open(other, sealed_options(test_key(2))));  // the check looked fresh
  SessionHandle os;
  ASSERT_EQ(rc_session_open(other.c, &os.s), RC_OK);
  auto back = filled(2 * kBlock, 0x77);
  EXPECT_EQ(read_into(os.s, 0, back.data(), back.size()), RC_E_INTEGRITY) << "the old key's blocks";
  EXPECT_EQ(back, filled(2 * kBlock, 0));
  const auto mine = filled(kBlock, 9);
  ASSERT_EQ(sync_write(os.s, 2 * kBlock, mine.data(), kBlock), RC_OK);
  back.assign(kBlock, 0);
  ASSERT_EQ(sync_read(os.s, 2 * kBlock, back.data(), kBlock), RC_OK) << "the new key reads what it wrote";
  EXPECT_EQ(back, mine);

  back.assign(2 * kBlock, 0);
  ASSERT_EQ(sync_read(s.s, 0, back.data(), back.size()), RC_OK) << "the old key still reads its blocks";
  EXPECT_EQ(back, data);
  back.assign(kBlock, 0x77);
  EXPECT_EQ(read_into(s.s, 2 * kBlock, back.data(), kBlock), RC_E_INTEGRITY) << "the new key's block";
  CacheHandle third;
  EXPECT_EQ(open_cache({server_.endpoint()}, sealed_options(test_key(1)), &third.c), RC_E_INTEGRITY)
      << "the check now names the new key";
}

// A first client killed while writing the key check leaves its first copy torn and the second zero: the next
// client takes the cache as fresh (nothing was sealed in it yet) instead of refusing every key forever.
TEST_P(SealedCache, AKeyCheckTornByAKilledFirstWriterLetsTheNextClientIn) {
  CacheHandle host;
  SessionHandle hs;
  ASSERT_TRUE(open_host_view(host, hs));  // the cache exists, all zeros
  auto torn = filled(RC_MIN_SEAL_BLOCK / 2, 0x5c);
  ASSERT_EQ(sync_write(hs.s, 40, torn.data(), torn.size()), RC_OK);
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(3))));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  const auto data = filled(kBlock, 8);
  ASSERT_EQ(sync_write(s.s, 0, data.data(), kBlock), RC_OK);
  CacheHandle again;
  EXPECT_TRUE(open(again, sealed_options(test_key(3)))) << "the check the second client wrote opens";
  CacheHandle other;
  EXPECT_EQ(open_cache({server_.endpoint()}, sealed_options(test_key(4)), &other.c), RC_E_INTEGRITY) << last_error();
}

TEST_P(SealedCache, BytesAlteredOrABlockMovedByTheHostAreDetected) {
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(1))));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  std::vector<uint8_t> data(8 * kBlock);
  fill_random(data.data(), data.size(), 3);
  ASSERT_EQ(sync_write(s.s, 0, data.data(), data.size()), RC_OK);

  CacheHandle host;
  SessionHandle hs;
  ASSERT_TRUE(open_host_view(host, hs));
  EXPECT_EQ(rc_cache_capacity(host.c), kRegions * kRegionSize);
  // Flip one bit of block 2's ciphertext, and one of block 5's trailer.
  for (const uint64_t at : {host_address(2) + 77, host_address(5) + kBlock + 3}) {
    uint8_t b = 0;
    ASSERT_EQ(sync_read(hs.s, at, &b, 1), RC_OK);
    b ^= 0x10;
    ASSERT_EQ(sync_write(hs.s, at, &b, 1), RC_OK);
  }
  // Copy block 0's sealed form over block 6.
  std::vector<uint8_t> sealed0(kStride);
  ASSERT_EQ(sync_read(hs.s, host_address(0), sealed0.data(), kStride), RC_OK);
  ASSERT_EQ(sync_write(hs.s, host_address(6), sealed0.data(), kStride), RC_OK);

  for (const uint64_t block : {2u, 5u, 6u}) {
    auto back = filled(kBlock, 0x77);
    EXPECT_EQ(read_into(s.s, block * kBlock, back.data(), kBlock), RC_E_INTEGRITY) << "block " << block;
    EXPECT_EQ(back, filled(kBlock, 0)) << "bytes of block " << block << " reached the reader";
  }
  auto span = filled(3 * kBlock, 0x77);
  EXPECT_EQ(read_into(s.s, 1 * kBlock + 10, span.data(), 2 * kBlock), RC_E_INTEGRITY) << "a read across blocks 1-3";
  auto span_expected = filled(3 * kBlock, 0x77);
  std::fill_n(span_expected.begin(), 2 * kBlock, 0);
  EXPECT_EQ(span, span_expected) << "the read's range is zeroed, nothing past it touched";
  for (const uint64_t block : {0u, 1u, 3u, 4u, 7u}) {
    std::vector<uint8_t> back(kBlock);
    ASSERT_EQ(sync_read(s.s, block * kBlock, back.data(), kBlock), RC_OK) << "untouched block " << block;
    EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + static_cast<std::ptrdiff_t>(block * kBlock)));
  }
}

// The regions of this process's shm mappings of server memory (only the server's regions are mapped
// "remotecache-region"): what the host holds, for a cache no second client may open.
std::vector<std::pair<std::byte*, uint64_t>> mapped_regions() {
  std::vector<std::pair<std::byte*, uint64_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("memfd:remotecache-region") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    const auto dash = range.find('-');
    const uint64_t from = std::stoull(range.substr(0, dash), nullptr, 16);
    const uint64_t to = std::stoull(range.substr(dash + 1), nullptr, 16);
    out.emplace_back(reinterpret_cast<std::byte*>(from), to - from);
  }
  return out;
}

// Writes v1, saves the host's memory, writes v2, puts the saved memory back, reads: what the client then gets.
int32_t replay_and_read(rc_session* s, std::vector<uint8_t>& back) {
  const std::vector<uint8_t> v1(back.size(), 1), v2(back.size(), 2);
  if (const int32_t st = sync_write(s, 0, v1.data(), v1.size()); st != RC_OK) return st;
  const auto regions = mapped_regions();
  EXPECT_FALSE(regions.empty()) << "no mapping of the server's regions in /proc/self/maps";
  std::vector<std::vector<std::byte>> saved;
  for (const auto& [base, size] : regions) saved.emplace_back(base, base + size);
  if (const int32_t st = sync_write(s, 0, v2.data(), v2.size()); st != RC_OK) return st;
  for (std::size_t i = 0; i < regions.size(); ++i) std::memcpy(regions[i].first, saved[i].data(), saved[i].size());
  std::fill(back.begin(), back.end(), 0x77);
  return read_into(s, 0, back.data(), back.size());
}

TEST_P(SealedCache, AnOlderVersionPutBackIsDetectedByItsOnlyClient) {
  if (GetParam() != "shm") GTEST_SKIP() << "the host's memory is reached through shm mappings";
  {
    CacheHandle cache;
    ASSERT_TRUE(open(cache, sealed_options(test_key(1), {0, 0, 1, 1}, RC_OPEN_EXCLUSIVE)));
    SessionHandle s;
    ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
    std::vector<uint8_t> back(4 * kBlock);
    EXPECT_EQ(replay_and_read(s.s, back), RC_E_INTEGRITY) << "the replayed first version was served";
    EXPECT_EQ(back, filled(4 * kBlock, 0));
  }
  // A shared cache's client cannot tell another client's newer write from a replay: the old version is served (the
  // documented limit), which also shows that the replay above was made.
  id_ = fresh_cache_id();
  CacheHandle cache;
  ASSERT_TRUE(open(cache, sealed_options(test_key(1), {0, 0, 1, 1})));
  SessionHandle s;
  ASSERT_EQ(rc_session_open(cache.c, &s.s), RC_OK);
  std::vector<uint8_t> back(4 * kBlock);
  EXPECT_EQ(replay_and_read(s.s, back), RC_OK);
  EXPECT_EQ(back, filled(4 * kBlock, 1));
}

INSTANTIATE_TEST_SUITE_P(Transports, SealedCache, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
