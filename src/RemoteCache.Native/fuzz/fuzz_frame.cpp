// libFuzzer target for everything that parses bytes a peer controls:
//  (a) rc::server::execute_batch — a request batch against three small fake regions, checked
//      against an independent model of the wire rules (layout, statuses, read data, no half-applied
//      malformed frames);
//  (b) rc::transport::decode_connect_request / decode_connect_reply;
//  (c) shm::RingReader over a fake shared segment whose indices and bytes come from the input (a
//      misbehaving peer), for a bounded number of peek / release steps;
//  (d) shm::RingWriter + RingReader with honest indices, as a round-trip property.
// The whole input is the frame for (a) and (b), so valid batch frames make good seeds; (c) and (d)
// draw their scripts from the same bytes through FuzzedDataProvider.
//
// Checks abort() (not assert(), which NDEBUG would remove) so libFuzzer reports them as crashes.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "server/executor.h"
#include "transport/shm/shm_ring.h"
#include "transport/connect_codec.h"

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz-frame: check failed at %s:%d: %s\n", __FILE__, __LINE__, \
                   #cond);                                                                \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace {

using rc::server::ExecResult;
using rc::server::RegionView;
namespace wire = rc::wire;
namespace shm = rc::transport::shm;

// ---- (a) execute_batch ------------------------------------------------------------------------

// Three regions, one of odd size; each a heap block of exactly its size so ASan sees any overrun.
constexpr uint64_t kRegionSizes[3] = {64 * 1024, 64 * 1024 - 15, 4 * 1024};

std::byte pattern(std::size_t region, uint64_t i) {
  return static_cast<std::byte>((i * 31u + region * 7u + (i >> 8)) & 0xffu);
}

struct Fixture {
  std::vector<std::vector<std::byte>> storage;
  std::vector<RegionView> regions;
  std::vector<std::byte> out;

  Fixture() : out(wire::kMaxFrame) {
    for (std::size_t r = 0; r < 3; ++r) {
      storage.emplace_back(kRegionSizes[r]);
      for (uint64_t i = 0; i < kRegionSizes[r]; ++i) storage[r][i] = pattern(r, i);
    }
    for (auto& s : storage) regions.push_back({s.data(), s.size()});
  }
};

Fixture& fixture() {
  static Fixture* f = new Fixture();  // never destroyed: libFuzzer may exit from any thread
  return *f;
}

// One request entry as the model parsed it.
struct Entry {
  wire::RequestEntry e;
  uint32_t payload = 0;  // offset of a write's payload within the frame
  bool in_range = false;
};

bool model_in_range(const wire::RequestEntry& e) {
  if (e.region >= 3) return false;
  const uint64_t size = kRegionSizes[e.region];
  return e.offset <= size && e.length <= size - e.offset;
}

// The model's reading of a frame: nullopt when the frame must be rejected as malformed.
// `entries` gets whatever parsed, even for a malformed frame (to check nothing was written).
bool model_parse(std::span<const std::byte> frame, uint64_t expected_seq, std::vector<Entry>& entries) {
  entries.clear();
  if (frame.size() < sizeof(wire::FrameHeader)) return false;
  const auto h = wire::read_header(frame.data());
  bool ok = h.magic == wire::kMagic && h.version == wire::kVersion &&
            h.kind == static_cast<uint8_t>(wire::Kind::Batch) && h.bytes == frame.size() &&
            h.bytes <= wire::kMaxFrame && h.count >= 1 && h.count <= wire::kMaxBatchEntries &&
            h.seq == expected_seq;
  std::size_t pos = sizeof h;
  uint64_t request_bytes = sizeof h;
  uint64_t response_bytes = sizeof h;
  const uint64_t count = h.count < wire::kMaxBatchEntries ? h.count : wire::kMaxBatchEntries;
  for (uint64_t i = 0; i < count; ++i) {
    if (frame.size() - pos < sizeof(wire::RequestEntry)) return false;
    Entry en;
    std::memcpy(&en.e, frame.data() + pos, sizeof en.e);
    pos += sizeof en.e;
    request_bytes += sizeof en.e;
    const auto op = static_cast<wire::Op>(en.e.op);
    if (op == wire::Op::Write) {
      if (en.e.length > wire::kMaxChunk) return false;
      const uint64_t padded = (uint64_t{en.e.length} + 7) & ~uint64_t{7};
      if (frame.size() - pos < padded) return false;
      en.payload = static_cast<uint32_t>(pos);
      pos += padded;
      request_bytes += padded;
    } else if (op == wire::Op::Read) {
      if (en.e.length > wire::kMaxChunk) return false;
      response_bytes += (uint64_t{en.e.length} + 7) & ~uint64_t{7};
    } else if (op == wire::Op::SetServerThreads) {
      if (en.e.length != 0) ok = false;
    } else {
      return false;
    }
    response_bytes += sizeof(wire::ResponseEntry);
    en.in_range = op != wire::Op::SetServerThreads && model_in_range(en.e);
    entries.push_back(en);
  }
  if (pos != frame.size()) ok = false;
  if (count > 1 && (request_bytes > sizeof(wire::FrameHeader) + wire::kBatchBytes ||
                    response_bytes > sizeof(wire::FrameHeader) + wire::kBatchBytes))
    ok = false;
  return ok;
}

