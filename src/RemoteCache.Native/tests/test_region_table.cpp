// RegionTable: address translation over several servers, splits at region ends and at max_slice,
// and overflow-safe range checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "client/region_table.h"

namespace {

using rc::client::RegionSlice;
using rc::client::RegionTable;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;
constexpr uint64_t GiB = 1024 * MiB;

// An independent model of the table: regions laid end to end in server order, then region order.
struct RefRegion {
  uint64_t start;
  uint64_t size;
  uint16_t server;
  uint16_t region;
};

struct Layout {
  RegionTable table;
  std::vector<RefRegion> ref;
  uint64_t capacity = 0;

  void add(uint16_t server, uint32_t count, uint64_t region_size) {
    table.add_server(server, count, region_size);
    for (uint32_t r = 0; r < count; ++r) {
      ref.push_back(RefRegion{capacity, region_size, server, static_cast<uint16_t>(r)});
      capacity += region_size;
    }
  }

  const RefRegion& region_at(uint64_t address) const {
    for (const auto& r : ref)
      if (address >= r.start && address - r.start < r.size) return r;
    ADD_FAILURE() << "address " << address << " outside the model";
    return ref.front();
  }
};

std::vector<RegionSlice> split(const RegionTable& t, uint64_t address, uint64_t length, uint32_t max_slice) {
  std::vector<RegionSlice> out;
  t.split(address, length, max_slice, [&](const RegionSlice& s) { out.push_back(s); });
  return out;
}

std::string describe(const RegionSlice& s) {
  return "{server " + std::to_string(s.server) + ", region " + std::to_string(s.region) + ", offset " +
         std::to_string(s.offset) + ", length " + std::to_string(s.length) + ", buffer_offset " +
         std::to_string(s.buffer_offset) + "}";
}

// The slices must be contiguous in the caller's buffer, cover the range exactly, translate each byte
// to the right (server, region, offset), and be cut only where needed: at a region end, after
// max_slice bytes, or at the end of the range.
::testing::AssertionResult check_split(const Layout& l, uint64_t address, uint64_t length, uint32_t max_slice) {
  const auto slices = split(l.table, address, length, max_slice);
  uint64_t done = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const RegionSlice& s = slices[i];
    auto fail = [&]() {
      return ::testing::AssertionFailure() << "split(" << address << ", " << length << ", " << max_slice
                                           << ") slice " << i << " " << describe(s) << ": ";
    };
    if (s.buffer_offset != done) return fail() << "buffer_offset should be " << done;
    if (s.length == 0) return fail() << "empty slice";
    if (s.length > max_slice) return fail() << "longer than max_slice";
    if (s.length > length - done) return fail() << "runs past the end of the range";
    const RefRegion& r = l.region_at(address + done);
    if (s.server != r.server || s.region != r.region)
      return fail() << "should be server " << r.server << " region " << r.region;
    if (s.offset != address + done - r.start) return fail() << "offset should be " << address + done - r.start;
    if (s.offset + s.length > r.size) return fail() << "crosses the region end";
    const uint64_t expect_len = std::min({r.size - s.offset, length - done, uint64_t{max_slice}});
    if (s.length != expect_len) return fail() << "length should be " << expect_len << " (cut only at region end / max_slice)";
    done += s.length;
  }
  if (done != length)
    return ::testing::AssertionFailure() << "split(" << address << ", " << length << ", " << max_slice << ") covered "
                                         << done << " bytes";
  return ::testing::AssertionSuccess();
}

Layout three_servers() {
  Layout l;
  l.add(0, 3, 1 * MiB);
  l.add(1, 2, 512 * KiB);
  l.add(2, 1, 3 * MiB);
  return l;
}

TEST(RegionTable, EmptyTable) {
  RegionTable t;
  EXPECT_EQ(t.capacity(), 0u);
  EXPECT_EQ(t.region_count(), 0u);
  EXPECT_FALSE(t.contains(0, 1));
  EXPECT_FALSE(t.contains(1, 0));
}

TEST(RegionTable, CapacityAndRegionCount) {
  Layout l = three_servers();
  EXPECT_EQ(l.table.capacity(), 3 * MiB + 1 * MiB + 3 * MiB);
  EXPECT_EQ(l.table.capacity(), l.capacity);
  EXPECT_EQ(l.table.region_count(), 6u);
}

