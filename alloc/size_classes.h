// glibc's 16-byte minimum alignment, made jemalloc's own.
//
// glibc returns every block 16-byte aligned (MALLOC_ALIGNMENT), and programs rely on it:
// tagged pointers in the low four bits, SSE loads of small structs. jemalloc's smallest
// size class is 8 bytes. Rounding each request up in the wrappers would cost every malloc
// and every sized delete on the fast path; instead d9 points jemalloc's size lookup for
// 1..8 bytes at its 16-byte class, once, before jemalloc serves the first block. malloc,
// nallocx, sdallocx and malloc_usable_size then all agree on the 16-byte class, and a
// sized delete of a 4-byte object finds the block where it was put.
#pragma once

#include <atomic>

namespace d9::alloc {

extern std::atomic<bool> g_min_size_class_set;

// Raises jemalloc's smallest size class to 16 bytes. Must run before any block is
// allocated; every thread's first allocation comes here (its byte counter starts at 0),
// so later callers wait for the first. Returns false to the first caller, leaving jemalloc
// as it is, if its tables do not have the layout this build was written against.
bool set_min_size_class();

inline bool min_size_class_set() {
  return g_min_size_class_set.load(std::memory_order_acquire);
}

}  // namespace d9::alloc
