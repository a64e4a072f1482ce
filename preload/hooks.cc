// Every function libd9.so interposes, in one place (malloc, free, the unaligned news and
// the unaligned deletes are in preload/fast_path.S, with their out-of-line halves here).
// Each is a thin wrapper: the inline sampling check (one TLS subtract and branch) and a
// call into jemalloc; only when the thread's byte counter runs out does the out-of-line
// sampled path run.
//
// Where jemalloc and glibc differ, the wrappers keep glibc's documented contract, which is
// what programs on this platform were written against:
//  - every block is 16-byte aligned (max_align_t): jemalloc's smallest size class is
//    raised to 16 bytes at start-up (alloc/size_classes.h);
//  - a failed realloc/valloc sets errno to ENOMEM;
//  - memalign and aligned_alloc (an alias of it in glibc 2.36) round an alignment that is
//    not a power of two up to the next one;
//  - operator new runs the new-handler loop as libstdc++ does: any exception the handler
//    throws propagates, and the retry keeps the requested alignment;
//  - d9's own bookkeeping never changes errno.
//  - the exec family seals the current segment first, since exec runs no destructors;
//  - pipe2 moves a pipe libunwind opens for d9 above d9's descriptor floor;
//  - pthread_create, pthread_exit, sigaction and signal serve CPU sampling (preload/cpu.h).
// With the live set on, sampled allocations come from the sampled arena, and every free
// first asks whether its pointer lies in that arena's range (sampled_heap.h): a compare
// against two globals, no memory touched. glibc's heap introspection (mallinfo, mallinfo2,
// malloc_stats, malloc_info, malloc_trim) answers from jemalloc (preload/heap_info.cc);
// mallopt is left to glibc, whose unused arena it tunes harmlessly.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "alloc/jemalloc_api.h"
#include "alloc/profiler.h"
#include "alloc/sampled_heap.h"
#include "alloc/sampler.h"
#include "alloc/thread_state.h"
#include "preload/cpu.h"
#include "preload/runtime.h"
#include "writer/segment.h"  // OwnFd: d9's descriptor floor

#define D9_EXPORT extern "C" __attribute__((visibility("default")))
#define D9_EXPORT_CXX __attribute__((visibility("default")))
#define D9_LIKELY(x) __builtin_expect(!!(x), 1)