TEST(RegionTable, TranslatesSingleBytes) {
  Layout l = three_servers();
  for (const auto& r : l.ref) {
    for (uint64_t off : {uint64_t{0}, uint64_t{1}, r.size / 2, r.size - 1}) {
      const auto slices = split(l.table, r.start + off, 1, 32 * 1024);
      ASSERT_EQ(slices.size(), 1u);
      EXPECT_EQ(slices[0].server, r.server) << "address " << r.start + off;
      EXPECT_EQ(slices[0].region, r.region) << "address " << r.start + off;
      EXPECT_EQ(slices[0].offset, off);
      EXPECT_EQ(slices[0].length, 1u);
      EXPECT_EQ(slices[0].buffer_offset, 0u);
    }
  }
  // Region indices restart at 0 on every server.
  EXPECT_EQ(split(l.table, 3 * MiB, 1, 8)[0].server, 1);
  EXPECT_EQ(split(l.table, 3 * MiB, 1, 8)[0].region, 0);
  EXPECT_EQ(split(l.table, 4 * MiB, 1, 8)[0].server, 2);
  EXPECT_EQ(split(l.table, 4 * MiB, 1, 8)[0].region, 0);
}

TEST(RegionTable, CutsAtRegionEnds) {
  Layout l;
  l.add(0, 2, 1000);
  l.add(1, 2, 1000);
  const auto s = split(l.table, 900, 1200, 10000);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(describe(s[0]), describe(RegionSlice{0, 0, 900, 100, 0}));
  EXPECT_EQ(describe(s[1]), describe(RegionSlice{0, 1, 0, 1000, 100}));
  EXPECT_EQ(describe(s[2]), describe(RegionSlice{1, 0, 0, 100, 1100}));

  // Ending exactly at a region end, and starting exactly at one.
  const auto t = split(l.table, 1000, 2000, 10000);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(describe(t[0]), describe(RegionSlice{0, 1, 0, 1000, 0}));
  EXPECT_EQ(describe(t[1]), describe(RegionSlice{1, 0, 0, 1000, 1000}));

  // The very last byte.
  const auto u = split(l.table, 3999, 1, 10000);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(describe(u[0]), describe(RegionSlice{1, 1, 999, 1, 0}));
}

TEST(RegionTable, CutsAtMaxSlice) {
  Layout l;
  l.add(0, 2, 1000);
  const auto s = split(l.table, 900, 800, 300);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(describe(s[0]), describe(RegionSlice{0, 0, 900, 100, 0}));
  EXPECT_EQ(describe(s[1]), describe(RegionSlice{0, 1, 0, 300, 100}));
  EXPECT_EQ(describe(s[2]), describe(RegionSlice{0, 1, 300, 300, 400}));
  EXPECT_EQ(describe(s[3]), describe(RegionSlice{0, 1, 600, 100, 700}));

  // max_slice 1: one slice per byte.
  const auto b = split(l.table, 998, 4, 1);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(describe(b[0]), describe(RegionSlice{0, 0, 998, 1, 0}));
  EXPECT_EQ(describe(b[1]), describe(RegionSlice{0, 0, 999, 1, 1}));
  EXPECT_EQ(describe(b[2]), describe(RegionSlice{0, 1, 0, 1, 2}));
  EXPECT_EQ(describe(b[3]), describe(RegionSlice{0, 1, 1, 1, 3}));
}

TEST(RegionTable, ZeroLengthProducesNoSlices) {
  Layout l = three_servers();
  EXPECT_TRUE(split(l.table, 0, 0, 4096).empty());
  EXPECT_TRUE(split(l.table, 1 * MiB, 0, 4096).empty());
  EXPECT_TRUE(split(l.table, l.capacity - 1, 0, 4096).empty());
}

TEST(RegionTable, WholeCacheSplit) {
  Layout l = three_servers();
  const uint32_t chunk = 32 * 1024;
  const auto s = split(l.table, 0, l.capacity, chunk);
  uint64_t expect = 0;
  for (const auto& r : l.ref) expect += (r.size + chunk - 1) / chunk;
  EXPECT_EQ(s.size(), expect);
  EXPECT_TRUE(check_split(l, 0, l.capacity, chunk));
  EXPECT_TRUE(check_split(l, 0, l.capacity, UINT32_MAX));
  EXPECT_EQ(split(l.table, 0, l.capacity, UINT32_MAX).size(), l.ref.size()) << "one slice per region";
}