// What a read of entry `j` must return: the region's initial pattern overlaid, in order, with the
// in-range writes that precede it in the batch.
void expected_read(std::span<const std::byte> frame, const std::vector<Entry>& entries, std::size_t j,
                   std::vector<std::byte>& want) {
  const auto& r = entries[j].e;
  want.resize(r.length);
  for (uint32_t k = 0; k < r.length; ++k) want[k] = pattern(r.region, r.offset + k);
  for (std::size_t i = 0; i < j; ++i) {
    const auto& w = entries[i].e;
    if (w.op != static_cast<uint8_t>(wire::Op::Write) || !entries[i].in_range || w.region != r.region)
      continue;
    const uint64_t lo = w.offset > r.offset ? w.offset : r.offset;
    const uint64_t w_end = w.offset + w.length, r_end = r.offset + r.length;
    const uint64_t hi = w_end < r_end ? w_end : r_end;
    if (lo >= hi) continue;
    std::memcpy(want.data() + (lo - r.offset), frame.data() + entries[i].payload + (lo - w.offset), hi - lo);
  }
}

bool region_matches_pattern(std::size_t region, uint64_t offset, uint64_t length) {
  const std::byte* base = fixture().storage[region].data();
  for (uint64_t k = 0; k < length; ++k)
    if (base[offset + k] != pattern(region, offset + k)) return false;
  return true;
}

void restore_pattern(std::size_t region, uint64_t offset, uint64_t length) {
  std::byte* base = fixture().storage[region].data();
  for (uint64_t k = 0; k < length; ++k) base[offset + k] = pattern(region, offset + k);
}