namespace {

using d9::tls_state;

constexpr size_t kMinAlign = 16;  // glibc's MALLOC_ALIGNMENT on 64-bit

// The fast path: charge `size` bytes to this thread; true while no sample point is hit.
inline bool no_sample(size_t size) {
  return !d9::reaches_sample_point(tls_state.bytes_until_sample, size);
}

// The sampled path, out of line: decide, allocate, record. `allocate(0)` allocates as
// usual; a sampled allocation calls `allocate(flags)` with the sampled arena's mallocx
// flags (none with the live set off), falling back to the usual heap if the arena is
// exhausted. errno is what the allocation left it, never what d9's own work did.
template <class Allocate>
__attribute__((noinline)) void* sampled(size_t size, Allocate allocate) {
  int saved = errno;
  bool take = d9::runtime::at_sample_point(size);
  errno = saved;
  if (!take) return allocate(0);
  int flags = d9::alloc::sampled_flags();
  void* p = flags ? allocate(flags) : nullptr;
  if (!p) p = allocate(0);
  if (p) {
    saved = errno;
    d9::alloc::record_alloc(p, size);
    errno = saved;
  }
  return p;
}

// Frees a block the range check flagged: records the free (if it is a tracked sample)
// before the memory is released, then returns it to its arena past the thread cache.
__attribute__((noinline)) void sampled_free(void* p, size_t size, int flags) {
  int saved = errno;
  d9::alloc::record_free(p);
  errno = saved;
  flags = (flags & ~d9::je::kTcacheBits) | d9::alloc::sampled_free_flags();
  if (size) {
    d9_je_sdallocx(p, size, flags);
  } else {
    d9_je_dallocx(p, flags);
  }
}

// Every free goes through here: the range check, then jemalloc.
inline void free_block(void* p, size_t size, int flags) {
  if (__builtin_expect(d9::alloc::maybe_sampled(p), 0)) return sampled_free(p, size, flags);
  if (size) return d9_je_sdallocx(p, size, flags);
  if (flags) return d9_je_dallocx(p, flags);
  d9_je_free(p);
}

// mallocx with d9's placement flags. jemalloc leaves mallocx(0) undefined (through a
// tcache it returns a smallest-class block, ignoring the alignment); malloc(0) and its
// kin must still return a unique, aligned block, so 0 asks for 1 byte.
inline void* placed_mallocx(size_t size, int flags) {
  return d9_je_mallocx(size ? size : 1, flags);
}

inline void* or_enomem(void* p) {
  if (__builtin_expect(p == nullptr, 0)) errno = ENOMEM;
  return p;
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// glibc's memalign: alignments up to 16 are plain malloc; others are rounded up to a power
// of two; absurd ones fail with EINVAL. `flags` places it (0 = the usual heap).
void* glibc_memalign(size_t alignment, size_t size, int flags) {
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return nullptr;
  }
  size_t a = kMinAlign;
  while (a < alignment) a <<= 1;
  if (flags) return or_enomem(placed_mallocx(size, flags | d9::je::align(a)));
  if (alignment <= kMinAlign) return or_enomem(d9_je_malloc(size));
  return or_enomem(d9_je_aligned_alloc(a, size));
}

// After a failure on the usual heap: memory the handler (or anyone) freed may sit in the
// sampled arena's retained extents, which the usual heap cannot reuse. Under an address-
// space limit that is the only memory left, so the retry looks there too.
void* from_sampled_arena(size_t size, size_t alignment) {
  int flags = d9::alloc::sampled_flags();
  if (!flags) return nullptr;
  return placed_mallocx(size, flags | (alignment ? d9::je::align(alignment) : 0));
}

// operator new when the allocator came back empty: the standard's new-handler loop.
template <bool kNoThrow>
__attribute__((noinline)) void* new_failed(size_t size, size_t alignment) {
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (!handler) {
      if (kNoThrow) return nullptr;
      throw std::bad_alloc();
    }
    if constexpr (kNoThrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
    void* p = alignment ? d9_je_aligned_alloc(alignment, size) : d9_je_malloc(size);
    if (!p) p = from_sampled_arena(size, alignment);
    if (p) return p;
  }
}

template <bool kNoThrow>
inline void* new_impl(size_t size, int flags) {
  void* p = flags ? placed_mallocx(size, flags) : d9_je_malloc(size);
  if (D9_LIKELY(p)) return p;
  if (flags) return nullptr;  // the sampled path retries on the usual heap
  return new_failed<kNoThrow>(size, 0);
}

template <bool kNoThrow>
inline void* new_aligned_impl(size_t size, std::align_val_t al, int flags) {
  auto alignment = static_cast<size_t>(al);
  if (alignment < kMinAlign) alignment = kMinAlign;
  void* p = flags ? placed_mallocx(size, flags | d9::je::align(alignment))
                  : d9_je_aligned_alloc(alignment, size);
  if (D9_LIKELY(p)) return p;
  if (flags) return nullptr;
  return new_failed<kNoThrow>(size, alignment);
}

template <bool kNoThrow>
inline void* new_aligned_entry(size_t size, std::align_val_t al) {
  if (no_sample(size)) return new_aligned_impl<kNoThrow>(size, al, 0);
  return sampled(size, [=](int flags) { return new_aligned_impl<kNoThrow>(size, al, flags); });
}

inline int align_flags(std::align_val_t al) {
  auto alignment = static_cast<size_t>(al);
  return d9::je::align(alignment < kMinAlign ? kMinAlign : alignment);
}

// A sampled realloc's result, placed in the sampled arena (NULL if the arena is full).
void* realloc_into_arena(void* ptr, size_t size, int flags) {
  if (!ptr) return placed_mallocx(size, flags);
  if (d9::alloc::maybe_sampled(ptr)) return d9_je_rallocx(ptr, size, flags);
  // jemalloc would grow a block of the usual heap in place, outside the sampled arena,
  // where its free could not be seen. Move it once; later growth stays in the arena.
  void* q = placed_mallocx(size, flags);
  if (q) {
    size_t old = d9_je_malloc_usable_size(ptr);
    memcpy(q, ptr, old < size ? old : size);
    d9_je_free(ptr);
  }
  return q;
}

// realloc that may involve a sampled block or a new sample. The old block's free is
// claimed before jemalloc can release it (see profiler.h) and undone if realloc fails.
__attribute__((noinline)) void* realloc_slow(void* ptr, size_t size, bool charged_sample) {
  int saved = errno;
  bool take = charged_sample && d9::runtime::at_sample_point(size);
  bool tracked = d9::alloc::maybe_sampled(ptr) && d9::alloc::forget_sampled(ptr);
  uint64_t free_ts = tracked ? d9::alloc::now_ns() : 0;
  errno = saved;
  int flags = take ? d9::alloc::sampled_flags() : 0;
  void* q = flags ? realloc_into_arena(ptr, size, flags) : nullptr;
  if (!q) {
    q = d9::alloc::maybe_sampled(ptr) ? d9_je_rallocx(ptr, size, d9::je::kTcacheNone)
                                      : d9_je_realloc(ptr, size);
  }
  saved = errno;
  if (!q) {
    if (tracked) d9::alloc::retrack_sampled(ptr);
    errno = ENOMEM;
    return nullptr;
  }
  if (tracked) d9::alloc::push_free(ptr, free_ts);
  if (take) d9::alloc::record_alloc(q, size);
  errno = saved;
  return q;
}

}  // namespace

