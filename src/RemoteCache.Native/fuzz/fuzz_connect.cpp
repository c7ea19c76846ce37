// libFuzzer target for admission: the Connect handshake's codec, capabilities and the registry.
// The first byte picks one of four modes (fuzz_grammar.h, fuzz-connect):
//
//  Raw         decode_connect_request / decode_connect_reply / decode_notice on the rest of the
//              input as one frame, each checked against an independent model of its format; what
//              decodes is encoded again and must decode to the same thing.
//  Encode      encode_connect_request / encode_connect_reply / encode_notice with fields from the
//              input (any token and capability lengths, statuses, messages with NULs or longer than
//              the field, 0..6 regions), decoded again: the model says what must come back.
//  Capability  capability::from_text on arbitrary text (and crypto::base64url_decode against an
//              independent base64url decoder); mint with fields from the input (throws exactly for
//              a short key or a bad server id), to_text + from_text round trip, verify against the
//              matching expectation (RC_OK) and against each single mismatch (RC_E_AUTH): another
//              cache, server, region count, expiry, a key with one bit flipped, and the capability
//              with any one of its 1152 bits flipped.
//  Registry    a server::Registry (64 KiB regions, a limit of 1..16 regions, open or with an
//              admission key) fed Connects built from the input (structured ones with minted,
//              forged, expired, bit-flipped or absent capabilities, and raw 256-byte ones), through
//              the codec or directly, interleaved with detach() and expire(now). A model of the
//              registry's rules predicts every grant's status, which cache a Connect joins, what
//              expire() drops, and memory_in_use(), which never exceeds the limit and is 0 once
//              every connection is detached.

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/capability.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/status.h"
#include "common/wire.h"
#include "fuzz_grammar.h"
#include "fuzz_util.h"
#include "server/registry.h"
#include "transport/connect_codec.h"

namespace {

using namespace rc::fuzz;
namespace wire = rc::wire;
namespace cap = rc::capability;
using rc::Status;

constexpr std::size_t kHeader = sizeof(wire::FrameHeader);

std::span<const std::byte> as_bytes(std::span<const uint8_t> s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The model's own notion of a known status (rc_status's values), not the library's helper.
bool known_status(int32_t s) { return s <= RC_OK && s >= RC_E_LIMIT; }

// HMAC-SHA256 straight from libcrypto: the model's reference for capability MACs.
std::array<uint8_t, 32> reference_mac(std::span<const uint8_t> key, const wire::Capability& c) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  FUZZ_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(&c),
                  wire::kCapabilitySigned, out.data(), &len) != nullptr);
  FUZZ_CHECK(len == out.size());
  return out;
}

bool header_is(std::span<const std::byte> frame, wire::Kind kind) {
  if (frame.size() < kHeader) return false;
  wire::FrameHeader h;
  std::memcpy(&h, frame.data(), sizeof h);
  return h.magic == wire::kMagic && h.version == wire::kVersion && h.kind == static_cast<uint8_t>(kind) &&
         h.bytes == frame.size() && h.bytes <= wire::kMaxFrame;
}

// The C string a message field holds once the codec copied `text` into it (at most N-1 bytes,
// read back up to the first NUL).
template <std::size_t N>
std::string field_text(std::string_view text) {
  std::string s(text.substr(0, std::min(text.size(), N - 1)));
  return s.substr(0, std::min(s.size(), std::strlen(s.c_str())));
}

bool starts_with(const char* text, const std::string& prefix) {
  return std::strncmp(text, prefix.data(), prefix.size()) == 0 && std::strlen(text) == prefix.size();
}

// ---- Raw: decoders on the input ---------------------------------------------------------------

void check_request_decode(std::span<const std::byte> frame) {
  wire::ConnectRequest req{};
  const Status st = rc::transport::decode_connect_request(frame, req);
  bool ok = frame.size() == kHeader + sizeof req && header_is(frame, wire::Kind::Connect);
  if (ok) {
    wire::ConnectRequest in;
    std::memcpy(&in, frame.data() + kHeader, sizeof in);
    ok = in.token_length <= wire::kTokenMax &&
         (in.capability_length == 0 || in.capability_length == sizeof(wire::Capability));
  }
  FUZZ_CHECK(st == (ok ? RC_OK : RC_E_PROTOCOL));
  if (!ok) return;
  FUZZ_CHECK(std::memcmp(&req, frame.data() + kHeader, sizeof req) == 0);
  const auto again = rc::transport::encode_connect_request(req);
  FUZZ_CHECK(again.size() == frame.size());
  wire::ConnectRequest req2{};
  FUZZ_CHECK(rc::transport::decode_connect_request(again, req2) == RC_OK);
  FUZZ_CHECK(std::memcmp(&req, &req2, sizeof req) == 0);
}

