// libFuzzer target for the server's admin frame parsing (remotecache_admin.h, docs/admin.md). The
// first byte picks one of two modes (fuzz_grammar.h, fuzz-admin):
//
//  Raw      decode_hello, decode_challenge, decode_notice and admin::open (as a request and as a
//           reply) on the rest of the input as one frame, each checked against an independent model
//           of its format; what decodes is encoded again and must decode to the same thing.
//  Session  a server::AdminSession keyed with a known admission key over a real Registry, fed hellos
//           and requests built from the input — sealed right, with another key, with one bit flipped
//           or cut short, out of sequence, with payloads of the wrong size, reserved or unused fields
//           set, unknown ops, oversized list counts — and raw frames, interleaved with caches
//           attaching to and detaching from the registry. A model of the protocol predicts whether
//           each frame is answered or refused (and with which status), and a model of the registry
//           what a verified reply holds: the stats, the page of caches and what is left after it, the
//           number of caches a drop removes, a lease extension's refusal of a lease end of 0 or too
//           far ahead (the registry is in open mode, so no cache has a lease to extend).

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/admin_codec.h"
#include "common/capability.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/wire.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "server/admin_session.h"
#include "server/registry.h"
#include "transport/connect_codec.h"

namespace {

using namespace rc::fuzz;
namespace wire = rc::wire;
namespace admin = rc::admin;
using rc::Status;

constexpr std::size_t kHeader = sizeof(wire::FrameHeader);
constexpr uint64_t kRegionSize = 4096;
constexpr uint32_t kRegionLimit = 256;
constexpr char kServerId[] = "fuzz-admin";

const std::vector<uint8_t>& admission_key() {
  static const std::vector<uint8_t> key(kAdKeyBytes, kAdKeyByte);
  return key;
}

std::span<const std::byte> as_bytes(std::span<const uint8_t> s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// HMAC-SHA256 straight from libcrypto: the model's reference for the session key and frame MACs.
std::array<uint8_t, 32> reference_hmac(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  FUZZ_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out.data(), &len) !=
             nullptr);
  FUZZ_CHECK(len == out.size());
  return out;
}

admin::SessionKey reference_session_key(const uint8_t (&server_nonce)[wire::kAdminServerNonceBytes],
                                        const uint8_t (&client_nonce)[wire::kAdminClientNonceBytes]) {
  std::vector<uint8_t> input(wire::kAdminKeyLabel, wire::kAdminKeyLabel + sizeof wire::kAdminKeyLabel - 1);
  input.insert(input.end(), server_nonce, server_nonce + sizeof server_nonce);
  input.insert(input.end(), client_nonce, client_nonce + sizeof client_nonce);
  return reference_hmac(admission_key(), input);
}

// Whether `frame` is, by the model, exactly one `kind` frame of this wire version with count 0; a
// plain (not sealed) one has flags and seq 0 too.
bool model_frame_is(std::span<const std::byte> frame, wire::Kind kind) {
  if (frame.size() < kHeader) return false;
  wire::FrameHeader h;
  std::memcpy(&h, frame.data(), sizeof h);
  const bool sealed = kind == wire::Kind::AdminRequest || kind == wire::Kind::AdminReply;
  return h.magic == wire::kMagic && h.version == wire::kVersion && h.kind == static_cast<uint8_t>(kind) &&
         h.bytes == frame.size() && h.bytes <= wire::kMaxFrame && h.count == 0 &&
         (sealed || (h.flags == 0 && h.seq == 0));
}

// ---- Raw: decoders on the input ---------------------------------------------------------------

void check_hello(std::span<const std::byte> frame) {
  wire::AdminHello hello{};
  const Status st = admin::decode_hello(frame, hello);
  const bool ok = model_frame_is(frame, wire::Kind::AdminHello) && frame.size() == kHeader + sizeof hello;
  FUZZ_CHECK(st == (ok ? RC_OK : RC_E_PROTOCOL));
  if (!ok) return;
  FUZZ_CHECK(std::memcmp(&hello, frame.data() + kHeader, sizeof hello) == 0);
  const auto again = admin::encode_hello(hello);
  FUZZ_CHECK(again.size() == frame.size() && std::memcmp(again.data(), frame.data(), frame.size()) == 0);
}

