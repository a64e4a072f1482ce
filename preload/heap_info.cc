// glibc's heap introspection, answered from jemalloc: mallinfo, mallinfo2, malloc_stats,
// malloc_info and malloc_trim. Left to glibc, they would describe glibc's own arena, which
// nothing uses under d9: a service exporting mallinfo2().uordblks as a metric would read
// about 0. The figures come from jemalloc's statistics (refreshed with `epoch` at each
// call), laid out in glibc's fields and formats so existing parsers keep working:
//
//   arena     stats.mapped: every byte jemalloc has mapped (all of jemalloc's memory is
//             mmapped; glibc counts its heap here, so that arena = uordblks + fordblks)
//   uordblks  stats.allocated: bytes in blocks the program holds
//   fordblks  arena - uordblks: mapped but not in the program's blocks (free space in
//             partly used pages, dirty and muzzy pages, allocator metadata)
//   keepcost  dirty and muzzy pages: what malloc_trim would give back to the system
//   ordblks, smblks, hblks, hblkhd, usmblks, fsmblks: 0 (no glibc-style free lists or
//             separately mmapped chunks; usmblks is 0 in glibc too)
//
// mallinfo's int fields saturate at INT_MAX instead of wrapping as glibc's do. Not on any
// hot path: each call takes jemalloc's statistics lock, as glibc's takes its arena locks.
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>

#include <cstdint>

#include "alloc/allocator_stats.h"
#include "alloc/jemalloc_api.h"

#define D9_EXPORT extern "C" __attribute__((visibility("default")))

namespace d9 {
namespace {

alloc::AllocatorStats read_stats() {
  alloc::AllocatorStats s;
  alloc::read_allocator_stats(&s);  // zeros where a read fails
  return s;
}

int saturate(size_t v) {
  return v > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v);
}

}  // namespace
}  // namespace d9

D9_EXPORT struct mallinfo2 mallinfo2() noexcept {
  d9::alloc::AllocatorStats s = d9::read_stats();
  struct mallinfo2 m = {};
  m.arena = s.mapped;
  m.uordblks = s.allocated;
  m.fordblks = s.mapped > s.allocated ? s.mapped - s.allocated : 0;
  m.keepcost = s.purgeable;
  return m;
}

D9_EXPORT struct mallinfo mallinfo() noexcept {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m = {};
  m.arena = d9::saturate(m2.arena);
  m.uordblks = d9::saturate(m2.uordblks);
  m.fordblks = d9::saturate(m2.fordblks);
  m.keepcost = d9::saturate(m2.keepcost);
  return m;
}

// glibc's layout (one arena: jemalloc's totals), to stderr as glibc writes it.
D9_EXPORT void malloc_stats() noexcept {
  d9::alloc::AllocatorStats s = d9::read_stats();
  fprintf(stderr,
          "Arena 0:\n"
          "system bytes     = %10zu\n"
          "in use bytes     = %10zu\n"
          "Total (incl. mmap):\n"
          "system bytes     = %10zu\n"
          "in use bytes     = %10zu\n"
          "max mmap regions = %10u\n"
          "max mmap bytes   = %10lu\n",
          s.mapped, s.allocated, s.mapped, s.allocated, 0u, 0ul);
}

// glibc's XML (version 1) with jemalloc's figures: free space as "rest", the mapped total
// as the system and address-space sizes. Options other than 0 are refused as glibc does:
// EINVAL as the return value, errno untouched.
D9_EXPORT int malloc_info(int options, FILE* fp) noexcept {
  if (options != 0) return EINVAL;
  d9::alloc::AllocatorStats s = d9::read_stats();
  uint64_t free_bytes = s.mapped > s.allocated ? s.mapped - s.allocated : 0;
  fprintf(fp,
          "<malloc version=\"1\">\n"
          "<heap nr=\"0\">\n"
          "<sizes>\n"
          "</sizes>\n"
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n"
          "<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n"
          "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</heap>\n"
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<total type=\"mmap\" count=\"0\" size=\"0\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n"
          "<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n"
          "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</malloc>\n",
          free_bytes, s.mapped, s.mapped, s.mapped, s.mapped, free_bytes, s.mapped, s.mapped,
          s.mapped, s.mapped);
  return 0;
}

// Flushes the calling thread's cache of freed blocks, then purges every arena's unused
// pages (`pad` has no meaning here: jemalloc keeps no top chunk). 1 if memory went back to
// the system, as glibc returns.
D9_EXPORT int malloc_trim(size_t pad) noexcept {
  (void)pad;
  size_t before = d9::read_stats().resident;
  d9_je_mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  d9_je_mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
  return d9::read_stats().resident < before ? 1 : 0;
}
