// Writes a seed corpus for every fuzz target, one directory per target under DIR:
//   fuzz-frame/        valid batch frames built with wire::BatchWriter (reads, writes, a control
//                      entry, out-of-range entries, the largest single-entry frames, a full small
//                      batch) plus well-formed Connect, ConnectReply and Notice frames;
//   fuzz-tcp-framing/  FrameReader scripts (streams of frames of every size up to kMaxFrame, in
//                      chunks, Notices, a bad header, a frame too large, an early end) and Outbox
//                      scripts (slow and irregular readers, a peer that closes);
//   fuzz-connect/      valid Connect/ConnectReply/Notice frames, encoder fields, capability texts
//                      and mint fields, registry scripts (open and with an admission key);
//   fuzz-response/     channel scripts: honest and mutated answers, Notices, one-sided ops;
//   fuzz-sequence/     streams of valid batches, with a wrong seq, a control entry, raw frames;
//   fuzz-admin/        admin frames (hello, challenge, sealed request and reply) and session scripts:
//                      every op sealed right, replays, wrong keys, flipped bits, oversized lists, drops.
// Script seeds follow fuzz_grammar.h. Seeds are generated at build/test time instead of being
// committed.
//
// usage: fuzz-seeds DIR

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "common/admin_codec.h"
#include "common/capability.h"
#include "common/status.h"
#include "common/wire.h"
#include "client/seal.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "transport/connect_codec.h"

namespace {

namespace wire = rc::wire;
using wire::Op;
using rc::fuzz::ScriptWriter;
using namespace rc::fuzz;

std::filesystem::path g_dir;
int g_count = 0;
bool g_ok = true;

void save(const std::string& target, const std::string& name, std::span<const std::byte> bytes) {
  std::error_code ec;
  std::filesystem::create_directories(g_dir / target, ec);
  const auto path = g_dir / target / name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "fuzz-seeds: cannot write %s\n", path.c_str());
    g_ok = false;
    return;
  }
  ++g_count;
}

