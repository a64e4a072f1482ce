#include "alloc/sampled_heap.h"

#include <jemalloc/jemalloc.h>  // extent_hooks_t and the MALLOCX_* flag encodings
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>

#include "alloc/jemalloc_api.h"
#include "alloc/thread_state.h"

uintptr_t d9_sampled_lo = 0;
uintptr_t d9_sampled_hi = 0;

namespace d9::alloc {

static_assert(je::kZero == MALLOCX_ZERO && je::kTcacheNone == MALLOCX_TCACHE_NONE &&
              je::arena(7) == MALLOCX_ARENA(7) && je::tcache(7) == MALLOCX_TCACHE(7) &&
              (je::tcache(4093) & ~je::kTcacheBits) == 0 &&  // jemalloc's highest tcache id
              (je::kTcacheNone & ~je::kTcacheBits) == 0);  // MALLOCX_ALIGN(a): ffs(a) - 1 == ctz(a)

namespace {

std::atomic<uintptr_t> g_cursor{0};  // next free byte of the reservation

// Sampled allocations are spread over several arenas, by thread, as jemalloc spreads
// ordinary ones: with one arena for all, threads queued on its bin and extent locks (a
// tcache refill, a large block) behind a holder that was preempted, 1.5-17 ms on a busy
// machine where ordinary allocations never blocked. jemalloc's own arena count (opt.narenas,
// 4 per CPU), at most kMaxArenas; they share the reservation and its lock-free hooks.
constexpr unsigned kMaxArenas = 8;
// Each arena is created at the first sample of a thread that maps to it, not at start-up:
// that takes 130-180 us, which every short-lived process that never samples (most shell
// commands) would wait for.
enum ArenaState : int { kNoArena, kCreating, kReady, kFailed };
struct SampledArena {
  std::atomic<int> state{kNoArena};
  int flags = 0;  // MALLOCX_ARENA of the arena; 0 until it exists
};
SampledArena g_arenas[kMaxArenas];
unsigned g_arena_count = 1;            // set when the reservation is made
std::atomic<bool> g_key_state{false};  // g_thread_exit created (by the first arena's creator)
std::atomic<bool> g_any_arena{false};  // some arena is ready: frees may need a tcache
// Its destructor runs as each thread that has an explicit tcache exits, however it was
// created and however it ends. Without it, tcaches could not be given back: none are used.
pthread_key_t g_thread_exit;
bool g_tcaches = false;

// jemalloc trims an automatic tcache as its thread allocates; an explicit one it never
// trims. Flushing it every so many sampled operations hands what it caches back to the
// arena: about every 4 GB allocated at the default rate. What a tcache can hold is bounded
// (a few MB at most, sampled blocks only) however rarely it is flushed; flushing more often
// only made the arena purge and fault the same pages in again (1024 operations: 1700 more
// page faults a second on bench/alloc_loop).
constexpr uint16_t kOpsPerFlush = 8192;

// "tcache.destroy" or "tcache.flush" of the explicit tcache in `flags`, if any.
void tcache_ctl(const char* name, int flags) {
  int tcache = flags & je::kTcacheBits;
  if (!tcache || tcache == je::kTcacheNone) return;
  unsigned id = static_cast<unsigned>(tcache >> 8) - 2;
  d9_je_mallctl(name, nullptr, nullptr, &id, sizeof(id));
}

// At thread exit: gives the thread's explicit tcache back. Frees from destructors that run
// later go past any tcache.
void release_thread_cache(void*) {
  ThreadState& t = tls_state;
  t.exited = 1;
  int flags = t.sampled_flags;
  if (!flags) return;
  t.sampled_flags = (flags & ~je::kTcacheBits) | je::kTcacheNone;
  tcache_ctl("tcache.destroy", flags);
}

// This thread's flags for arena flags `arena_flags`, creating its explicit tcache on first
// use (and retrying every kOpsPerFlush operations while jemalloc had none to give).
int thread_flags(int arena_flags) {
  ThreadState& t = tls_state;
  if (t.sampled_flags) {
    t.sampled_flags = arena_flags | (t.sampled_flags & je::kTcacheBits);
    if (++t.sampled_ops < kOpsPerFlush || t.exited) return t.sampled_flags;
    t.sampled_ops = 0;
    if ((t.sampled_flags & je::kTcacheBits) != je::kTcacheNone) {
      tcache_ctl("tcache.flush", t.sampled_flags);
      return t.sampled_flags;
    }
  }
  int tcache = je::kTcacheNone;
  unsigned id = 0;
  size_t len = sizeof(id);
  if (g_tcaches && !t.exited && d9_je_mallctl("tcache.create", &id, &len, nullptr, 0) == 0) {
    tcache = je::tcache(id);
  }
  t.sampled_flags = arena_flags | tcache;  // first: setspecific may allocate, and sample
  if (tcache != je::kTcacheNone) pthread_setspecific(g_thread_exit, &g_thread_exit);
  return t.sampled_flags;
}

// Memory in the reservation was counted against RLIMIT_AS when it was reserved, so under
// an address-space limit it would let the program allocate past that limit. With a limit
// in force, d9 reserves nothing and the hook hands out no new memory: sampled allocations
// then come from the usual heap, under the same limit (and are counted as untracked).
// (RLIMIT_DATA needs nothing: the kernel checks it when mprotect makes pages writable.)
bool address_space_limited() {
  rlimit rl;
  return getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

// Carves `size` bytes aligned to `alignment` from the reservation (lock-free bump).
void* extent_alloc(extent_hooks_t*, void* new_addr, size_t size, size_t alignment, bool* zero,
                   bool* commit, unsigned) {
  if (address_space_limited()) return nullptr;
  const uintptr_t end = d9_sampled_hi;
  uintptr_t cur = g_cursor.load(std::memory_order_relaxed);
  uintptr_t start;
  do {
    start = (cur + alignment - 1) & ~(alignment - 1);
    if (new_addr && reinterpret_cast<uintptr_t>(new_addr) != start) return nullptr;
    if (start < cur || start + size > end || start + size < start) return nullptr;  // full
  } while (!g_cursor.compare_exchange_weak(cur, start + size, std::memory_order_relaxed));
  void* p = reinterpret_cast<void*>(start);
  if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) return nullptr;  // bytes stay carved
  *zero = true;  // never handed out before: fresh zero pages
  *commit = true;
  return p;
}

// Opt out of unmapping: jemalloc keeps the extent and reuses it.
bool extent_dalloc(extent_hooks_t*, void*, size_t, bool, unsigned) {
  return true;
}
void extent_destroy(extent_hooks_t*, void*, size_t, bool, unsigned) {}
bool extent_commit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) {
  return false;
}
// Opt out of decommit: pages stay accessible (and are purged instead).
bool extent_decommit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) {
  return true;
}

