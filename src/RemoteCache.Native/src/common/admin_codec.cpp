#include "common/admin_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace rc::admin {
namespace {

constexpr std::size_t kHeader = sizeof(wire::FrameHeader);

std::vector<std::byte> plain_frame(wire::Kind kind, std::span<const std::byte> payload) {
  std::vector<std::byte> out(kHeader + payload.size());
  const wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), 0,
                            static_cast<uint32_t>(out.size()), 0, 0};
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + kHeader, payload.data(), payload.size());
  return out;
}

// Whether `frame` is exactly one `kind` frame of this wire version with count 0 (and, for a plain
// frame, flags and seq 0: only sealed frames use them).
bool frame_is(std::span<const std::byte> frame, wire::Kind kind, bool sealed) {
  if (frame.size() < kHeader) return false;
  const auto h = wire::read_header(frame.data());
  return wire::header_ok(h, kind, frame.size()) && h.bytes == frame.size() && h.count == 0 &&
         (sealed || (h.flags == 0 && h.seq == 0));
}

std::span<const uint8_t> as_u8(std::span<const std::byte> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

SessionKey derive_session_key(std::span<const uint8_t> admission_key, const wire::AdminChallenge& challenge,
                              const wire::AdminHello& hello) {
  constexpr std::size_t kLabel = sizeof wire::kAdminKeyLabel - 1;
  uint8_t input[kLabel + sizeof challenge.nonce + sizeof hello.nonce];
  std::memcpy(input, wire::kAdminKeyLabel, kLabel);
  std::memcpy(input + kLabel, challenge.nonce, sizeof challenge.nonce);
  std::memcpy(input + kLabel + sizeof challenge.nonce, hello.nonce, sizeof hello.nonce);
  return crypto::hmac_sha256(admission_key, input);
}

std::vector<std::byte> encode_hello(const wire::AdminHello& hello) {
  return plain_frame(wire::Kind::AdminHello, bytes_of(hello));
}

Status decode_hello(std::span<const std::byte> frame, wire::AdminHello& out) {
  if (!frame_is(frame, wire::Kind::AdminHello, false) || frame.size() != kHeader + sizeof out)
    return fail(RC_E_PROTOCOL, "the admin hello is not a hello frame of wire version " + std::to_string(wire::kVersion));
  std::memcpy(&out, frame.data() + kHeader, sizeof out);
  return RC_OK;
}

std::vector<std::byte> encode_challenge(Status status, std::span<const uint8_t> nonce, std::string_view message) {
  wire::AdminChallenge c{};
  c.status = status;
  c.admin_version = wire::kAdminVersion;
  if (!nonce.empty()) std::memcpy(c.nonce, nonce.data(), std::min(nonce.size(), sizeof c.nonce));
  const std::size_t n = std::min(message.size(), sizeof c.message - 1);
  if (n > 0) std::memcpy(c.message, message.data(), n);
  return plain_frame(wire::Kind::AdminChallenge, bytes_of(c));
}

Status decode_challenge(std::span<const std::byte> frame, wire::AdminChallenge& out) {
  if (!frame_is(frame, wire::Kind::AdminChallenge, false) || frame.size() != kHeader + sizeof out)
    return fail(RC_E_PROTOCOL, "the server's answer to the admin hello is not a challenge");
  std::memcpy(&out, frame.data() + kHeader, sizeof out);
  out.message[sizeof out.message - 1] = '\0';
  if (out.status != RC_OK) {
    // Range-check the peer's integer before it becomes an rc_status.
    return fail(is_known_status(out.status) ? static_cast<Status>(out.status) : RC_E_PROTOCOL,
                std::string("the server refused the admin connection: ") + out.message);
  }
  if (out.admin_version != wire::kAdminVersion)
    return fail(RC_E_PROTOCOL, "the server speaks admin version " + std::to_string(out.admin_version) + ", this client " +
                                   std::to_string(wire::kAdminVersion));
  return RC_OK;
}

std::vector<std::byte> seal(const SessionKey& key, wire::Kind kind, wire::AdminOp op, uint64_t seq,
                            std::span<const std::byte> payload) {
  std::vector<std::byte> out(kHeader + payload.size() + wire::kAdminMacBytes);
  const wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), static_cast<uint16_t>(op),
                            static_cast<uint32_t>(out.size()), 0, seq};
  std::memcpy(out.data(), &h, sizeof h);
  if (!payload.empty()) std::memcpy(out.data() + kHeader, payload.data(), payload.size());
  const std::size_t signed_bytes = out.size() - wire::kAdminMacBytes;
  const auto mac = crypto::hmac_sha256(key, as_u8({out.data(), signed_bytes}));
  std::memcpy(out.data() + signed_bytes, mac.data(), mac.size());
  return out;
}

Status open(const SessionKey& key, std::span<const std::byte> frame, wire::Kind kind, Opened& out) {
  if (!frame_is(frame, kind, true) || frame.size() < kHeader + wire::kAdminMacBytes)
    return fail(RC_E_PROTOCOL, kind == wire::Kind::AdminRequest ? "not an admin request frame" : "not an admin reply frame");
  const std::size_t signed_bytes = frame.size() - wire::kAdminMacBytes;
  const auto mac = crypto::hmac_sha256(key, as_u8(frame.first(signed_bytes)));
  if (!crypto::equal(mac, as_u8(frame.subspan(signed_bytes))))
    return fail(RC_E_AUTH, "its MAC does not verify (another admission key, or an altered frame)");
  const auto h = wire::read_header(frame.data());
  out.op = h.flags;
  out.seq = h.seq;
  out.payload = frame.subspan(kHeader, signed_bytes - kHeader);
  return RC_OK;
}

}  // namespace rc::admin
