// Byte sizes on the tools' command lines: a decimal number with an optional K, M or G suffix
// (powers of 1024). Nothing when the text is not a size or does not fit 64 bits.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rc::tools {

inline std::optional<uint64_t> parse_size(std::string_view text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end == text.data()) return std::nullopt;
  const std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  unsigned shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) return std::nullopt;
  if (value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

}  // namespace rc::tools