void check_reply_decode(std::span<const std::byte> frame) {
  wire::ConnectReply reply{};
  std::vector<wire::RegionDescriptor> regions;
  const Status st = rc::transport::decode_connect_reply(frame, reply, regions);
  const char* why = rc::last_error();
  FUZZ_CHECK(why != nullptr);
  FUZZ_CHECK(std::memchr(reply.message, '\0', sizeof reply.message) != nullptr);
  if (frame.size() < kHeader + sizeof reply || !header_is(frame, wire::Kind::ConnectReply)) {
    FUZZ_CHECK(st == RC_E_PROTOCOL);
    return;
  }
  wire::ConnectReply in;
  std::memcpy(&in, frame.data() + kHeader, sizeof in);
  FUZZ_CHECK(reply.status == in.status);
  if (in.status != RC_OK) {
    // A refusal: its status when it is one, and its message, as the last error.
    FUZZ_CHECK(st == (known_status(in.status) ? in.status : RC_E_PROTOCOL));
    const std::string message = field_text<sizeof in.message>({in.message, sizeof in.message});
    FUZZ_CHECK(starts_with(why, "server refused the connection: " + message));
    return;
  }
  const bool ok = in.region_count > 0 && in.region_size > 0 &&
                  frame.size() == kHeader + sizeof in + std::size_t{in.region_count} * sizeof(wire::RegionDescriptor);
  FUZZ_CHECK(st == (ok ? RC_OK : RC_E_PROTOCOL));
  if (!ok) return;
  FUZZ_CHECK(regions.size() == in.region_count);
  FUZZ_CHECK(reply.region_count == in.region_count && reply.region_size == in.region_size);
  FUZZ_CHECK(std::memcmp(regions.data(), frame.data() + kHeader + sizeof in, regions.size() * sizeof regions[0]) == 0);

  // Encoded again (as a server would grant it), it decodes to the same.
  rc::transport::Grant g;
  g.message = reply.message;
  g.region_size = reply.region_size;
  const auto again = rc::transport::encode_connect_reply(g, regions);
  wire::ConnectReply reply2{};
  std::vector<wire::RegionDescriptor> regions2;
  FUZZ_CHECK(rc::transport::decode_connect_reply(again, reply2, regions2) == RC_OK);
  FUZZ_CHECK(reply2.region_count == reply.region_count && reply2.region_size == reply.region_size);
  FUZZ_CHECK(reply2.max_frame == wire::kMaxFrame);
  FUZZ_CHECK(std::strcmp(reply2.message, reply.message) == 0);
  FUZZ_CHECK(regions2.size() == regions.size() &&
             std::memcmp(regions2.data(), regions.data(), regions.size() * sizeof regions[0]) == 0);
}

void check_notice_decode(std::span<const std::byte> frame) {
  const Status st = rc::transport::decode_notice(frame);
  FUZZ_CHECK(st != RC_OK);
  wire::Notice in{};
  if (frame.size() != kHeader + sizeof in || !header_is(frame, wire::Kind::Notice)) {
    FUZZ_CHECK(st == RC_E_PROTOCOL);
    return;
  }
  std::memcpy(&in, frame.data() + kHeader, sizeof in);
  if (in.status == RC_OK || !known_status(in.status)) {
    FUZZ_CHECK(st == RC_E_PROTOCOL);
    return;
  }
  FUZZ_CHECK(st == in.status);
  const std::string message = field_text<sizeof in.message>({in.message, sizeof in.message});
  FUZZ_CHECK(starts_with(rc::last_error(), "the server closed the connection: " + message));
  // And back: the same notice encodes to a frame that decodes to the same status.
  FUZZ_CHECK(rc::transport::decode_notice(rc::transport::encode_notice(st, message)) == st);
}

