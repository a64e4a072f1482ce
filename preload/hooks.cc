// Every function libd9.so interposes, in one place. Each is a thin wrapper: the inline
// sampling check (one TLS subtract and branch) and a tail call into jemalloc; only when
// the thread's byte counter runs out does the out-of-line sampled path run.
//
// Frees need no bookkeeping yet (live-set tracking is a separate step), so they forward
// straight to jemalloc. glibc-only extras (mallinfo, malloc_trim, mallopt, malloc_info)
// are left to glibc: they describe glibc's unused arena and stay harmless.
#include <errno.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "alloc/profiler.h"
#include "alloc/sampler.h"
#include "alloc/thread_state.h"
#include "preload/jemalloc_api.h"
#include "preload/runtime.h"

#define D9_EXPORT extern "C" __attribute__((visibility("default")))
#define D9_EXPORT_CXX __attribute__((visibility("default")))

namespace {

using d9::tls_state;

// The fast path: charge `size` bytes to this thread; true while no sample point is hit.
inline bool no_sample(size_t size) {
  return !d9::reaches_sample_point(tls_state.bytes_until_sample, size);
}

// The sampled path, out of line: decide, allocate, record.
template <class Allocate>
__attribute__((noinline)) void* sampled(size_t size, Allocate allocate) {
  bool take = d9::runtime::at_sample_point(size);
  void* p = allocate();
  if (take && p) d9::alloc::record_alloc(p, size);
  return p;
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

// ---- C allocation API ------------------------------------------------------------------

D9_EXPORT void* malloc(size_t size) {
  if (no_sample(size)) return d9_je_malloc(size);
  return sampled(size, [=] { return d9_je_malloc(size); });
}

D9_EXPORT void free(void* ptr) { d9_je_free(ptr); }

D9_EXPORT void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return d9_je_calloc(n, size);  // ENOMEM
  if (no_sample(total)) return d9_je_calloc(n, size);
  return sampled(total, [=] { return d9_je_calloc(n, size); });
}

D9_EXPORT void* realloc(void* ptr, size_t size) {
  // glibc: realloc(p, 0) frees p and returns NULL.
  if (ptr && size == 0) {
    d9_je_free(ptr);
    return nullptr;
  }
  if (no_sample(size)) return d9_je_realloc(ptr, size);
  return sampled(size, [=] { return d9_je_realloc(ptr, size); });
}

D9_EXPORT void* reallocarray(void* ptr, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(ptr, total);
}

D9_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) {
  if (no_sample(size)) return d9_je_posix_memalign(out, alignment, size);
  int rc = 0;
  sampled(size, [&]() -> void* {
    rc = d9_je_posix_memalign(out, alignment, size);
    return rc == 0 ? *out : nullptr;
  });
  return rc;
}

D9_EXPORT void* aligned_alloc(size_t alignment, size_t size) {
  if (no_sample(size)) return d9_je_aligned_alloc(alignment, size);
  return sampled(size, [=] { return d9_je_aligned_alloc(alignment, size); });
}

D9_EXPORT void* memalign(size_t alignment, size_t size) {
  // glibc rounds an alignment that is not a power of two up to the next one.
  if (alignment & (alignment - 1)) {
    size_t a = 1;
    while (a < alignment && a != 0) a <<= 1;
    if (a == 0) {
      errno = EINVAL;
      return nullptr;
    }
    alignment = a;
  }
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (no_sample(size)) return d9_je_aligned_alloc(alignment, size);
  return sampled(size, [=] { return d9_je_aligned_alloc(alignment, size); });
}

D9_EXPORT void* valloc(size_t size) {
  if (no_sample(size)) return d9_je_valloc(size);
  return sampled(size, [=] { return d9_je_valloc(size); });
}

D9_EXPORT void* pvalloc(size_t size) {
  // glibc: page-aligned, size rounded up to whole pages, at least one page.
  size_t page = page_size();
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(page - 1);
  if (rounded == 0) rounded = page;
  return memalign(page, rounded);
}

D9_EXPORT size_t malloc_usable_size(void* ptr) {
  return ptr ? d9_je_malloc_usable_size(ptr) : 0;
}

// ---- jemalloc's own API, so programs built against jemalloc share d9's heap -----------

D9_EXPORT void* mallocx(size_t size, int flags) {
  if (no_sample(size)) return d9_je_mallocx(size, flags);
  return sampled(size, [=] { return d9_je_mallocx(size, flags); });
}

D9_EXPORT void* rallocx(void* ptr, size_t size, int flags) {
  if (no_sample(size)) return d9_je_rallocx(ptr, size, flags);
  return sampled(size, [=] { return d9_je_rallocx(ptr, size, flags); });
}