// ---- C allocation API ------------------------------------------------------------------

// The out-of-line halves of preload/fast_path.S: malloc at a sample point (or on a thread's
// first call), and frees of pointers in the sampled arena's range.
extern "C" void* d9_malloc_sampled(size_t size) {
  return sampled(
      size, [=](int flags) { return flags ? placed_mallocx(size, flags) : d9_je_malloc(size); });
}
extern "C" void d9_free_sampled(void* ptr) {
  sampled_free(ptr, 0, 0);
}
extern "C" void d9_sized_free_sampled(void* ptr, size_t size) {
  sampled_free(ptr, size, 0);
}

D9_EXPORT void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (no_sample(total)) return d9_je_calloc(1, total);
  return sampled(total, [=](int flags) {
    return flags ? placed_mallocx(total, flags | d9::je::kZero) : d9_je_calloc(1, total);
  });
}

D9_EXPORT void* realloc(void* ptr, size_t size) {
  // glibc: realloc(p, 0) frees p and returns NULL.
  if (ptr && size == 0) {
    free_block(ptr, 0, 0);
    return nullptr;
  }
  bool sample_point = !no_sample(size);
  if (D9_LIKELY(!sample_point && !d9::alloc::maybe_sampled(ptr))) {
    return or_enomem(d9_je_realloc(ptr, size));
  }
  return realloc_slow(ptr, size, sample_point);
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
  if (alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void*)) {
    return EINVAL;
  }
  if (alignment < kMinAlign) alignment = kMinAlign;
  int saved = errno;  // posix_memalign reports through its result, never through errno
  int rc = 0;
  auto allocate = [&](int flags) -> void* {
    void* p = flags ? placed_mallocx(size, flags | d9::je::align(alignment))
                    : d9_je_aligned_alloc(alignment, size);
    rc = p ? 0 : ENOMEM;
    if (p) *out = p;
    return p;
  };
  if (no_sample(size)) {
    allocate(0);
  } else {
    sampled(size, allocate);
  }
  errno = saved;
  return rc;
}

D9_EXPORT void* memalign(size_t alignment, size_t size) {
  if (no_sample(size)) return glibc_memalign(alignment, size, 0);
  return sampled(size, [=](int flags) { return glibc_memalign(alignment, size, flags); });
}

D9_EXPORT void* aligned_alloc(size_t alignment, size_t size) {
  return memalign(alignment, size);
}

