#include "common/endpoint.h"

#include <charconv>

#include "common/status.h"

namespace rc {

std::string Endpoint::to_string() const {
  switch (kind) {
    case TransportKind::Shm: return "shm:" + path;
    case TransportKind::Tcp: return "tcp:" + host + ":" + std::to_string(port);
    case TransportKind::Verbs: return "verbs:" + host + ":" + std::to_string(port);
  }
  return {};
}

std::optional<Endpoint> parse_endpoint(std::string_view text) {
  Endpoint ep;
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    set_last_error("endpoint '" + std::string(text) + "' has no transport prefix (tcp:, shm:, verbs:)");
    return std::nullopt;
  }
  const std::string_view scheme = text.substr(0, colon);
  const std::string_view rest = text.substr(colon + 1);
  if (scheme == "shm") {
    if (rest.empty() || rest.size() > 100) {
      set_last_error("shm endpoint needs a socket path of 1-100 characters");
      return std::nullopt;
    }
    ep.kind = TransportKind::Shm;
    ep.path = std::string(rest);
    return ep;
  }
  if (scheme == "tcp" || scheme == "verbs") {
    ep.kind = scheme == "tcp" ? TransportKind::Tcp : TransportKind::Verbs;
    const auto last = rest.rfind(':');
    if (last == std::string_view::npos || last == 0) {
      set_last_error("endpoint '" + std::string(text) + "' needs HOST:PORT");
      return std::nullopt;
    }
    ep.host = std::string(rest.substr(0, last));
    if (ep.host.size() > 2 && ep.host.front() == '[' && ep.host.back() == ']')
      ep.host = ep.host.substr(1, ep.host.size() - 2);
    const std::string_view port = rest.substr(last + 1);
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || ptr != port.data() + port.size() || value > 65535) {
      set_last_error("endpoint '" + std::string(text) + "' has a bad port");
      return std::nullopt;
    }
    ep.port = static_cast<uint16_t>(value);
    return ep;
  }
  set_last_error("unknown transport '" + std::string(scheme) + "' (expected tcp, shm or verbs)");
  return std::nullopt;
}

}  // namespace rc