bool extent_purge_lazy(extent_hooks_t*, void* addr, size_t, size_t offset, size_t length,
                       unsigned) {
  return madvise(static_cast<char*>(addr) + offset, length, MADV_FREE) != 0;
}

bool extent_purge_forced(extent_hooks_t*, void* addr, size_t, size_t offset, size_t length,
                         unsigned) {
  return madvise(static_cast<char*>(addr) + offset, length, MADV_DONTNEED) != 0;
}

// One contiguous mapping: any split or merge inside it is fine.
bool extent_split(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) {
  return false;
}
bool extent_merge(extent_hooks_t*, void*, size_t, void*, size_t, bool, unsigned) {
  return false;
}

extent_hooks_t g_hooks = {extent_alloc,        extent_dalloc,   extent_destroy,
                          extent_commit,       extent_decommit, extent_purge_lazy,
                          extent_purge_forced, extent_split,    extent_merge};

// Reserves `bytes` of address space below the usual heap. Where the kernel would put it,
// right next to jemalloc's own mappings, ordinary malloc/free ran 30% slower on
// bench/alloc_loop (20 vs 15 ns/op, with identical instruction counts). So it goes at a
// random 2 MiB-aligned spot between 16 and 64 TiB: above sanitizer shadows and non-PIE
// programs' brk heaps, below PIE executables (~85 TiB) and the mmap area (~127 TiB).
// If that space is taken, anywhere will do.
void* reserve(size_t bytes) {
  constexpr uintptr_t kLow = 16ULL << 40, kHigh = 64ULL << 40, kAlign = 2ULL << 20;
  constexpr int kProt = PROT_NONE, kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  for (int attempt = 0; attempt < 4 && bytes < kHigh - kLow; ++attempt) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) break;
    auto hint = reinterpret_cast<void*>((kLow + r % (kHigh - kLow - bytes)) & ~(kAlign - 1));
    void* p = mmap(hint, bytes, kProt, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == hint) return p;
    if (p != MAP_FAILED) munmap(p, bytes);  // a kernel before 4.17 took it as a mere hint
  }
  return mmap(nullptr, bytes, kProt, kFlags, -1, 0);
}

}  // namespace

