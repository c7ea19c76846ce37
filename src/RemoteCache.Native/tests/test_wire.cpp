// The wire format: struct layouts, cost rules, header validation, and BatchWriter round trips
// parsed back by an independent walker that follows the format described in wire.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/wire.h"

namespace {

namespace wire = rc::wire;

constexpr uint32_t kHeader = sizeof(wire::FrameHeader);
constexpr uint32_t kCap = kHeader + wire::kBatchBytes;  // request / response frame cap for >1 entry

// ---- layout --------------------------------------------------------------------------------------

TEST(Wire, StructSizesAndOffsets) {
  EXPECT_EQ(sizeof(wire::FrameHeader), 24u);
  EXPECT_EQ(offsetof(wire::FrameHeader, magic), 0u);
  EXPECT_EQ(offsetof(wire::FrameHeader, version), 4u);
  EXPECT_EQ(offsetof(wire::FrameHeader, kind), 5u);
  EXPECT_EQ(offsetof(wire::FrameHeader, flags), 6u);
  EXPECT_EQ(offsetof(wire::FrameHeader, bytes), 8u);
  EXPECT_EQ(offsetof(wire::FrameHeader, count), 12u);
  EXPECT_EQ(offsetof(wire::FrameHeader, seq), 16u);

  EXPECT_EQ(sizeof(wire::RequestEntry), 16u);
  EXPECT_EQ(offsetof(wire::RequestEntry, op), 0u);
  EXPECT_EQ(offsetof(wire::RequestEntry, flags), 1u);
  EXPECT_EQ(offsetof(wire::RequestEntry, region), 2u);
  EXPECT_EQ(offsetof(wire::RequestEntry, length), 4u);
  EXPECT_EQ(offsetof(wire::RequestEntry, offset), 8u);

  EXPECT_EQ(sizeof(wire::ResponseEntry), 8u);
  EXPECT_EQ(offsetof(wire::ResponseEntry, status), 0u);
  EXPECT_EQ(offsetof(wire::ResponseEntry, length), 4u);

  // Version 2: flags, a client id and a capability joined the Connect.
  EXPECT_EQ(sizeof(wire::ConnectRequest), 256u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, cache_id), 0u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, regions), 8u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, server_threads), 12u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, token_length), 16u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, flags), 20u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, client_id), 24u);
  EXPECT_EQ(sizeof(wire::ConnectRequest::client_id), 16u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, token), 40u);
  EXPECT_EQ(sizeof(wire::ConnectRequest::token), wire::kTokenMax);
  EXPECT_EQ(offsetof(wire::ConnectRequest, capability_length), 104u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, reserved), 108u);
  EXPECT_EQ(offsetof(wire::ConnectRequest, capability), 112u);

  EXPECT_EQ(sizeof(wire::Capability), 144u);
  EXPECT_EQ(offsetof(wire::Capability, magic), 0u);
  EXPECT_EQ(offsetof(wire::Capability, version), 4u);
  EXPECT_EQ(offsetof(wire::Capability, cache_id), 8u);
  EXPECT_EQ(offsetof(wire::Capability, expires_unix_ms), 16u);
  EXPECT_EQ(offsetof(wire::Capability, regions), 24u);
  EXPECT_EQ(offsetof(wire::Capability, server_id_length), 28u);
  EXPECT_EQ(offsetof(wire::Capability, server_id), 32u);
  EXPECT_EQ(sizeof(wire::Capability::server_id), 64u);
  EXPECT_EQ(offsetof(wire::Capability, nonce), 96u);
  EXPECT_EQ(offsetof(wire::Capability, mac), 112u);
  EXPECT_EQ(sizeof(wire::Capability::mac), 32u);
  EXPECT_EQ(wire::kCapabilitySigned, 112u) << "the MAC covers every byte before it";

  EXPECT_EQ(sizeof(wire::Notice), 104u);
  EXPECT_EQ(offsetof(wire::Notice, status), 0u);
  EXPECT_EQ(offsetof(wire::Notice, reserved), 4u);
  EXPECT_EQ(offsetof(wire::Notice, message), 8u);

  EXPECT_EQ(sizeof(wire::ConnectReply), 120u);
  EXPECT_EQ(offsetof(wire::ConnectReply, status), 0u);
  EXPECT_EQ(offsetof(wire::ConnectReply, region_count), 4u);
  EXPECT_EQ(offsetof(wire::ConnectReply, region_size), 8u);
  EXPECT_EQ(offsetof(wire::ConnectReply, max_frame), 16u);
  EXPECT_EQ(offsetof(wire::ConnectReply, message), 24u);

  EXPECT_EQ(sizeof(wire::RegionDescriptor), 16u);

  EXPECT_TRUE(std::is_trivially_copyable_v<wire::FrameHeader>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::RequestEntry>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::ResponseEntry>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::ConnectRequest>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::ConnectReply>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::Capability>);
  EXPECT_TRUE(std::is_trivially_copyable_v<wire::Notice>);
}

