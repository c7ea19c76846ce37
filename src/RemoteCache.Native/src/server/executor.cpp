#include "server/executor.h"

#include <cstring>

#include "common/status.h"
#include "common/wire.h"

namespace rc::server {
namespace {

using wire::FrameHeader;
using wire::Op;
using wire::RequestEntry;
using wire::ResponseEntry;

ExecResult malformed(const char* reason) {
  ExecResult r;
  r.malformed = true;
  r.reason = reason;
  return r;
}

bool in_range(const RequestEntry& e, std::span<const RegionView> regions) {
  if (e.region >= regions.size()) return false;
  const uint64_t size = regions[e.region].size;
  return e.offset <= size && e.length <= size - e.offset;
}

}  // namespace

ExecResult execute_batch(std::span<const std::byte> frame, std::span<const RegionView> regions,
                         uint64_t expected_seq, std::byte* out, Access access) {
  if (frame.size() < sizeof(FrameHeader)) return malformed("frame shorter than its header");
  const FrameHeader h = wire::read_header(frame.data());
  if (!wire::header_ok(h, wire::Kind::Batch, frame.size()) || h.bytes != frame.size())
    return malformed("bad frame header");
  if (h.count == 0 || h.count > wire::kMaxBatchEntries) return malformed("bad entry count");
  if (h.seq != expected_seq) return malformed("out-of-sequence batch");

  // Pass 1: structure and size rules, so that nothing runs unless everything parses.
  uint32_t pos = sizeof(FrameHeader);
  uint32_t response_bytes = sizeof(FrameHeader);
  bool any_read = false;
  for (uint32_t i = 0; i < h.count; ++i) {
    if (h.bytes - pos < sizeof(RequestEntry)) return malformed("entry runs past the frame");
    RequestEntry e;
    std::memcpy(&e, frame.data() + pos, sizeof e);
    pos += sizeof e;
    switch (static_cast<Op>(e.op)) {
      case Op::Write:
        if (e.length > wire::kMaxChunk) return malformed("write longer than the chunk limit");
        if (h.bytes - pos < wire::pad8(e.length)) return malformed("write payload runs past the frame");
        pos += wire::pad8(e.length);
        break;
      case Op::Read:
        if (e.length > wire::kMaxChunk) return malformed("read longer than the chunk limit");
        any_read = true;
        break;
      case Op::SetServerThreads:
        if (e.length != 0) return malformed("control entry with payload");
        break;
      default:
        return malformed("unknown op");
    }
    response_bytes += wire::response_cost(static_cast<Op>(e.op), e.length);
  }
  if (pos != h.bytes) return malformed("trailing bytes after the last entry");
  if (h.count > 1 && (h.bytes > sizeof(FrameHeader) + wire::kBatchBytes ||
                      response_bytes > sizeof(FrameHeader) + wire::kBatchBytes))
    return malformed("batch larger than the batch limit");

  // Pass 2: execute in order.
  ExecResult result;
  bool all_ok = true;
  uint32_t in = sizeof(FrameHeader);
  uint32_t o = sizeof(FrameHeader);
  for (uint32_t i = 0; i < h.count; ++i) {
    RequestEntry e;
    std::memcpy(&e, frame.data() + in, sizeof e);
    in += sizeof e;
    const Op op = static_cast<Op>(e.op);
    ResponseEntry r{RC_OK, 0};
    if (op != Op::Read && access == Access::ReadOnly) {
      r.status = RC_E_AUTH;
      all_ok = false;
    } else if (op == Op::SetServerThreads) {
      result.server_threads = static_cast<uint32_t>(e.offset > 0xffff ? 0xffff : e.offset);
    } else if (!in_range(e, regions)) {
      r.status = RC_E_OUT_OF_RANGE;
      all_ok = false;
    } else if (op == Op::Write) {
      std::memcpy(regions[e.region].base + e.offset, frame.data() + in, e.length);
    }
    if (op == Op::Write) in += wire::pad8(e.length);
    // Entries are always written; an all-OK write-only batch drops them below (kFlagAllOk).
    // A read's payload slot is pad8(requested length) even when it failed, so the response
    // layout follows from the request alone.
    if (op == Op::Read && r.status == RC_OK) r.length = e.length;
    std::memcpy(out + o, &r, sizeof r);
    o += sizeof r;
    if (op == Op::Read) {
      const uint32_t padded = wire::pad8(e.length);
      if (r.status == RC_OK) {
        std::memcpy(out + o, regions[e.region].base + e.offset, e.length);
        if (padded != e.length) std::memset(out + o + e.length, 0, padded - e.length);
      } else {
        std::memset(out + o, 0, padded);
      }
      o += padded;
    }
  }

  FrameHeader rh{wire::kMagic, wire::kVersion, static_cast<uint8_t>(wire::Kind::Response), 0, o,
                 h.count, h.seq};
  if (all_ok && !any_read) {
    rh.flags = wire::kFlagAllOk;
    rh.bytes = sizeof(FrameHeader);
  }
  std::memcpy(out, &rh, sizeof rh);
  result.response_bytes = rh.bytes;
  return result;
}

}  // namespace rc::server
