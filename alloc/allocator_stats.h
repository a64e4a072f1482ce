// jemalloc's own view of the heap (stats.allocated, active, resident, mapped, retained),
// read beside the sampled estimate so a user sees fragmentation and retained pages.
// Called on d9's writer thread about once a second, and by glibc's heap introspection
// when the program asks (preload/heap_info.cc): mallctl("epoch") refreshes jemalloc's
// merged statistics under its own locks, which the hot path must never wait on.
#pragma once

#include <cstdint>

namespace d9::alloc {

struct AllocatorStats {
  uint64_t allocated = 0, active = 0, resident = 0, mapped = 0, retained = 0;
  uint64_t purgeable = 0;  // dirty and muzzy pages of every arena: what a purge gives back
};

// False when jemalloc was built without statistics or a read failed.
bool read_allocator_stats(AllocatorStats* out);

}  // namespace d9::alloc
