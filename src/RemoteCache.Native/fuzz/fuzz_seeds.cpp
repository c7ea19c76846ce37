// Writes a seed corpus for fuzz-frame: valid batch frames built with wire::BatchWriter (reads,
// writes, a control entry, out-of-range entries, the largest single-entry frames, a full small
// batch) plus well-formed Connect and ConnectReply frames. Seeds are generated at build/test time
// instead of being committed.
//
// usage: fuzz-seeds DIR

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "common/wire.h"

namespace {

namespace wire = rc::wire;
using wire::Op;

std::filesystem::path g_dir;
int g_count = 0;

bool save(const std::string& name, std::span<const std::byte> bytes) {
  std::ofstream f(g_dir / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "fuzz-seeds: cannot write %s\n", (g_dir / name).c_str());
    return false;
  }
  ++g_count;
  return true;
}

std::vector<std::byte> payload(uint32_t length, uint8_t salt) {
  std::vector<std::byte> p(length);
  for (uint32_t i = 0; i < length; ++i) p[i] = static_cast<std::byte>((i * 13u + salt) & 0xffu);
  return p;
}

struct Builder {
  std::vector<std::byte> buf = std::vector<std::byte>(wire::kMaxFrame);
  wire::BatchWriter w{buf.data()};
  std::vector<std::vector<std::byte>> keep;  // payloads must outlive add()

  Builder& add(Op op, uint16_t region, uint64_t offset, uint32_t length) {
    const void* p = nullptr;
    if (op == Op::Write) {
      keep.push_back(payload(length, static_cast<uint8_t>(keep.size())));
      p = keep.back().data();
    }
    w.add(op, region, offset, length, p);
    return *this;
  }
  bool save_as(const std::string& name, uint64_t seq) { return save(name, w.finish(seq)); }
};

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

std::vector<std::byte> frame_of(wire::Kind kind, std::span<const std::byte> body) {
  std::vector<std::byte> out;
  const wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), 0,
                            static_cast<uint32_t>(sizeof(wire::FrameHeader) + body.size()), 0, 0};
  put(out, h);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(g_dir, ec);
  if (ec) {
    std::fprintf(stderr, "fuzz-seeds: cannot create %s: %s\n", argv[1], ec.message().c_str());
    return 1;
  }

  bool ok = true;
  // Regions in fuzz-frame: 0 and 1 are ~64 KiB (1 is odd-sized), 2 is 4 KiB.
  ok &= Builder().add(Op::Read, 0, 0, 64).save_as("batch-read", 1);
  ok &= Builder().add(Op::Write, 1, 100, 13).save_as("batch-write-odd", 1);
  ok &= Builder().add(Op::Write, 0, 4096, 256).add(Op::Read, 0, 4000, 512).save_as("batch-write-read", 1);
  ok &= Builder().add(Op::Write, 2, 0, 64).add(Op::Write, 2, 64, 64).save_as("batch-writes-allok", 7);
  ok &= Builder().add(Op::SetServerThreads, 0, 3, 0).save_as("batch-set-threads", 1);
  ok &= Builder()
            .add(Op::Read, 2, 4090, 16)     // leaves region 2
            .add(Op::Write, 5, 0, 8)        // no region 5
            .add(Op::Read, 1, 65521 - 8, 8) // last bytes of the odd region
            .save_as("batch-out-of-range", 1);
  ok &= Builder().add(Op::Read, 0, 0, wire::kMaxChunk).save_as("batch-max-read", 1);
  ok &= Builder().add(Op::Write, 1, 1, wire::kMaxChunk).save_as("batch-max-write", 2);
  {
    Builder b;  // as many small entries as the batch rules allow, mixed
    for (uint32_t i = 0; b.w.fits(i % 2 ? Op::Read : Op::Write, 8, wire::kMaxBatchEntries); ++i)
      b.add(i % 2 ? Op::Read : Op::Write, static_cast<uint16_t>(i % 3), i * 8u, 8);
    ok &= b.save_as("batch-full", 1);
  }
  {
    Builder b;
    for (uint32_t i = 0; b.w.fits(Op::Read, 0, wire::kMaxBatchEntries); ++i) b.add(Op::Read, 0, i, 0);
    ok &= b.save_as("batch-many-empty-reads", 3);
  }

  {  // Connect request
    wire::ConnectRequest req{};
    req.cache_id = 42;
    req.regions = 2;
    req.server_threads = 1;
    const char token[] = "secret-token";
    req.token_length = sizeof token - 1;
    std::memcpy(req.token, token, sizeof token - 1);
    std::vector<std::byte> body;
    put(body, req);
    ok &= save("connect-request", frame_of(wire::Kind::Connect, body));
  }
  {  // Connect replies: granted with two regions, and refused
    wire::ConnectReply rep{};
    rep.status = 0;
    rep.region_count = 2;
    rep.region_size = 1 << 20;
    rep.max_frame = wire::kMaxFrame;
    std::vector<std::byte> body;
    put(body, rep);
    put(body, wire::RegionDescriptor{0x10000, 0});
    put(body, wire::RegionDescriptor{0x20000, 1});
    ok &= save("connect-reply-ok", frame_of(wire::Kind::ConnectReply, body));

    wire::ConnectReply no{};
    no.status = -4;  // RC_E_AUTH
    std::snprintf(no.message, sizeof no.message, "%s", "wrong token");
    std::vector<std::byte> body2;
    put(body2, no);
    ok &= save("connect-reply-refused", frame_of(wire::Kind::ConnectReply, body2));
  }

  std::printf("fuzz-seeds: wrote %d seeds to %s\n", g_count, argv[1]);
  return ok ? 0 : 1;
}