TEST(Wire, Constants) {
  EXPECT_EQ(std::memcmp(&wire::kMagic, "RCB1", 4), 0) << "magic spells RCB1 in memory";
  EXPECT_EQ(wire::kVersion, 2);
  EXPECT_EQ(wire::kBatchBytes, 4096u);
  EXPECT_EQ(wire::kMaxChunk, 32u * 1024u);
  EXPECT_EQ(wire::kMaxBatchEntries, 256u);
  EXPECT_EQ(wire::kMaxFrame, 24u + 256u * 16u + 32768u + 4096u);
  EXPECT_EQ(static_cast<int>(wire::Kind::Connect), 1);
  EXPECT_EQ(static_cast<int>(wire::Kind::ConnectReply), 2);
  EXPECT_EQ(static_cast<int>(wire::Kind::Batch), 3);
  EXPECT_EQ(static_cast<int>(wire::Kind::Response), 4);
  EXPECT_EQ(static_cast<int>(wire::Kind::Notice), 5);
  EXPECT_EQ(std::memcmp(&wire::kCapabilityMagic, "RCC1", 4), 0) << "capability magic spells RCC1 in memory";
  EXPECT_EQ(wire::kCapabilityVersion, 1);
  EXPECT_EQ(wire::kConnectExclusive, 1u);
  EXPECT_EQ(wire::kConnectExclusive, RC_OPEN_EXCLUSIVE) << "the Connect flag is the open flag";
  EXPECT_EQ(wire::kTokenMax, static_cast<uint32_t>(RC_MAX_TOKEN_BYTES));
  EXPECT_EQ(static_cast<int>(wire::Op::Read), 1);
  EXPECT_EQ(static_cast<int>(wire::Op::Write), 2);
  EXPECT_EQ(static_cast<int>(wire::Op::SetServerThreads), 3);
}

TEST(Wire, Pad8AndCosts) {
  EXPECT_EQ(wire::pad8(0), 0u);
  EXPECT_EQ(wire::pad8(1), 8u);
  EXPECT_EQ(wire::pad8(7), 8u);
  EXPECT_EQ(wire::pad8(8), 8u);
  EXPECT_EQ(wire::pad8(9), 16u);
  EXPECT_EQ(wire::pad8(4095), 4096u);
  EXPECT_EQ(wire::pad8(wire::kMaxChunk), wire::kMaxChunk);
  for (uint32_t n = 0; n < 200; ++n) {
    EXPECT_EQ(wire::pad8(n) % 8, 0u);
    EXPECT_GE(wire::pad8(n), n);
    EXPECT_LT(wire::pad8(n) - n, 8u);
  }

  EXPECT_EQ(wire::request_cost(wire::Op::Read, 100), 16u);
  EXPECT_EQ(wire::request_cost(wire::Op::Write, 100), 16u + 104u);
  EXPECT_EQ(wire::request_cost(wire::Op::Write, 0), 16u);
  EXPECT_EQ(wire::request_cost(wire::Op::SetServerThreads, 0), 16u);
  EXPECT_EQ(wire::response_cost(wire::Op::Read, 100), 8u + 104u);
  EXPECT_EQ(wire::response_cost(wire::Op::Read, 0), 8u);
  EXPECT_EQ(wire::response_cost(wire::Op::Write, 100), 8u);
  EXPECT_EQ(wire::response_cost(wire::Op::SetServerThreads, 0), 8u);
}

