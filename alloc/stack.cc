#include "alloc/stack.h"

#include <dlfcn.h>
#include <unwind.h>

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
std::atomic<bool> g_unwinder_wanted{false};  // a capture has asked the writer for it

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
  return fn != nullptr;
}

bool unwinder_wanted() {
  return g_unwinder_wanted.load(std::memory_order_acquire);
}

void set_loader_suspect(bool suspect) {
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

// A capture without libunwind asks the writer to load it (once per process) and goes on
// at once: a host thread never waits for a library load. Until the writer has loaded it
// (and for good if libunwind.so.8 is missing), samples are walked with libgcc.
void ask_for_unwinder() {
  if (!g_unwinder_wanted.load(std::memory_order_relaxed) &&
      !g_unwinder_wanted.exchange(true, std::memory_order_acq_rel)) {
    alloc::nudge_writer();
  }
}

}  // namespace

int capture(uint64_t* out, int max_depth) {
  if (max_depth <= 0) return 0;
  if (max_depth > kMaxDepth) max_depth = kMaxDepth;
  void* pcs[kMaxDepth + kOwnFramesSlack];
  const int max = max_depth + kOwnFramesSlack;
  int n;
  if (BacktraceFn backtrace = g_backtrace.load(std::memory_order_acquire)) {
    if (!g_loader_suspect.load(std::memory_order_acquire)) {
      n = backtrace(pcs, max);
    } else if (unwind::has_tables()) {
      n = walk_without_loader(pcs, max);
    } else {
      n = walk_with_libgcc(pcs, max);  // lock-free, like the CPU sampler's tables
    }
  } else {
    n = walk_with_libgcc(pcs, max);
    ask_for_unwinder();
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