D9_EXPORT void* valloc(size_t size) {
  return memalign(page_size(), size);
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

// The caller's own mallocx flags win: a sample goes to the sampled arena only when they
// name no arena or thread cache of their own (else it is counted as untracked).
inline int merge_flags(int caller, int sampled) {
  constexpr int kPlacement = ~0x7f;  // arena and tcache bits; the low 7 are align + zero
  if (!sampled) return 0;
  return (caller & kPlacement) ? 0 : caller | sampled;
}

D9_EXPORT void* mallocx(size_t size, int flags) {
  if (no_sample(size)) return d9_je_mallocx(size, flags);
  return sampled(size, [=](int ours) {
    int f = merge_flags(flags, ours);
    return ours && !f ? nullptr : placed_mallocx(size, ours ? f : flags);
  });
}

D9_EXPORT void* rallocx(void* ptr, size_t size, int flags) {
  // Rare API: moves of sampled blocks are reported; new samples stay where the caller put
  // them.
  if (no_sample(size) && !d9::alloc::maybe_sampled(ptr)) return d9_je_rallocx(ptr, size, flags);
  bool tracked = d9::alloc::maybe_sampled(ptr) && d9::alloc::forget_sampled(ptr);
  uint64_t free_ts = tracked ? d9::alloc::now_ns() : 0;
  void* q = d9_je_rallocx(ptr, size, flags);
  if (!q) {
    if (tracked) d9::alloc::retrack_sampled(ptr);
    return nullptr;
  }
  if (tracked) d9::alloc::push_free(ptr, free_ts);
  return q;
}

D9_EXPORT size_t xallocx(void* ptr, size_t size, size_t extra, int flags) {
  return d9_je_xallocx(ptr, size, extra, flags);
}
D9_EXPORT size_t sallocx(const void* ptr, int flags) {
  return d9_je_sallocx(ptr, flags);
}
D9_EXPORT void dallocx(void* ptr, int flags) {
  free_block(ptr, 0, flags);
}
D9_EXPORT void sdallocx(void* ptr, size_t size, int flags) {
  free_block(ptr, size ? size : 1, flags);
}
D9_EXPORT size_t nallocx(size_t size, int flags) {
  return d9_je_nallocx(size, flags);
}
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

// Unaligned new and new[], plain and nothrow: preload/fast_path.S, with these halves.
extern "C" void* d9_new_sampled(size_t size) {
  return sampled(size, [=](int flags) { return new_impl<false>(size, flags); });
}
// jemalloc's operator new, past its fast path, calls here in place of its malloc_default
// (alloc/prefix_jemalloc.cmake), so an empty result runs the new-handler loop above.
extern "C" __attribute__((visibility("hidden"))) void* d9_new_slow(size_t size) {
  void* p = je_malloc_default(size);
  if (D9_LIKELY(p)) return p;
  return new_failed<false>(size, 0);
}
extern "C" void* d9_new_nothrow_sampled(size_t size) noexcept {
  return sampled(size, [=](int flags) { return new_impl<true>(size, flags); });
}
extern "C" void* d9_new_nothrow_failed(size_t size) noexcept {
  return new_failed<true>(size, 0);
}
D9_EXPORT_CXX void* operator new(size_t size, std::align_val_t al) {
  return new_aligned_entry<false>(size, al);
}
D9_EXPORT_CXX void* operator new[](size_t size, std::align_val_t al) {
  return new_aligned_entry<false>(size, al);
}
D9_EXPORT_CXX void* operator new(size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  return new_aligned_entry<true>(size, al);
}
D9_EXPORT_CXX void* operator new[](size_t size, std::align_val_t al,
                                   const std::nothrow_t&) noexcept {
  return new_aligned_entry<true>(size, al);
}

// Unaligned deletes, plain, sized and nothrow: preload/fast_path.S.
D9_EXPORT_CXX void operator delete(void* p, std::align_val_t al) noexcept {
  if (p) free_block(p, 0, align_flags(al));
}
D9_EXPORT_CXX void operator delete[](void* p, std::align_val_t al) noexcept {
  if (p) free_block(p, 0, align_flags(al));
}
D9_EXPORT_CXX void operator delete(void* p, size_t n, std::align_val_t al) noexcept {
  if (p) free_block(p, n, align_flags(al));
}
D9_EXPORT_CXX void operator delete[](void* p, size_t n, std::align_val_t al) noexcept {
  if (p) free_block(p, n, align_flags(al));
}
D9_EXPORT_CXX void operator delete(void* p, std::align_val_t al, const std::nothrow_t&) noexcept {
  if (p) free_block(p, 0, align_flags(al));
}
D9_EXPORT_CXX void operator delete[](void* p, std::align_val_t al, const std::nothrow_t&) noexcept {
  if (p) free_block(p, 0, align_flags(al));
}

// ---- exec family: seal the segment before the image is replaced -----------------------
// glibc's own exec variants call its internal execve, not this one, so each is wrapped.

extern "C" char** environ;

namespace {

template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

using ExecveFn = int (*)(const char*, char* const[], char* const[]);

int real_execve(const char* path, char* const argv[], char* const envp[]) {
  static const auto fn = next_symbol<ExecveFn>("execve");
  return fn(path, argv, envp);
}

int real_execvpe(const char* file, char* const argv[], char* const envp[]) {
  static const auto fn = next_symbol<ExecveFn>("execvpe");
  return fn(file, argv, envp);
}

// Collects execl-style variadic arguments (ending in NULL) into an argv on the stack.
#define D9_COLLECT_ARGS(first, argv, after)                                        \
  size_t argc = 1;                                                                 \
  {                                                                                \
    va_list count;                                                                 \
    va_start(count, first);                                                        \
    while (va_arg(count, char*)) ++argc;                                           \
    va_end(count);                                                                 \
  }                                                                                \
  char** argv = static_cast<char**>(__builtin_alloca((argc + 1) * sizeof(char*))); \
  va_list args;                                                                    \
  va_start(args, first);                                                           \
  argv[0] = const_cast<char*>(first);                                              \
  for (size_t i = 1; i <= argc; ++i) argv[i] = va_arg(args, char*);                \
  after;                                                                           \
  va_end(args);

}  // namespace

D9_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  d9::runtime::before_exec();
  return real_execve(path, argv, envp);
}