uint64_t cheap_hash(const uint8_t* data, std::size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

void fuzz_execute(const uint8_t* data, std::size_t size) {
  Fixture& fx = fixture();
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);

  // Half the time the batch carries the sequence the connection expects, otherwise it must be 1.
  uint64_t expected_seq = 1;
  if (size >= sizeof(wire::FrameHeader) && (cheap_hash(data, size) & 1) != 0)
    expected_seq = wire::read_header(frame.data()).seq;

  std::vector<Entry> entries;
  const bool model_ok = model_parse(frame, expected_seq, entries);

  const ExecResult res = rc::server::execute_batch(frame, fx.regions, expected_seq, fx.out.data());

  if (res.malformed) {
    FUZZ_CHECK(res.reason != nullptr);
    FUZZ_CHECK(!model_ok);
    // A malformed frame never half-applies: no write it carries reached its region.
    for (const Entry& en : entries)
      if (en.e.op == static_cast<uint8_t>(wire::Op::Write) && en.in_range)
        FUZZ_CHECK(region_matches_pattern(en.e.region, en.e.offset, en.e.length));
    return;
  }
  FUZZ_CHECK(model_ok);

  // The response header is valid and echoes the batch.
  FUZZ_CHECK(res.response_bytes >= sizeof(wire::FrameHeader));
  FUZZ_CHECK(res.response_bytes <= wire::kMaxFrame);
  const auto req = wire::read_header(frame.data());
  const auto rh = wire::read_header(fx.out.data());
  FUZZ_CHECK(wire::header_ok(rh, wire::Kind::Response, res.response_bytes));
  FUZZ_CHECK(rh.bytes == res.response_bytes);
  FUZZ_CHECK(rh.seq == req.seq);
  FUZZ_CHECK(rh.count == req.count);
  FUZZ_CHECK(entries.size() == req.count);
  if (req.count > 1) FUZZ_CHECK(res.response_bytes <= sizeof(wire::FrameHeader) + wire::kBatchBytes);

  bool all_ok = true, any_read = false;
  std::optional<uint32_t> threads;
  for (const Entry& en : entries) {
    if (en.e.op == static_cast<uint8_t>(wire::Op::Read)) any_read = true;
    if (en.e.op == static_cast<uint8_t>(wire::Op::SetServerThreads))
      threads = static_cast<uint32_t>(en.e.offset > 0xffff ? 0xffff : en.e.offset);
    else if (!en.in_range)
      all_ok = false;
  }
  FUZZ_CHECK(res.server_threads == threads);

  if ((rh.flags & wire::kFlagAllOk) != 0) {
    FUZZ_CHECK(all_ok && !any_read);
    FUZZ_CHECK(rh.bytes == sizeof(wire::FrameHeader));
  } else {
    FUZZ_CHECK(!(all_ok && !any_read));
    // Walk the response the way the client does; it must end exactly at response_bytes.
    uint64_t pos = sizeof(wire::FrameHeader);
    std::vector<std::byte> want;
    for (std::size_t j = 0; j < entries.size(); ++j) {
      const auto& e = entries[j].e;
      FUZZ_CHECK(res.response_bytes - pos >= sizeof(wire::ResponseEntry));
      wire::ResponseEntry re;
      std::memcpy(&re, fx.out.data() + pos, sizeof re);
      pos += sizeof re;
      const bool ok = e.op == static_cast<uint8_t>(wire::Op::SetServerThreads) || entries[j].in_range;
      FUZZ_CHECK(re.status == (ok ? RC_OK : RC_E_OUT_OF_RANGE));
      if (e.op == static_cast<uint8_t>(wire::Op::Read)) {
        const uint32_t padded = wire::pad8(e.length);
        FUZZ_CHECK(res.response_bytes - pos >= padded);
        FUZZ_CHECK(re.length == (ok ? e.length : 0u));
        const std::byte* got = fx.out.data() + pos;
        if (ok) {
          expected_read(frame, entries, j, want);
          FUZZ_CHECK(want.empty() || std::memcmp(got, want.data(), want.size()) == 0);
        }
        for (uint32_t k = ok ? e.length : 0; k < padded; ++k) FUZZ_CHECK(got[k] == std::byte{0});
        pos += padded;
      }
    }
    FUZZ_CHECK(pos == res.response_bytes);
  }

  // Put the regions back so every input starts from the same state (and the checks above hold).
  for (const Entry& en : entries)
    if (en.e.op == static_cast<uint8_t>(wire::Op::Write) && en.in_range)
      restore_pattern(en.e.region, en.e.offset, en.e.length);
}

// ---- (b) connect frames -----------------------------------------------------------------------

void fuzz_connect(const uint8_t* data, std::size_t size) {
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);

  wire::ConnectRequest request{};
  if (rc::transport::decode_connect_request(frame, request) == RC_OK) {
    FUZZ_CHECK(size == sizeof(wire::FrameHeader) + sizeof(wire::ConnectRequest));
    FUZZ_CHECK(request.token_length <= wire::kTokenMax);
  }

  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  const rc::Status st = rc::transport::decode_connect_reply(frame, reply, regions);
  if (st == RC_OK) {
    FUZZ_CHECK(reply.status == RC_OK);
    FUZZ_CHECK(reply.region_count > 0 && regions.size() == reply.region_count);
    FUZZ_CHECK(reply.region_size > 0);
    FUZZ_CHECK(size == sizeof(wire::FrameHeader) + sizeof reply +
                           regions.size() * sizeof(wire::RegionDescriptor));
  } else {
    // A refusal passes the server's status through when it is one of ours (RC_E_AUTH, RC_E_LIMIT,
    // ...), so any known error may come back, not only the decoder's own.
    FUZZ_CHECK(st != RC_OK && rc::is_known_status(st));
    const char* text = rc::last_error();
    FUZZ_CHECK(text != nullptr);
    (void)std::strlen(text);
  }
  FUZZ_CHECK(std::memchr(reply.message, '\0', sizeof reply.message) != nullptr);
}

// ---- (c) RingReader against a hostile peer ----------------------------------------------------

