// Allocates known byte totals at distinct call sites, for end-to-end accuracy tests.
// Each site's code lives in its own section, and the program prints every section's
// address range, so the test can attribute a sample's leaf frame to its site without a
// symbolizer: "site NAME START END BYTES COUNT".
//
// Modes:
//   sites            the accuracy workload (about 9.5 GB allocated and freed at once)
//   counted N        N rounds of every allocation API at one site (for D9_SAMPLE_RATE=1)
//   thread-exit      like `counted 100`, then exit() from a second thread while main waits
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <new>

#include "tests/programs/sites.h"

SITE(small) void site_small(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    char* p = static_cast<char*>(malloc(1024));
    p[0] = 1;
    use(p);
    free(p);
  }
}

SITE(medium) void site_medium(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    char* p = static_cast<char*>(malloc(64 * 1024));
    p[0] = 1;
    use(p);
    free(p);
  }
}

SITE(large) void site_large(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    char* p = new char[4 << 20];
    p[0] = 1;
    use(p);
    delete[] p;
  }
}

SITE(tiny) void site_tiny(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    void* p = malloc(32);
    use(p);
    free(p);
  }
}

// One round = 9 allocations through 9 different entry points, of 100, 200, ... 900 bytes
// (4500 bytes), so the test can check each event's size.
SITE(counted) void site_counted(uint64_t rounds) {
  for (uint64_t i = 0; i < rounds; ++i) {
    void* a = malloc(100);
    void* b = calloc(10, 20);
    void* c = realloc(nullptr, 300);
    void* d = aligned_alloc(64, 400);
    void* e = nullptr;
    if (posix_memalign(&e, 128, 500) != 0) abort();
    void* f = memalign(256, 600);
    char* g = new char[700];
    auto* h = new (std::nothrow) char[800];
    void* k = ::operator new (900, std::align_val_t{512});
    use(a), use(b), use(c), use(d), use(e), use(f), use(g), use(h), use(k);
    free(a), free(b), free(c), free(d), free(e), free(f);
    delete[] g;
    delete[] h;
    ::operator delete (k, std::align_val_t{512});
  }
}

SITE_BOUNDS(small)
SITE_BOUNDS(medium)
SITE_BOUNDS(large)
SITE_BOUNDS(tiny)
SITE_BOUNDS(counted)

static void run_counted(uint64_t rounds) {
  site_counted(rounds);
  REPORT_SITE(counted, rounds * 4500, rounds * 9);
}

static void* exit_from_thread(void*) {
  run_counted(100);
  fflush(stdout);
  exit(0);  // from a non-main thread, while main is blocked
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "sites") == 0) {
    const uint64_t kSmall = 4ULL << 20, kMedium = 65536, kLarge = 256, kTiny = 16ULL << 20;
    site_small(kSmall);
    site_medium(kMedium);
    site_large(kLarge);
    site_tiny(kTiny);
    REPORT_SITE(small, kSmall * 1024, kSmall);
    REPORT_SITE(medium, kMedium * 65536, kMedium);
    REPORT_SITE(large, kLarge * (4 << 20), kLarge);
    REPORT_SITE(tiny, kTiny * 32, kTiny);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "counted") == 0) {
    run_counted(strtoull(argv[2], nullptr, 10));
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "thread-exit") == 0) {
    pthread_t t;
    pthread_create(&t, nullptr, exit_from_thread, nullptr);
    for (;;) pause();
  }
  fprintf(stderr, "usage: known_sites sites | counted N | thread-exit\n");
  return 2;
}