void fuzz_raw(Script& in) {
  const auto rest = as_bytes(in.bytes(in.remaining()));
  check_request_decode(rest);
  check_reply_decode(rest);
  check_notice_decode(rest);
}

// ---- Encode: encoders with fields from the input ----------------------------------------------

// A status the server could put in a Grant or a Notice: within rc_status's representable range
// (-16..15), so it stays a valid enum value, yet including values that are not rc_status codes.
Status status_from(Script& in) { return static_cast<Status>(static_cast<int32_t>(in.upto(31)) - 16); }

std::string text_from(Script& in, uint32_t max) {
  const auto b = in.bytes(in.upto(max));
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void fuzz_encode(Script& in) {
  {  // Connect request: any field values.
    wire::ConnectRequest req{};
    const auto b = in.bytes(sizeof req);
    std::memcpy(&req, b.data(), b.size());
    const auto frame = rc::transport::encode_connect_request(req);
    FUZZ_CHECK(frame.size() == kHeader + sizeof req && header_is(frame, wire::Kind::Connect));
    wire::ConnectRequest out{};
    const bool ok = req.token_length <= wire::kTokenMax &&
                    (req.capability_length == 0 || req.capability_length == sizeof(wire::Capability));
    FUZZ_CHECK(rc::transport::decode_connect_request(frame, out) == (ok ? RC_OK : RC_E_PROTOCOL));
    if (ok) FUZZ_CHECK(std::memcmp(&req, &out, sizeof req) == 0);
  }
  {  // Connect reply.
    rc::transport::Grant g;
    g.status = status_from(in);
    g.message = text_from(in, 127);
    std::vector<wire::RegionDescriptor> regions(in.upto(6));
    for (auto& r : regions) {
      r.addr = in.u64();
      r.key = in.u64();
    }
    g.region_size = in.u64();
    const auto frame = rc::transport::encode_connect_reply(g, regions);
    FUZZ_CHECK(header_is(frame, wire::Kind::ConnectReply));
    wire::ConnectReply reply{};
    std::vector<wire::RegionDescriptor> out;
    const Status st = rc::transport::decode_connect_reply(frame, reply, out);
    const std::string message = field_text<sizeof reply.message>(g.message);
    FUZZ_CHECK(std::strcmp(reply.message, message.c_str()) == 0);
    if (g.status != RC_OK) {
      FUZZ_CHECK(st == (known_status(g.status) ? g.status : RC_E_PROTOCOL));
      FUZZ_CHECK(starts_with(rc::last_error(), "server refused the connection: " + message));
    } else {
      const bool ok = !regions.empty() && g.region_size > 0;
      FUZZ_CHECK(st == (ok ? RC_OK : RC_E_PROTOCOL));
      if (ok) {
        FUZZ_CHECK(reply.region_count == regions.size() && reply.region_size == g.region_size);
        FUZZ_CHECK(reply.max_frame == wire::kMaxFrame);
        FUZZ_CHECK(out.size() == regions.size() &&
                   std::memcmp(out.data(), regions.data(), regions.size() * sizeof regions[0]) == 0);
      }
    }
  }
  {  // Notice.
    const Status status = status_from(in);
    const std::string text = text_from(in, 127);
    const auto frame = rc::transport::encode_notice(status, text);
    FUZZ_CHECK(frame.size() == kHeader + sizeof(wire::Notice) && header_is(frame, wire::Kind::Notice));
    const Status st = rc::transport::decode_notice(frame);
    if (status != RC_OK && known_status(status)) {
      FUZZ_CHECK(st == status);
      FUZZ_CHECK(starts_with(rc::last_error(),
                             "the server closed the connection: " + field_text<sizeof(wire::Notice::message)>(text)));
    } else {
      FUZZ_CHECK(st == RC_E_PROTOCOL);
    }
  }
}

// ---- Capability -------------------------------------------------------------------------------

// A strict base64url decoder (RFC 4648 §5, padding optional): the model for crypto's.
std::optional<std::vector<uint8_t>> reference_base64url(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '-') v = 62;
    else if (c == '_') v = 63;
    else return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

bool url_alphabet_only(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

void check_text(std::string_view text) {
  const auto raw = rc::crypto::base64url_decode(text);
  const auto want = reference_base64url(text);
  // Everything well-formed decodes, to the right bytes. (Whether ill-formed text is refused is
  // checked too: the decoder must not be more lenient than the format.)
  FUZZ_CHECK(raw.has_value() == want.has_value());
  if (raw) {
    FUZZ_CHECK(*raw == *want);
    const std::string back = rc::crypto::base64url_encode(*raw);
    FUZZ_CHECK(url_alphabet_only(back));
    FUZZ_CHECK(rc::crypto::base64url_decode(back) == raw);
  }
  const auto c = cap::from_text(text);
  const bool ok = raw && raw->size() == sizeof(wire::Capability) &&
                  std::memcmp(raw->data(), &wire::kCapabilityMagic, 4) == 0 && (*raw)[4] == wire::kCapabilityVersion;
  FUZZ_CHECK(c.has_value() == ok);
  if (!c) return;
  FUZZ_CHECK(std::memcmp(&*c, raw->data(), sizeof *c) == 0);
  const auto again = cap::from_text(cap::to_text(*c));
  FUZZ_CHECK(again && std::memcmp(&*again, &*c, sizeof *c) == 0);
}

void expect_refused(const wire::Capability& c, std::span<const uint8_t> key, const cap::Expectation& want) {
  FUZZ_CHECK(cap::verify(c, key, want) == RC_E_AUTH);
  FUZZ_CHECK(std::strncmp(rc::last_error(), "capability refused: ", 20) == 0);
}

void fuzz_capability(Script& in) {
  check_text(text_from(in, 300));

  std::vector<uint8_t> key(in.upto(80));
  {
    const auto b = in.bytes(key.size());
    std::copy(b.begin(), b.end(), key.begin());
  }
  const uint64_t cache_id = in.u64();
  const std::string server = text_from(in, 70);
  const uint32_t regions = in.u32();
  const uint64_t expires = in.u64();

  const bool bad = key.size() < RC_MIN_ADMISSION_KEY_BYTES || server.empty() || server.size() > 64;
  wire::Capability c{};
  try {
    c = cap::mint(key, cache_id, server, regions, expires);
    FUZZ_CHECK(!bad);
  } catch (const std::invalid_argument&) {
    FUZZ_CHECK(bad);
    return;
  }

  // What was minted: the fields, zeroed padding, and a MAC over everything before it.
  FUZZ_CHECK(c.magic == wire::kCapabilityMagic && c.version == wire::kCapabilityVersion);
  FUZZ_CHECK(c.rights == 0 && c.reserved[0] == 0 && c.reserved[1] == 0);
  FUZZ_CHECK(c.cache_id == cache_id && c.expires_unix_ms == expires && c.regions == regions);
  FUZZ_CHECK(c.server_id_length == server.size() && std::memcmp(c.server_id, server.data(), server.size()) == 0);
  for (std::size_t i = server.size(); i < sizeof c.server_id; ++i) FUZZ_CHECK(c.server_id[i] == 0);
  const auto mac = reference_mac(key, c);
  FUZZ_CHECK(std::memcmp(mac.data(), c.mac, sizeof c.mac) == 0);

  const std::string text = cap::to_text(c);
  FUZZ_CHECK(text.size() + 1 <= RC_MAX_CAPABILITY_TEXT && url_alphabet_only(text));
  const auto parsed = cap::from_text(text);
  FUZZ_CHECK(parsed && std::memcmp(&*parsed, &c, sizeof c) == 0);

  const cap::Expectation good{cache_id, server, regions, expires - 1};
  if (expires == 0) {
    expect_refused(c, key, good);  // expired before any "now"
    return;
  }
  FUZZ_CHECK(cap::verify(c, key, good) == RC_OK);
  FUZZ_CHECK(cap::verify(c, key, cap::Expectation{cache_id, server, 0, 0}) == RC_OK);

  // Each single mismatch is refused.
  expect_refused(c, key, {cache_id + 1, server, regions, expires - 1});
  expect_refused(c, key, {cache_id, server + "x", regions, expires - 1});
  expect_refused(c, key, {cache_id, std::string_view(server).substr(0, server.size() - 1), regions, expires - 1});
  expect_refused(c, key, {cache_id, server, regions, expires});
  if (regions < UINT32_MAX) expect_refused(c, key, {cache_id, server, regions + 1, expires - 1});
  {
    std::vector<uint8_t> other = key;
    other[in.upto(static_cast<uint32_t>(other.size() - 1))] ^= static_cast<uint8_t>(1u << (in.u8() % 8));
    expect_refused(c, other, good);
  }
  // A capability with any one bit flipped is refused (the MAC covers every other byte).
  for (uint32_t n = in.upto(8); n > 0; --n) {
    const uint32_t bit = in.upto(8 * sizeof c - 1);
    wire::Capability flipped = c;
    reinterpret_cast<uint8_t*>(&flipped)[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    expect_refused(flipped, key, good);
  }
}

// ---- Registry ---------------------------------------------------------------------------------

constexpr uint64_t kRegionSize = 64 * 1024;
constexpr uint64_t kHourMs = 3'600'000;

const std::vector<uint8_t>& admission_key() {
  static const std::vector<uint8_t> key(kRgKeyBytes, kRgKeyByte);
  return key;
}

// A cache as the model sees it: it holds memory from its creation until its last connection
// detaches — or, admitted by a capability, until its lease ends (expire()), whoever is connected;
// `listed` while a Connect can still join it (not dropped by expire()).
struct ModelCache {
  uint64_t id = 0;
  std::string token;
  uint32_t regions = 0;
  bool exclusive = false;
  std::array<uint8_t, 16> first_client{};
  bool shared = false;
  uint64_t lease_end = 0;
  uint32_t connections = 0;
  bool listed = true;
  bool dropped = false;
  const rc::server::CacheState* real = nullptr;
};

struct Connection {
  std::shared_ptr<rc::server::CacheState> cache;
  ModelCache* model;
};

class RegistryRun {
 public:
  RegistryRun(bool admission, uint64_t limit, bool commit_memory)
      : admission_(admission),
        limit_(limit),
        registry_(kRegionSize, limit,
                  rc::server::Admission{admission ? admission_key() : std::vector<uint8_t>{}, kRgServerId},
                  commit_memory) {
    FUZZ_CHECK(registry_.open_mode() == !admission);
  }

  void attach(const wire::ConnectRequest& r) {
    const uint64_t now = cap::unix_now_ms();
    ModelCache* target = nullptr;
    const Status want = model_attach(r, now, target);
    std::shared_ptr<rc::server::CacheState> cache;
    const rc::transport::Grant g = registry_.attach(r, cache);
    FUZZ_CHECK(g.status == want);
    if (want != RC_OK) {
      FUZZ_CHECK(!cache);
      FUZZ_CHECK(!g.message.empty());
      check_memory();
      return;
    }
    FUZZ_CHECK(cache != nullptr);
    const bool migration = (r.flags & wire::kConnectMigrationSource) != 0;
    FUZZ_CHECK(g.read_only == migration);
    const uint32_t granted = migration ? target->regions : r.regions;
    FUZZ_CHECK(g.region_size == kRegionSize && g.regions.size() == granted);
    const bool has_cap = admission_ && r.capability_length != 0;
    if (migration) {  // joined as nobody's client: no sharing, no lease
      FUZZ_CHECK(cache.get() == target->real);
    } else if (target != nullptr && target->connections == 0) {  // an idle lease-lived cache: its next first client
      FUZZ_CHECK(cache.get() == target->real);
      std::memcpy(target->first_client.data(), r.client_id, sizeof r.client_id);
      target->exclusive = (r.flags & wire::kConnectExclusive) != 0;
      target->shared = false;
      if (has_cap) target->lease_end = std::max(target->lease_end, r.capability.expires_unix_ms);
    } else if (target != nullptr) {  // joined
      FUZZ_CHECK(cache.get() == target->real);
      const bool same_client = std::memcmp(target->first_client.data(), r.client_id, sizeof r.client_id) == 0;
      target->shared = target->shared || !same_client;
      if (has_cap) target->lease_end = std::max(target->lease_end, r.capability.expires_unix_ms);
    } else {  // created
      for (const auto& m : caches_) FUZZ_CHECK(m->real != cache.get());
      auto m = std::make_unique<ModelCache>();
      m->id = r.cache_id;
      m->token.assign(r.token, r.token_length);
      m->regions = r.regions;
      m->exclusive = (r.flags & wire::kConnectExclusive) != 0;
      std::memcpy(m->first_client.data(), r.client_id, sizeof r.client_id);
      m->lease_end = admission_ ? r.capability.expires_unix_ms : 0;
      m->real = cache.get();
      in_use_ += uint64_t{r.regions} * kRegionSize;
      by_id_[r.cache_id] += r.regions;
      target = m.get();
      caches_.push_back(std::move(m));
    }
    ++target->connections;
    // The memory is there, writable, and the size granted.
    for (const auto& region : g.regions) {
      FUZZ_CHECK(region.fd >= 0 && region.base != nullptr && region.size == kRegionSize);
      region.base[0] = std::byte{1};
      region.base[region.size - 1] = std::byte{2};
      FUZZ_CHECK(region.base[region.size - 1] == std::byte{2});
    }
    FUZZ_CHECK(cache->views.size() == granted);
    conns_.push_back(Connection{std::move(cache), target});
    check_memory();
  }

  void detach(std::size_t i) {
    if (conns_.empty()) return;
    i %= conns_.size();
    Connection c = std::move(conns_[i]);
    conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
    registry_.detach(c.cache);
    ModelCache* m = c.model;
    if (--m->connections == 0 && m->lease_end != 0 && !m->dropped) {
      // Lease-lived: kept, memory and all, until its lease ends; it forgets its clients.
      FUZZ_CHECK(c.cache->regions.size() == m->regions);
      m->exclusive = false;
      m->shared = false;
    } else if (m->connections == 0) {
      FUZZ_CHECK(c.cache->regions.empty() && c.cache->views.empty());  // freed with its last connection
      forget(m);
    } else {
      FUZZ_CHECK(c.cache->regions.size() == m->regions);
    }
    check_memory();
  }

  void expire(uint64_t now) {
    std::vector<ModelCache*> idle;  // dropped now; freed at once when nobody is connected
    std::size_t want_dropped = 0;
    uint64_t want_next = 0;
    for (auto& m : caches_) {
      if (!m->listed || m->lease_end == 0) continue;
      if (m->lease_end <= now) {
        m->listed = false;
        m->dropped = true;
        ++want_dropped;
        idle.push_back(m.get());
      } else if (want_next == 0 || m->lease_end < want_next) {
        want_next = m->lease_end;
      }
    }
    uint64_t next = 0;
    FUZZ_CHECK(registry_.expire(now, next) == want_dropped);
    FUZZ_CHECK(next == want_next);
    for (ModelCache* m : idle)
      if (m->connections == 0) forget(m);
    for (const auto& c : conns_)
      FUZZ_CHECK((c.cache->dropped.load() == rc::server::DropCause::LeaseEnded) == c.model->dropped);
    check_memory();
  }

  void finish() {
    while (!conns_.empty()) detach(conns_.size() - 1);
    // What is left lives for its lease: every lease ending frees it all.
    expire(UINT64_MAX);
    FUZZ_CHECK(caches_.empty() && by_id_.empty());
    FUZZ_CHECK(registry_.memory_in_use() == 0);
    uint64_t next = 1;
    FUZZ_CHECK(registry_.expire(UINT64_MAX, next) == 0 && next == 0);
  }

 private:
  // The registry's rules, in the order it applies them.
  Status model_attach(const wire::ConnectRequest& r, uint64_t now, ModelCache*& target) const {
    target = nullptr;
    if (r.token_length > wire::kTokenMax) return RC_E_INVALID_ARGUMENT;
    if ((r.flags & ~(wire::kConnectExclusive | wire::kConnectMigrationSource)) != 0) return RC_E_INVALID_ARGUMENT;
    if ((r.flags & wire::kConnectMigrationSource) != 0) return model_migration_source(r, now, target);
    if (r.regions == 0 || r.regions > RC_MAX_REGIONS_PER_SERVER) return RC_E_INVALID_ARGUMENT;
    if (admission_ && !capability_admits(r, now, 0)) return RC_E_AUTH;
    const std::string token(r.token, r.token_length);
    for (const auto& m : caches_) {
      if (!m->listed || m->id != r.cache_id || m->token != token) continue;
      if (m->regions != r.regions) return RC_E_INVALID_ARGUMENT;
      target = m.get();
      if (m->connections == 0) return RC_OK;  // idle and lease-lived: nobody has a claim on it
      const bool same_client = std::memcmp(m->first_client.data(), r.client_id, sizeof r.client_id) == 0;
      if ((m->exclusive && !same_client) || ((r.flags & wire::kConnectExclusive) != 0 && (m->shared || !same_client))) {
        target = nullptr;
        return RC_E_IN_USE;
      }
      return RC_OK;
    }
    if (admission_) {
      const auto it = by_id_.find(r.cache_id);
      const uint64_t held = it == by_id_.end() ? 0 : it->second;
      if (held + r.regions > r.capability.regions) return RC_E_AUTH;
    }
    if (uint64_t{r.regions} * kRegionSize > limit_ - in_use_) return RC_E_NO_MEMORY;
    return RC_OK;
  }

  // A server pulling a region: read-only, into the one listed cache with the id, never in open mode.
  Status model_migration_source(const wire::ConnectRequest& r, uint64_t now, ModelCache*& target) const {
    if (r.flags != wire::kConnectMigrationSource || r.regions != 0 || r.token_length != 0) return RC_E_INVALID_ARGUMENT;
    if (!admission_ || !capability_admits(r, now, wire::kCapabilityRightMigrationSource)) return RC_E_AUTH;
    std::size_t count = 0;
    for (const auto& m : caches_) {
      if (!m->listed || m->id != r.cache_id) continue;
      target = m.get();
      ++count;
    }
    if (count == 1) return RC_OK;
    target = nullptr;
    return RC_E_INVALID_ARGUMENT;
  }

  bool capability_admits(const wire::ConnectRequest& r, uint64_t now, uint8_t rights) const {
    if (r.capability_length != sizeof(wire::Capability)) return false;
    const wire::Capability& c = r.capability;
    if (c.magic != wire::kCapabilityMagic || c.version != wire::kCapabilityVersion) return false;
    const auto mac = reference_mac(admission_key(), c);
    if (std::memcmp(mac.data(), c.mac, sizeof c.mac) != 0) return false;
    const std::string_view server(c.server_id, std::min<std::size_t>(c.server_id_length, sizeof c.server_id));
    // Leases in these scripts end an hour or more away from now, so the registry's own clock
    // reading cannot disagree with ours.
    return c.rights == rights && server == kRgServerId && c.cache_id == r.cache_id && c.expires_unix_ms > now &&
           r.regions <= c.regions;
  }

  // A cache the registry freed: its memory and its regions' count go.
  void forget(ModelCache* m) {
    in_use_ -= uint64_t{m->regions} * kRegionSize;
    if ((by_id_[m->id] -= m->regions) == 0) by_id_.erase(m->id);
    caches_.erase(std::find_if(caches_.begin(), caches_.end(), [&](const auto& p) { return p.get() == m; }));
  }

  void check_memory() const {
    const uint64_t used = registry_.memory_in_use();
    FUZZ_CHECK(used == in_use_);
    FUZZ_CHECK(used <= limit_);
  }

  const bool admission_;
  const uint64_t limit_;
  rc::server::Registry registry_;
  std::vector<std::unique_ptr<ModelCache>> caches_;  // every cache holding memory
  std::map<uint64_t, uint64_t> by_id_;               // regions held per cache id
  uint64_t in_use_ = 0;
  std::vector<Connection> conns_;
};

// A capability for a scripted Connect (grammar: fuzz_grammar.h, Registry / Attach).
wire::Capability scripted_capability(Script& in, uint64_t cache_id, uint32_t sel) {
  const uint8_t which = in.u8();
  const uint32_t regions = in.upto(8);
  const uint64_t now = cap::unix_now_ms();
  const uint64_t expiry[] = {now + kHourMs, now - kHourMs, 0, UINT64_MAX};
  const uint64_t expires = expiry[in.upto(3)];
  std::vector<uint8_t> key = admission_key();
  if (sel == 4) key[0] ^= 1;  // signed with another key
  wire::Capability c = cap::mint(key, (which & 1) ? cache_id + 1 : cache_id, (which & 2) ? "other-server" : kRgServerId,
                                 regions, expires, (which & 4) ? wire::kCapabilityRightMigrationSource : 0);
  if (sel == 5) {
    const uint32_t bit = in.upto(8 * sizeof c - 1);
    reinterpret_cast<uint8_t*>(&c)[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  return c;
}

const std::string& scripted_token(uint32_t sel) {
  static const std::string tokens[] = {"", "owner-token", "other-token", std::string(wire::kTokenMax, 't')};
  return tokens[sel];
}

// Hands a Connect to the registry, directly or (as a server does) after the codec: a request the
// codec refuses never reaches the registry.
void submit(RegistryRun& run, const wire::ConnectRequest& r, bool via_codec) {
  if (!via_codec) {
    run.attach(r);
    return;
  }
  const auto frame = rc::transport::encode_connect_request(r);
  wire::ConnectRequest decoded{};
  const bool ok = r.token_length <= wire::kTokenMax &&
                  (r.capability_length == 0 || r.capability_length == sizeof(wire::Capability));
  FUZZ_CHECK(rc::transport::decode_connect_request(frame, decoded) == (ok ? RC_OK : RC_E_PROTOCOL));
  if (!ok) return;
  FUZZ_CHECK(std::memcmp(&decoded, &r, sizeof r) == 0);
  run.attach(decoded);
}

void fuzz_registry(Script& in) {
  const uint8_t config = in.u8();
  uint64_t limit = (uint64_t{in.upto(15)} + 1) * kRegionSize;
  const uint64_t extra = uint64_t{in.upto(15)} * 4096;
  if (config & kRgOddLimit) limit += extra;
  RegistryRun run((config & kRgAdmission) != 0, limit, (config & kRgCommitMemory) != 0);

  for (int step = 0; step < kRgMaxSteps && !in.empty(); ++step) {
    switch (in.u8() % kRgCount) {
      case kRgAttach:
      case kRgAttach2:
      case kRgAttach3:
      case kRgAttach4: {
        wire::ConnectRequest r{};
        r.cache_id = in.upto(3);
        const std::string& token = scripted_token(in.upto(3));
        r.token_length = static_cast<uint32_t>(token.size());
        std::memcpy(r.token, token.data(), token.size());
        const uint8_t regions = in.u8();
        r.regions = regions < 200   ? 1u + regions % 4
                    : regions < 220 ? 0u
                    : regions < 240 ? 250u + regions % 3
                                    : in.u32();
        const uint8_t flags = in.u8();
        r.flags = flags < 150   ? 0u
                  : flags < 240 ? wire::kConnectExclusive
                  : flags < 250 ? wire::kConnectMigrationSource
                                : in.u32();
        std::memset(r.client_id, static_cast<int>(in.upto(2)) + 1, sizeof r.client_id);
        r.server_threads = in.u8();
        const uint32_t sel = in.upto(7);
        if (sel >= 1 && sel <= 5) {
          r.capability = scripted_capability(in, r.cache_id, sel);
          r.capability_length = sizeof r.capability;
        } else if (sel == 6) {
          const auto b = in.bytes(sizeof r.capability);
          std::memcpy(&r.capability, b.data(), b.size());
          r.capability_length = sizeof r.capability;
        } else if (sel == 7) {
          r.capability_length = in.u32();
        }
        submit(run, r, in.flag());
        break;
      }
      case kRgAttachRaw: {
        wire::ConnectRequest r{};
        const auto b = in.bytes(sizeof r);
        std::memcpy(&r, b.data(), b.size());
        submit(run, r, in.flag());
        break;
      }
      case kRgDetach:
      case kRgDetach2:
        run.detach(in.u8());
        break;
      case kRgExpire: {
        const uint64_t now = cap::unix_now_ms();
        const uint64_t at[] = {now - 2 * kHourMs, now, now + 2 * kHourMs, UINT64_MAX};
        run.expire(at[in.upto(3)]);
        break;
      }
    }
  }
  run.finish();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rc::set_log_level(rc::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Script in(data, size);
  switch (in.u8() % kCnCount) {
    case kCnRaw: fuzz_raw(in); break;
    case kCnEncode: fuzz_encode(in); break;
    case kCnCapability: fuzz_capability(in); break;
    case kCnRegistry: fuzz_registry(in); break;
  }
  return 0;
}
