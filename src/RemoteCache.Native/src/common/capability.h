// Capabilities (wire::Capability): minted by whoever holds a server's admission key (the cache
// manager, the remotecache-capability command), checked by the server at Connect. The text form is
// the base64url of the 144 bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/wire.h"

namespace rc::capability {

// Throws std::invalid_argument for a key shorter than RC_MIN_ADMISSION_KEY_BYTES or a server id
// longer than the field. `rights`: 0 (a client's admission) or one wire::kCapabilityRight*.
wire::Capability mint(std::span<const uint8_t> key, uint64_t cache_id, std::string_view server_id, uint32_t regions,
                      uint64_t expires_unix_ms, uint8_t rights = 0);

std::string to_text(const wire::Capability& cap);
// Nothing when `text` is not the text form of a capability of a known version.
std::optional<wire::Capability> from_text(std::string_view text);

// What a server asks of a capability, beside its signature.
struct Expectation {
  uint64_t cache_id;
  std::string_view server_id;
  uint32_t regions;  // asked for
  uint64_t now_unix_ms;
  uint8_t rights = 0;  // what the Connect needs: exactly these (0: an ordinary admission)
};

// RC_OK, or RC_E_AUTH with the reason as the last error (names what did not match and why).
Status verify(const wire::Capability& cap, std::span<const uint8_t> key, const Expectation& want);

// Milliseconds since 1970 on the wall clock (leases are wall-clock times shared with the manager).
uint64_t unix_now_ms();

}  // namespace rc::capability
