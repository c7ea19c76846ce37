// The admin exchange's frames (wire.h, "admin frames"): encoding, strict decoding, and the session
// key and MACs that authenticate requests and replies. Shared by the server (server/admin_session.h)
// and the client (client/admin_client.h), so both ends agree on every byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "common/status.h"
#include "common/wire.h"

namespace rc::admin {

using SessionKey = crypto::Digest;

// HMAC-SHA256 under the admission key of kAdminKeyLabel, the server's nonce and the client's: the
// key never travels, and every connection gets its own key, so a frame recorded on one connection
// does not verify on another. The label keeps these MACs apart from capability signatures, which
// the same admission key makes.
SessionKey derive_session_key(std::span<const uint8_t> admission_key, const wire::AdminChallenge& challenge,
                              const wire::AdminHello& hello);

std::vector<std::byte> encode_hello(const wire::AdminHello& hello);
// Hello and challenge are plain frames: header (flags, count and seq 0) and payload, nothing else.
// RC_OK, or RC_E_PROTOCOL with the reason as the last error (the admin version is the caller's to check).
Status decode_hello(std::span<const std::byte> frame, wire::AdminHello& out);

// `nonce` is empty for a refusal (zeros on the wire); `message` is cut to the field.
std::vector<std::byte> encode_challenge(Status status, std::span<const uint8_t> nonce, std::string_view message);
// The challenge's status: RC_OK; the server's refusal with its message as the last error; or
// RC_E_PROTOCOL when the frame does not parse or speaks another admin version.
Status decode_challenge(std::span<const std::byte> frame, wire::AdminChallenge& out);

// An AdminRequest or AdminReply whose MAC verified. `op` is the header's, unchecked.
struct Opened {
  uint16_t op = 0;
  uint64_t seq = 0;
  std::span<const std::byte> payload;  // into the frame
};

// header (flags = op, count = 0) + payload + MAC under `key`.
std::vector<std::byte> seal(const SessionKey& key, wire::Kind kind, wire::AdminOp op, uint64_t seq,
                            std::span<const std::byte> payload);
// Checks the structure first (a `kind` frame of this wire version, as long as its header says, with
// room for a MAC and count 0): RC_E_PROTOCOL; then the MAC: RC_E_AUTH. Each with the reason as the
// last error.
Status open(const SessionKey& key, std::span<const std::byte> frame, wire::Kind kind, Opened& out);

template <typename T>
std::span<const std::byte> bytes_of(const T& value) {
  return {reinterpret_cast<const std::byte*>(&value), sizeof value};
}

}  // namespace rc::admin