// ---- header_ok -----------------------------------------------------------------------------------

wire::FrameHeader good_header(uint32_t bytes) {
  return wire::FrameHeader{wire::kMagic, wire::kVersion, static_cast<uint8_t>(wire::Kind::Batch), 0, bytes, 1, 7};
}

TEST(Wire, HeaderOkAcceptsWellFormed) {
  EXPECT_TRUE(wire::header_ok(good_header(100), wire::Kind::Batch, 100));
  EXPECT_TRUE(wire::header_ok(good_header(100), wire::Kind::Batch, 1000)) << "more bytes available than the frame is fine";
  EXPECT_TRUE(wire::header_ok(good_header(24), wire::Kind::Batch, 24)) << "an empty frame is only a header";
  EXPECT_TRUE(wire::header_ok(good_header(wire::kMaxFrame), wire::Kind::Batch, wire::kMaxFrame));
  for (auto kind : {wire::Kind::Connect, wire::Kind::ConnectReply, wire::Kind::Response, wire::Kind::Notice}) {
    auto h = good_header(64);
    h.kind = static_cast<uint8_t>(kind);
    EXPECT_TRUE(wire::header_ok(h, kind, 64)) << static_cast<int>(kind);
  }
}

TEST(Wire, HeaderOkRejectsMalformed) {
  auto h = good_header(100);
  h.magic = 0x31424353;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "bad magic";
  h = good_header(100);
  h.magic = 0;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "zero magic";

  h = good_header(100);
  h.version = wire::kVersion + 1;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "future version";
  h.version = 1;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "version 1 (before the v2 Connect)";
  h.version = 0;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "version 0";

  h = good_header(100);
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Response, 100)) << "kind mismatch";
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Connect, 100)) << "kind mismatch";
  h.kind = 0;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "kind 0";
  h.kind = 200;
  EXPECT_FALSE(wire::header_ok(h, wire::Kind::Batch, 100)) << "unknown kind";

  EXPECT_FALSE(wire::header_ok(good_header(23), wire::Kind::Batch, 100)) << "bytes smaller than the header";
  EXPECT_FALSE(wire::header_ok(good_header(0), wire::Kind::Batch, 100)) << "bytes 0";
  EXPECT_FALSE(wire::header_ok(good_header(101), wire::Kind::Batch, 100)) << "bytes beyond what was received";
  EXPECT_FALSE(wire::header_ok(good_header(wire::kMaxFrame + 1), wire::Kind::Batch, wire::kMaxFrame + 1))
      << "bytes beyond kMaxFrame";
  EXPECT_FALSE(wire::header_ok(good_header(UINT32_MAX), wire::Kind::Batch, SIZE_MAX)) << "huge bytes";
}

TEST(Wire, ReadHeaderFromUnalignedBytes) {
  std::vector<std::byte> raw(64 + 3);
  const wire::FrameHeader h{wire::kMagic, wire::kVersion, 4, 0x1234, 0xA0B0C0D0u, 0x01020304u, 0x1122334455667788ull};
  std::memcpy(raw.data() + 3, &h, sizeof h);
  const auto r = wire::read_header(raw.data() + 3);
  EXPECT_EQ(r.magic, h.magic);
  EXPECT_EQ(r.version, h.version);
  EXPECT_EQ(r.kind, h.kind);
  EXPECT_EQ(r.flags, h.flags);
  EXPECT_EQ(r.bytes, h.bytes);
  EXPECT_EQ(r.count, h.count);
  EXPECT_EQ(r.seq, h.seq);
  // Little-endian on the wire.
  EXPECT_EQ(raw[3 + 8], std::byte{0xD0});
  EXPECT_EQ(raw[3 + 16], std::byte{0x88});
}