void check_challenge(std::span<const std::byte> frame) {
  wire::AdminChallenge c{};
  const Status st = admin::decode_challenge(frame, c);
  if (!model_frame_is(frame, wire::Kind::AdminChallenge) || frame.size() != kHeader + sizeof c) {
    FUZZ_CHECK(st == RC_E_PROTOCOL);
    return;
  }
  wire::AdminChallenge in;
  std::memcpy(&in, frame.data() + kHeader, sizeof in);
  const bool known = in.status <= RC_OK && in.status >= RC_E_LIMIT;
  const Status want = in.status != RC_OK                        ? (known ? static_cast<Status>(in.status) : RC_E_PROTOCOL)
                      : in.admin_version != wire::kAdminVersion ? RC_E_PROTOCOL
                                                                : RC_OK;
  FUZZ_CHECK(st == want);
  FUZZ_CHECK(c.message[sizeof c.message - 1] == '\0');
  if (st == RC_OK) {
    const auto again = admin::encode_challenge(RC_OK, c.nonce, c.message);
    wire::AdminChallenge c2{};
    FUZZ_CHECK(admin::decode_challenge(again, c2) == RC_OK);
    FUZZ_CHECK(std::memcmp(c.nonce, c2.nonce, sizeof c.nonce) == 0 && std::strcmp(c.message, c2.message) == 0);
  }
}

void check_open(std::span<const std::byte> frame, const admin::SessionKey& key, wire::Kind kind) {
  admin::Opened opened;
  const Status st = admin::open(key, frame, kind, opened);
  if (!model_frame_is(frame, kind) || frame.size() < kHeader + wire::kAdminMacBytes) {
    FUZZ_CHECK(st == RC_E_PROTOCOL);
    return;
  }
  const std::size_t signed_bytes = frame.size() - wire::kAdminMacBytes;
  const auto mac = reference_hmac(key, {reinterpret_cast<const uint8_t*>(frame.data()), signed_bytes});
  const bool verifies = std::memcmp(mac.data(), frame.data() + signed_bytes, mac.size()) == 0;
  FUZZ_CHECK(st == (verifies ? RC_OK : RC_E_AUTH));
  if (!verifies) return;
  wire::FrameHeader h;
  std::memcpy(&h, frame.data(), sizeof h);
  FUZZ_CHECK(opened.op == h.flags && opened.seq == h.seq && opened.payload.size() == signed_bytes - kHeader);
  const auto again = admin::seal(key, kind, static_cast<wire::AdminOp>(opened.op), opened.seq, opened.payload);
  FUZZ_CHECK(again.size() == frame.size() && std::memcmp(again.data(), frame.data(), frame.size()) == 0);
}

void fuzz_raw(Script& in) {
  const auto rest = in.bytes(in.remaining());
  const auto frame = as_bytes(rest);
  check_hello(frame);
  check_challenge(frame);
  // A Notice never decodes as success.
  FUZZ_CHECK(rc::transport::decode_notice(frame) != RC_OK);
  const uint8_t zeros_server[wire::kAdminServerNonceBytes] = {};
  const uint8_t zeros_client[wire::kAdminClientNonceBytes] = {};
  const admin::SessionKey key = reference_session_key(zeros_server, zeros_client);
  check_open(frame, key, wire::Kind::AdminRequest);
  check_open(frame, key, wire::Kind::AdminReply);
}

// ---- Session: an AdminSession against models ---------------------------------------------------

struct ModelCache {
  uint64_t id = 0;
  uint32_t token = 0;
  uint64_t serial = 0;
  uint32_t connections = 0;
  bool live = true;  // not dropped
};

struct Connection {
  std::shared_ptr<rc::server::CacheState> cache;
  ModelCache* model;
};

enum class Expect { Reply, Refused, Silent };

