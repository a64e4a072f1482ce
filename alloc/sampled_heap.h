// Where sampled allocations live, so that free() can recognise them for free.
//
// Sampled allocations are served by a jemalloc arena of their own, whose extent hooks
// carve memory from one reserved address range. Every pointer a free() sees is then
// "certainly not sampled" unless it falls in that range, which a compare against two
// globals decides without touching the block: unsampled frees, nearly all of them, pay a
// compare and a branch (preload/fast_path.S). Pointers in the range are checked exactly
// against the sampled-address set (address_set.h).
//
// The range is reserved PROT_NONE and MAP_NORESERVE and made accessible extent by extent,
// so it costs address space, not memory. Extents are never unmapped: jemalloc retains and
// reuses them, and purges their pages through the hooks like any other.
//
// Allocations in the arena go through a per-thread explicit tcache of their own, never the
// thread's automatic one, so the arena's memory never leaks into ordinary allocations and
// a sampled allocation or free costs a tcache hit rather than an arena lock.
#pragma once

#include <cstddef>
#include <cstdint>

// The reservation is [d9_sampled_lo, d9_sampled_hi); both are 0 while there is none (live
// set off), so no pointer is ever in range and the first compare of a free settles it. C names: the
// free fast paths in preload/fast_path.S read them. The reservation is placed below the usual heap
// (sampled_heap.cc), so those paths compare against the high bound first.
extern "C" uintptr_t d9_sampled_lo, d9_sampled_hi;

namespace d9::alloc {

inline bool maybe_sampled(const void* p) {
  auto u = reinterpret_cast<uintptr_t>(p);
  return u >= d9_sampled_lo && u < d9_sampled_hi;
}

// Reserves up to `reserve_bytes` of address space (less if the system refuses). False if
// that fails, or if RLIMIT_AS is limited (the reservation would eat into the program's own
// limit); the live set must then stay off. The arena itself is created at the first sample.
bool init_sampled_heap(size_t reserve_bytes);

// mallocx flags that allocate in the sampled arena on this thread: the arena (created by
// the first call), through this thread's explicit tcache (created on first use), or
// MALLOCX_TCACHE_NONE if jemalloc has no tcache left or the thread is exiting. 0 when there
// is no arena: no reservation, its creation failed, or another thread is creating it.
int sampled_heap_flags();
// Fork child: an arena another thread of the parent was creating is either there (its
// flags were set) or to be created again.
void sampled_heap_after_fork();

// dallocx flags (a tcache) for freeing a block of the sampled arena on this thread. A
// thread's explicit tcache is destroyed as the thread exits.
int sampled_free_flags();

}  // namespace d9::alloc
