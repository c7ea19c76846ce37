#include "common/capability.h"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/crypto.h"

namespace rc::capability {
namespace {

std::span<const uint8_t> signed_bytes(const wire::Capability& cap) {
  return {reinterpret_cast<const uint8_t*>(&cap), wire::kCapabilitySigned};
}

}  // namespace

wire::Capability mint(std::span<const uint8_t> key, uint64_t cache_id, std::string_view server_id, uint32_t regions,
                      uint64_t expires_unix_ms, uint8_t rights) {
  if (key.size() < RC_MIN_ADMISSION_KEY_BYTES)
    throw std::invalid_argument("an admission key has at least " + std::to_string(RC_MIN_ADMISSION_KEY_BYTES) + " bytes");
  wire::Capability cap{};
  if (server_id.empty() || server_id.size() > sizeof cap.server_id)
    throw std::invalid_argument("a server id has 1 to " + std::to_string(sizeof cap.server_id) + " bytes");
  cap.magic = wire::kCapabilityMagic;
  cap.version = wire::kCapabilityVersion;
  cap.rights = rights;
  cap.cache_id = cache_id;
  cap.expires_unix_ms = expires_unix_ms;
  cap.regions = regions;
  cap.server_id_length = static_cast<uint32_t>(server_id.size());
  std::memcpy(cap.server_id, server_id.data(), server_id.size());
  crypto::random_bytes(cap.nonce);
  const auto mac = crypto::hmac_sha256(key, signed_bytes(cap));
  std::memcpy(cap.mac, mac.data(), mac.size());
  return cap;
}

std::string to_text(const wire::Capability& cap) {
  return crypto::base64url_encode({reinterpret_cast<const uint8_t*>(&cap), sizeof cap});
}

std::optional<wire::Capability> from_text(std::string_view text) {
  const auto bytes = crypto::base64url_decode(text);
  if (!bytes || bytes->size() != sizeof(wire::Capability)) return std::nullopt;
  wire::Capability cap{};
  std::memcpy(&cap, bytes->data(), sizeof cap);
  if (cap.magic != wire::kCapabilityMagic || cap.version != wire::kCapabilityVersion) return std::nullopt;
  return cap;
}

Status verify(const wire::Capability& cap, std::span<const uint8_t> key, const Expectation& want) {
  if (cap.magic != wire::kCapabilityMagic || cap.version != wire::kCapabilityVersion)
    return fail(RC_E_AUTH, "capability refused: not a version " + std::to_string(wire::kCapabilityVersion) + " capability");
  // The signature first: nothing else in a forged capability deserves an answer.
  const auto mac = crypto::hmac_sha256(key, signed_bytes(cap));
  if (!crypto::equal(mac, cap.mac)) return fail(RC_E_AUTH, "capability refused: its signature does not verify with this server's admission key");
  // Rights before the rest: a migration capability grants 0 regions, and "grants 0 regions" would
  // hide that it is the wrong kind of capability altogether.
  if (cap.rights != want.rights) {
    // Short enough for a ConnectReply's message.
    if (want.rights == 0 && cap.rights == wire::kCapabilityRightMigrationSource)
      return fail(RC_E_AUTH, "capability refused: a migration capability admits a server pulling a region, not a client");
    if (want.rights == wire::kCapabilityRightMigrationSource && cap.rights == 0)
      return fail(RC_E_AUTH, "capability refused: a migration source needs a migration capability, not a client's");
    return fail(RC_E_AUTH, "capability refused: it carries rights " + std::to_string(cap.rights) + ", this Connect needs " +
                               std::to_string(want.rights));
  }
  const std::string_view server(cap.server_id, std::min<std::size_t>(cap.server_id_length, sizeof cap.server_id));
  if (server != want.server_id)
    return fail(RC_E_AUTH, "capability refused: it is for server '" + std::string(server) + "', this is '" +
                               std::string(want.server_id) + "'");
  if (cap.cache_id != want.cache_id)
    return fail(RC_E_AUTH, "capability refused: it is for cache " + std::to_string(cap.cache_id) + ", not cache " +
                               std::to_string(want.cache_id));
  if (cap.expires_unix_ms <= want.now_unix_ms)
    return fail(RC_E_AUTH, "capability refused: it expired " + std::to_string((want.now_unix_ms - cap.expires_unix_ms) / 1000) +
                               " s ago");
  if (want.regions > cap.regions)
    return fail(RC_E_AUTH, "capability refused: it grants " + std::to_string(cap.regions) + " regions, " +
                               std::to_string(want.regions) + " were asked for");
  return RC_OK;
}

uint64_t unix_now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace rc::capability
