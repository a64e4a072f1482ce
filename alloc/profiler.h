// Allocation sampling state shared by every thread: the settings chosen at start-up, the
// rings, the sampled-address set, and the out-of-line paths that record one sampled
// allocation or one free of a sampled allocation.
//
// Locking contract: nothing here takes a lock. Producers push into the rings with one CAS
// and drop (counted) when they are full; only the writer thread consumes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "alloc/ring.h"
#include "alloc/sampled_heap.h"
#include "alloc/thread_state.h"

namespace d9::alloc {

struct Settings {
  uint64_t sample_rate = 524288;  // mean bytes between samples; 1 = every allocation
  uint64_t seed = 0;
  int stack_depth = 64;
  uint32_t ring_slots = 4096;  // alloc ring; each free ring has four times as many
  bool liveset = true;         // track frees of sampled allocations
};

// Maps the rings (and, with the live set, the sampled heap and address set) and stores
// the settings. Called once, before sampling is switched on. False if the alloc ring
// cannot be mapped; if only the live-set parts fail, settings().liveset becomes false.
bool setup(const Settings& settings);
const Settings& settings();

struct Rings {
  Ring allocs;
  Ring frees;           // frees of sampled allocations
  Ring frees_overflow;  // takes frees while `frees` is full; drops only when both are
};
Rings& rings();

// Counters the writer reports (cumulative since start-up).
struct Counters {
  uint64_t alloc_samples;  // sampled allocations recorded or dropped
  uint64_t untracked;      // sampled but not in the address set (bucket full)
  uint64_t frees_seen;     // frees of tracked allocations, recorded or dropped
};
Counters counters();

// Called when the thread's byte counter has run out on an initialised thread: redraws
// the next gap and returns whether this allocation is sampled.
bool take_sample(ThreadState& t);

// Sets up a thread's sampler (seed, tid, first gap) and charges `size` against it.
// Returns whether this very allocation is sampled.
bool start_thread(ThreadState& t, size_t size);

// Captures the stack and pushes an AllocRecord; with the live set on, also enters the
// address in the sampled-address set. Out of line, never on the fast path.
__attribute__((noinline)) void record_alloc(const void* ptr, size_t size);

// Frees of sampled allocations, for pointers in the sampled range. A free is recorded
// before the memory goes back to jemalloc, so the address cannot be handed out again
// (and sampled under a new timestamp) before the free is timestamped.
//
// forget_sampled: removes ptr from the set; true if it was a tracked sample.
bool forget_sampled(const void* ptr);
// Undoes forget_sampled (a realloc that failed: the block is still live).
void retrack_sampled(const void* ptr);
// Pushes the FreeRecord for a pointer forget_sampled returned true for.
void push_free(const void* ptr, uint64_t timestamp_ns);
// forget_sampled + push_free, timestamped now.
__attribute__((noinline)) void record_free(const void* ptr);

uint64_t now_ns();

// mallocx flags for a sampled allocation: the sampled arena with the live set on, else 0.
inline int sampled_flags() {
  return settings().liveset ? sampled_heap_flags() : 0;
}

// Writer wake-ups. The writer sleeps on a futex between drains; producers nudge it each
// time another quarter of a ring has been claimed, so a burst is drained before the ring
// fills even when the drain interval has not elapsed. One syscall per capacity/4
// samples, on the sampled path only.
void nudge_writer();
// The writer reads the count of nudges before it looks for work, then sleeps until nudged
// or `timeout_ns` has passed, only if the count is still `seen`: a nudge that lands
// between the look and the sleep ends the sleep at once instead of being slept through.
uint32_t nudges();
void wait_for_work(uint32_t seen, long timeout_ns);

// Forgets all state inherited from the parent in a fork child.
void reset_after_fork();

}  // namespace d9::alloc
