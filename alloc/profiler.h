// Allocation sampling state shared by every thread: the settings chosen at start-up, the
// alloc ring, and the out-of-line path that records one sampled allocation.
//
// Locking contract: nothing here takes a lock. Producers push into the ring with one CAS
// and drop (counted) when it is full; only the writer thread consumes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "alloc/ring.h"
#include "alloc/thread_state.h"

namespace d9::alloc {

struct Settings {
  uint64_t sample_rate = 524288;  // mean bytes between samples; 1 = every allocation
  uint64_t seed = 0;
  int stack_depth = 64;
  uint32_t ring_slots = 4096;
};

// Maps the ring and stores the settings. Called once, before sampling is switched on.
bool setup(const Settings& settings);
const Settings& settings();
Ring& alloc_ring();

// Called when the thread's byte counter has run out on an initialised thread: redraws
// the next gap and returns whether this allocation is sampled.
bool take_sample(ThreadState& t);

// Sets up a thread's sampler (seed, tid, first gap) and charges `size` against it.
// Returns whether this very allocation is sampled.
bool start_thread(ThreadState& t, size_t size);

// Captures the stack and pushes an AllocRecord; out of line, never on the fast path.
__attribute__((noinline)) void record_alloc(const void* ptr, size_t size);

// Writer wake-ups. The writer sleeps on a futex between drains; producers nudge it each
// time another quarter of the ring has been claimed, so a burst is drained before the
// ring fills even when the drain interval has not elapsed. One syscall per
// capacity/4 samples, on the sampled path only.
void nudge_writer();
// Sleeps until nudged or `timeout_ns` has passed.
void wait_for_work(long timeout_ns);

// Forgets all state inherited from the parent in a fork child.
void reset_after_fork();

}  // namespace d9::alloc
