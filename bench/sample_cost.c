/* Cost of one sampled allocation: recurse to a fixed stack depth, then malloc/free in a
 * loop. Run with D9_SAMPLE_RATE=1 (every allocation sampled) and with D9_ENABLE=0; the
 * difference per operation is the sampled path (stack capture + ring push).
 * Usage: sample_cost DEPTH N   -> prints ns per malloc/free pair */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void* volatile sink;

__attribute__((noinline)) static double descend(int depth, long n) {
  if (depth > 0) {
    double r = descend(depth - 1, n);
    __asm__ volatile("" : : : "memory"); /* keeps this frame: no tail call */
    return r + 0.0 * depth;
  }
  double t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    void* p = malloc(64);
    sink = p;
    free(p);
  }
  return (now_ns() - t0) / (double)n;
}

int main(int argc, char** argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 20;
  long n = argc > 2 ? atol(argv[2]) : 200000;
  printf("%.1f\n", descend(depth, n));
  return 0;
}
