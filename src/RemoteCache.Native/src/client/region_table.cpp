#include "client/region_table.h"

#include <algorithm>
#include <bit>

namespace rc::client {

void RegionTable::add_server(uint16_t server, uint32_t count, uint64_t region_size) {
  for (uint32_t r = 0; r < count; ++r) {
    regions_.push_back(Entry{capacity_, region_size, server, static_cast<uint16_t>(r)});
    capacity_ += region_size;
  }
  // Servers may lend different region sizes; the shift applies only while they all agree.
  const bool same = std::all_of(regions_.begin(), regions_.end(),
                                [&](const Entry& e) { return e.size == regions_.front().size; });
  const uint64_t size = regions_.empty() ? 0 : regions_.front().size;
  uniform_shift_ = same && std::has_single_bit(size) ? std::countr_zero(size) : -1;
}

std::size_t RegionTable::search(uint64_t address) const {
  // First region whose start is beyond address, minus one.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), address,
                             [](uint64_t a, const Entry& e) { return a < e.start; });
  return static_cast<std::size_t>(it - regions_.begin()) - 1;
}

}  // namespace rc::client
