// alloc_loop: single-thread malloc/free loop for overhead measurements
// (scripts/bench_overhead.sh). Plain C, linked only to libc, so the allocator
// under test is whatever LD_PRELOAD supplies.
//
// Usage: alloc_loop [iterations]   (default 40000000, ~0.7 s with jemalloc)
// With BENCH_IDLE_THREAD=1 in the environment, one extra thread that never runs is
// started first. It measures what merely having a second thread costs a one-thread
// program: once a process has ever had two threads, glibc's pthread_mutex_unlock (which
// jemalloc calls on every arena lock) uses a locked exchange instead of a plain store.
// d9's writer thread makes every profiled process pay that.
// One op = free one of 64 live slots, malloc a new block (16..512 bytes; 1 in 64
// is 4..64 KiB) and write to it. Prints "ns_per_op=<wall> cpu_ns_per_op=<cpu>"
// on stdout; the CPU time is the whole process's (all threads, d9's included).
#define _POSIX_C_SOURCE 200809L  // clock_gettime, sched_yield under -std=c11

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kSlots = 64 };

static void* slots[kSlots];  // global: pointers escape, so malloc/free cannot be elided
volatile uint64_t sink;

static uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void* idle_thread(void* arg) {
  for (;;) pause();
  return arg;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 40000000L;
  if (n <= 0) {
    fprintf(stderr, "usage: %s [iterations>0]\n", argv[0]);
    return 2;
  }
  const char* idle = getenv("BENCH_IDLE_THREAD");
  pthread_t thread;
  if (idle && idle[0] == '1' && pthread_create(&thread, NULL, idle_thread, NULL) != 0) {
    fprintf(stderr, "alloc_loop: pthread_create failed\n");
    return 1;
  }
  uint64_t x = 0x9e3779b97f4a7c15u;  // xorshift64 state: deterministic pattern
  uint64_t sum = 0;

  uint64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t size = (x & 63) == 0 ? 4096 + (size_t)((x >> 8) % (60 * 1024))  // 4..64 KiB
                                : 16 + (size_t)((x >> 8) % 497);           // 16..512 B
    unsigned slot = (unsigned)(x >> 40) & (kSlots - 1);
    unsigned char* old = slots[slot];
    if (old) sum += old[0];
    free(old);
    unsigned char* p = malloc(size);
    if (!p) abort();
    memset(p, (int)i, 16);  // touch the head and the tail
    p[size - 1] = (unsigned char)i;
    slots[slot] = p;
  }
  uint64_t t1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_PROCESS_CPUTIME_ID);

  for (int s = 0; s < kSlots; ++s) free(slots[s]);
  sink = sum;
  printf("ns_per_op=%.3f cpu_ns_per_op=%.3f\n", (double)(t1 - t0) / (double)n,
         (double)(c1 - c0) / (double)n);
  return 0;
}
