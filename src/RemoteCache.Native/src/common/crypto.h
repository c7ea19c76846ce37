// The few cryptographic primitives RemoteCache uses, all from OpenSSL's libcrypto: HMAC-SHA256 for
// capabilities and token digests, a CSPRNG for client ids, nonces and random tokens, constant-time
// comparison, and base64url for the text form of capabilities.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rc::crypto {

using Digest = std::array<uint8_t, 32>;

Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> data);
// Fills `out` from the CSPRNG; throws std::runtime_error if it cannot (never silently weak).
void random_bytes(std::span<uint8_t> out);
// Equality without an early exit, so the time taken does not tell how many bytes matched.
bool equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

std::string base64url_encode(std::span<const uint8_t> data);
// Nothing when `text` is not base64url (padding optional).
std::optional<std::vector<uint8_t>> base64url_decode(std::string_view text);

// Frees libcrypto's state of the calling thread now (libcrypto would at the thread's exit): for a detached
// thread whose end the process does not wait for, so that nothing of it outlives the work it signalled done.
void release_thread_state();

}  // namespace rc::crypto
