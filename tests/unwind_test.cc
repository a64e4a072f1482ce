// The signal handler's unwinder (alloc/unwind.h) on this process's own stacks: the same
// frames as libunwind, complete down to clone/_start, through libc code built without
// frame pointers, through a signal frame, and cheap enough to run at every sample.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <ucontext.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <chrono>
#include <thread>
#include <vector>

#include "alloc/cpu_profiler.h"
#include "alloc/unwind.h"

namespace d9::unwind {
namespace {

StackBounds this_stack() {
  pthread_attr_t attr;
  pthread_getattr_np(pthread_self(), &attr);
  void* addr;
  size_t size;
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  return {reinterpret_cast<uint64_t>(addr), reinterpret_cast<uint64_t>(addr) + size};
}

struct Captured {
  std::vector<uint64_t> ours, libunwind;
  bool complete = false;
};

// libunwind's per-thread cache crashes in its thread-exit destructor under TSan.
#ifdef __SANITIZE_THREAD__
constexpr bool kLibunwindOnThreads = false;
#else
constexpr bool kLibunwindOnThreads = true;
#endif

// Walks from the current point with both unwinders (libunwind only if `with_libunwind`).
__attribute__((noinline)) Captured capture(bool with_libunwind = true) {
  Captured c;
  ucontext_t uc;
  getcontext(&uc);
  const greg_t* g = uc.uc_mcontext.gregs;
  uint64_t out[256];
  WalkResult w = walk({static_cast<uint64_t>(g[REG_RIP]), static_cast<uint64_t>(g[REG_RSP]),
                       static_cast<uint64_t>(g[REG_RBP])},
                      this_stack(), out, 256);
  c.ours.assign(out, out + w.depth);
  c.complete = w.complete;
  if (!with_libunwind) return c;
  void* pcs[256];
  int n = unw_backtrace(pcs, 256);
  for (int i = 0; i < n; ++i) c.libunwind.push_back(reinterpret_cast<uint64_t>(pcs[i]));
  return c;
}

__attribute__((noinline)) Captured recurse(int depth, bool with_libunwind = true) {
  if (depth == 0) return capture(with_libunwind);
  Captured c = recurse(depth - 1, with_libunwind);
  asm volatile("");  // not a tail call
  return c;
}

// ours[0] is getcontext's return point in capture(), libunwind's [0] is inside capture()
// after unw_backtrace: compare from the caller of capture() on.
void expect_same_callers(const Captured& c) {
  ASSERT_GE(c.ours.size(), 3u);
  ASSERT_GE(c.libunwind.size(), 3u);
  std::vector<uint64_t> ours(c.ours.begin() + 1, c.ours.end());
  std::vector<uint64_t> theirs(c.libunwind.begin() + 1, c.libunwind.end());
  EXPECT_EQ(ours, theirs);
}

class Unwind : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static ModuleMap* map = new ModuleMap;  // published for the whole process, never freed
    auto t0 = std::chrono::steady_clock::now();
    map->refresh();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("tables: %zu modules, %zu rows (%zu KiB), built in %.1f ms\n", map->modules(),
                map->rows(), map->rows() * sizeof(cfi::Row) / 1024, ms);
  }
};

TEST_F(Unwind, SameFramesAsLibunwindAndComplete) {
  Captured c = recurse(20);
  EXPECT_TRUE(c.complete);
  EXPECT_GE(c.ours.size(), 22u);
  expect_same_callers(c);
}

TEST_F(Unwind, OnAThreadDownToClone) {
  Captured c;
  std::thread([&] { c = recurse(5, kLibunwindOnThreads); }).join();
  EXPECT_TRUE(c.complete);
  EXPECT_GE(c.ours.size(), 9u);  // capture, 6 x recurse, the lambda, ..., clone3
  if (kLibunwindOnThreads) expect_same_callers(c);
}

