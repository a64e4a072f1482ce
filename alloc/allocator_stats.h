// jemalloc's own view of the heap (stats.allocated, active, resident, mapped, retained),
// read beside the sampled estimate so a user sees fragmentation and retained pages.
// Called on d9's writer thread only, about once a second: mallctl("epoch") refreshes
// jemalloc's merged statistics under its own locks, which the hot path must never wait on.
#pragma once

#include <cstdint>

namespace d9::alloc {

struct AllocatorStats {
  uint64_t allocated = 0, active = 0, resident = 0, mapped = 0, retained = 0;
};

// False when jemalloc was built without statistics or a read failed.
bool read_allocator_stats(AllocatorStats* out);

}  // namespace d9::alloc