void save(const std::string& target, const std::string& name, const ScriptWriter& w) {
  save(target, name, std::span<const std::byte>(reinterpret_cast<const std::byte*>(w.data().data()), w.data().size()));
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
  std::vector<std::byte> frame(uint64_t seq) {
    const auto f = w.finish(seq);
    return {f.begin(), f.end()};
  }
  void save_as(const std::string& name, uint64_t seq) { save("fuzz-frame", name, frame(seq)); }
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

std::vector<uint8_t> admission_key() { return std::vector<uint8_t>(kRgKeyBytes, kRgKeyByte); }

// A capability for fuzz-connect's registry that stays valid (expires in 2100).
constexpr uint64_t kYear2100Ms = 4102444800000ull;

wire::ConnectRequest connect_request(uint64_t cache_id, uint32_t regions, bool with_capability) {
  wire::ConnectRequest req{};
  req.cache_id = cache_id;
  req.regions = regions;
  req.server_threads = 1;
  const char token[] = "secret-token";
  req.token_length = sizeof token - 1;
  std::memcpy(req.token, token, sizeof token - 1);
  std::memset(req.client_id, 7, sizeof req.client_id);
  if (with_capability) {
    req.capability = rc::capability::mint(admission_key(), cache_id, kRgServerId, regions + 1, kYear2100Ms);
    req.capability_length = sizeof req.capability;
  }
  return req;
}

// ---- fuzz-frame -------------------------------------------------------------------------------

void frame_seeds() {
  // Regions in fuzz-frame: 0 and 1 are ~64 KiB (1 is odd-sized), 2 is 4 KiB.
  Builder().add(Op::Read, 0, 0, 64).save_as("batch-read", 1);
  Builder().add(Op::Write, 1, 100, 13).save_as("batch-write-odd", 1);
  Builder().add(Op::Write, 0, 4096, 256).add(Op::Read, 0, 4000, 512).save_as("batch-write-read", 1);
  Builder().add(Op::Write, 2, 0, 64).add(Op::Write, 2, 64, 64).save_as("batch-writes-allok", 7);
  Builder().add(Op::SetServerThreads, 0, 3, 0).save_as("batch-set-threads", 1);
  Builder()
      .add(Op::Read, 2, 4090, 16)      // leaves region 2
      .add(Op::Write, 5, 0, 8)         // no region 5
      .add(Op::Read, 1, 65521 - 8, 8)  // last bytes of the odd region
      .save_as("batch-out-of-range", 1);
  Builder().add(Op::Read, 0, 0, wire::kMaxChunk).save_as("batch-max-read", 1);
  Builder().add(Op::Write, 1, 1, wire::kMaxChunk).save_as("batch-max-write", 2);
  {
    Builder b;  // as many small entries as the batch rules allow, mixed
    for (uint32_t i = 0; b.w.fits(i % 2 ? Op::Read : Op::Write, 8, wire::kMaxBatchEntries); ++i)
      b.add(i % 2 ? Op::Read : Op::Write, static_cast<uint16_t>(i % 3), i * 8u, 8);
    b.save_as("batch-full", 1);
  }
  {
    Builder b;
    for (uint32_t i = 0; b.w.fits(Op::Read, 0, wire::kMaxBatchEntries); ++i) b.add(Op::Read, 0, i, 0);
    b.save_as("batch-many-empty-reads", 3);
  }
  {
    std::vector<std::byte> body;
    put(body, connect_request(42, 2, false));
    save("fuzz-frame", "connect-request", frame_of(wire::Kind::Connect, body));
  }
  {  // Connect replies: granted with two regions, and refused with every status a server may send
    wire::ConnectReply rep{};
    rep.status = 0;
    rep.region_count = 2;
    rep.region_size = 1 << 20;
    rep.max_frame = wire::kMaxFrame;
    std::vector<std::byte> body;
    put(body, rep);
    put(body, wire::RegionDescriptor{0x10000, 0});
    put(body, wire::RegionDescriptor{0x20000, 1});
    save("fuzz-frame", "connect-reply-ok", frame_of(wire::Kind::ConnectReply, body));

    // One past the last known status, too: the client must turn it into RC_E_PROTOCOL.
    for (int32_t status = RC_E_INVALID_ARGUMENT; rc::is_known_status(status + 1); --status) {
      wire::ConnectReply no{};
      no.status = status;
      std::snprintf(no.message, sizeof no.message, "%s", "refused");
      std::vector<std::byte> refused;
      put(refused, no);
      save("fuzz-frame", "connect-reply-refused" + std::to_string(status), frame_of(wire::Kind::ConnectReply, refused));
    }
  }
}

// ---- fuzz-tcp-framing -------------------------------------------------------------------------

ScriptWriter reader_script(uint8_t config) {
  ScriptWriter w;
  w.u8(0).u8(config);
  return w;
}

void append_frame(ScriptWriter& w, uint8_t kind_sel, uint32_t bytes, uint8_t corruption = 0) {
  w.u8(kRdAppendFrame).u8(kind_sel).upto(bytes, wire::kMaxFrame + 64).u8(corruption);
}
void send(ScriptWriter& w, uint32_t chunk) { w.u8(kRdSend).upto(chunk - 1, 0xffff); }
void next(ScriptWriter& w, bool consume = false) { w.u8(kRdNext).flag(consume); }

void tcp_framing_seeds() {
  const std::string t = "fuzz-tcp-framing";
  {  // batches of several sizes, sent in odd chunks
    ScriptWriter w = reader_script(0);
    const uint32_t sizes[] = {40, 24 + 16 + 64, 1000, 4120, wire::kMaxFrame, 48};
    for (uint32_t s : sizes) append_frame(w, 0, s);
    for (uint32_t c : {1u, 7u, 23u, 4096u, 40000u, 65536u}) {
      send(w, c);
      next(w);
    }
    w.u8(kRdSendAll);
    for (int i = 0; i < 6; ++i) next(w, i % 2 == 0);
    save(t, "reader-batches", w);
  }
  {  // responses with Notices between them, the last frame cut short by the end of the stream
    ScriptWriter w = reader_script(kRdResponse | kRdAllowNotice);
    append_frame(w, 1, 32);
    append_frame(w, 2, 24 + sizeof(wire::Notice));
    append_frame(w, 1, 24 + 8 + 4096);
    append_frame(w, 2, 24 + sizeof(wire::Notice));
    append_frame(w, 1, 2000);
    send(w, 100);
    next(w);
    w.u8(kRdConsume);
    send(w, 5000);
    next(w);
    next(w);
    send(w, 1200);
    w.u8(kRdShutdown);
    next(w);
    save(t, "reader-responses-notices", w);
  }
  {  // a Notice where none is allowed, after good frames
    ScriptWriter w = reader_script(kRdResponse);
    append_frame(w, 1, 64);
    append_frame(w, 2, 24 + sizeof(wire::Notice));
    w.u8(kRdSendAll);
    next(w);
    next(w);
    save(t, "reader-notice-refused", w);
  }
  {  // bad magic, bad version, too large, too small
    for (uint8_t bad = 0; bad < 4; ++bad) {
      ScriptWriter w = reader_script(0);
      append_frame(w, 0, 100);
      if (bad == 0) append_frame(w, 0, 100, 6);
      if (bad == 1) append_frame(w, 0, 100, 7);
      if (bad == 2) append_frame(w, 0, wire::kMaxFrame + 1);
      if (bad == 3) append_frame(w, 0, 23);
      w.u8(kRdSendAll);
      next(w);
      next(w);
      save(t, "reader-bad-" + std::to_string(bad), w);
    }
  }
  {  // many full-size frames through a small socket: the reader compacts its buffer
    ScriptWriter w = reader_script(kRdSmallSocket);
    for (int i = 0; i < 12; ++i) append_frame(w, 0, wire::kMaxFrame - static_cast<uint32_t>(i) * 999);
    for (int i = 0; i < 40; ++i) {
      send(w, 30000);
      next(w, i % 3 == 0);
    }
    save(t, "reader-compaction", w);
  }
  {  // a real batch frame as raw bytes, split
    Builder b;
    b.add(Op::Write, 0, 8, 40).add(Op::Read, 1, 0, 16);
    const auto f = b.frame(1);
    ScriptWriter w = reader_script(0);
    w.u8(kRdAppendRaw).upto(static_cast<uint32_t>(f.size()), 255).bytes(f);
    send(w, 30);
    next(w);
    send(w, 1000);
    next(w);
    save(t, "reader-raw-batch", w);
  }
  // Outbox: a slow reader that never drains completely, an irregular one, a peer that closes.
  {
    ScriptWriter w;
    w.u8(1).u8(1);  // 4 KiB socket buffer
    for (int i = 0; i < 60; ++i) {
      w.u8(kObPushFrame).upto(40000 - 1, 0xffff);
      w.u8(kObRead).upto(20000 - 1, 0xffff);
    }
    save(t, "outbox-slow-reader", w);
  }
  {
    ScriptWriter w;
    w.u8(1).u8(2);
    for (int i = 0; i < 30; ++i) {
      w.u8(kObPushSmall).upto(static_cast<uint32_t>(i * 7 % 256), 255);
      w.u8(kObPushBig).upto(static_cast<uint32_t>(i % 5), 255);
      w.u8(kObRead).upto(static_cast<uint32_t>(i * 4099 % 65536), 0xffff);
      if (i % 4 == 0) w.u8(kObFlush);
      if (i % 9 == 0) w.u8(kObReadAll);
    }
    save(t, "outbox-irregular", w);
  }
  {
    ScriptWriter w;
    w.u8(1).u8(3);
    w.u8(kObPushBig).upto(255, 255);  // 1 MiB at once
    w.u8(kObRead).upto(0xffff, 0xffff);
    w.u8(kObPushFrame).upto(1000, 0xffff);
    w.u8(kObFlush);
    w.u8(kObReadAll);
    w.u8(kObPushBig).upto(63, 255);
    w.u8(kObClosePeer).upto(10, 255);
    save(t, "outbox-close", w);
  }
}

// ---- fuzz-connect -----------------------------------------------------------------------------

void connect_seeds() {
  const std::string t = "fuzz-connect";
  auto with_mode = [](uint8_t mode, std::span<const std::byte> rest) {
    std::vector<std::byte> out{static_cast<std::byte>(mode)};
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  save(t, "raw-request", with_mode(kCnRaw, rc::transport::encode_connect_request(connect_request(5, 2, false))));
  save(t, "raw-request-capability",
       with_mode(kCnRaw, rc::transport::encode_connect_request(connect_request(5, 2, true))));
  {
    rc::transport::Grant g;
    g.region_size = 1 << 20;
    const wire::RegionDescriptor regions[] = {{0x10000, 0}, {0x20000, 1}, {0x30000, 2}};
    save(t, "raw-reply-ok", with_mode(kCnRaw, rc::transport::encode_connect_reply(g, regions)));
    g.status = RC_E_IN_USE;
    g.message = "cache 5 is open exclusively by another client";
    save(t, "raw-reply-refused", with_mode(kCnRaw, rc::transport::encode_connect_reply(g, {})));
  }
  save(t, "raw-notice", with_mode(kCnRaw, rc::transport::encode_notice(RC_E_EXPIRED, "the lease of cache 5 ended")));
  {
    ScriptWriter w;
    w.u8(kCnEncode);
    const auto req = connect_request(9, 3, true);
    w.bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&req), sizeof req));
    const std::string msg = "server memory limit reached";
    w.upto(16, 31).upto(static_cast<uint32_t>(msg.size()), 127).bytes(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(msg.data()), msg.size()));
    w.upto(2, 6).u64(0x1000).u64(1).u64(0x2000).u64(2).u64(1 << 20);
    w.upto(16 - 12, 31).upto(5, 127).bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("lease"), 5));
    save(t, "encode", w);
  }
  {  // a capability's text, then mint fields; the text also with blanks around it (libcrypto's
     // decoder skips those: the text form must not)
    const auto text = rc::capability::to_text(rc::capability::mint(admission_key(), 77, "server-a", 4, kYear2100Ms));
    auto capability_script = [&](const std::string& shown) {
      ScriptWriter w;
      w.u8(kCnCapability);
      w.upto(static_cast<uint32_t>(shown.size()), 300).bytes(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(shown.data()), shown.size()));
      w.upto(32, 80);
      for (int i = 0; i < 32; ++i) w.u8(static_cast<uint8_t>(i * 37));
      w.u64(77);
      w.upto(8, 70).bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("server-a"), 8));
      w.u32(4).u64(kYear2100Ms);
      w.upto(3, 31).u8(0);                       // the key bit to flip
      w.upto(8, 8);
      for (uint32_t bit : {0u, 39u, 100u, 400u, 800u, 895u, 896u, 1151u}) w.upto(bit, 8 * 144 - 1);
      return w;
    };
    save(t, "capability", capability_script(text));
    save(t, "capability-newlines-after", capability_script(text + "\n\n\n\n"));
    save(t, "capability-spaces-before", capability_script("    " + text));
  }
  // Registry scripts.
  auto attach = [](ScriptWriter& w, uint32_t id, uint32_t token, uint8_t regions, uint8_t flags, uint32_t client,
                   uint32_t cap_sel, uint8_t cap_which = 0, uint32_t cap_regions = 4, uint32_t expiry = 0,
                   bool codec = true) {
    w.u8(kRgAttach).upto(id, 3).upto(token, 3).u8(regions).u8(flags).upto(client, 2).u8(2).upto(cap_sel, 7);
    if (cap_sel >= 1 && cap_sel <= 5) {
      w.u8(cap_which).upto(cap_regions, 8).upto(expiry, 3);
      if (cap_sel == 5) w.upto(500, 8 * 144 - 1);
    }
    w.flag(codec);
  };
  {  // open mode: joins, a second client, exclusive conflicts, the limit, detaches
    ScriptWriter w;
    w.u8(kCnRegistry).u8(kRgCommitMemory).upto(5, 15).upto(0, 15);
    attach(w, 1, 1, 1, 0, 0, 0);      // cache 1, 2 regions (of a limit of 6)
    attach(w, 1, 1, 1, 0, 0, 0);      // joins
    attach(w, 1, 1, 1, 0, 1, 0);      // another client joins: shared
    attach(w, 1, 1, 1, 200, 0, 0);    // exclusive on a shared cache: refused
    attach(w, 1, 2, 2, 200, 0, 0);    // another token: another cache (3 regions), exclusive
    attach(w, 1, 2, 2, 0, 1, 0);      // another client on an exclusive cache: refused
    attach(w, 2, 0, 3, 0, 0, 0);      // 4 more regions: over the limit
    attach(w, 3, 3, 210, 0, 0, 0);    // zero regions
    w.u8(kRgDetach).u8(0);
    w.u8(kRgDetach).u8(0);
    w.u8(kRgDetach).u8(0);
    attach(w, 2, 0, 2, 0, 0, 0);      // 3 regions fit now
    w.u8(kRgExpire).upto(3, 3);
    save(t, "registry-open", w);
  }
  {  // admission: a good capability, then wrong key, expired, another cache, more regions than granted
    ScriptWriter w;
    w.u8(kCnRegistry).u8(kRgAdmission).upto(7, 15).upto(0, 15);
    attach(w, 1, 1, 1, 0, 0, 1, 0, 4, 0);   // 2 regions of 4 granted, lease in an hour
    attach(w, 1, 1, 1, 0, 0, 1, 0, 4, 3);   // joins, lease extended to forever
    attach(w, 1, 2, 2, 0, 0, 2, 0, 4, 0);   // same id, another token: 2 + 3 > 4
    attach(w, 1, 3, 0, 0, 0, 3, 0, 4, 0);   // same id, 1 region: 3 of 4
    attach(w, 2, 1, 0, 0, 0, 4);            // wrong key
    attach(w, 2, 1, 0, 0, 0, 1, 0, 4, 1);   // expired
    attach(w, 2, 1, 0, 0, 0, 1, 1, 4, 0);   // for another cache
    attach(w, 2, 1, 0, 0, 0, 1, 2, 4, 0);   // for another server
    attach(w, 2, 1, 0, 0, 0, 5);            // a bit flipped
    attach(w, 2, 1, 0, 0, 0, 0);            // none at all
    w.u8(kRgExpire).upto(2, 3);              // the hour-long lease of the token-3 cache ends
    attach(w, 3, 0, 0, 0, 0, 1, 0, 1, 0, false);
    w.u8(kRgExpire).upto(3, 3);
    w.u8(kRgDetach).u8(1);
    save(t, "registry-admission", w);
  }
  {  // migration sources: before the cache exists, with a client's capability, joined read-only, then
     // ambiguous once a second cache shares the id; a migration capability in an ordinary Connect
    ScriptWriter w;
    w.u8(kCnRegistry).u8(kRgAdmission).upto(7, 15).upto(0, 15);
    attach(w, 1, 0, 210, 245, 0, 1, 4, 0, 0);  // no cache 1 yet
    attach(w, 1, 1, 1, 0, 0, 1, 0, 4, 0);      // the owner: 2 regions of 4
    attach(w, 1, 0, 210, 245, 0, 1, 0, 0, 0);  // a client's capability
    attach(w, 1, 0, 210, 245, 0, 1, 4, 0, 0);  // joined read-only
    attach(w, 1, 1, 1, 0, 0, 1, 4, 4, 0);      // a migration capability as a client's: refused
    attach(w, 1, 2, 0, 0, 1, 1, 0, 4, 0);      // another token: a second cache with id 1
    attach(w, 1, 0, 210, 245, 0, 1, 4, 0, 0);  // two caches share the id
    w.u8(kRgDetach).u8(1);
    w.u8(kRgExpire).upto(3, 3);
    save(t, "registry-migration", w);
  }
  {  // a raw Connect carrying a capability minted with the registry's key
    ScriptWriter w;
    w.u8(kCnRegistry).u8(kRgAdmission).upto(3, 15).upto(0, 15);
    const auto req = connect_request(1, 1, true);
    w.u8(kRgAttachRaw).bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&req), sizeof req)).flag(true);
    w.u8(kRgAttachRaw).bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&req), sizeof req)).flag(false);
    w.u8(kRgExpire).upto(3, 3);
    save(t, "registry-raw", w);
  }
}