D9_EXPORT int execv(const char* path, char* const argv[]) {
  d9::runtime::before_exec();
  return real_execve(path, argv, environ);
}

D9_EXPORT int execvp(const char* file, char* const argv[]) {
  d9::runtime::before_exec();
  return real_execvpe(file, argv, environ);
}

D9_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  d9::runtime::before_exec();
  return real_execvpe(file, argv, envp);
}

D9_EXPORT int execl(const char* path, const char* arg, ...) {
  D9_COLLECT_ARGS(arg, argv, (void)0)
  d9::runtime::before_exec();
  return real_execve(path, argv, environ);
}

D9_EXPORT int execlp(const char* file, const char* arg, ...) {
  D9_COLLECT_ARGS(arg, argv, (void)0)
  d9::runtime::before_exec();
  return real_execvpe(file, argv, environ);
}

D9_EXPORT int execle(const char* path, const char* arg, ...) {
  // execle: the environment follows the terminating NULL.
  char* const* envp = nullptr;
  D9_COLLECT_ARGS(arg, argv, envp = va_arg(args, char* const*))
  d9::runtime::before_exec();
  return real_execve(path, argv, envp);
}

D9_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  using FexecveFn = int (*)(int, char* const[], char* const[]);
  static const auto fn = next_symbol<FexecveFn>("fexecve");
  d9::runtime::before_exec();
  return fn(fd, argv, envp);
}

// ---- dlclose: keep the library's symbols --------------------------------------------
// Samples may hold addresses in a library about to be unloaded; the writer takes note of
// the mapped modules first, so those addresses still resolve at the next seal.

D9_EXPORT int dlclose(void* handle) {
  using DlcloseFn = int (*)(void*);
  static const auto real_dlclose = next_symbol<DlcloseFn>("dlclose");
  uint8_t nested = tls_state.in_dlclose;
  // A dlclose from a destructor run by another dlclose may hold the loader lock, which the
  // writer needs: only the outermost one waits.
  if (!nested) d9::runtime::before_dlclose();
  tls_state.in_dlclose = 1;
  int rc = real_dlclose(handle);
  tls_state.in_dlclose = nested;
  return rc;
}

