// Executes one request batch against the regions granted to a connection and writes the response
// frame. Pure: no I/O, no threads, so the frame parser can be fuzzed on its own.
//
// The frame is validated completely before anything executes, so a malformed frame never
// half-applies. Structural faults (bad header, sizes, trailing bytes, unknown op, wrong sequence)
// make the whole frame malformed: the caller closes that connection. An entry whose range leaves
// its region is not a framing fault: it is answered with RC_E_OUT_OF_RANGE and the rest executes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace rc::server {

struct RegionView {
  std::byte* base;
  uint64_t size;
};

struct ExecResult {
  bool malformed = false;
  const char* reason = nullptr;           // why, when malformed
  uint32_t response_bytes = 0;            // of `out`
  std::optional<uint32_t> server_threads; // a SetServerThreads entry asked for this s
};

// What a connection may do to its regions. A migration source (wire::kConnectMigrationSource) only
// reads: its writes and SetServerThreads entries are answered RC_E_AUTH and change nothing, like an
// entry out of range, so the rest of its batch still runs.
enum class Access : uint8_t { ReadWrite, ReadOnly };

// `out` must hold wire::kMaxFrame bytes. `expected_seq` is the sequence the batch must carry.
ExecResult execute_batch(std::span<const std::byte> frame, std::span<const RegionView> regions,
                         uint64_t expected_seq, std::byte* out, Access access = Access::ReadWrite);

}  // namespace rc::server
