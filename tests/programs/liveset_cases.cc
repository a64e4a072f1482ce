// Workloads for the live-set tests. Sites print their code ranges like known_sites:
// "site NAME START END BYTES COUNT". Modes:
//   leak             leaks 64 MiB in 1 KiB blocks at site `leak`; allocates and frees
//                    2 GiB at site `churn` (64 KiB-1 KiB mixed)
//   cases            at D9_SAMPLE_RATE=1: address reuse, a failed realloc, an in-place
//                    realloc and a free from another thread; prints "tid NAME TID" lines
//   burst T N        T threads each allocate and free N blocks as fast as they can
//   threads T        T short-lived threads, one after another, each allocating 20 blocks
//                    and freeing 10 of them plus 10 left by the thread before it; then
//                    prints "next_tcache ID", the id jemalloc gives a new explicit tcache
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "tests/programs/sites.h"

static std::vector<void*> g_leaked;

SITE(leak) void site_leak(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    void* p = malloc(1024);
    memset(p, 1, 16);
    g_leaked.push_back(p);  // kept to the end: never freed
  }
}

SITE(churn) void site_churn(uint64_t bytes) {
  uint64_t done = 0;
  for (uint64_t i = 0; done < bytes; ++i) {
    size_t size = (i % 64 + 1) * 1024;
    char* p = static_cast<char*>(malloc(size));
    p[0] = 1;
    use(p);
    free(p);
    done += size;
  }
}

SITE_BOUNDS(leak)
SITE_BOUNDS(churn)

static long gettid_() {
  return syscall(SYS_gettid);
}

static void* g_handoff;
static void* free_elsewhere(void*) {
  printf("tid freer %ld\n", gettid_());
  free(g_handoff);
  return nullptr;
}

static void cases() {
  printf("tid main %ld\n", gettid_());
  // Address reuse within one drain: the same block size, freed and allocated at once.
  for (int i = 0; i < 100; ++i) {
    void* a = malloc(48);
    use(a);
    free(a);
  }
  // A failed realloc leaves the block live; it is freed later, once.
  void* keep = malloc(1000);
  auto keep_addr = reinterpret_cast<unsigned long>(keep);
  void* failed = realloc(keep, SIZE_MAX / 2);
  printf("failed_realloc %s %lu\n", failed ? "succeeded" : "failed", keep_addr);
  free(failed ? failed : keep);
  // In-place shrink: the same address, freed as the old block and allocated as the new.
  void* grow = malloc(8192);
  auto grow_addr = reinterpret_cast<unsigned long>(grow);
  void* same = realloc(grow, 8000);
  printf("inplace_realloc %lu %lu\n", grow_addr, reinterpret_cast<unsigned long>(same));
  free(same);
  // A free from another thread.
  g_handoff = malloc(777);
  printf("handoff %lu\n", reinterpret_cast<unsigned long>(g_handoff));
  pthread_t t;
  pthread_create(&t, nullptr, free_elsewhere, nullptr);
  pthread_join(t, nullptr);
}

static uint64_t g_burst_n;
static void* burst(void*) {
  for (uint64_t i = 0; i < g_burst_n; ++i) {
    void* p = malloc(64 + (i & 255));
    use(p);
    free(p);
  }
  return nullptr;
}

// Blocks handed from each thread to the next, so frees also happen on other threads.
static void* g_passed[10];
static void* short_lived(void*) {
  void* mine[20];
  for (int i = 0; i < 20; ++i) {
    mine[i] = malloc(32 + 48 * i);
    use(mine[i]);
  }
  for (int i = 0; i < 10; ++i) {
    free(g_passed[i]);
    free(mine[i]);
    g_passed[i] = mine[10 + i];
  }
  return nullptr;
}

static void thread_churn(int threads) {
  for (int i = 0; i < threads; ++i) {
    pthread_t t;
    if (pthread_create(&t, nullptr, short_lived, nullptr) != 0) abort();
    pthread_join(t, nullptr);
  }
  for (void* p : g_passed) free(p);
  // Explicit tcache ids are recycled when a tcache is destroyed: a small id shows that the
  // exited threads' caches were given back (jemalloc has 4093).
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  unsigned id = 0;
  size_t len = sizeof(id);
  if (!mallctl || mallctl("tcache.create", &id, &len, nullptr, 0) != 0) {
    printf("next_tcache none\n");
    return;
  }
  printf("next_tcache %u\n", id);
  mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof(id));
}

int main(int argc, char** argv) {
  if (argc >= 2 && !strcmp(argv[1], "leak")) {
    const uint64_t kLeakBlocks = 65536, kChurnBytes = 2ULL << 30;
    site_leak(kLeakBlocks);
    site_churn(kChurnBytes);
    REPORT_SITE(leak, kLeakBlocks * 1024, kLeakBlocks);
    REPORT_SITE(churn, kChurnBytes, 0);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "cases")) {
    cases();
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "burst")) {
    int threads = atoi(argv[2]);
    g_burst_n = strtoull(argv[3], nullptr, 10);
    std::vector<pthread_t> ts(threads);
    for (auto& t : ts) pthread_create(&t, nullptr, burst, nullptr);
    for (auto& t : ts) pthread_join(t, nullptr);
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "threads")) {
    thread_churn(atoi(argv[2]));
    return 0;
  }
  fprintf(stderr, "usage: liveset_cases leak | cases | burst THREADS N | threads T\n");
  return 2;
}