class SessionRun {
 public:
  SessionRun()
      : registry_(kRegionSize, kRegionLimit * kRegionSize, rc::server::Admission{{}, kServerId}, false),
        session_(rc::server::AdminContext{&registry_, 3, rc::now_ns(), [] { return 1u; }, [this] { ++wakeups_; }},
                 admission_key()) {}

  ~SessionRun() {
    for (auto& c : conns_) registry_.detach(c.cache);
    FUZZ_CHECK(registry_.memory_in_use() == 0);
  }

  void hello(Script& in) {
    std::vector<std::byte> frame;
    bool valid = false;
    switch (in.u8() % 4) {
      case 0:
      case 1:
        hello_.admin_version = wire::kAdminVersion;
        std::memset(hello_.nonce, static_cast<int>(in.u8()), sizeof hello_.nonce);
        frame = admin::encode_hello(hello_);
        valid = true;
        break;
      case 2: {
        wire::AdminHello other = hello_;
        other.admin_version = wire::kAdminVersion + 1 + in.u8();
        frame = admin::encode_hello(other);
        break;
      }
      default: {
        const auto raw = as_bytes(in.bytes(in.upto(80)));
        frame.assign(raw.begin(), raw.end());
        wire::AdminHello parsed{};
        valid = admin::decode_hello(frame, parsed) == RC_OK && parsed.admin_version == wire::kAdminVersion;
        if (valid) hello_ = parsed;
      }
    }
    const auto answer = session_.greet(frame);
    if (state_ != State::AwaitingHello || !valid) {
      FUZZ_CHECK(answer.close && !answer.refused.empty());
      state_ = State::Closed;
      return;
    }
    FUZZ_CHECK(!answer.close && answer.refused.empty());
    wire::AdminChallenge challenge{};
    FUZZ_CHECK(admin::decode_challenge(answer.frame, challenge) == RC_OK);
    key_ = reference_session_key(challenge.nonce, hello_.nonce);
    FUZZ_CHECK(key_ == admin::derive_session_key(admission_key(), challenge, hello_));
    state_ = State::Open;
  }