// ---- descriptors d9's libraries open for it -----------------------------------------------
// libunwind tests an address by writing a byte of it into a pipe of its own, which it opens
// with pipe2 at d9's first stack capture, on a host thread: the lowest free numbers, 3 and
// 4 in most programs. A program that then closes them and reuses the numbers would have
// libunwind read a byte from, and write one into, the program's own files. A pipe opened
// while d9 code runs on the thread moves up to d9's descriptor floor instead.

D9_EXPORT int pipe2(int fds[2], int flags) noexcept {
  using Fn = int (*)(int*, int);
  static const auto real = next_symbol<Fn>("pipe2");
  int rc = real(fds, flags);
  if (rc == 0 && (tls_state.in_d9 || tls_state.internal)) {
    fds[0] = d9::OwnFd::raise(fds[0]);
    fds[1] = d9::OwnFd::raise(fds[1]);
  }
  return rc;
}

// ---- user and group changes: the output follows the process ----------------------------
// A server started as root that switches to another user (nginx's, apache's and postgres's
// workers) could no longer create files in its own output directory. Before root gives
// its effective user or group away, the writer hands the directory over to them.

namespace {
constexpr uid_t kKeepUid = static_cast<uid_t>(-1);
constexpr gid_t kKeepGid = static_cast<gid_t>(-1);
}  // namespace

#define D9_ID_WRAPPER(name, params, args, uid, gid)  \
  D9_EXPORT int name params noexcept {               \
    using Fn = int(*) params;                        \
    static const auto real = next_symbol<Fn>(#name); \
    d9::runtime::before_id_change(uid, gid);         \
    return real args;                                \
  }
D9_ID_WRAPPER(setuid, (uid_t u), (u), u, kKeepGid)
D9_ID_WRAPPER(seteuid, (uid_t e), (e), e, kKeepGid)
D9_ID_WRAPPER(setreuid, (uid_t r, uid_t e), (r, e), e, kKeepGid)
D9_ID_WRAPPER(setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s), e, kKeepGid)
D9_ID_WRAPPER(setgid, (gid_t g), (g), kKeepUid, g)
D9_ID_WRAPPER(setegid, (gid_t e), (e), kKeepUid, e)
D9_ID_WRAPPER(setregid, (gid_t r, gid_t e), (r, e), kKeepUid, e)
D9_ID_WRAPPER(setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s), kKeepUid, e)
#undef D9_ID_WRAPPER

// ---- _exit and _Exit: seal the last segment, as exit() does through d9's destructor ------
// glibc's exit() ends in its internal _exit, not this one.

namespace {

using QuickExitFn = void (*)(int);

[[noreturn]] void seal_then(QuickExitFn real, int status) {
  d9::runtime::before_quick_exit();
  real(status);
  __builtin_unreachable();
}

}  // namespace

D9_EXPORT void _exit(int status) {
  static const auto real = next_symbol<QuickExitFn>("_exit");
  seal_then(real, status);
}

D9_EXPORT void _Exit(int status) {
  static const auto real = next_symbol<QuickExitFn>("_Exit");
  seal_then(real, status);
}

// ---- threads and SIGPROF: CPU sampling (preload/cpu.h) ------------------------------
// pthread_create arms the new thread's CPU-time timer before the host's start routine
// runs, so no thread's first CPU goes unsampled and no timer outlives its thread; the
// signal functions keep SIGPROF the host's own.

D9_EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                             void* arg) noexcept {
  return d9::cpu::create_thread(thread, attr, fn, arg);
}

D9_EXPORT void pthread_exit(void* retval) {
  using ExitFn = void (*)(void*);
  static const auto fn = next_symbol<ExitFn>("pthread_exit");
  d9::cpu::thread_exiting();
  fn(retval);
  __builtin_unreachable();
}

D9_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  return d9::cpu::host_sigaction(sig, act, old);
}

D9_EXPORT sighandler_t signal(int sig, sighandler_t handler) noexcept {
  return d9::cpu::host_signal(sig, handler);
}
