// cross_thread: two-thread workload with cross-thread frees for overhead measurements
// (scripts/bench_overhead.sh). Plain C + pthreads, linked only to libc.
//
// Usage: cross_thread [objects]   (default 8000000, ~0.7 s with jemalloc)
// The producer mallocs objects (16..512 bytes; 1 in 64 is 4..64 KiB), writes them and
// passes them through a lock-free SPSC ring; the consumer reads and frees them. Each
// thread also does one local malloc/free pair per object. One op = one object handed
// over (= 3 malloc/free pairs in total). Prints "ns_per_op=<wall> cpu_ns_per_op=<cpu>"
// on stdout; the CPU time is the whole process's (all threads, d9's included).
#define _POSIX_C_SOURCE 200809L  // clock_gettime, sched_yield under -std=c11

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kRing = 1024 };  // power of two

static struct {
  _Alignas(64) _Atomic uint64_t head;  // next slot to write (producer-owned)
  _Alignas(64) _Atomic uint64_t tail;  // next slot to read (consumer-owned)
  _Alignas(64) void* slot[kRing];
} ring;

static long n_objects;
volatile uint64_t sink;

static uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Short busy wait, then give the core away (the bench machine has only 2 cores).
static void backoff(unsigned* spins) {
  if (++*spins < 64) {
    __builtin_ia32_pause();
  } else {
    *spins = 0;
    sched_yield();
  }
}

static size_t next_size(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return (*x & 63) == 0 ? 4096 + (size_t)((*x >> 8) % (60 * 1024)) : 16 + (size_t)((*x >> 8) % 497);
}

// Local malloc/free pair so that each thread also exercises its own tcache.
static uint64_t local_pair(uint64_t* x) {
  size_t size = next_size(x);
  unsigned char* q = malloc(size);
  if (!q) abort();
  q[0] = (unsigned char)size;
  q[size - 1] = 1;
  uint64_t v = q[0];
  free(q);
  return v;
}

static void* producer(void* arg) {
  (void)arg;
  uint64_t x = 0x9e3779b97f4a7c15u, sum = 0;
  uint64_t head = 0, tail_seen = 0;
  for (long i = 0; i < n_objects; ++i) {
    size_t size = next_size(&x);
    unsigned char* p = malloc(size);
    if (!p) abort();
    memset(p, (int)i, 16);
    p[size - 1] = (unsigned char)i;
    unsigned spins = 0;
    while (head - tail_seen == kRing) {  // full: refresh the consumer's position
      tail_seen = atomic_load_explicit(&ring.tail, memory_order_acquire);
      if (head - tail_seen == kRing) backoff(&spins);
    }
    ring.slot[head & (kRing - 1)] = p;
    atomic_store_explicit(&ring.head, ++head, memory_order_release);
    sum += local_pair(&x);
  }
  sink = sum;
  return NULL;
}

static void* consumer(void* arg) {
  (void)arg;
  uint64_t x = 0x2545f4914f6cdd1du, sum = 0;
  uint64_t tail = 0, head_seen = 0;
  for (long i = 0; i < n_objects; ++i) {
    unsigned spins = 0;
    while (tail == head_seen) {  // empty: refresh the producer's position
      head_seen = atomic_load_explicit(&ring.head, memory_order_acquire);
      if (tail == head_seen) backoff(&spins);
    }
    unsigned char* p = ring.slot[tail & (kRing - 1)];
    atomic_store_explicit(&ring.tail, ++tail, memory_order_release);
    sum += p[0];
    free(p);
    sum += local_pair(&x);
  }
  sink = sum;
  return NULL;
}

int main(int argc, char** argv) {
  n_objects = argc > 1 ? atol(argv[1]) : 8000000L;
  if (n_objects <= 0) {
    fprintf(stderr, "usage: %s [objects>0]\n", argv[0]);
    return 2;
  }
  pthread_t prod, cons;
  uint64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  if (pthread_create(&cons, NULL, consumer, NULL) || pthread_create(&prod, NULL, producer, NULL)) {
    fprintf(stderr, "pthread_create failed\n");
    return 1;
  }
  pthread_join(prod, NULL);
  pthread_join(cons, NULL);
  uint64_t t1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  printf("ns_per_op=%.3f cpu_ns_per_op=%.3f\n", (double)(t1 - t0) / (double)n_objects,
         (double)(c1 - c0) / (double)n_objects);
  return 0;
}
