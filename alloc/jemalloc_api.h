// jemalloc's entry points inside libd9.so (its C API; d9's operator new jumps into jemalloc's own).
// Debian's libjemalloc_pic.a is linked in with every public symbol renamed `d9_je_<name>` (see
// alloc/CMakeLists.txt), so the calls below go straight into jemalloc's own fast paths, with no PLT
// and no chance of binding to another allocator, and libd9's exported malloc family is the only one
// the host sees.
#pragma once

#include <cstddef>

// mallocx flag encodings as jemalloc.h defines them (checked against it in sampled_heap.cc;
// jemalloc.h itself is not included here, its malloc declarations would clash with ours).
namespace d9::je {
constexpr int kZero = 0x40;         // MALLOCX_ZERO
constexpr int kTcacheNone = 0x100;  // MALLOCX_TCACHE_NONE
constexpr int align(size_t a) {
  return __builtin_ctzl(a);
}  // MALLOCX_ALIGN
constexpr int arena(unsigned a) {
  return static_cast<int>(a + 1) << 20;
}  // MALLOCX_ARENA
constexpr int tcache(unsigned tc) {
  return static_cast<int>(tc + 2) << 8;
}  // MALLOCX_TCACHE
constexpr int kTcacheBits = 0xfff00;  // where MALLOCX_TCACHE and MALLOCX_TCACHE_NONE live
}  // namespace d9::je

extern "C" {
void* d9_je_malloc(size_t size) noexcept;
void* d9_je_calloc(size_t n, size_t size) noexcept;
void* d9_je_realloc(void* ptr, size_t size) noexcept;
void d9_je_free(void* ptr) noexcept;
int d9_je_posix_memalign(void** out, size_t alignment, size_t size) noexcept;
void* d9_je_aligned_alloc(size_t alignment, size_t size) noexcept;
void* d9_je_memalign(size_t alignment, size_t size) noexcept;
void* d9_je_valloc(size_t size) noexcept;
size_t d9_je_malloc_usable_size(void* ptr) noexcept;

void* d9_je_mallocx(size_t size, int flags) noexcept;
void* d9_je_rallocx(void* ptr, size_t size, int flags) noexcept;
size_t d9_je_xallocx(void* ptr, size_t size, size_t extra, int flags) noexcept;
size_t d9_je_sallocx(const void* ptr, int flags) noexcept;
void d9_je_dallocx(void* ptr, int flags) noexcept;
void d9_je_sdallocx(void* ptr, size_t size, int flags) noexcept;
size_t d9_je_nallocx(size_t size, int flags) noexcept;
int d9_je_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp,
                  size_t newlen) noexcept;
int d9_je_mallctlnametomib(const char* name, size_t* mibp, size_t* miblenp) noexcept;
int d9_je_mallctlbymib(const size_t* mib, size_t miblen, void* oldp, size_t* oldlenp, void* newp,
                       size_t newlen) noexcept;
void d9_je_malloc_stats_print(void (*write_cb)(void*, const char*), void* cbopaque,
                              const char* opts) noexcept;

// jemalloc's malloc past its fast path (an internal symbol, never renamed): its operator
// new's slow path, which prefix_jemalloc.cmake points at d9_new_slow instead.
void* je_malloc_default(size_t size) noexcept;
}