// ---- BatchWriter round trips ------------------------------------------------------------------------

struct Entry {
  wire::Op op;
  uint16_t region;
  uint64_t offset;
  uint32_t length;
  std::vector<std::byte> payload;  // writes only
};

std::vector<std::byte> bytes_of(uint64_t seed, uint32_t n) {
  std::vector<std::byte> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x & 0xFF);
  }
  return v;
}

// Walks a batch frame per wire.h: header, then `count` entries, each RequestEntry followed for writes
// by pad8(length) payload bytes whose padding is zero; the entries end exactly at header.bytes.
::testing::AssertionResult parse_batch(std::span<const std::byte> frame, uint64_t expect_seq,
                                       std::vector<Entry>& out) {
  out.clear();
  if (frame.size() < kHeader) return ::testing::AssertionFailure() << "frame shorter than a header";
  const auto h = wire::read_header(frame.data());
  if (!wire::header_ok(h, wire::Kind::Batch, frame.size()))
    return ::testing::AssertionFailure() << "header_ok rejected the writer's own frame";
  if (h.bytes != frame.size()) return ::testing::AssertionFailure() << "header.bytes " << h.bytes << " != span " << frame.size();
  if (h.seq != expect_seq) return ::testing::AssertionFailure() << "seq " << h.seq << " != " << expect_seq;
  if (h.flags != 0) return ::testing::AssertionFailure() << "flags " << h.flags;
  std::size_t pos = kHeader;
  for (uint32_t i = 0; i < h.count; ++i) {
    if (pos % 8 != 0) return ::testing::AssertionFailure() << "entry " << i << " misaligned at " << pos;
    if (pos + sizeof(wire::RequestEntry) > h.bytes) return ::testing::AssertionFailure() << "entry " << i << " overruns the frame";
    wire::RequestEntry e;
    std::memcpy(&e, frame.data() + pos, sizeof e);
    pos += sizeof e;
    if (e.flags != 0) return ::testing::AssertionFailure() << "entry " << i << " flags " << int{e.flags};
    Entry parsed{static_cast<wire::Op>(e.op), e.region, e.offset, e.length, {}};
    if (parsed.op == wire::Op::Write) {
      const uint32_t padded = wire::pad8(e.length);
      if (pos + padded > h.bytes) return ::testing::AssertionFailure() << "payload of entry " << i << " overruns the frame";
      parsed.payload.assign(frame.data() + pos, frame.data() + pos + e.length);
      for (uint32_t k = e.length; k < padded; ++k)
        if (frame[pos + k] != std::byte{0}) return ::testing::AssertionFailure() << "non-zero padding in entry " << i;
      pos += padded;
    }
    out.push_back(std::move(parsed));
  }
  if (pos != h.bytes) return ::testing::AssertionFailure() << "entries end at " << pos << ", frame at " << h.bytes;
  return ::testing::AssertionSuccess();
}

class WireBuffer {
 public:
  WireBuffer() : buf_(std::make_unique<std::byte[]>(wire::kMaxFrame)) {
    std::memset(buf_.get(), 0xEE, wire::kMaxFrame);  // poison: padding must be written as zeros
  }
  std::byte* get() { return buf_.get(); }

 private:
  std::unique_ptr<std::byte[]> buf_;
};

void expect_same(const std::vector<Entry>& got, const std::vector<Entry>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("entry " + std::to_string(i));
    EXPECT_EQ(got[i].op, want[i].op);
    EXPECT_EQ(got[i].region, want[i].region);
    EXPECT_EQ(got[i].offset, want[i].offset);
    EXPECT_EQ(got[i].length, want[i].length);
    EXPECT_TRUE(got[i].payload == want[i].payload) << "payload differs";
  }
}

