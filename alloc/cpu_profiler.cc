#include "alloc/cpu_profiler.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <ctime>

#include "alloc/profiler.h"
#include "alloc/unwind.h"

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

// Sets `t` to the stack of `thread`: lo first, then hi, which publishes the pair to
// stack_bounds() in the signal handler.
void set_bounds_of(pthread_t thread, CpuThread& t) {
  pthread_attr_t attr;
  if (pthread_getattr_np(thread, &attr) != 0) return;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr) {
    std::atomic_ref<uint64_t>(t.stack_lo)
        .store(reinterpret_cast<uint64_t>(addr), std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(t.stack_hi)
        .store(reinterpret_cast<uint64_t>(addr) + size, std::memory_order_release);
  }
  pthread_attr_destroy(&attr);
}

// The main thread waiting for its bounds, and its handle (see defer_main_stack_bounds).
std::atomic<CpuThread*> g_deferred{nullptr};
pthread_t g_deferred_thread;

}  // namespace

void set_stack_bounds(CpuThread& t) {
  set_bounds_of(pthread_self(), t);
}

void defer_main_stack_bounds(CpuThread& t) {
  g_deferred_thread = pthread_self();
  g_deferred.store(&t, std::memory_order_release);
}

void publish_main_stack_bounds() {
  if (CpuThread* t = g_deferred.exchange(nullptr, std::memory_order_acq_rel)) {
    set_bounds_of(g_deferred_thread, *t);
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
