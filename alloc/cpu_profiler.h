// CPU sampling state shared by every thread: the CPU ring, the per-thread stack bounds the
// signal handler may read, and the handler's body. Timers, the handler's installation and
// the thread hooks are in preload/cpu.h.
//
// Locking contract: record_sample() runs inside the SIGPROF handler and is async-signal-
// safe: no lock, no allocation, no call that may take one; the only syscall is the futex
// wake-up of the writer once per quarter of the ring. Stacks come from unwind::walk().
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <cstdint>

#include "alloc/ring.h"
#include "alloc/unwind.h"

namespace d9::cpu {

// What the handler needs to know about the thread it interrupts. Zero-initialised,
// initial-exec TLS like ThreadState; zero stack bounds mean "unknown" (leaf pc only).
struct CpuThread {
  uint64_t stack_lo, stack_hi;
  uint32_t tid;
  uint32_t timer_slot;  // 1 + index in the timer table (preload/cpu.cc); 0 = no timer
};
extern constinit thread_local CpuThread tls_cpu __attribute__((tls_model("initial-exec")));

// One CPU ring record. A sample carries its stack; a thread's exit carries its last name
// (so short-lived threads keep their name after /proc/self/task/<tid> is gone).
struct CpuRecord {
  enum Kind : uint8_t { kSample = 0, kThreadExit = 1 };
  uint64_t timestamp_ns;  // CLOCK_MONOTONIC
  uint32_t tid;
  uint16_t cpu;  // kNoCpu when unknown
  uint8_t kind;
  uint8_t complete;  // the walk reached the outermost frame
  uint32_t depth;    // frames that follow, leaf first
  uint32_t overrun;  // timer expirations merged into this signal (si_overrun)
  static constexpr uint16_t kNoCpu = 0xffff;
  static constexpr size_t kNameBytes = 16;  // TASK_COMM_LEN, in the frames area
  uint64_t* frames() { return reinterpret_cast<uint64_t*>(this + 1); }
  const uint64_t* frames() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  char* name() { return reinterpret_cast<char*>(this + 1); }
  const char* name() const { return reinterpret_cast<const char*>(this + 1); }
  static size_t bytes_for(int max_depth) {
    size_t frames = sizeof(uint64_t) * static_cast<size_t>(max_depth);
    return sizeof(CpuRecord) + (frames < kNameBytes ? kNameBytes : frames);
  }
};
static_assert(sizeof(CpuRecord) == 24);

// Maps the CPU ring. False if it cannot be mapped (CPU sampling then stays off).
bool setup(uint32_t slots, int stack_depth);
Ring& ring();
// Forgets records in flight (fork child).
void reset_after_fork();

// The handler's work for one of d9's timer signals: timestamp, cpu, stack, push.
void record_sample(const ucontext_t* uc, int overrun);
// True once any thread has taken a CPU sample: the unwind tables are built only then, so
// that a process too short-lived to be sampled never pays for them.
bool sampled_yet();
// Pushes the exiting thread's name (called before its timer is deleted).
void record_thread_exit();

// Stack bounds of the calling thread (pthread_getattr_np). Not for signal handlers.
void set_stack_bounds(CpuThread& t);
// The main thread's bounds take 0.1-0.2 ms to find (from /proc/self/maps), so the main
// thread only registers here and d9's writer works them out as it starts
// (publish_main_stack_bounds). Until then its samples hold the interrupted pc only.
void defer_main_stack_bounds(CpuThread& t);
// The main thread's stack, [lo, hi), as glibc's pthread_getattr_np finds it, but without
// the thread's own lock: the writer takes it, and a fork child could inherit it held.
bool main_stack_bounds(uint64_t* lo, uint64_t* hi);
void publish_main_stack_bounds();
// Forgets a deferred request (fork child: the thread that made it may not exist there).
void forget_deferred_stack_bounds();
// Bounds as the signal handler reads them: zero (unknown) until both are published.
unwind::StackBounds stack_bounds(const CpuThread& t);

}  // namespace d9::cpu
