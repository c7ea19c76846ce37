#include "client/region_table.h"

#include <algorithm>
#include <bit>

namespace rc::client {

void RegionTable::add_region(uint16_t server, uint16_t region, uint64_t size, bool moving, bool reads_wait) {
  regions_.push_back(Entry{capacity_, size, server, region, moving, moving && reads_wait});
  capacity_ += size;
  if (moving) ++moving_;
  // Servers may lend different region sizes; the shift applies only while they all agree.
  const uint64_t first = regions_.front().size;
  const bool same = uniform_shift_ >= 0 ? size == first : regions_.size() == 1;
  uniform_shift_ = same && std::has_single_bit(first) ? std::countr_zero(first) : -1;
}

void RegionTable::add_server(uint16_t server, uint32_t count, uint64_t region_size) {
  for (uint32_t r = 0; r < count; ++r) add_region(server, static_cast<uint16_t>(r), region_size);
}

bool RegionTable::waits(uint64_t address, uint64_t length, bool write_or_behind) const {
  if (moving_ == 0) return false;
  const uint64_t end = address + (length == 0 ? 1 : length);
  for (std::size_t i = find(address); i < regions_.size() && regions_[i].start < end; ++i)
    if (regions_[i].moving && (write_or_behind || regions_[i].reads_wait)) return true;
  return false;
}

std::size_t RegionTable::search(uint64_t address) const {
  // First region whose start is beyond address, minus one.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), address,
                             [](uint64_t a, const Entry& e) { return a < e.start; });
  return static_cast<std::size_t>(it - regions_.begin()) - 1;
}

}  // namespace rc::client
