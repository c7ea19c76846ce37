// What moves between sessions, client threads and connections.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace rc::client {

class Session;

// The data-path settings every batching decision reads; derived from the cache's (c, s, b, q).
struct Knobs {
  uint32_t batch = 1;
  uint32_t depth = 1;
  bool prefer_one_sided = true;  // s == 0 (no server CPU) or b == 1 (latency first)
  uint64_t timeout_ns = 10'000'000'000ull;
};

// One slice of a caller's request: a single region, at most wire::kMaxChunk bytes.
struct Op {
  Session* session;
  void* buffer;       // read destination or write source (the caller keeps it alive)
  uint64_t offset;    // within the region
  uint32_t length;
  uint32_t slot;      // the caller's request in its session
  uint16_t server;
  uint16_t region;
  uint8_t kind;       // wire::Op
};

// Where finished slices report; implemented by Session.
void complete(const Op& op, Status status);

}  // namespace rc::client
