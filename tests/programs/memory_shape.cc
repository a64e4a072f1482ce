// A run with a known memory shape over time, for `d9 peak`, `d9 lifetimes`, `--at` and
// `d9 report` (tests/cli_time_test.cc). 512 steps of ~4 ms:
//   ramp_site   1 MiB a step for the first 256 steps, all freed at step 256: a 256 MiB peak;
//   leak_site   2 x 64 KiB a step, never freed: 32 MiB at the peak, 64 MiB at the end;
//   churn_site  8000 x 48 B a step, each freed at once: ~4 M temporary allocations.
// Prints "mark NAME REALTIME_NS MONOTONIC_NS" at the start, around the release and at the end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "sites.h"

namespace {

constexpr int kSteps = 512, kRampSteps = 256;
constexpr size_t kRampBlock = 1 << 20, kLeakBlock = 64 << 10, kChurnBlock = 48;
constexpr int kLeakPerStep = 2, kChurnPerStep = 8000;

void* g_ramp[kRampSteps];

void mark(const char* name) {
  timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  printf("mark %s %lld %lld\n", name, rt.tv_sec * 1000000000LL + rt.tv_nsec,
         mono.tv_sec * 1000000000LL + mono.tv_nsec);
}

}  // namespace

SITE(ramp_site) void* ramp_site() {
  void* p = malloc(kRampBlock);
  memset(p, 1, kRampBlock);
  return p;
}

SITE(leak_site) void leak_site() {
  for (int i = 0; i < kLeakPerStep; ++i) {
    void* p = malloc(kLeakBlock);
    memset(p, 2, kLeakBlock);
    use(p);
  }
}

SITE(churn_site) void churn_site() {
  for (int i = 0; i < kChurnPerStep; ++i) {
    void* p = malloc(kChurnBlock);
    use(p);
    free(p);
  }
}

int main() {
  mark("start");
  for (int step = 0; step < kSteps; ++step) {
    if (step < kRampSteps) g_ramp[step] = ramp_site();
    if (step == kRampSteps) {
      mark("before_release");
      for (void* p : g_ramp) free(p);
      mark("after_release");
    }
    leak_site();
    churn_site();
    usleep(4000);
  }
  mark("end");
  return 0;
}
