#include "alloc/profiler.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <ctime>

#include "alloc/address_set.h"
#include "alloc/records.h"
#include "alloc/sampler.h"
#include "alloc/stack.h"

namespace d9 {
constinit thread_local ThreadState tls_state __asm__("d9_tls_state")
    __attribute__((tls_model("initial-exec"))) = {};
}  // namespace d9

namespace d9::alloc {
namespace {

Settings g_settings;
Rings g_rings;
AddressSet g_sampled_set;
std::atomic<uint64_t> g_untracked{0};

// Address space reserved for the sampled arena; pages are committed only as used.
constexpr size_t kSampledHeapReserve = 256ULL << 30;
// Sampled-address set: 32768 buckets x 8 ways (2 MiB) tracks ~100k live samples (50 GB of
// live heap at the default rate) with a negligible chance of a full bucket.
constexpr size_t kAddressSetBuckets = 32768;
// The header line and the first 19 frames of an alloc record.
constexpr int kAllocLinesToWarm = 3;
std::atomic<uint64_t> g_thread_index{0};
std::atomic<uint32_t> g_nudges{0};  // futex word the writer sleeps on

}  // namespace

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// Gap to the next sample point. Every-allocation mode keeps the counter at zero so each
// allocation takes the sampled path.
int64_t next_gap(ThreadState& t) {
  if (g_settings.sample_rate <= 1) return 0;
  return draw_gap(t.rng, g_settings.sample_rate);
}

}  // namespace

bool setup(const Settings& settings) {
  g_settings = settings;
  if (g_settings.stack_depth < 1) g_settings.stack_depth = 1;
  if (g_settings.stack_depth > stack::kMaxDepth) g_settings.stack_depth = stack::kMaxDepth;
  if (!g_rings.allocs.init(settings.ring_slots, AllocRecord::bytes_for(g_settings.stack_depth))) {
    return false;
  }
  if (g_settings.liveset) {
    g_settings.liveset = g_rings.frees.init(settings.ring_slots * 4, sizeof(FreeRecord)) &&
                         g_rings.frees_overflow.init(settings.ring_slots * 4, sizeof(FreeRecord)) &&
                         g_sampled_set.init(kAddressSetBuckets) &&
                         init_sampled_heap(kSampledHeapReserve);
  }
  return true;
}

const Settings& settings() {
  return g_settings;
}
Rings& rings() {
  return g_rings;
}

Counters counters() {
  // Taken from the rings rather than from counters of their own: every sample and every
  // tracked free claims a slot or is counted as dropped, so the hot path pays no extra
  // shared atomic. A free that finds the first ring full is counted by it and retried on
  // the overflow ring, so only the overflow ring's drops are losses.
  return {g_rings.allocs.claimed() + g_rings.allocs.dropped(),
          g_untracked.load(std::memory_order_relaxed),
          g_rings.frees.claimed() + g_rings.frees_overflow.claimed() +
              g_rings.frees_overflow.dropped()};
}

bool take_sample(ThreadState& t) {
  t.bytes_until_sample = next_gap(t);
  return true;
}

bool start_thread(ThreadState& t, size_t size) {
  t.rng = mix_seed(g_settings.seed, g_thread_index.fetch_add(1, std::memory_order_relaxed));
  t.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  t.initialised = 1;
  t.bytes_until_sample = next_gap(t) - static_cast<int64_t>(size);
  if (t.bytes_until_sample > 0) return false;
  return take_sample(t);
}

void record_alloc(const void* ptr, size_t size) {
  ReentryGuard guard;
  if (guard.nested()) return;
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  if (g_settings.liveset) g_sampled_set.prefetch(addr);  // its line is cold: 2 MiB, random
  Ring& ring = g_rings.allocs;
  uint64_t pos;
  auto* rec = static_cast<AllocRecord*>(ring.try_claim(&pos));
  if (!rec) return;  // full: counted by the ring, reported as dropped_allocs
  rec->timestamp_ns = now_ns();
  rec->addr = addr;
  rec->size = size;
  rec->tid = tls_state.tid;
  rec->depth = static_cast<uint32_t>(stack::capture(rec->frames(), g_settings.stack_depth));
  // Tracked only once its AllocEvent is certain (the slot is claimed), so every tracked
  // free has an alloc to match. Entered before the pointer reaches the program, so no free
  // can precede it. Outside the sampled arena (arena exhausted, or a caller's own mallocx
  // arena) or in a full bucket, its free cannot be reported: counted as a dropped free.
  // After the stack capture, which gives the bucket's prefetch time to land; the record's
  // lines were prefetched for writing, so the locked insert waits for no store.
  if (g_settings.liveset && !(maybe_sampled(ptr) && g_sampled_set.insert(addr))) {
    g_untracked.fetch_add(1, std::memory_order_relaxed);
  }
  ring.publish(pos);
  ring.prefetch_next(kAllocLinesToWarm);  // for the next sample, thousands of bytes away
  if ((pos & (ring.capacity() / 4 - 1)) == 0) nudge_writer();
}

bool forget_sampled(const void* ptr) {
  return g_sampled_set.erase(reinterpret_cast<uint64_t>(ptr));
}

void retrack_sampled(const void* ptr) {
  if (!g_sampled_set.insert(reinterpret_cast<uint64_t>(ptr))) {
    g_untracked.fetch_add(1, std::memory_order_relaxed);
  }
}

void push_free(const void* ptr, uint64_t timestamp_ns) {
  if (tls_state.tid == 0) tls_state.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  uint64_t pos;
  Ring* ring = &g_rings.frees;
  void* slot = ring->try_claim(&pos);
  if (!slot) {  // full: spill to the overflow ring, which counts what it cannot take
    ring = &g_rings.frees_overflow;
    slot = ring->try_claim(&pos);
    if (!slot) return;
  }
  auto* rec = static_cast<FreeRecord*>(slot);
  rec->timestamp_ns = timestamp_ns;
  rec->addr = reinterpret_cast<uint64_t>(ptr);
  rec->tid = tls_state.tid;
  ring->publish(pos);
  g_rings.frees.prefetch_next(1);
  if ((pos & (ring->capacity() / 4 - 1)) == 0) nudge_writer();
}

void record_free(const void* ptr) {
  if (forget_sampled(ptr)) push_free(ptr, now_ns());
}

void nudge_writer() {
  g_nudges.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &g_nudges, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

uint32_t nudges() {
  return g_nudges.load(std::memory_order_acquire);
}

void wait_for_work(uint32_t seen, long timeout_ns) {
  timespec ts{0, timeout_ns};
  syscall(SYS_futex, &g_nudges, FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

void reset_after_fork() {
  g_rings.allocs.reset();
  g_rings.frees.reset();
  g_rings.frees_overflow.reset();
  // The child inherits the parent's sampled heap, but not its writer's live set: frees of
  // inherited samples are simply not reported.
  g_sampled_set.clear();
  g_untracked.store(0);
  sampled_heap_after_fork();
  tls_state.tid = static_cast<uint32_t>(syscall(SYS_gettid));
}

}  // namespace d9::alloc
