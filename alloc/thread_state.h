// Per-thread state of the shim: one zero-initialised, initial-exec TLS struct.
//
// Zero means "not initialised yet" and is safe to use before any constructor has run:
// the loader and libc allocate before main, and the first allocation on every thread
// finds bytes_until_sample == 0, which routes it to the out-of-line path that sets the
// thread up. Initial-exec TLS needs no allocation or lock to reach (libd9 is preloaded,
// so it lives in the static TLS block).
#pragma once

#include <cstddef>
#include <cstdint>

namespace d9 {

struct ThreadState {
  // Bytes left before the next sample point; the fast path subtracts and branches on it.
  int64_t bytes_until_sample;
  uint64_t rng;  // xorshift state for gap draws; 0 until the thread is set up
  uint32_t tid;  // gettid(), cached
  uint8_t initialised;
  uint8_t in_d9;          // reentrancy guard: set while d9 code runs on this thread
  uint8_t internal;       // d9's own threads (writer): their allocations are never sampled
  uint8_t in_dlclose;     // inside dlclose: nested dlcloses (from destructors) must not wait
  int32_t sampled_flags;  // mallocx flags of this thread's sampled allocations; 0 = not set up
  uint8_t exited;         // thread-exit cleanup ran: no new per-thread resources
  uint8_t spare;          // free (padding before sampled_ops)
  uint16_t sampled_ops;   // sampled allocations and frees since the tcache was last flushed
};
static_assert(sizeof(ThreadState) == 32,
              "ThreadState is on every allocation's path: keep it small");
static_assert(offsetof(ThreadState, bytes_until_sample) == 0,
              "preload/fast_path.S subtracts from the first word");

// constinit: no dynamic initialiser, so access needs no TLS-init wrapper call on the fast path.
// Assembler name d9_tls_state: the fast paths in preload/fast_path.S reach it by that name.
extern constinit thread_local ThreadState tls_state __asm__("d9_tls_state")
    __attribute__((tls_model("initial-exec")));

// Marks d9 code running on a host thread; allocations made meanwhile are served but never
// sampled, so stack capture or the writer can allocate without recursing into the sampler.
class ReentryGuard {
 public:
  ReentryGuard() : state_(tls_state), was_(state_.in_d9) { state_.in_d9 = 1; }
  ~ReentryGuard() { state_.in_d9 = was_; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  bool nested() const { return was_ != 0; }

 private:
  ThreadState& state_;
  uint8_t was_;
};

}  // namespace d9
