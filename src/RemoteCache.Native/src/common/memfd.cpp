#include "common/memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif


namespace rc {

int sealed_memfd(const char* name, uint64_t size) {
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

void release_pages(void* base, std::size_t size) { madvise(base, size, MADV_REMOVE); }

void populate(void* base, std::size_t size, int advice) {
  // madvise holds the process's mmap lock for reading while it populates: a whole GiB at once (~0.1-0.4 s) would keep
  // every mmap and munmap of the process waiting (a session's new connection, a pull's source mapping), and the page
  // faults queued behind them.
  constexpr std::size_t kChunk = std::size_t{16} << 20;
  auto* at = static_cast<std::byte*>(base);
  for (std::size_t done = 0; done < size; done += kChunk)
    madvise(at + done, std::min(kChunk, size - done), advice);  // best effort (kernels before 5.14 lack the advice)
}

namespace {

constexpr uint64_t kPagePresent = 1ULL << 63;  // pagemap entry: the page is mapped
constexpr std::size_t kPagemapBatch = 8192;    // entries per read: 64 KiB covering 32 MiB of 4 KiB pages

void populate_run(std::byte* from, std::byte* to) {
  if (to > from) populate(from, static_cast<std::size_t>(to - from), MADV_POPULATE_WRITE);
}

void populate_unmapped(int pagemap, std::byte* begin, std::size_t size, std::size_t page) {
  const std::size_t pages = (size + page - 1) / page;
  std::vector<uint64_t> entries(std::min(pages, kPagemapBatch));
  std::byte* unmapped = nullptr;  // the start of the run of unmapped pages being gathered
  for (std::size_t first = 0; first < pages; first += entries.size()) {
    const std::size_t n = std::min(entries.size(), pages - first);
    const auto at = static_cast<off_t>((reinterpret_cast<uintptr_t>(begin) / page + first) * sizeof(uint64_t));
    if (pread(pagemap, entries.data(), n * sizeof(uint64_t), at) != static_cast<ssize_t>(n * sizeof(uint64_t))) {
      populate_run(unmapped != nullptr ? unmapped : begin + first * page, begin + size);
      return;
    }
    for (std::size_t i = 0; i < n; ++i) {
      std::byte* p = begin + (first + i) * page;
      if ((entries[i] & kPagePresent) == 0) {
        if (unmapped == nullptr) unmapped = p;
      } else if (unmapped != nullptr) {
        populate_run(unmapped, p);
        unmapped = nullptr;
      }
    }
  }
  if (unmapped != nullptr) populate_run(unmapped, begin + size);
}

}  // namespace

void populate_for_write(void* base, std::size_t size) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  auto* begin = static_cast<std::byte*>(base);
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0 || reinterpret_cast<uintptr_t>(begin) % page != 0) {
    if (pagemap >= 0) close(pagemap);
    populate_run(begin, begin + size);
    return;
  }
  populate_unmapped(pagemap, begin, size, page);
  close(pagemap);
}

void stream_copy(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  constexpr std::size_t kLine = 64;
  constexpr std::size_t kPrefetchAhead = 16 * kLine;
  const std::size_t head = std::min(n, (kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= kLine; n -= kLine, d += kLine, s += kLine) {
    _mm_prefetch(reinterpret_cast<const char*>(s) + kPrefetchAhead, _MM_HINT_NTA);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  _mm_sfence();  // streamed stores are weakly ordered: make them visible before whatever follows
  std::memcpy(d, s, n);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace rc