TEST(RegionTable, BoundaryCrossingSplits) {
  Layout l = three_servers();
  std::vector<uint64_t> points = {0, 1, l.capacity - 1};
  for (const auto& r : l.ref) {
    for (uint64_t d : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{4096}}) {
      if (r.start >= d) points.push_back(r.start - d);
      points.push_back(r.start + d);
    }
  }
  const uint64_t lengths[] = {1, 2, 7, 8, 4095, 4096, 32768, 32769, 100000, 512 * KiB, 1 * MiB + 1, 3 * MiB};
  const uint32_t max_slices[] = {7, 4096, 32768, UINT32_MAX};
  int checked = 0;
  for (uint64_t a : points) {
    for (uint64_t len : lengths) {
      if (!l.table.contains(a, len)) continue;
      for (uint32_t m : max_slices) {
        if (len / m > 8000) continue;  // keep it fast under sanitizers
        ASSERT_TRUE(check_split(l, a, len, m));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(RegionTable, RandomSplits) {
  Layout l;
  l.add(0, 4, 1 * MiB);
  l.add(1, 3, 256 * KiB + 8);  // odd sizes so boundaries are not aligned
  l.add(2, 5, 100'003);
  l.add(3, 1, 2 * MiB);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 5000; ++i) {
    uint64_t len = 1 + rng() % (rng() % 4 == 0 ? l.capacity : 70000);
    uint64_t a;
    if (rng() % 2) {
      // Start just before a boundary.
      const auto& r = l.ref[rng() % l.ref.size()];
      a = r.start + r.size - std::min<uint64_t>(r.size, 1 + rng() % std::min<uint64_t>(len, r.size));
    } else {
      a = rng() % l.capacity;
    }
    if (a + len > l.capacity) len = l.capacity - a;
    if (len == 0) continue;
    const uint32_t m = (rng() % 3 == 0) ? UINT32_MAX : static_cast<uint32_t>(1 + rng() % 65536);
    if (len / m > 8000) continue;
    ASSERT_TRUE(l.table.contains(a, len));
    ASSERT_TRUE(check_split(l, a, len, m)) << "iteration " << i;
  }
}

TEST(RegionTable, RegionsLargerThan4GiB) {
  // Slice lengths are 32-bit: a region of 8 GiB must be cut at max_slice without truncation.
  Layout l;
  l.add(0, 1, 8 * GiB);
  l.add(1, 1, 16);
  const auto s = split(l.table, 0, 8 * GiB + 10, UINT32_MAX);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(describe(s[0]), describe(RegionSlice{0, 0, 0, UINT32_MAX, 0}));
  EXPECT_EQ(describe(s[1]), describe(RegionSlice{0, 0, UINT32_MAX, UINT32_MAX, UINT32_MAX}));
  EXPECT_EQ(describe(s[2]), describe(RegionSlice{0, 0, 2ull * UINT32_MAX, 2, 2ull * UINT32_MAX}));
  EXPECT_EQ(describe(s[3]), describe(RegionSlice{1, 0, 0, 10, 8 * GiB}));
  EXPECT_TRUE(check_split(l, 5 * GiB, 3 * GiB + 16, UINT32_MAX));
  EXPECT_TRUE(check_split(l, 8 * GiB - 3, 19, 4));
}

TEST(RegionTable, ContainsIsOverflowSafe) {
  Layout l = three_servers();
  const uint64_t cap = l.capacity;
  EXPECT_TRUE(l.table.contains(0, cap));
  EXPECT_TRUE(l.table.contains(0, 0));
  EXPECT_TRUE(l.table.contains(cap - 1, 1));
  EXPECT_TRUE(l.table.contains(cap, 0)) << "an empty range at the end is inside";
  EXPECT_FALSE(l.table.contains(cap, 1));
  EXPECT_FALSE(l.table.contains(cap - 1, 2));
  EXPECT_FALSE(l.table.contains(0, cap + 1));
  EXPECT_FALSE(l.table.contains(cap + 1, 0));
  EXPECT_FALSE(l.table.contains(UINT64_MAX, 0));
  EXPECT_FALSE(l.table.contains(UINT64_MAX, 1));
  EXPECT_FALSE(l.table.contains(UINT64_MAX - 5, 10)) << "address + length wraps to a small number";
  EXPECT_FALSE(l.table.contains(UINT64_MAX - cap + 1, cap));
  EXPECT_FALSE(l.table.contains(1, UINT64_MAX)) << "1 + UINT64_MAX wraps to 0";
  EXPECT_FALSE(l.table.contains(8, UINT64_MAX - 7)) << "8 + (UINT64_MAX - 7) wraps to 0";
  EXPECT_FALSE(l.table.contains(0, UINT64_MAX));
  EXPECT_FALSE(l.table.contains(UINT64_MAX, UINT64_MAX));
}

TEST(RegionTable, CapacityNearUint64Max) {
  // A table whose capacity reaches UINT64_MAX: arithmetic at the top of the address space.
  Layout l;
  l.add(0, 1, UINT64_MAX - 100);
  l.add(1, 1, 100);
  ASSERT_EQ(l.table.capacity(), UINT64_MAX);
  EXPECT_TRUE(l.table.contains(UINT64_MAX - 1, 1));
  EXPECT_TRUE(l.table.contains(0, UINT64_MAX));
  EXPECT_FALSE(l.table.contains(UINT64_MAX, 1));
  EXPECT_FALSE(l.table.contains(UINT64_MAX - 1, 2));
  EXPECT_FALSE(l.table.contains(2, UINT64_MAX - 1));
  const auto s = split(l.table, UINT64_MAX - 110, 30, 8);
  EXPECT_TRUE(check_split(l, UINT64_MAX - 110, 30, 8));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back().server, 1);
  EXPECT_EQ(s.back().offset + s.back().length, 20u);
  EXPECT_TRUE(check_split(l, UINT64_MAX - 100, 100, 4096));
}

}  // namespace
