// Memory the server shares with shm clients as memfds. A client may do anything to the fd it is
// handed, so the size is sealed before the fd leaves the server: a client that could shrink it
// would make the server's own accesses fault (SIGBUS) and take every tenant down.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rc {

// A memfd of `size` bytes whose size can no longer change (shrink, grow and the seals themselves
// sealed). -1 with errno set on failure.
int sealed_memfd(const char* name, uint64_t size);

// Frees the pages behind a shared mapping of a memfd at once, also for every other process that
// still maps it: a departed client that kept its mapping keeps no memory the server lends again
// (what it touches afterwards is new memory, charged to that client).
void release_pages(void* base, std::size_t size);

// madvise(MADV_POPULATE_READ or MADV_POPULATE_WRITE) over [base, base + size), in chunks that let other mappings of
// the process through meanwhile. Best effort.
void populate(void* base, std::size_t size, int advice);

// Maps every page of a shared mapping for writing in one pass, zero-filling pages the memfd does not
// have yet, and skips the runs /proc/self/pagemap says are mapped already: asking the kernel to
// populate a mapped gigabyte costs ~80 ms on this VM, reading its page map ~8 ms. Best effort
// (kernels before 5.14 lack MADV_POPULATE_WRITE: the first write to each page faults instead).
void populate_for_write(void* base, std::size_t size);

// A copy of a large block nobody will read soon (a region pulled into its new home): non-temporal
// stores on x86-64, so it neither reads the destination lines first nor evicts the data path's
// cached lines; memcpy elsewhere.
void stream_copy(void* dst, const void* src, std::size_t n);

}  // namespace rc
