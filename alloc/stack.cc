#include "alloc/stack.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/auxv.h>
#include <time.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "alloc/cpu_profiler.h"
#include "alloc/profiler.h"
#include "alloc/thread_state.h"
#include "alloc/unwind.h"

// Linker-provided bounds of libd9's own image, used to drop d9's frames from stacks.
extern "C" const char __ehdr_start __attribute__((visibility("hidden")));
extern "C" const char _end __attribute__((visibility("hidden")));

namespace d9::stack {
namespace {

using BacktraceFn = int (*)(void**, int);
std::atomic<BacktraceFn> g_backtrace{nullptr};
std::atomic<bool> g_loader_suspect{false};
std::atomic<bool> g_waited_for_loader{false};  // this fork child's one wait is used up
std::atomic<bool> g_writer_loads{false};       // writer_loads_unwinder() was called
std::atomic<bool> g_unwinder_wanted{false};    // a capture has asked the writer for it
std::atomic<bool> g_unwinder_tried{false};     // load_unwinder() has finished, loaded or not

// Frames of the sampling path itself that sit above the caller: wrapper, sampled path,
// capture. A little slack keeps the requested depth after they are dropped.
constexpr int kOwnFramesSlack = 8;

bool in_own_image(uint64_t pc) {
  return pc >= reinterpret_cast<uint64_t>(&__ehdr_start) && pc < reinterpret_cast<uint64_t>(&_end);
}

BacktraceFn open_unwinder() {
  void* lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return nullptr;
  auto fn = reinterpret_cast<BacktraceFn>(dlsym(lib, "unw_backtrace"));
  if (!fn) return nullptr;
  // Per-thread caches of unwind information: no lock shared between sampling threads, and
  // repeated stacks skip the DWARF lookups.
  using SetPolicyFn = int (*)(void*, int);
  auto set_policy = reinterpret_cast<SetPolicyFn>(dlsym(lib, "_ULx86_64_set_caching_policy"));
  auto* space = static_cast<void**>(dlsym(lib, "_ULx86_64_local_addr_space"));
  constexpr int kCachePerThread = 2;  // UNW_CACHE_PER_THREAD
  if (set_policy && space) set_policy(*space, kCachePerThread);
  return fn;
}

}  // namespace

bool load_unwinder() {
  if (g_backtrace.load(std::memory_order_acquire)) return true;
  BacktraceFn fn = open_unwinder();
  if (fn) g_backtrace.store(fn, std::memory_order_release);
  g_unwinder_tried.store(true, std::memory_order_release);  // waiting threads go on
  return fn != nullptr;
}

void writer_loads_unwinder() {
  g_writer_loads.store(true, std::memory_order_release);
}

bool unwinder_wanted() {
  return g_unwinder_wanted.load(std::memory_order_acquire);
}

void set_loader_suspect(bool suspect) {
  if (suspect) g_waited_for_loader.store(false, std::memory_order_relaxed);
  g_loader_suspect.store(suspect, std::memory_order_release);
}

namespace {

// The stack from here with the CPU sampler's unwind tables: no loader lock, no libunwind.
__attribute__((noinline)) int walk_without_loader(void** pcs, int max) {
  uint64_t sp, fp, pc;
  asm volatile("mov %%rsp, %0\n\tmov %%rbp, %1\n\tlea 0(%%rip), %2" : "=r"(sp), "=r"(fp), "=r"(pc));
  const cpu::CpuThread& t = cpu::tls_cpu;
  uint64_t frames[kMaxDepth + kOwnFramesSlack];
  int n = unwind::walk({pc, sp, fp}, cpu::stack_bounds(t), frames, max).depth;
  for (int i = 0; i < n; ++i) pcs[i] = reinterpret_cast<void*>(frames[i]);
  return n;
}

// The stack from here with libgcc's unwinder, for samples taken before libunwind is loaded
// (allocations in the constructors of libraries initialised before d9's own: libstdc++'s,
// and those of every library the program links) or when it cannot be loaded. Slower than
// libunwind's cached walk, but it needs nothing loaded: libgcc_s is one of libd9's own
// dependencies, and with glibc 2.35 or later it finds unwind tables through
// _dl_find_object, which takes no lock and may be called while the loader runs
// constructors.
struct GccWalk {
  void** pcs;
  int depth, max;
};

_Unwind_Reason_Code on_gcc_frame(_Unwind_Context* context, void* arg) {
  auto* walk = static_cast<GccWalk*>(arg);
  uintptr_t pc = _Unwind_GetIP(context);
  if (pc == 0 || walk->depth >= walk->max) return _URC_END_OF_STACK;
  walk->pcs[walk->depth++] = reinterpret_cast<void*>(pc);
  return _URC_NO_REASON;
}

__attribute__((noinline)) int walk_with_libgcc(void** pcs, int max) {
  GccWalk walk{pcs, 0, max};
  _Unwind_Backtrace(on_gcc_frame, &walk);
  return walk.depth;
}

// The dynamic loader's own image, from the auxiliary vector: no lock, no allocation.
struct Range {
  uintptr_t lo = 0, hi = 0;
};
Range loader_image() {
  Range r;
  r.lo = getauxval(AT_BASE);
  if (r.lo == 0) return r;
  const auto* ehdr = reinterpret_cast<const ElfW(Ehdr)*>(r.lo);
  const auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(r.lo + ehdr->e_phoff);
  for (int i = 0; i < ehdr->e_phnum; ++i) {
    if (phdr[i].p_type == PT_LOAD) r.hi = std::max(r.hi, r.lo + phdr[i].p_vaddr + phdr[i].p_memsz);
  }
  return r;
}

// True if the loader is on this stack: the thread may hold the loader's lock (an
// allocation inside dlopen, or in a constructor it runs), which the writer's dlopen needs.
bool inside_loader(void* const* pcs, int n) {
  static const Range ld = loader_image();
  for (int i = 0; i < n; ++i) {
    auto pc = reinterpret_cast<uintptr_t>(pcs[i]);
    if (pc >= ld.lo && pc < ld.hi) return true;
  }
  return false;
}

// A capture without libunwind, once the writer can load it: the first asks for it, and
// each thread waits for the load once (at most 20 ms), so the samples that follow are
// walked with it, however long the writer takes to be scheduled (one starved by this very
// thread, or under valgrind, which runs one thread at a time). Not while the loader is on
// the stack: the writer's dlopen would wait for this thread. Loads first: every capture
// without libunwind comes here, only the first may pay for the exchange.
void wait_for_unwinder(void* const* pcs, int n) {
  if (!g_writer_loads.load(std::memory_order_acquire)) return;
  if (!g_unwinder_wanted.load(std::memory_order_relaxed) &&
      !g_unwinder_wanted.exchange(true, std::memory_order_acq_rel)) {
    alloc::nudge_writer();
  }
  ThreadState& t = tls_state;
  if (t.waited_for_unwinder || inside_loader(pcs, n)) return;
  t.waited_for_unwinder = 1;
  timespec pause{0, 50 * 1000};
  for (int i = 0; i < 400 && !g_unwinder_tried.load(std::memory_order_acquire); ++i) {
    nanosleep(&pause, nullptr);
  }
}

}  // namespace

// A fork child without unwind tables: waits (once, at most 20 ms) for the writer to show
// the loader's lock free. True if it did.
bool loader_cleared_after_wait() {
  if (unwind::has_tables() || g_waited_for_loader.exchange(true, std::memory_order_relaxed)) {
    return false;
  }
  timespec pause{0, 50 * 1000};
  for (int i = 0; i < 400; ++i) {
    if (!g_loader_suspect.load(std::memory_order_acquire)) return true;
    nanosleep(&pause, nullptr);
  }
  return false;
}

int capture(uint64_t* out, int max_depth) {
  if (max_depth <= 0) return 0;
  if (max_depth > kMaxDepth) max_depth = kMaxDepth;
  void* pcs[kMaxDepth + kOwnFramesSlack];
  const int max = max_depth + kOwnFramesSlack;
  int n;
  if (BacktraceFn backtrace = g_backtrace.load(std::memory_order_acquire)) {
    bool suspect = g_loader_suspect.load(std::memory_order_acquire);
    if (suspect && loader_cleared_after_wait()) suspect = false;
    n = suspect ? walk_without_loader(pcs, max) : backtrace(pcs, max);
  } else {
    n = walk_with_libgcc(pcs, max);
    wait_for_unwinder(pcs, n);
  }
  int first = 0;
  while (first < n && in_own_image(reinterpret_cast<uint64_t>(pcs[first]))) ++first;
  int depth = 0;
  for (int i = first; i < n && depth < max_depth; ++i) {
    out[depth++] = reinterpret_cast<uint64_t>(pcs[i]);
  }
  return depth;
}

}  // namespace d9::stack
