#include "alloc/profiler.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <ctime>

#include "alloc/records.h"
#include "alloc/sampler.h"
#include "alloc/stack.h"

namespace d9 {
constinit thread_local ThreadState tls_state __attribute__((tls_model("initial-exec"))) = {};
}  // namespace d9

namespace d9::alloc {
namespace {

Settings g_settings;
Ring g_alloc_ring;
std::atomic<uint64_t> g_thread_index{0};
std::atomic<uint32_t> g_nudges{0};  // futex word the writer sleeps on

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

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
  return g_alloc_ring.init(settings.ring_slots, AllocRecord::bytes_for(g_settings.stack_depth));
}

const Settings& settings() { return g_settings; }
Ring& alloc_ring() { return g_alloc_ring; }

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
  uint64_t pos;
  auto* rec = static_cast<AllocRecord*>(g_alloc_ring.try_claim(&pos));
  if (!rec) return;  // full: counted by the ring, reported as dropped_allocs
  rec->timestamp_ns = now_ns();
  rec->addr = reinterpret_cast<uint64_t>(ptr);
  rec->size = size;
  rec->tid = tls_state.tid;
  rec->depth = static_cast<uint32_t>(stack::capture(rec->frames(), g_settings.stack_depth));
  g_alloc_ring.publish(pos);
  if ((pos & (g_alloc_ring.capacity() / 4 - 1)) == 0) nudge_writer();
}

void nudge_writer() {
  g_nudges.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &g_nudges, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void wait_for_work(long timeout_ns) {
  uint32_t seen = g_nudges.load(std::memory_order_acquire);
  timespec ts{0, timeout_ns};
  syscall(SYS_futex, &g_nudges, FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

void reset_after_fork() {
  g_alloc_ring.reset();
  tls_state.tid = static_cast<uint32_t>(syscall(SYS_gettid));
}

}  // namespace d9::alloc
