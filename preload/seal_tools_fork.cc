// The seal tools and fork: children adopt their parent's tools warm, a warm-up thread
// prepares them for the children of a process that forks, and the loader lock keeps fork
// out of d9's library loads.
#include "preload/seal_tools_fork.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "alloc/stack.h"
#include "alloc/thread_state.h"
#include "preload/log.h"
#include "preload/process_state.h"

namespace d9::runtime {

// The seal tools and their symbol caches outlive a fork. A child that ends soon after it
// was forked (worker pools, prefork servers) would otherwise load them and symbolize from
// cold at its exit: 0.1-0.2 s per child with system debug info installed. The writer holds
// g_tools_mu while it uses them; fork takes it too, so a child adopts them only as they
// were between two uses. Fork waits at most 2 ms for it, not for a whole seal (0.1 s and
// more, for as long as the forking host thread would stall): such a child loads its own.
pthread_mutex_t g_tools_mu = PTHREAD_MUTEX_INITIALIZER;
SealTools* g_tools_for_child = nullptr;  // what the next fork child's writer starts with

// d9's threads load libraries (the seal tools) under g_loader_mu, and fork holds it from
// its prepare handler to its parent and child handlers, waiting as long as a load takes: a
// fork in the middle of a dlopen leaves the child libraries half loaded (seen: "libdw.so.1:
// undefined symbol: lzma_code"). Held for the load only, unlike g_tools_mu, which a seal
// holds throughout and fork waits 2 ms for at most. Taken after g_tools_mu where both are
// (fork takes them in that order too).
pthread_mutex_t g_loader_mu = PTHREAD_MUTEX_INITIALIZER;

namespace {

bool g_tools_held_for_fork = false;
bool g_loader_held_for_fork = false;

std::atomic<bool> g_has_forked{false};  // this process has forked: warm the tools up

// A process that forks gets its seal tools loaded and its current addresses symbolized
// early, by a thread of its own, so that children forked from then on inherit warm caches
// (module symbol tables, DWARF unit indexes) instead of building them again at their exit:
// the same work the process would do at its own first seal, done once for all of them.
// g_tools_mu is taken per chunk of addresses, so a fork waits for one chunk at most.
struct WarmUp {
  Writer* writer;
  std::vector<uint64_t> addresses;
};

void* warm_up_main(void* arg) {
  tls_state.internal = 1;  // never sample d9's own allocations
  auto* job = static_cast<WarmUp*>(arg);
  constexpr size_t kChunk = 64;
  // At least one pass, even without addresses: loaded tools alone spare each child the
  // dlopen of libd9_seal.so and libdw.
  for (size_t i = 0; i == 0 || i < job->addresses.size(); i += kChunk) {
    if (g_stop.load(std::memory_order_acquire)) break;
    pthread_mutex_lock(&g_tools_mu);
    SealTools* tools = seal_tools(*job->writer);
    if (tools && i == 0) tools->refresh_modules(true);  // files read once, for every child
    size_t end = std::min(i + kChunk, job->addresses.size());
    for (size_t k = i; tools && k < end; ++k) tools->resolve(job->addresses[k]);
    pthread_mutex_unlock(&g_tools_mu);
    if (!tools) break;
  }
  delete job;
  return nullptr;
}

}  // namespace

void tools_fork_prepare() {
  g_has_forked.store(true, std::memory_order_relaxed);
  g_tools_held_for_fork = false;
  g_tools_for_child = nullptr;
  // At most 2 ms: long enough for one chunk of the warm-up (warm_up_main), much shorter
  // than a seal, which the forking thread must not wait for. On the monotonic clock, as
  // pthread_mutex_clocklock is told (pthread_mutex_timedlock reads the realtime clock).
  timespec until = deadline_after(2 * 1000 * 1000);
  if (pthread_mutex_clocklock(&g_tools_mu, CLOCK_MONOTONIC, &until) == 0) {
    g_tools_held_for_fork = true;
    if (g_writer && g_writer->tools_tried) g_tools_for_child = g_writer->tools;
  }
  // A load takes a millisecond or two; the bound only keeps a fork from waiting forever
  // on a load that itself waits on the forking thread (a constructor calling
  // pthread_atfork while glibc holds its fork lock).
  timespec load_until = deadline_after(0);
  load_until.tv_sec += 2;
  g_loader_held_for_fork = pthread_mutex_clocklock(&g_loader_mu, CLOCK_MONOTONIC, &load_until) == 0;
}

void tools_fork_parent() {
  if (g_loader_held_for_fork) pthread_mutex_unlock(&g_loader_mu);
  if (g_tools_held_for_fork) pthread_mutex_unlock(&g_tools_mu);
}

void tools_fork_child() {
  g_has_forked.store(false, std::memory_order_relaxed);
  pthread_mutex_init(&g_loader_mu, nullptr);
  pthread_mutex_init(&g_tools_mu, nullptr);
  if (!g_tools_held_for_fork) g_tools_for_child = nullptr;
}

// libunwind is loaded here, by the writer, once a sample has asked for it (stack.h): not
// at start-up, where every process would wait for it, sampled or not.
void load_unwinder_if_wanted(Writer& w) {
  if (w.unwinder_tried || !stack::unwinder_wanted()) return;
  w.unwinder_tried = true;
  pthread_mutex_lock(&g_loader_mu);
  stack::load_unwinder();
  pthread_mutex_unlock(&g_loader_mu);
}

// Called with g_tools_mu held.
SealTools* seal_tools(Writer& w) {
  if (!w.tools_tried) {
    w.tools_tried = true;
    std::string why;
    pthread_mutex_lock(&g_loader_mu);
    w.tools = load_seal_tools(g_options.symbolize == Symbolize::kFull, &why);
    pthread_mutex_unlock(&g_loader_mu);
    if (!w.tools) log::line("segments are sealed without symbols or compression: ", why.c_str());
  }
  return w.tools;
}

void warm_up_for_children(Writer& w) {
  if (w.warm_up_started || !g_has_forked.load(std::memory_order_relaxed)) return;
  w.warm_up_started = true;
  auto* job = new WarmUp{&w, {}};
  if (g_options.symbolize != Symbolize::kOff && w.segment->is_open()) {
    const auto& seen = w.segment->events().frame_addresses();
    job->addresses.assign(seen.begin(), seen.end());
  }
  if (!start_d9_thread(warm_up_main, job)) delete job;
}

}  // namespace d9::runtime