TEST(BatchWriter, EmptyWriter) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  EXPECT_EQ(w.count(), 0u);
  EXPECT_EQ(w.bytes(), kHeader);
  EXPECT_EQ(w.response_bytes(), kHeader);
  auto frame = w.finish(1);
  std::vector<Entry> parsed;
  ASSERT_TRUE(parse_batch(frame, 1, parsed));
  EXPECT_TRUE(parsed.empty());
}

TEST(BatchWriter, RoundTripMixedLengths) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  std::vector<Entry> want;
  const uint32_t write_lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 100, 255};
  const uint32_t read_lengths[] = {0, 1, 13, 64, 1000};
  uint16_t region = 0;
  uint64_t expect_request = kHeader;
  uint64_t expect_response = kHeader;
  for (std::size_t i = 0; i < std::size(write_lengths); ++i) {
    Entry e{wire::Op::Write, region++, 0x1000u * i + 3, write_lengths[i], bytes_of(i, write_lengths[i])};
    ASSERT_TRUE(w.fits(e.op, e.length, 256));
    w.add(e.op, e.region, e.offset, e.length, e.payload.data());
    expect_request += 16 + wire::pad8(e.length);
    expect_response += 8;
    want.push_back(std::move(e));
    if (i < std::size(read_lengths)) {
      Entry r{wire::Op::Read, static_cast<uint16_t>(65535 - i), UINT64_MAX - i, read_lengths[i], {}};
      ASSERT_TRUE(w.fits(r.op, r.length, 256));
      w.add(r.op, r.region, r.offset, r.length, nullptr);
      expect_request += 16;
      expect_response += 8 + wire::pad8(r.length);
      want.push_back(std::move(r));
    }
  }
  EXPECT_EQ(w.count(), want.size());
  EXPECT_EQ(w.bytes(), expect_request);
  EXPECT_EQ(w.response_bytes(), expect_response);
  const uint64_t seq = 0x0102030405060708ull;
  auto frame = w.finish(seq);
  EXPECT_EQ(frame.data(), buf.get());
  EXPECT_EQ(frame.size(), w.bytes());
  std::vector<Entry> parsed;
  ASSERT_TRUE(parse_batch(frame, seq, parsed));
  expect_same(parsed, want);

  // reset() starts a new, empty batch in the same buffer.
  w.reset();
  EXPECT_EQ(w.count(), 0u);
  EXPECT_EQ(w.bytes(), kHeader);
  EXPECT_EQ(w.response_bytes(), kHeader);
  Entry again{wire::Op::Write, 1, 2, 3, bytes_of(99, 3)};
  w.add(again.op, again.region, again.offset, again.length, again.payload.data());
  frame = w.finish(seq + 1);
  ASSERT_TRUE(parse_batch(frame, seq + 1, parsed));
  expect_same(parsed, {again});
}