bool init_sampled_heap(size_t reserve_bytes) {
  if (d9_sampled_hi != 0) return true;
  if (address_space_limited()) return false;
  void* base = MAP_FAILED;
  // vm.max_map_count or overcommit policy may refuse a large reservation: halve to 1 GiB.
  for (size_t bytes = reserve_bytes; bytes >= (1ULL << 30); bytes /= 2) {
    base = reserve(bytes);
    if (base != MAP_FAILED) {
      reserve_bytes = bytes;
      break;
    }
  }
  if (base == MAP_FAILED) return false;

  // The range must be valid before the arena exists: jemalloc allocates the arena's own
  // metadata through its hooks while creating it. Nothing is in it before then, so no free
  // can mistake a pointer for a sampled one.
  unsigned narenas = 0;
  size_t len = sizeof(narenas);
  if (d9_je_mallctl("opt.narenas", &narenas, &len, nullptr, 0) == 0 && narenas > 0) {
    g_arena_count = std::min(narenas, kMaxArenas);
  }
  g_cursor.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
  d9_sampled_lo = reinterpret_cast<uintptr_t>(base);  // the range opens when hi is set
  d9_sampled_hi = reinterpret_cast<uintptr_t>(base) + reserve_bytes;
  return true;
}

namespace {

// Creates arena `a`, once. A sample that comes while another thread is creating it, or
// after creation failed, is served from the usual heap (and counted as untracked).
bool ensure_arena(SampledArena& a) {
  int state = a.state.load(std::memory_order_acquire);
  if (state == kReady) return true;
  if (state != kNoArena || d9_sampled_hi == 0 ||
      !a.state.compare_exchange_strong(state, kCreating, std::memory_order_acq_rel)) {
    return false;
  }
  unsigned arena = 0;
  size_t arena_size = sizeof(arena);
  extent_hooks_t* hooks = &g_hooks;
  if (d9_je_mallctl("arenas.create", &arena, &arena_size, &hooks, sizeof(hooks)) != 0) {
    a.state.store(kFailed, std::memory_order_release);
    return false;
  }
  if (!g_key_state.exchange(true, std::memory_order_acq_rel)) {
    g_tcaches = pthread_key_create(&g_thread_exit, release_thread_cache) == 0;
  }
  a.flags = je::arena(arena);
  a.state.store(kReady, std::memory_order_release);
  g_any_arena.store(true, std::memory_order_release);
  return true;
}

}  // namespace

// The thread's arena (by tid) and explicit tcache. A thread that freed sampled blocks
// before it sampled has a tcache and no arena yet.
int sampled_heap_flags() {
  ThreadState& t = tls_state;
  int arena_flags = t.sampled_flags & ~je::kTcacheBits;
  if (!arena_flags) {
    SampledArena& a = g_arenas[t.tid % g_arena_count];
    if (!ensure_arena(a)) return 0;
    arena_flags = a.flags;
  }
  return thread_flags(arena_flags);
}

void sampled_heap_after_fork() {
  for (SampledArena& a : g_arenas) {
    if (a.state.load(std::memory_order_relaxed) == kCreating) {
      a.state.store(a.flags ? kReady : kNoArena, std::memory_order_relaxed);
      if (a.flags) g_any_arena.store(true, std::memory_order_relaxed);
    }
  }
}

int sampled_free_flags() {
  if (!g_any_arena.load(std::memory_order_acquire)) return je::kTcacheNone;
  return thread_flags(tls_state.sampled_flags & ~je::kTcacheBits) & je::kTcacheBits;
}

}  // namespace d9::alloc