void fuzz_ring_reader(const uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  // Real rings are kRingBytes (a multiple of 8); small ones reach the wrap logic quickly.
  const uint32_t ring_size = 8u * in.ConsumeIntegralInRange<uint32_t>(1, 1024);
  std::vector<std::byte> ring(ring_size);  // exactly ring_size: ASan flags any access past it
  {
    const std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<uint32_t>(0, ring_size));
    if (!bytes.empty()) std::memcpy(ring.data(), bytes.data(), bytes.size());
  }
  shm::RingIndex head, tail;
  head.value.store(in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                    : in.ConsumeIntegralInRange<uint64_t>(0, 2ull * ring_size));
  tail.value.store(in.ConsumeIntegral<uint64_t>());
  shm::RingReader reader(head, tail, ring.data(), ring_size);

  for (int step = 0; step < 128 && in.remaining_bytes() > 0; ++step) {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
      case 1: {
        std::span<const std::byte> frame;
        const rc::Status st = reader.peek(frame);
        FUZZ_CHECK(st == RC_OK || st == RC_E_BUSY || st == RC_E_PROTOCOL);
        if (st == RC_OK) {
          FUZZ_CHECK(frame.size() <= wire::kMaxFrame);
          FUZZ_CHECK(frame.data() >= ring.data());
          FUZZ_CHECK(frame.data() + frame.size() <= ring.data() + ring.size());
          unsigned sum = 0;  // touch every byte handed out
          for (std::byte b : frame) sum += static_cast<unsigned>(b);
          (void)sum;
          if (in.ConsumeBool()) reader.release();
        }
        break;
      }
      case 2:
        reader.release();
        break;
      case 3:  // the peer publishes more (or less) data
        head.value.fetch_add(in.ConsumeIntegralInRange<uint64_t>(0, ring_size + 16));
        break;
      case 4:  // the peer publishes anything at all
        head.value.store(in.ConsumeIntegral<uint64_t>());
        break;
      case 5: {  // the peer scribbles a record header in the ring
        const uint32_t at = 8u * in.ConsumeIntegralInRange<uint32_t>(0, ring_size / 8 - 1);
        const uint32_t word = in.ConsumeBool() ? 0xffffffffu : in.ConsumeIntegral<uint32_t>();
        std::memcpy(ring.data() + at, &word, sizeof word);
        break;
      }
    }
  }
}

// ---- (d) RingWriter -> RingReader round trip with honest indices ------------------------------

void fuzz_ring_roundtrip(const uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const uint32_t ring_size = 8u * in.ConsumeIntegralInRange<uint32_t>(2, 1024);
  std::vector<std::byte> ring(ring_size);
  shm::RingIndex head, tail;
  shm::RingWriter writer(head, tail, ring.data(), ring_size);
  shm::RingReader reader(head, tail, ring.data(), ring_size);
  std::deque<std::vector<std::byte>> queued;
  uint8_t next = 0;

  for (int step = 0; step < 256 && in.remaining_bytes() > 0; ++step) {
    if (in.ConsumeBool()) {
      const uint32_t length = in.ConsumeIntegralInRange<uint32_t>(0, ring_size);
      std::vector<std::byte> frame(length);
      for (auto& b : frame) b = static_cast<std::byte>(next++);
      // (a zero-length frame still gets a non-null pointer: the writer memcpy()s from it)
      static const std::byte kNothing{};
      const rc::Status st = writer.write(frame.empty() ? std::span<const std::byte>(&kNothing, 0)
                                                       : std::span<const std::byte>(frame));
      if (8u + wire::pad8(length) > ring_size / 2) {
        FUZZ_CHECK(st == RC_E_INVALID_ARGUMENT);
      } else {
        FUZZ_CHECK(st == RC_OK || st == RC_E_BUSY);
        if (queued.empty()) FUZZ_CHECK(st == RC_OK);  // an empty ring takes any legal record
        if (st == RC_OK) queued.push_back(std::move(frame));
      }
    } else {
      std::span<const std::byte> frame;
      const rc::Status st = reader.peek(frame);
      if (queued.empty()) {
        FUZZ_CHECK(st == RC_E_BUSY);
      } else {
        FUZZ_CHECK(st == RC_OK);
        FUZZ_CHECK(frame.size() == queued.front().size());
        FUZZ_CHECK(frame.empty() || std::memcmp(frame.data(), queued.front().data(), frame.size()) == 0);
        reader.release();
        queued.pop_front();
      }
    }
  }
  while (!queued.empty()) {
    std::span<const std::byte> frame;
    FUZZ_CHECK(reader.peek(frame) == RC_OK);
    FUZZ_CHECK(frame.size() == queued.front().size());
    reader.release();
    queued.pop_front();
  }
  std::span<const std::byte> frame;
  FUZZ_CHECK(reader.peek(frame) == RC_E_BUSY);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz_execute(data, size);
  fuzz_connect(data, size);
  fuzz_ring_reader(data, size);
  fuzz_ring_roundtrip(data, size);
  return 0;
}