// ---- fuzz-response ----------------------------------------------------------------------------

void submit(ScriptWriter& w, bool read, uint32_t region, uint32_t offset, uint8_t length_sel, uint32_t length) {
  w.u8(kRsSubmit).flag(read).upto(region, 2).u8(0).upto(offset, 4095).u8(length_sel);
  if (length_sel == 0) w.upto(length - 1, 63);
  if (length_sel == 1) w.upto(length - 1, wire::kMaxChunk - 1);
}

void response_seeds() {
  const std::string t = "fuzz-response";
  {  // tcp-like: batches of 4, two in flight, honest answers
    ScriptWriter w;
    w.u8(0).upto(3, 15).upto(1, 7);
    for (int i = 0; i < 10; ++i) submit(w, i % 3 != 0, 0, static_cast<uint32_t>(i) * 100, 0, 8 + i);
    w.u8(kRsFlush);
    w.u8(kRsRespond).u8(0);
    w.u8(kRsProgress);
    w.u8(kRsRespond).u8(0);
    w.u8(kRsProgress);
    w.u8(kRsFlush).u8(kRsProgress);
    save(t, "honest-batches", w);
  }
  {  // a large read, out-of-range ops, an answer with a flipped byte
    ScriptWriter w;
    w.u8(0).upto(0, 15).upto(0, 7);
    submit(w, true, 1, 4000, 2, wire::kMaxChunk);
    submit(w, true, 2, 0, 0, 16);
    submit(w, false, 1, 4095, 1, 9000);
    w.u8(kRsRespond).u8(0);
    w.u8(kRsRespond).u8(3).u8(0).upto(40, 0xffff).u8(0x10);
    w.u8(kRsProgress);
    save(t, "mutated", w);
  }
  {  // a Notice behind a response, then a disconnection
    ScriptWriter w;
    w.u8(kRsRingPoll).upto(1, 15).upto(3, 7);
    for (int i = 0; i < 6; ++i) submit(w, true, 0, static_cast<uint32_t>(i) * 64, 0, 64);
    w.u8(kRsFlush);
    w.u8(kRsRespond).u8(0);
    w.u8(kRsRespond).u8(5).upto(12, 15).upto(5, 127).bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("lease"), 5));
    w.u8(kRsProgress);
    save(t, "notice", w);
  }
  {
    ScriptWriter w;
    w.u8(0).upto(7, 15).upto(0, 7);
    for (int i = 0; i < 4; ++i) submit(w, i % 2 == 0, 0, 8, 0, 32);
    w.u8(kRsFlush);
    w.u8(kRsRespond).u8(6);
    w.u8(kRsRespond).u8(7).upto(0, 2);
    w.u8(kRsRespond).u8(0);
    w.u8(kRsProgress);
    save(t, "disconnect", w);
  }
  {  // one-sided link: lone ops go one-sided, completions fail, a completion nobody posted
    ScriptWriter w;
    w.u8(kRsOneSided | kRsPreferOneSided).upto(0, 15).upto(2, 7);
    submit(w, true, 0, 0, 0, 40);
    submit(w, false, 1, 100, 0, 12);
    w.u8(kRsComplete).upto(1, 3).u8(2);
    w.u8(kRsProgress);
    submit(w, true, 0, 64, 0, 40);
    w.u8(kRsPostFail).flag(false);
    submit(w, true, 0, 64, 0, 40);
    w.u8(kRsProgress);
    w.u8(kRsComplete).upto(1, 3).u8(0);
    w.u8(kRsProgress);
    save(t, "one-sided", w);
  }
  {  // send_frame busy, then failing; a liveness probe that fails
    ScriptWriter w;
    w.u8(0).upto(1, 15).upto(0, 7);
    w.u8(kRsSendBusy).upto(2, 3).flag(false);
    for (int i = 0; i < 4; ++i) submit(w, false, 0, static_cast<uint32_t>(i) * 8, 0, 8);
    w.u8(kRsRespond).u8(6);
    w.u8(kRsAlive).flag(true);
    w.u8(kRsProgress);
    w.u8(kRsSendBusy).upto(0, 3).flag(true);
    submit(w, false, 0, 0, 0, 8);
    submit(w, false, 0, 0, 0, 8);
    save(t, "send-busy", w);
  }
}

