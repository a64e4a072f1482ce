// Known CPU use for the CPU-sampling tests: a worker thread splits its CPU 70/30 between
// two functions (chunks of ~100 µs, chosen at random, so timer ticks cannot alias with
// the schedule) and a second thread, named by its creator, runs a third function, renames
// itself with prctl half-way and runs on. Each function lives in its own section and the
// program prints every section's range, so the test attributes a sample's leaf pc without
// a symbolizer. CPU time is measured with CLOCK_THREAD_CPUTIME_ID.
//
// Usage: cpu_split SECONDS      each thread burns SECONDS of CPU
// Output: "site NAME START END", then
//         "thread worker TID CPU_NS A_NS B_NS" and
//         "thread named TID CPU_NS RENAMED_AT_MONOTONIC_NS"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#define SITE(name) extern "C" __attribute__((noinline, used, section("d9cpu_" #name)))
#define SECTION_BOUNDS(name)                    \
  extern "C" const char __start_d9cpu_##name[]; \
  extern "C" const char __stop_d9cpu_##name[];

namespace {

uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// The same loop in each function, so a chunk costs the same wherever it runs.
inline uint64_t spin(uint64_t iters, uint64_t x) {
  for (uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}

}  // namespace

SITE(work_a) uint64_t work_a(uint64_t iters, uint64_t x) {
  return spin(iters, x);
}
SITE(work_b) uint64_t work_b(uint64_t iters, uint64_t x) {
  return spin(iters, x);
}
SITE(work_c) uint64_t work_c(uint64_t iters, uint64_t x) {
  return spin(iters, x);
}
SECTION_BOUNDS(work_a)
SECTION_BOUNDS(work_b)
SECTION_BOUNDS(work_c)

namespace {

uint64_t g_budget_ns = 0;
uint64_t g_chunk_iters = 0;
volatile uint64_t g_sink = 0;

struct Worker {
  uint32_t tid;
  uint64_t cpu_ns, a_ns, b_ns;
};

void* worker_main(void* p) {
  auto* w = static_cast<Worker*>(p);
  w->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  uint64_t rng = 88172645463325252ULL, x = 1;
  uint64_t start = thread_cpu_ns(), now = start;
  while (now - start < g_budget_ns) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    bool a = rng % 10 < 7;
    x = a ? work_a(g_chunk_iters, x) : work_b(g_chunk_iters, x);
    uint64_t t = thread_cpu_ns();
    (a ? w->a_ns : w->b_ns) += t - now;
    now = t;
  }
  w->cpu_ns = now - start;
  g_sink = x;
  return nullptr;
}

struct Named {
  uint32_t tid;
  uint64_t cpu_ns, renamed_at;
  pthread_barrier_t* named;
};

void* named_main(void* p) {
  auto* n = static_cast<Named*>(p);
  n->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  pthread_barrier_wait(n->named);  // the creator names this thread meanwhile
  uint64_t start = thread_cpu_ns(), now = start, x = 7;
  bool renamed = false;
  while (now - start < g_budget_ns) {
    if (!renamed && now - start >= g_budget_ns / 2) {
      prctl(PR_SET_NAME, "d9-renamed");
      n->renamed_at = monotonic_ns();
      renamed = true;
    }
    x = work_c(g_chunk_iters, x);
    now = thread_cpu_ns();
  }
  n->cpu_ns = now - start;
  g_sink = x;
  return nullptr;
}

// Iterations of spin() that take about 100 µs of CPU here.
uint64_t calibrate() {
  uint64_t iters = 1000, x = 3;
  for (;;) {
    uint64_t t0 = thread_cpu_ns();
    x = spin(iters, x);
    uint64_t dt = thread_cpu_ns() - t0;
    if (dt >= 2000000) {
      g_sink = x;
      return iters * 100000 / dt + 1;
    }
    iters *= 2;
  }
}

void print_site(const char* name, const char* start, const char* stop) {
  printf("site %s %lu %lu\n", name, reinterpret_cast<unsigned long>(start),
         reinterpret_cast<unsigned long>(stop));
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  g_budget_ns = static_cast<uint64_t>(seconds * 1e9);
  g_chunk_iters = calibrate();

  pthread_barrier_t named_barrier;
  pthread_barrier_init(&named_barrier, nullptr, 2);
  Worker w{};
  Named n{};
  n.named = &named_barrier;
  pthread_t tw, tn;
  pthread_create(&tw, nullptr, worker_main, &w);
  pthread_create(&tn, nullptr, named_main, &n);
  pthread_setname_np(tn, "d9-named");
  pthread_barrier_wait(&named_barrier);
  pthread_join(tw, nullptr);
  pthread_join(tn, nullptr);

  print_site("work_a", __start_d9cpu_work_a, __stop_d9cpu_work_a);
  print_site("work_b", __start_d9cpu_work_b, __stop_d9cpu_work_b);
  print_site("work_c", __start_d9cpu_work_c, __stop_d9cpu_work_c);
  printf("thread worker %u %lu %lu %lu\n", w.tid, static_cast<unsigned long>(w.cpu_ns),
         static_cast<unsigned long>(w.a_ns), static_cast<unsigned long>(w.b_ns));
  printf("thread named %u %lu %lu\n", n.tid, static_cast<unsigned long>(n.cpu_ns),
         static_cast<unsigned long>(n.renamed_at));
  return 0;
}