TEST(BatchWriter, RandomBatchesRoundTripAndRespectCaps) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  std::mt19937_64 rng(2024);
  uint64_t seq = 1;
  int multi_entry_batches = 0;
  for (int batch = 0; batch < 400; ++batch) {
    const uint32_t max_entries = 1 + static_cast<uint32_t>(rng() % 300);  // sometimes above kMaxBatchEntries
    std::vector<Entry> want;
    w.reset();
    for (;;) {
      const wire::Op op = (rng() % 2) ? wire::Op::Write : wire::Op::Read;
      // log-uniform lengths 0..kMaxChunk, many small ones
      const double l = std::uniform_real_distribution<double>(0.0, std::log(static_cast<double>(wire::kMaxChunk) + 1.0))(rng);
      const uint32_t length = std::min(wire::kMaxChunk, static_cast<uint32_t>(std::exp(l)) - 1u);
      const bool fits = w.fits(op, length, max_entries);
      const uint32_t count = w.count();
      const bool within_rules = count == 0 ||
                                (count < max_entries && count < wire::kMaxBatchEntries &&
                                 w.bytes() + wire::request_cost(op, length) <= kCap &&
                                 w.response_bytes() + wire::response_cost(op, length) <= kCap);
      ASSERT_EQ(fits, within_rules) << "batch " << batch << " count " << count << " op " << int(op) << " length "
                                    << length << " bytes " << w.bytes() << " response " << w.response_bytes();
      if (!fits) break;
      Entry e{op, static_cast<uint16_t>(rng()), rng(), length, {}};
      if (op == wire::Op::Write) e.payload = bytes_of(rng(), length);
      static const std::byte kNoPayload{};
      // A zero-length write still passes a valid pointer (memcpy with a null source is UB even for 0 bytes).
      const void* src = e.op != wire::Op::Write ? nullptr : e.payload.empty() ? &kNoPayload : e.payload.data();
      w.add(e.op, e.region, e.offset, e.length, src);
      want.push_back(std::move(e));
      ASSERT_LE(w.bytes(), wire::kMaxFrame);
      if (w.count() > 1) {
        ASSERT_LE(w.bytes(), kCap) << "a multi-entry batch exceeds the 4 KiB request cap";
        ASSERT_LE(w.response_bytes(), kCap) << "a multi-entry batch exceeds the 4 KiB response cap";
      }
      ASSERT_LE(w.count(), std::min(max_entries, wire::kMaxBatchEntries));
    }
    if (want.size() > 1) ++multi_entry_batches;
    auto frame = w.finish(seq);
    std::vector<Entry> parsed;
    ASSERT_TRUE(parse_batch(frame, seq, parsed)) << "batch " << batch;
    expect_same(parsed, want);
    ++seq;
  }
  EXPECT_GT(multi_entry_batches, 50);
}

TEST(BatchWriter, LoneLargeEntryAlwaysFits) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  // max_entries is irrelevant for the first entry, even 0.
  EXPECT_TRUE(w.fits(wire::Op::Write, wire::kMaxChunk, 0));
  EXPECT_TRUE(w.fits(wire::Op::Write, wire::kMaxChunk, 1));
  EXPECT_TRUE(w.fits(wire::Op::Read, wire::kMaxChunk, 1));

  auto big = bytes_of(5, wire::kMaxChunk);
  w.add(wire::Op::Write, 3, 4096, wire::kMaxChunk, big.data());
  EXPECT_EQ(w.bytes(), kHeader + 16 + wire::kMaxChunk);
  EXPECT_FALSE(w.fits(wire::Op::Read, 0, 256)) << "nothing joins an entry that already exceeds the cap";
  EXPECT_FALSE(w.fits(wire::Op::Write, 0, 256));
  auto frame = w.finish(9);
  std::vector<Entry> parsed;
  ASSERT_TRUE(parse_batch(frame, 9, parsed));
  expect_same(parsed, {Entry{wire::Op::Write, 3, 4096, wire::kMaxChunk, big}});

  // A lone large read: small request, large response.
  w.reset();
  w.add(wire::Op::Read, 0, 0, wire::kMaxChunk, nullptr);
  EXPECT_EQ(w.bytes(), kHeader + 16);
  EXPECT_EQ(w.response_bytes(), kHeader + 8 + wire::kMaxChunk);
  EXPECT_FALSE(w.fits(wire::Op::Write, 8, 256)) << "the response side is already over the cap";
  EXPECT_FALSE(w.fits(wire::Op::Read, 0, 256));

  // An entry just above the cap only goes alone.
  w.reset();
  EXPECT_TRUE(w.fits(wire::Op::Write, 5000, 256));
  w.add(wire::Op::Write, 0, 0, 8, bytes_of(1, 8).data());
  EXPECT_FALSE(w.fits(wire::Op::Write, 5000, 256));
  EXPECT_FALSE(w.fits(wire::Op::Read, 5000, 256));
  EXPECT_TRUE(w.fits(wire::Op::Write, 1000, 256));
}