// ---- fuzz-sequence ----------------------------------------------------------------------------

struct EntrySpec {
  uint8_t op_sel;  // 0 Read, 7 Write, 14 SetServerThreads
  uint32_t region;
  uint32_t offset;  // upto(4095) form
  uint32_t length;  // upto(64) form, or kMaxChunk with length_sel 2
  uint8_t length_sel = 0;
};

void built(ScriptWriter& w, const std::vector<EntrySpec>& entries, uint8_t seq_sel = 0) {
  w.u8(kSqBuilt).upto(static_cast<uint32_t>(entries.size() - 1), 15);
  for (const auto& e : entries) {
    w.u8(e.op_sel).upto(e.region, 3);
    if (e.op_sel == 14) {
      w.u16(static_cast<uint16_t>(e.offset));
      continue;
    }
    w.u8(0).upto(e.offset, 4095).u8(e.length_sel);
    if (e.length_sel == 0) w.upto(e.length, 64);
    if (e.length_sel == 1) w.upto(e.length, wire::kMaxChunk);
  }
  w.u8(seq_sel);
}

void sequence_seeds() {
  const std::string t = "fuzz-sequence";
  {  // writes then reads of the same bytes, over several batches, sent in pieces
    ScriptWriter w;
    w.u8(0);
    built(w, {{7, 0, 100, 40}, {0, 0, 96, 48}});
    built(w, {{7, 1, 0, 64}, {7, 1, 64, 64}, {0, 1, 32, 64}});
    built(w, {{0, 2, 4000, 64}, {0, 0, 100, 40}});
    w.u8(kSqSend).upto(29, 0xffff).u8(kSqServe).u8(kSqClientRead).upto(0, 7);
    w.u8(kSqSend).upto(999, 0xffff).u8(kSqServe).u8(kSqClientRead).upto(7, 7);
    built(w, {{14, 0, 3, 0}});
    built(w, {{7, 2, 0, 0, 2}});
    w.u8(kSqSend).upto(0xffff, 0xffff).u8(kSqServe);
    save(t, "writes-reads", w);
  }
  {  // a wrong sequence number in the third batch: the server stops there
    ScriptWriter w;
    w.u8(0);
    built(w, {{7, 0, 0, 8}});
    built(w, {{0, 0, 0, 8}});
    built(w, {{7, 0, 8, 8}}, 245);
    built(w, {{0, 0, 8, 8}});
    w.u8(kSqSend).upto(0xffff, 0xffff).u8(kSqServe).u8(kSqClientRead).upto(7, 7);
    save(t, "wrong-seq", w);
  }
  {  // lone SetServerThreads batches, one with a payload length (malformed)
    ScriptWriter w;
    w.u8(0);
    w.u8(kSqSetThreads).u16(4).u8(0);
    built(w, {{0, 0, 0, 16}});
    w.u8(kSqSetThreads).u16(70000 & 0xffff).u8(0);
    w.u8(kSqSetThreads).u16(1).u8(255).u8(8);
    save(t, "set-threads", w);
  }
  {  // big writes and reads through small sockets with an idle client
    ScriptWriter w;
    w.u8(kSqSmallSocket);
    for (int i = 0; i < 10; ++i) {
      built(w, {{static_cast<uint8_t>(i % 2 ? 0 : 7), 0, 0, 0, 2}});
      w.u8(kSqSend).upto(5000, 0xffff).u8(kSqServe);
    }
    w.u8(kSqClientRead).upto(2, 7);
    save(t, "big-small-socket", w);
  }
  {  // a raw frame with a valid header and garbage entries, then a corrupted batch
    ScriptWriter w;
    w.u8(0);
    built(w, {{7, 0, 0, 16}});
    const uint8_t garbage[] = {1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    w.u8(kSqRaw).upto(sizeof garbage, 0xffff).flag(true).upto(0, 255).bytes(garbage);
    w.u8(kSqCorrupt).upto(0, 15).u8(0).upto(0, 3).u8(0).upto(0, 4095).u8(0).upto(8, 64).u8(0).upto(30, 0xffff).u8(0x40);
    w.u8(kSqSend).upto(0xffff, 0xffff).u8(kSqServe);
    save(t, "raw-corrupt", w);
  }
}

// ---- fuzz-admin -------------------------------------------------------------------------------

// A Request step (fuzz_grammar.h) with every selector at its honest value unless given.
struct AdminStep {
  uint8_t op = 2;  // op sel: 0 none, 1 Ping, 2 Stats, 3 ListCaches, 4 DropCache, 5 raw_op, 6 ExtendLease
  uint16_t raw_op = 99;
  uint8_t id_sel = 0;
  uint8_t id = 0;
  uint8_t after_sel = 0;
  uint8_t max_sel = 0;
  uint32_t max = 0;
  uint8_t seq_sel = 0;
  uint8_t payload_sel = 0;
  uint8_t seal_sel = 0;
};

void admin_request(ScriptWriter& w, const AdminStep& s) {
  w.u8(kAdRequest).u8(s.op);
  if (s.op % 7 == 5) w.u16(s.raw_op);
  w.u8(s.id_sel);
  if (s.id_sel % 4 != 3) w.upto(s.id, 7);
  w.u8(s.after_sel);
  if (s.after_sel % 4 == 2) w.upto(0, 70);
  w.u8(s.max_sel);
  if (s.max_sel % 4 == 1) w.upto(s.max, wire::kAdminListPage);
  if (s.max_sel % 4 == 2) w.upto(s.max, 3);
  w.u8(0);  // reserved: zero
  w.u8(s.seq_sel).u8(s.payload_sel).u8(s.seal_sel);
}

// A Request step for `op` (1 Ping, 2 Stats, 3 ListCaches, 4 DropCache, 6 ExtendLease) with honest fields.
AdminStep honest(uint8_t op) {
  AdminStep s;
  s.op = op;
  return s;
}

void admin_seeds() {
  const std::string t = "fuzz-admin";
  auto with_mode = [](uint8_t mode, std::span<const std::byte> rest) {
    std::vector<std::byte> out{static_cast<std::byte>(mode)};
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  wire::AdminHello hello{};
  hello.admin_version = wire::kAdminVersion;
  save(t, "raw-hello", with_mode(kAdModeRaw, rc::admin::encode_hello(hello)));
  const uint8_t nonce[wire::kAdminServerNonceBytes] = {1, 2, 3};
  save(t, "raw-challenge", with_mode(kAdModeRaw, rc::admin::encode_challenge(RC_OK, nonce, "")));
  save(t, "raw-challenge-refused",
       with_mode(kAdModeRaw, rc::admin::encode_challenge(RC_E_AUTH, {}, "open mode (no admission key)")));
  {  // sealed under the raw mode's session key (kAdKey, zero nonces), so that they verify
    const std::vector<uint8_t> key(kAdKeyBytes, kAdKeyByte);
    const wire::AdminChallenge zero_challenge{};
    const wire::AdminHello zero_hello{};
    const auto session = rc::admin::derive_session_key(key, zero_challenge, zero_hello);
    wire::AdminRequest list{};
    list.max_count = 16;
    save(t, "raw-request", with_mode(kAdModeRaw, rc::admin::seal(session, wire::Kind::AdminRequest, wire::AdminOp::ListCaches,
                                                                  1, rc::admin::bytes_of(list))));
    wire::AdminDropResult dropped{2, 0};
    save(t, "raw-reply", with_mode(kAdModeRaw, rc::admin::seal(session, wire::Kind::AdminReply, wire::AdminOp::DropCache,
                                                                3, rc::admin::bytes_of(dropped))));
  }
  {  // every op, honestly, around caches coming and going
    ScriptWriter w;
    w.u8(kAdModeSession);
    w.u8(kAdHello).u8(0).u8(7);
    admin_request(w, honest(1));
    for (uint32_t id = 1; id <= 4; ++id) w.u8(kAdAttach).upto(id, 7).upto(id % 3, 2);
    w.u8(kAdAttach).upto(2, 7).upto(2, 2);  // joins
    admin_request(w, honest(2));
    AdminStep page = honest(3);
    page.max_sel = 1;
    page.max = 2;
    admin_request(w, page);
    page.after_sel = 1;  // the next page
    admin_request(w, page);
    AdminStep drop = honest(4);
    drop.id = 2;
    admin_request(w, drop);
    AdminStep extend = honest(6);
    extend.id = 1;
    admin_request(w, extend);  // a lease end of 0: refused in the reply
    extend.after_sel = 2;      // a lease end long past: answered (open mode: no cache has a lease)
    admin_request(w, extend);
    admin_request(w, honest(2));
    w.u8(kAdDetach).u8(1);
    w.u8(kAdDetach).u8(0);
    page.after_sel = 0;
    page.max = wire::kAdminListPage;
    admin_request(w, page);
    save(t, "session-honest", w);
  }
  {  // refusals: a replay, then (on fresh runs) another key, a flipped bit, an oversized list
    const AdminStep bad[] = {
        [] { AdminStep s = honest(2); s.seq_sel = 241; return s; }(),   // the previous seq: replayed
        [] { AdminStep s = honest(2); s.seal_sel = 5; return s; }(),    // another key
        [] { AdminStep s = honest(4); s.seal_sel = 6; return s; }(),    // a flipped bit (then upto(bits))
        [] { AdminStep s = honest(3); s.max_sel = 2; s.max = 1; return s; }(),  // kAdminListPage + 1
        [] { AdminStep s = honest(1); s.payload_sel = 7; return s; }(),  // 8 bytes too many
        [] { AdminStep s; s.op = 5; return s; }(),                       // op from a u16
    };
    int n = 0;
    for (const AdminStep& b : bad) {
      ScriptWriter w;
      w.u8(kAdModeSession);
      w.u8(kAdAttach).upto(1, 7).upto(0, 2);
      w.u8(kAdHello).u8(1).u8(0x21);
      admin_request(w, honest(2));
      admin_request(w, b);
      if (b.seal_sel == 6) w.upto(400, 80 * 8 - 1);
      admin_request(w, honest(1));  // after a refusal: nothing more
      save(t, "session-refused-" + std::to_string(n++), w);
    }
  }
  {  // a request before the hello, a second hello, a hello of another version
    ScriptWriter w;
    w.u8(kAdModeSession);
    admin_request(w, honest(1));
    save(t, "session-before-hello", w);
    ScriptWriter v;
    v.u8(kAdModeSession).u8(kAdHello).u8(2).u8(1);
    save(t, "session-other-version", v);
  }
}

}  // namespace

// ---- fuzz-unseal ------------------------------------------------------------------------------

void unseal_seeds() {
  const std::string t = "fuzz-unseal";
  std::array<uint8_t, rc::client::seal::kKeyBytes> key{};
  key.fill(kUnsealKeyByte);
  for (uint8_t sel = 0; sel < 2; ++sel) {  // 512 and 4096: a 64 KiB seed would pass the targets' max_len
    const uint32_t block = kUnsealBlocks[sel];
    rc::client::seal::Sealer sealer(key, kUnsealCacheId, block);
    const auto plain = payload(block, sel);
    std::vector<std::byte> stored(block + rc::client::seal::kTrailerBytes);
    sealer.seal(7, plain.data(), stored.data());
    ScriptWriter valid;
    valid.u8(kUnsealOpen).u8(sel).u64(7).bytes(std::span<const std::byte>(stored));
    save(t, "open-valid-" + std::to_string(block), valid);
    ScriptWriter zeros;
    zeros.u8(kUnsealOpen).u8(sel).u64(0);
    save(t, "open-zeros-" + std::to_string(block), zeros);
    ScriptWriter trip;
    trip.u8(kUnsealRoundTrip).u8(sel).u64(3).bytes(std::span<const std::byte>(plain)).u32(block + 5).u8(0x80);
    save(t, "round-trip-" + std::to_string(block), trip);
  }
}

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
  frame_seeds();
  tcp_framing_seeds();
  connect_seeds();
  response_seeds();
  sequence_seeds();
  admin_seeds();
  unseal_seeds();
  std::printf("fuzz-seeds: wrote %d seeds to %s\n", g_count, argv[1]);
  return g_ok ? 0 : 1;
}
