// The helpers a region pull copies with (common/memfd.h): populate_for_write maps every page of a
// shared mapping and changes no byte (pages already mapped are skipped, pages the memfd lacks read
// as zeros), and stream_copy copies exactly what memcpy would at any alignment and length.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/memfd.h"
#include "harness.h"

namespace {

using namespace rctest;

constexpr std::size_t kPage = 4096;
constexpr std::size_t kPages = 64;

// Which pages of [base, base + pages * kPage) this process maps (bit 63 of /proc/self/pagemap).
std::vector<bool> mapped_pages(const std::byte* base, std::size_t pages) {
  std::vector<uint64_t> entries(pages);
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  const auto at = static_cast<off_t>(reinterpret_cast<uintptr_t>(base) / kPage * sizeof(uint64_t));
  EXPECT_EQ(pread(fd, entries.data(), pages * sizeof(uint64_t), at), static_cast<ssize_t>(pages * sizeof(uint64_t)));
  close(fd);
  std::vector<bool> mapped(pages);
  for (std::size_t i = 0; i < pages; ++i) mapped[i] = (entries[i] >> 63) != 0;
  return mapped;
}

TEST(RegionMemory, PopulateForWriteMapsEveryPageAndKeepsTheirBytes) {
  const int fd = rc::sealed_memfd("populate-test", kPages * kPage);
  ASSERT_GE(fd, 0);
  auto* writer = static_cast<std::byte*>(mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  auto* view = static_cast<std::byte*>(mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(writer, MAP_FAILED);
  ASSERT_NE(view, MAP_FAILED);
  // Pages with content written through another mapping, pages mapped in this one, pages the memfd lacks.
  for (std::size_t p = 0; p < kPages; p += 3) std::memset(writer + p * kPage, static_cast<int>(p + 1), kPage);
  for (std::size_t p = 0; p < kPages; p += 5) view[p * kPage + 7] = std::byte{0xAB};

  rc::populate_for_write(view, kPages * kPage);

  const std::vector<bool> mapped = mapped_pages(view, kPages);
  for (std::size_t p = 0; p < kPages; ++p) {
    EXPECT_TRUE(mapped[p]) << "page " << p << " is not mapped";
    const auto first = p % 3 == 0 ? std::byte(p + 1) : std::byte{0};
    EXPECT_EQ(view[p * kPage], first) << "page " << p;
    EXPECT_EQ(view[p * kPage + 7], p % 5 == 0 ? std::byte{0xAB} : first) << "page " << p;
  }
  munmap(writer, kPages * kPage);
  munmap(view, kPages * kPage);
  close(fd);
}

TEST(RegionMemory, StreamCopyCopiesWhatMemcpyWouldAtAnyAlignment) {
  std::vector<std::byte> source(3 * kPage), copied(3 * kPage + 128), expected(3 * kPage + 128);
  std::iota(reinterpret_cast<unsigned char*>(source.data()), reinterpret_cast<unsigned char*>(source.data() + source.size()),
            static_cast<unsigned char>(1));
  for (std::size_t dst_offset : {0, 1, 13, 63, 64}) {
    for (std::size_t src_offset : {0, 5, 64}) {
      for (std::size_t length : {0, 1, 63, 64, 65, 1000, 2 * 4096 + 17}) {
        std::fill(copied.begin(), copied.end(), std::byte{0xEE});
        std::fill(expected.begin(), expected.end(), std::byte{0xEE});
        std::memcpy(expected.data() + dst_offset, source.data() + src_offset, length);
        rc::stream_copy(copied.data() + dst_offset, source.data() + src_offset, length);
        EXPECT_EQ(copied, expected) << "dst +" << dst_offset << ", src +" << src_offset << ", " << length << " bytes";
      }
    }
  }
}

}  // namespace