  void request(Script& in) {
    // 0 none, 1 Ping, 2 Stats, 3 ListCaches, 4 DropCache, 5 any op from a u16, 6 ExtendLease.
    const uint8_t op_sel = in.u8() % 7;
    const uint16_t op = op_sel == 5 ? in.u16() : static_cast<uint16_t>(op_sel);
    wire::AdminRequest r{};
    switch (in.u8() % 4) {
      case 3: r.cache_id = in.u64(); break;
      default: r.cache_id = in.upto(7); break;
    }
    switch (in.u8() % 4) {
      case 0: r.after = 0; break;
      case 1: r.after = last_listed_; break;
      case 2: r.after = in.upto(70); break;
      default: r.after = in.u64(); break;
    }
    switch (in.u8() % 4) {
      case 0: r.max_count = 0; break;
      case 1: r.max_count = in.upto(wire::kAdminListPage); break;
      case 2: r.max_count = wire::kAdminListPage + in.upto(3); break;
      default: r.max_count = in.u32(); break;
    }
    r.reserved = in.u8() < 250 ? 0 : in.u32();
    const uint8_t seq_sel = in.u8();
    uint64_t seq = next_seq_;
    if (seq_sel >= 252) seq = in.u64();
    else if (seq_sel >= 248) seq = 0;
    else if (seq_sel >= 240) seq = next_seq_ - 1;
    else if (seq_sel >= 230) seq = next_seq_ + 1;
    const auto fields = admin::bytes_of(r);
    std::vector<std::byte> payload(fields.begin(), fields.end());
    const uint8_t payload_sel = in.u8() % 8;
    if (payload_sel == 6) payload.resize(payload.size() - 8);
    if (payload_sel == 7) payload.resize(payload.size() + 8, std::byte{0});
    const uint8_t seal_sel = in.u8() % 8;
    admin::SessionKey key = key_;
    if (seal_sel == 5) key[0] ^= static_cast<uint8_t>(0x80);
    auto frame = admin::seal(key, wire::Kind::AdminRequest, static_cast<wire::AdminOp>(op), seq, payload);
    Status want = RC_OK;
    if (seal_sel == 7) {
      frame.pop_back();
      want = RC_E_PROTOCOL;
    } else if (seal_sel == 6) {
      const uint32_t bit = in.upto(static_cast<uint32_t>(frame.size() * 8 - 1));
      frame[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      // magic, version, kind, bytes and count are structure; flags, seq, payload and MAC are signed.
      const bool structural = bit < 48 || (bit >= 64 && bit < 128);
      want = structural ? RC_E_PROTOCOL : RC_E_AUTH;
    } else if (seal_sel == 5) {
      want = RC_E_AUTH;
    }
    if (want == RC_OK) want = model_request(op, r, seq, payload.size());
    check_answer(frame, want, static_cast<wire::AdminOp>(op), r, seq);
  }

  void raw(Script& in) {
    const auto b = in.bytes(in.upto(200));
    const auto frame = as_bytes(b);
    // Whatever it holds, it cannot carry a MAC under this session's key by chance: refused, unless it
    // is an honest request the fuzzer rebuilt (then the model says what it does).
    admin::Opened opened;
    Status want = RC_E_PROTOCOL;
    wire::AdminRequest r{};
    if (state_ == State::Open) {
      want = admin::open(key_, frame, wire::Kind::AdminRequest, opened);
      if (want == RC_OK) {
        if (opened.payload.size() == sizeof r) std::memcpy(&r, opened.payload.data(), sizeof r);
        want = model_request(opened.op, r, opened.seq, opened.payload.size());
      }
    }
    check_answer(frame, want, static_cast<wire::AdminOp>(opened.op), r, opened.seq);
  }

  void attach(Script& in) {
    wire::ConnectRequest r{};
    r.cache_id = in.upto(7);
    const uint32_t token = in.upto(2);
    const std::string text = "token-" + std::to_string(token);
    std::memcpy(r.token, text.data(), text.size());
    r.token_length = static_cast<uint32_t>(text.size());
    r.regions = 1;
    r.server_threads = 1;
    ModelCache* target = nullptr;
    for (auto& m : caches_)
      if (m->live && m->id == r.cache_id && m->token == token) target = m.get();
    const bool fits = target != nullptr || in_use_regions() < kRegionLimit;
    std::shared_ptr<rc::server::CacheState> cache;
    const auto grant = registry_.attach(r, cache);
    FUZZ_CHECK(grant.status == (fits ? RC_OK : RC_E_NO_MEMORY));
    if (!fits) return;
    if (target == nullptr) {
      auto m = std::make_unique<ModelCache>();
      m->id = r.cache_id;
      m->token = token;
      m->serial = ++serials_;
      FUZZ_CHECK(cache->serial == m->serial);
      target = m.get();
      caches_.push_back(std::move(m));
    }
    ++target->connections;
    conns_.push_back(Connection{cache, target});
  }

  void detach(Script& in) {
    if (conns_.empty()) return;
    const std::size_t i = in.u8() % conns_.size();
    registry_.detach(conns_[i].cache);
    ModelCache* m = conns_[i].model;
    conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
    if (--m->connections == 0)
      caches_.erase(std::find_if(caches_.begin(), caches_.end(), [&](const auto& c) { return c.get() == m; }));
  }

 private:
  enum class State { AwaitingHello, Open, Closed };

  uint32_t in_use_regions() const { return static_cast<uint32_t>(caches_.size()); }

  // What the session must answer to a request whose MAC verifies.
  Status model_request(uint16_t op, const wire::AdminRequest& r, uint64_t seq, std::size_t payload_size) const {
    if (seq != next_seq_) return RC_E_AUTH;
    if (payload_size != sizeof r || r.reserved != 0) return RC_E_PROTOCOL;
    switch (op) {
      case 1:
      case 2: return r.cache_id == 0 && r.after == 0 && r.max_count == 0 ? RC_OK : RC_E_PROTOCOL;
      case 3: return r.cache_id == 0 && r.max_count <= wire::kAdminListPage ? RC_OK : RC_E_PROTOCOL;
      case 4: return r.after == 0 && r.max_count == 0 ? RC_OK : RC_E_PROTOCOL;
      case 6: return r.max_count == 0 ? RC_OK : RC_E_PROTOCOL;  // a bad lease end is refused in the reply
      default: return RC_E_PROTOCOL;
    }
  }

  void check_answer(std::span<const std::byte> frame, Status want, wire::AdminOp op, const wire::AdminRequest& r,
                    uint64_t seq) {
    if (state_ == State::Closed) {
      const auto answer = session_.handle(frame);
      FUZZ_CHECK(answer.close && answer.frame.empty());
      return;
    }
    if (state_ == State::AwaitingHello) want = RC_E_PROTOCOL;
    // The model of the registry before the request runs (a drop changes it).
    std::vector<const ModelCache*> listed;
    for (const auto& m : caches_)
      if (m->live) listed.push_back(m.get());
    const uint32_t wakeups = wakeups_;
    const uint64_t before_ms = rc::capability::unix_now_ms();
    const auto answer = session_.handle(frame);
    const uint64_t after_ms = rc::capability::unix_now_ms();
    if (want != RC_OK) {
      FUZZ_CHECK(answer.close && !answer.refused.empty());
      FUZZ_CHECK(rc::transport::decode_notice(answer.frame) == want);
      FUZZ_CHECK(wakeups_ == wakeups);
      state_ = State::Closed;
      return;
    }
    FUZZ_CHECK(!answer.close && answer.refused.empty());
    admin::Opened reply;
    FUZZ_CHECK(admin::open(key_, answer.frame, wire::Kind::AdminReply, reply) == RC_OK);
    FUZZ_CHECK(reply.seq == seq && reply.op == static_cast<uint16_t>(op));
    ++next_seq_;
    switch (op) {
      case wire::AdminOp::Ping: FUZZ_CHECK(reply.payload.empty()); break;
      case wire::AdminOp::Stats: check_stats(reply.payload, listed); break;
      case wire::AdminOp::ListCaches: check_list(reply.payload, listed, r); break;
      case wire::AdminOp::DropCache: check_drop(reply.payload, r.cache_id, wakeups); break;
      case wire::AdminOp::ExtendLease: check_extend(reply.payload, r, before_ms, after_ms); break;
      // No script carries a pull's 304-byte payload (requests are AdminRequests, raw frames at most
      // 200 bytes), so the model refuses every pull; test_migration_pull.cpp covers the op.
      case wire::AdminOp::PullRegion: FUZZ_CHECK(false); break;
    }
  }

  void check_stats(std::span<const std::byte> payload, const std::vector<const ModelCache*>& listed) const {
    wire::AdminStats s{};
    FUZZ_CHECK(payload.size() == sizeof s);
    std::memcpy(&s, payload.data(), sizeof s);
    uint32_t connections = 0;
    for (const auto& m : caches_) connections += m->connections;
    FUZZ_CHECK(s.caches == listed.size());
    FUZZ_CHECK(s.memory_lent == caches_.size() * kRegionSize && s.regions_lent == caches_.size());
    FUZZ_CHECK(s.memory_limit == kRegionLimit * kRegionSize && s.region_size == kRegionSize);
    FUZZ_CHECK(s.data_connections == connections && s.admin_connections == 1 && s.server_threads == 3);
    FUZZ_CHECK(std::string(s.server_id, s.server_id_length) == kServerId);
  }

  void check_list(std::span<const std::byte> payload, const std::vector<const ModelCache*>& listed,
                  const wire::AdminRequest& r) {
    wire::AdminListHead head{};
    FUZZ_CHECK(payload.size() >= sizeof head);
    std::memcpy(&head, payload.data(), sizeof head);
    std::vector<const ModelCache*> after;
    for (const ModelCache* m : listed)
      if (m->serial > r.after) after.push_back(m);
    std::sort(after.begin(), after.end(), [](const auto* a, const auto* b) { return a->serial < b->serial; });
    const std::size_t count = std::min<std::size_t>(after.size(), r.max_count);
    FUZZ_CHECK(head.count == count && head.more == after.size() - count);
    FUZZ_CHECK(payload.size() == sizeof head + count * sizeof(wire::AdminCacheEntry));
    for (std::size_t i = 0; i < count; ++i) {
      wire::AdminCacheEntry e{};
      std::memcpy(&e, payload.data() + sizeof head + i * sizeof e, sizeof e);
      FUZZ_CHECK(e.cache_id == after[i]->id && e.serial == after[i]->serial && e.regions == 1);
      FUZZ_CHECK(e.connections == after[i]->connections && e.server_threads == 1 && e.flags == 0);
      FUZZ_CHECK(e.lease_end_unix_ms == 0);
      last_listed_ = e.serial;
    }
  }

  // The server read its clock between before_ms and after_ms: a lease end that far ahead of one and
  // not the other may go either way.
  void check_extend(std::span<const std::byte> payload, const wire::AdminRequest& r, uint64_t before_ms,
                    uint64_t after_ms) const {
    wire::AdminExtendResult result{};
    FUZZ_CHECK(payload.size() == sizeof result);
    std::memcpy(&result, payload.data(), sizeof result);
    FUZZ_CHECK(result.message[sizeof result.message - 1] == '\0');
    const auto too_far = [&](uint64_t now) { return r.lease_end_unix_ms > now && r.lease_end_unix_ms - now > RC_MAX_LEASE_AHEAD_MS; };
    if (r.lease_end_unix_ms != 0 && too_far(before_ms) != too_far(after_ms)) return;
    const bool refused = r.lease_end_unix_ms == 0 || too_far(before_ms);
    FUZZ_CHECK(result.status == (refused ? RC_E_INVALID_ARGUMENT : RC_OK));
    FUZZ_CHECK(result.caches == 0);  // open mode: no cache has a lease
    FUZZ_CHECK(refused == (result.message[0] != '\0'));
  }

  void check_drop(std::span<const std::byte> payload, uint64_t id, uint32_t wakeups_before) {
    wire::AdminDropResult result{};
    FUZZ_CHECK(payload.size() == sizeof result);
    std::memcpy(&result, payload.data(), sizeof result);
    uint32_t want = 0;
    for (auto& m : caches_) {
      if (!m->live || m->id != id) continue;
      m->live = false;
      ++want;
    }
    FUZZ_CHECK(result.dropped == want && result.reserved == 0);
    FUZZ_CHECK(wakeups_ == wakeups_before + (want > 0 ? 1 : 0));
    for (const auto& c : conns_)
      FUZZ_CHECK((c.cache->dropped.load() == rc::server::DropCause::ByManager) == !c.model->live);
  }

  rc::server::Registry registry_;
  rc::server::AdminSession session_;
  uint32_t wakeups_ = 0;
  State state_ = State::AwaitingHello;
  wire::AdminHello hello_{};
  admin::SessionKey key_{};
  uint64_t next_seq_ = 1;
  uint64_t last_listed_ = 0;
  uint64_t serials_ = 0;
  std::vector<std::unique_ptr<ModelCache>> caches_;  // every cache holding memory, dropped ones too
  std::vector<Connection> conns_;
};

void fuzz_session(Script& in) {
  SessionRun run;
  for (int step = 0; step < kAdMaxSteps && !in.empty(); ++step) {
    switch (in.u8() % kAdStepCount) {
      case kAdHello: run.hello(in); break;
      case kAdRequest:
      case kAdRequest2:
      case kAdRequest3: run.request(in); break;
      case kAdRawFrame: run.raw(in); break;
      case kAdAttach:
      case kAdAttach2: run.attach(in); break;
      case kAdDetach: run.detach(in); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rc::set_log_level(rc::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Script in(data, size);
  switch (in.u8() % kAdModeCount) {
    case kAdModeRaw: fuzz_raw(in); break;
    case kAdModeSession: fuzz_session(in); break;
  }
  return 0;
}