TEST(BatchWriter, MaxEntriesRule) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(w.fits(wire::Op::Read, 8, 10)) << i;
    w.add(wire::Op::Read, 0, i * 8ull, 8, nullptr);
  }
  EXPECT_FALSE(w.fits(wire::Op::Read, 8, 10)) << "max_entries 10 reached";
  EXPECT_TRUE(w.fits(wire::Op::Read, 8, 11));
  EXPECT_FALSE(w.fits(wire::Op::Read, 8, 1));

  // kMaxBatchEntries caps the batch even when max_entries is larger: 256 zero-length reads exactly fill
  // the 4 KiB request budget (256 * 16), the 257th does not fit.
  w.reset();
  for (uint32_t i = 0; i < wire::kMaxBatchEntries; ++i) {
    ASSERT_TRUE(w.fits(wire::Op::Read, 0, 1000)) << i;
    w.add(wire::Op::Read, 0, i, 0, nullptr);
  }
  EXPECT_EQ(w.count(), wire::kMaxBatchEntries);
  EXPECT_EQ(w.bytes(), kCap);
  EXPECT_FALSE(w.fits(wire::Op::Read, 0, 1000));
  auto frame = w.finish(3);
  std::vector<Entry> parsed;
  ASSERT_TRUE(parse_batch(frame, 3, parsed));
  EXPECT_EQ(parsed.size(), wire::kMaxBatchEntries);
}

TEST(BatchWriter, RequestByteCapBoundary) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  const auto payload = bytes_of(2, 1000);
  // 4 writes of 1000 bytes: 4 * (16 + 1000) = 4064 request bytes; 32 bytes of budget remain.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(w.fits(wire::Op::Write, 1000, 256));
    w.add(wire::Op::Write, 0, 0, 1000, payload.data());
  }
  EXPECT_EQ(w.bytes(), kHeader + 4064);
  EXPECT_FALSE(w.fits(wire::Op::Write, 1000, 256));
  EXPECT_TRUE(w.fits(wire::Op::Write, 16, 256)) << "16 + 16 = 32 bytes: exactly at the cap";
  EXPECT_FALSE(w.fits(wire::Op::Write, 17, 256)) << "16 + pad8(17) = 40 bytes: over the cap";
  EXPECT_TRUE(w.fits(wire::Op::Read, 4000, 256)) << "a read costs 16 request bytes; its response side has room";
  w.add(wire::Op::Write, 0, 0, 16, payload.data());
  EXPECT_EQ(w.bytes(), kCap);
  EXPECT_FALSE(w.fits(wire::Op::Read, 0, 256)) << "request budget exhausted";
}

TEST(BatchWriter, ResponseByteCapBoundary) {
  WireBuffer buf;
  wire::BatchWriter w(buf.get());
  // 4 reads of 1000 bytes: response 4 * (8 + 1000) = 4032; 64 bytes remain.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(w.fits(wire::Op::Read, 1000, 256));
    w.add(wire::Op::Read, 0, 0, 1000, nullptr);
  }
  EXPECT_EQ(w.response_bytes(), kHeader + 4032);
  EXPECT_FALSE(w.fits(wire::Op::Read, 1000, 256));
  EXPECT_TRUE(w.fits(wire::Op::Read, 56, 256)) << "8 + 56 = 64: exactly at the cap";
  EXPECT_FALSE(w.fits(wire::Op::Read, 57, 256)) << "8 + pad8(57) = 72: over the cap";
  EXPECT_TRUE(w.fits(wire::Op::Write, 2000, 256)) << "a write adds only 8 response bytes";
  w.add(wire::Op::Read, 0, 0, 56, nullptr);
  EXPECT_EQ(w.response_bytes(), kCap);
  EXPECT_FALSE(w.fits(wire::Op::Write, 0, 256)) << "response budget exhausted";
}

}  // namespace
