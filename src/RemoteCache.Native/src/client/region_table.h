// Maps a cache's flat address space [0, capacity) onto (server, region, offset): regions are laid
// end to end in the order they joined (Redy §3.3's region table). A region that migrated is held by
// another server than its neighbours; one that is moving now is marked, so that sessions hold its
// writes back (Redy §6.2's pause-on-migration writes).
#pragma once

#include <cstdint>
#include <vector>

namespace rc::client {

struct RegionSlice {
  uint16_t server;    // index into the cache's servers
  uint16_t region;    // region index on that server
  uint64_t offset;    // within the region
  uint32_t length;    // bytes of this slice
  uint64_t buffer_offset;  // where the slice sits in the caller's buffer
};

class RegionTable {
 public:
  // Appends one region of `size` bytes: `server`'s region number `region` (moving: writes to it wait;
  // reads_wait: its reads too).
  void add_region(uint16_t server, uint16_t region, uint64_t size, bool moving = false, bool reads_wait = false);
  // Appends `count` regions of `region_size` bytes held by `server`.
  void add_server(uint16_t server, uint32_t count, uint64_t region_size);

  uint64_t capacity() const { return capacity_; }
  std::size_t region_count() const { return regions_.size(); }

  // Whether [address, address + length) lies inside the cache (overflow-safe).
  bool contains(uint64_t address, uint64_t length) const {
    return address <= capacity_ && length <= capacity_ - address;
  }

  // The common case in one lookup: true (with `out` set) when the range sits inside one region
  // and needs no cut.
  // Whether any region is moving; then waits tells which requests wait.
  bool any_moving() const { return moving_ > 0; }
  // Whether a request on [address, address + length) (inside the cache) waits: it touches a moving region,
  // and it is a write (or follows a waiting request: `write_or_behind`) or that region's reads wait too.
  bool waits(uint64_t address, uint64_t length, bool write_or_behind) const;

  bool single(uint64_t address, uint64_t length, uint32_t max_slice, RegionSlice& out) const {
    if (length == 0 || length > max_slice) return false;
    const Entry& e = regions_[find(address)];
    const uint64_t offset = address - e.start;
    if (length > e.size - offset) return false;
    out = RegionSlice{e.server, e.region, offset, static_cast<uint32_t>(length), 0};
    return true;
  }

  // Cuts [address, address + length) at region boundaries and every `max_slice` bytes, calling
  // `fn(const RegionSlice&)` in address order. The range must satisfy contains().
  template <typename Fn>
  void split(uint64_t address, uint64_t length, uint32_t max_slice, Fn&& fn) const {
    uint64_t done = 0;
    std::size_t i = find(address);
    while (done < length) {
      const Entry& e = regions_[i];
      const uint64_t offset = address + done - e.start;
      uint64_t n = e.size - offset;
      if (n > length - done) n = length - done;
      if (n > max_slice) n = max_slice;
      fn(RegionSlice{e.server, e.region, offset, static_cast<uint32_t>(n), done});
      done += n;
      if (offset + n == e.size) ++i;
    }
  }

 private:
  struct Entry {
    uint64_t start;
    uint64_t size;
    uint16_t server;
    uint16_t region;
    bool moving;
    bool reads_wait;
  };
  std::size_t find(uint64_t address) const {
    return uniform_shift_ >= 0 ? static_cast<std::size_t>(address >> uniform_shift_) : search(address);
  }
  std::size_t search(uint64_t address) const;

  std::vector<Entry> regions_;
  uint64_t capacity_ = 0;
  uint32_t moving_ = 0;
  int uniform_shift_ = -1;  // log2 of the region size when all regions share one power-of-two size
};

}  // namespace rc::client
