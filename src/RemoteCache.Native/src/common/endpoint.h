// Endpoint strings: "tcp:HOST:PORT", "shm:PATH" (PATH may start with '@' for the abstract
// namespace), "verbs:HOST:PORT".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rc {

enum class TransportKind { Shm, Tcp, Verbs };

struct Endpoint {
  TransportKind kind = TransportKind::Tcp;
  std::string host;  // tcp, verbs
  uint16_t port = 0;
  std::string path;  // shm

  std::string to_string() const;
};

// Returns nothing (and sets the last-error text) when the string does not parse.
std::optional<Endpoint> parse_endpoint(std::string_view text);

}  // namespace rc
