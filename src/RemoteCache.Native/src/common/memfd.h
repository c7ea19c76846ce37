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

}  // namespace rc
