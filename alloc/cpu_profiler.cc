#include "alloc/cpu_profiler.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "alloc/profiler.h"
#include "alloc/unwind.h"

extern "C" void* __libc_stack_end;  // ld.so: the stack pointer the process started with

namespace d9::cpu {

constinit thread_local CpuThread tls_cpu __attribute__((tls_model("initial-exec"))) = {};

namespace {

Ring g_ring;
int g_depth = 64;
std::atomic<bool> g_sampled_yet{false};

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no lock, safe in a handler
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t current_tid(CpuThread& t) {
  if (t.tid == 0) t.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t.tid;
}

void publish(uint64_t pos) {
  g_ring.publish(pos);
  if ((pos & (g_ring.capacity() / 4 - 1)) == 0) alloc::nudge_writer();
}

}  // namespace

bool setup(uint32_t slots, int stack_depth) {
  g_depth = stack_depth;
  return g_ring.init(slots, CpuRecord::bytes_for(stack_depth));
}

Ring& ring() {
  return g_ring;
}

void reset_after_fork() {
  g_ring.reset();
}

void record_sample(const ucontext_t* uc, int overrun) {
  CpuThread& t = tls_cpu;
  uint64_t pos;
  g_sampled_yet.store(true, std::memory_order_relaxed);
  auto* rec = static_cast<CpuRecord*>(g_ring.try_claim(&pos));
  if (!rec) return;  // full: counted by the ring
  rec->timestamp_ns = monotonic_ns();
  rec->tid = current_tid(t);
  int cpu = sched_getcpu();  // rseq or vDSO: no lock
  rec->cpu = cpu >= 0 && cpu < CpuRecord::kNoCpu ? static_cast<uint16_t>(cpu) : CpuRecord::kNoCpu;
  rec->kind = CpuRecord::kSample;
  rec->overrun = overrun > 0 ? static_cast<uint32_t>(overrun) : 0;
  const greg_t* g = uc->uc_mcontext.gregs;
  unwind::Regs regs{static_cast<uint64_t>(g[REG_RIP]), static_cast<uint64_t>(g[REG_RSP]),
                    static_cast<uint64_t>(g[REG_RBP])};
  unwind::WalkResult w = unwind::walk(regs, stack_bounds(t), rec->frames(), g_depth);
  rec->depth = static_cast<uint32_t>(w.depth);
  rec->complete = w.complete;
  publish(pos);
}

bool sampled_yet() {
  return g_sampled_yet.load(std::memory_order_relaxed);
}

void record_thread_exit() {
  CpuThread& t = tls_cpu;
  uint64_t pos;
  auto* rec = static_cast<CpuRecord*>(g_ring.try_claim(&pos));
  if (!rec) return;
  rec->timestamp_ns = monotonic_ns();
  rec->tid = current_tid(t);
  rec->cpu = CpuRecord::kNoCpu;
  rec->kind = CpuRecord::kThreadExit;
  rec->complete = 0;
  rec->depth = 0;
  rec->overrun = 0;
  char* name = rec->name();
  memset(name, 0, CpuRecord::kNameBytes);
  prctl(PR_GET_NAME, name);
  publish(pos);
}

namespace {

// lo first, then hi, which publishes the pair to stack_bounds() in the signal handler.
void publish_bounds(CpuThread& t, uint64_t lo, uint64_t hi) {
  std::atomic_ref<uint64_t>(t.stack_lo).store(lo, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(t.stack_hi).store(hi, std::memory_order_release);
}

std::atomic<CpuThread*> g_deferred{nullptr};  // the main thread, waiting for its bounds

}  // namespace

void set_stack_bounds(CpuThread& t) {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr) {
    publish_bounds(t, reinterpret_cast<uint64_t>(addr), reinterpret_cast<uint64_t>(addr) + size);
  }
  pthread_attr_destroy(&attr);
}

bool main_stack_bounds(uint64_t* lo, uint64_t* hi) {
  const auto at = reinterpret_cast<uint64_t>(__libc_stack_end);
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  rlimit rl;
  if (getrlimit(RLIMIT_STACK, &rl) != 0) return false;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string maps;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) maps.append(buf, static_cast<size_t>(n));
  close(fd);
  uint64_t last_to = 0;  // end of the mapping below
  for (size_t pos = 0; pos < maps.size();) {
    size_t eol = maps.find('\n', pos);
    if (eol == std::string::npos) eol = maps.size();
    char* dash = nullptr;
    uint64_t from = strtoull(maps.c_str() + pos, &dash, 16);
    if (dash && *dash == '-') {
      uint64_t to = strtoull(dash + 1, nullptr, 16);
      if (from <= at && at < to) {
        // As glibc: the top is the page above __libc_stack_end; the size what RLIMIT_STACK
        // leaves of the mapping, page-aligned, and never past the mapping below.
        uint64_t top = (at & ~(page - 1)) + page;
        uint64_t size = (rl.rlim_cur - (to - top)) & ~(page - 1);
        if (size > top - last_to) size = top - last_to;
        *lo = top - size;
        *hi = top;
        return true;
      }
      last_to = to;
    }
    pos = eol + 1;
  }
  return false;
}

void defer_main_stack_bounds(CpuThread& t) {
  g_deferred.store(&t, std::memory_order_release);
}

void publish_main_stack_bounds() {
  uint64_t lo, hi;
  if (CpuThread* t = g_deferred.exchange(nullptr, std::memory_order_acq_rel)) {
    if (main_stack_bounds(&lo, &hi)) publish_bounds(*t, lo, hi);
  }
}

void forget_deferred_stack_bounds() {
  g_deferred.store(nullptr, std::memory_order_relaxed);
}

unwind::StackBounds stack_bounds(const CpuThread& t) {
  // const_cast: atomic_ref needs a mutable object; these are only loads.
  uint64_t hi =
      std::atomic_ref<uint64_t>(const_cast<uint64_t&>(t.stack_hi)).load(std::memory_order_acquire);
  if (hi == 0) return {0, 0};
  return {
      std::atomic_ref<uint64_t>(const_cast<uint64_t&>(t.stack_lo)).load(std::memory_order_relaxed),
      hi};
}

}  // namespace d9::cpu