// qsort is in libc, built without frame pointers: only the tables get through it.
Captured g_from_qsort;
int compare(const void* a, const void* b) {
  if (g_from_qsort.ours.empty()) g_from_qsort = capture();
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

TEST_F(Unwind, ThroughLibcWithoutFramePointers) {
  int v[64];
  for (int i = 0; i < 64; ++i) v[i] = 64 - i;
  qsort(v, 64, sizeof(int), compare);
  EXPECT_TRUE(g_from_qsort.complete);
  expect_same_callers(g_from_qsort);
}

// From inside a signal handler, through the kernel's signal frame (__restore_rt) into
// the interrupted code and down to the bottom. The handler only walks into static buffers.
StackBounds g_sig_stack;
uint64_t g_sig_ours[256];
void* g_sig_theirs[256];
int g_sig_ours_n = 0, g_sig_theirs_n = 0;
bool g_sig_complete = false;
void on_usr2(int) {
  ucontext_t uc;
  getcontext(&uc);
  const greg_t* g = uc.uc_mcontext.gregs;
  WalkResult w = walk({static_cast<uint64_t>(g[REG_RIP]), static_cast<uint64_t>(g[REG_RSP]),
                       static_cast<uint64_t>(g[REG_RBP])},
                      g_sig_stack, g_sig_ours, 256);
  g_sig_ours_n = w.depth;
  g_sig_complete = w.complete;
  g_sig_theirs_n = unw_backtrace(g_sig_theirs, 256);
}

TEST_F(Unwind, ThroughASignalFrame) {
  g_sig_stack = this_stack();
  signal(SIGUSR2, on_usr2);
  raise(SIGUSR2);
  signal(SIGUSR2, SIG_DFL);
  Captured c;
  c.complete = g_sig_complete;
  c.ours.assign(g_sig_ours, g_sig_ours + g_sig_ours_n);
  for (int i = 0; i < g_sig_theirs_n; ++i) {
    c.libunwind.push_back(reinterpret_cast<uint64_t>(g_sig_theirs[i]));
  }
  EXPECT_TRUE(c.complete);
  expect_same_callers(c);
}

TEST_F(Unwind, UnknownStackGivesTheLeafOnly) {
  uint64_t out[8];
  WalkResult w = walk({0x1234, 0x1000, 0}, {0, 0}, out, 8);
  EXPECT_EQ(w.depth, 1);
  EXPECT_FALSE(w.complete);
  EXPECT_EQ(out[0], 0x1234u);
}

// The writer works out the main thread's stack bounds itself (glibc's way, without the
// thread's lock): the same as pthread_getattr_np gives on the main thread.
TEST(MainStackBounds, SameAsGlibc) {
  ASSERT_EQ(gettid(), getpid()) << "GoogleTest runs tests on the main thread";
  StackBounds glibc = this_stack();
  uint64_t lo = 0, hi = 0;
  ASSERT_TRUE(cpu::main_stack_bounds(&lo, &hi));
  EXPECT_EQ(lo, glibc.lo);
  EXPECT_EQ(hi, glibc.hi);
  auto here = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  EXPECT_TRUE(here >= lo && here < hi);
}

// The cost of one sample's walk, next to libunwind's unw_backtrace (which the handler
// cannot use), printed for the record; the bound only catches a gross regression.
TEST_F(Unwind, CostPerSample) {
  constexpr int kRounds = 20000;
  auto time = [&](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) fn();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           kRounds;
  };
  ucontext_t uc;
  getcontext(&uc);
  const greg_t* g = uc.uc_mcontext.gregs;
  Regs regs{static_cast<uint64_t>(g[REG_RIP]), static_cast<uint64_t>(g[REG_RSP]),
            static_cast<uint64_t>(g[REG_RBP])};
  StackBounds stack = this_stack();
  uint64_t out[256];
  int depth = 0;
  double ours = time([&] { depth = walk(regs, stack, out, 256).depth; });
  void* pcs[256];
  double theirs = time([&] { unw_backtrace(pcs, 256); });
  std::printf("walk: %.0f ns for %d frames (%.0f ns/frame); unw_backtrace: %.0f ns\n", ours, depth,
              ours / depth, theirs);
  EXPECT_LT(ours / depth, 1000.0);
}

}  // namespace
}  // namespace d9::unwind