D9_EXPORT size_t xallocx(void* ptr, size_t size, size_t extra, int flags) {
  return d9_je_xallocx(ptr, size, extra, flags);
}
D9_EXPORT size_t sallocx(const void* ptr, int flags) { return d9_je_sallocx(ptr, flags); }
D9_EXPORT void dallocx(void* ptr, int flags) { d9_je_dallocx(ptr, flags); }
D9_EXPORT void sdallocx(void* ptr, size_t size, int flags) { d9_je_sdallocx(ptr, size, flags); }
D9_EXPORT size_t nallocx(size_t size, int flags) { return d9_je_nallocx(size, flags); }
D9_EXPORT int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) {
  return d9_je_mallctl(name, oldp, oldlenp, newp, newlen);
}
D9_EXPORT int mallctlnametomib(const char* name, size_t* mibp, size_t* miblenp) {
  return d9_je_mallctlnametomib(name, mibp, miblenp);
}
D9_EXPORT int mallctlbymib(const size_t* mib, size_t miblen, void* oldp, size_t* oldlenp,
                           void* newp, size_t newlen) {
  return d9_je_mallctlbymib(mib, miblen, oldp, oldlenp, newp, newlen);
}
D9_EXPORT void malloc_stats_print(void (*write_cb)(void*, const char*), void* cbopaque,
                                  const char* opts) {
  d9_je_malloc_stats_print(write_cb, cbopaque, opts);
}

// ---- C++ operators new and delete: every standard form --------------------------------

D9_EXPORT_CXX void* operator new(size_t size) {
  if (no_sample(size)) return d9_je__Znwm(size);
  return sampled(size, [=] { return d9_je__Znwm(size); });
}
D9_EXPORT_CXX void* operator new[](size_t size) {
  if (no_sample(size)) return d9_je__Znam(size);
  return sampled(size, [=] { return d9_je__Znam(size); });
}
D9_EXPORT_CXX void* operator new(size_t size, const std::nothrow_t& tag) noexcept {
  if (no_sample(size)) return d9_je__ZnwmRKSt9nothrow_t(size, tag);
  return sampled(size, [&] { return d9_je__ZnwmRKSt9nothrow_t(size, tag); });
}
D9_EXPORT_CXX void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  if (no_sample(size)) return d9_je__ZnamRKSt9nothrow_t(size, tag);
  return sampled(size, [&] { return d9_je__ZnamRKSt9nothrow_t(size, tag); });
}
D9_EXPORT_CXX void* operator new(size_t size, std::align_val_t al) {
  if (no_sample(size)) return d9_je__ZnwmSt11align_val_t(size, al);
  return sampled(size, [=] { return d9_je__ZnwmSt11align_val_t(size, al); });
}
D9_EXPORT_CXX void* operator new[](size_t size, std::align_val_t al) {
  if (no_sample(size)) return d9_je__ZnamSt11align_val_t(size, al);
  return sampled(size, [=] { return d9_je__ZnamSt11align_val_t(size, al); });
}
D9_EXPORT_CXX void* operator new(size_t size, std::align_val_t al,
                                 const std::nothrow_t& tag) noexcept {
  if (no_sample(size)) return d9_je__ZnwmSt11align_val_tRKSt9nothrow_t(size, al, tag);
  return sampled(size, [&] { return d9_je__ZnwmSt11align_val_tRKSt9nothrow_t(size, al, tag); });
}
D9_EXPORT_CXX void* operator new[](size_t size, std::align_val_t al,
                                   const std::nothrow_t& tag) noexcept {
  if (no_sample(size)) return d9_je__ZnamSt11align_val_tRKSt9nothrow_t(size, al, tag);
  return sampled(size, [&] { return d9_je__ZnamSt11align_val_tRKSt9nothrow_t(size, al, tag); });
}

D9_EXPORT_CXX void operator delete(void* p) noexcept { d9_je__ZdlPv(p); }
D9_EXPORT_CXX void operator delete[](void* p) noexcept { d9_je__ZdaPv(p); }
D9_EXPORT_CXX void operator delete(void* p, size_t n) noexcept { d9_je__ZdlPvm(p, n); }
D9_EXPORT_CXX void operator delete[](void* p, size_t n) noexcept { d9_je__ZdaPvm(p, n); }
D9_EXPORT_CXX void operator delete(void* p, std::align_val_t al) noexcept {
  d9_je__ZdlPvSt11align_val_t(p, al);
}
D9_EXPORT_CXX void operator delete[](void* p, std::align_val_t al) noexcept {
  d9_je__ZdaPvSt11align_val_t(p, al);
}
D9_EXPORT_CXX void operator delete(void* p, size_t n, std::align_val_t al) noexcept {
  d9_je__ZdlPvmSt11align_val_t(p, n, al);
}
D9_EXPORT_CXX void operator delete[](void* p, size_t n, std::align_val_t al) noexcept {
  d9_je__ZdaPvmSt11align_val_t(p, n, al);
}
D9_EXPORT_CXX void operator delete(void* p, const std::nothrow_t& tag) noexcept {
  d9_je__ZdlPvRKSt9nothrow_t(p, tag);
}
D9_EXPORT_CXX void operator delete[](void* p, const std::nothrow_t& tag) noexcept {
  d9_je__ZdaPvRKSt9nothrow_t(p, tag);
}
D9_EXPORT_CXX void operator delete(void* p, std::align_val_t al,
                                   const std::nothrow_t& tag) noexcept {
  d9_je__ZdlPvSt11align_val_tRKSt9nothrow_t(p, al, tag);
}
D9_EXPORT_CXX void operator delete[](void* p, std::align_val_t al,
                                     const std::nothrow_t& tag) noexcept {
  d9_je__ZdaPvSt11align_val_tRKSt9nothrow_t(p, al, tag);
}
