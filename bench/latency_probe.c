// latency_probe: per-call latency of malloc and free under several threads, for
// scripts/bench_latency.sh (issue 19: no stalls on host threads). Plain C, linked to libc
// and pthreads only, so the allocator under test is whatever LD_PRELOAD supplies.
//
// Usage: latency_probe [-t threads] [-s seconds] [-l late_threads] [-p pause_us]
//   -t  worker threads started at once (default 4)
//   -s  run time in seconds (default 2)
//   -l  late threads (default 4): started one by one, evenly spread over the run, each
//       working for 100 ms and exiting, so a thread's first allocations (and a profiler's
//       first sample on a thread) happen while the others run
//   -p  pause after every burst of 64 malloc/free pairs, in microseconds (default 50; 0 =
//       a tight loop). Paced threads leave the CPUs mostly idle, as a service waiting for
//       requests does, so a long call is the allocator's and not the scheduler giving the
//       CPU to another runnable thread of this very program.
//
// Each thread keeps a pool of 1024 live blocks: an op frees a random slot's block (if any)
// and puts a new one there, sizes from a fixed-seed distribution (70% 16-256 B, 25% up to
// 4 KiB, 4.5% up to 64 KiB, 0.5% up to 1 MiB). Only the malloc or free call itself is
// between the two TSC reads; the block is touched afterwards. Latencies go into per-thread
// log-linear histograms (32 sub-buckets per power of two: within ~3%), allocated before
// the run. Percentiles are the bucket's upper bound, clamped to the exact max.
//
// Output (ns):
//   # latency_probe: threads=.. late=.. seconds=.. pause_us=.. tsc_ghz=.. timer_ns=..
//   malloc ops=N p50=.. p99=.. p99.9=.. p99.99=.. max=.. over_1ms=.. blocked=.. preempted=..
//   oncpu=.. free   (same fields) outlier op=malloc ns=.. thread=.. late=0|1 t_ms=.. age_ms=..
//   thread_ops=.. thread_kib=..
//           size=.. vcsw=.. ivcsw=.. faults=.. cpu=A->B
// blocked/preempted/oncpu split the ops above 1 ms by what the thread's counters
// (getrusage RUSAGE_THREAD, read outside the timed region) show around the op: a voluntary
// context switch (the call slept or waited on a lock), only an involuntary one (the
// scheduler took the CPU away), or neither (the time was spent running, page faults
// included). The counters are read after every burst and again after a slow op, so the
// window they cover is at most one burst. The outlier lines are the slowest ops of the run
// (8 per kind), with the thread's age, op count and bytes allocated so far (a profiler's
// per-thread first-sample cost shows up as outliers at a small thread_kib), the block's
// size, page faults in the same window and the CPU at either end of the call.
// timer_ns is what two back-to-back TSC reads measure (the floor of every figure); it is
// not subtracted.
#define _GNU_SOURCE  // RUSAGE_THREAD

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

enum {
  kSlots = 1024,  // live blocks per thread
  kBurst = 64,    // malloc/free pairs between pauses and counter reads
  kSub = 5,       // log2 of the sub-buckets per power of two
  kBuckets = (64 - kSub + 1) << kSub,
  kMaxThreads = 256,  // workers + late threads
  kTop = 8,           // slowest ops kept per thread and kind
  kLateMs = 100,      // how long a late thread works
};

enum Kind { kMalloc, kFree, kKinds };
static const char* const kKindName[kKinds] = {"malloc", "free"};

enum Cause { kBlocked, kPreempted, kOnCpu, kCauses };

typedef struct {
  uint64_t cycles, start;  // latency; TSC at the call
  uint64_t thread_ops, thread_bytes, size;
  long vcsw, ivcsw, faults;
  unsigned cpu0, cpu1;
  int thread;
} Outlier;

typedef struct {
  uint64_t hist[kKinds][kBuckets];
  uint64_t count[kKinds];
  uint64_t max[kKinds];
  uint64_t over[kKinds][kCauses];  // ops above 1 ms, by cause
  Outlier top[kKinds][kTop];       // slowest ops, unsorted; cycles == 0: empty
  uint64_t backwards;              // TSC reads that went back (should stay 0)
  uint64_t started;                // TSC when the thread began
  int late;
  char pad[64];
} ThreadStats;

static ThreadStats g_stats[kMaxThreads];  // static: nothing is allocated for them in the run
static atomic_int g_stop;
static uint64_t g_one_ms;      // cycles in 1 ms
static uint64_t g_detail;      // cycles above which an op's counters are read (20 us)
static double g_ns_per_cycle;  // calibrated
static uint64_t g_t0;          // TSC at the start of the run
static long g_pause_us = 50;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Timestamps around the call: rdtscp waits for the instructions before it to finish, the
// lfence keeps the ones after it from starting early. cpu: the CPU the read ran on.
static inline uint64_t stamp(unsigned* cpu) {
#if HAVE_TSC
  uint64_t t = __rdtscp(cpu);
  _mm_lfence();
  return t;
#else
  *cpu = 0;
  return now_ns();
#endif
}

static unsigned bucket_of(uint64_t v) {
  if (v < (1u << kSub)) return (unsigned)v;
  unsigned msb = 63u - (unsigned)__builtin_clzll(v);
  unsigned shift = msb - kSub;
  return ((shift + 1) << kSub) | (unsigned)((v >> shift) & ((1u << kSub) - 1));
}

static uint64_t bucket_upper(unsigned b) {  // largest value in bucket b
  if (b < (1u << kSub)) return b;
  unsigned shift = (b >> kSub) - 1;
  uint64_t mant = (1u << kSub) | (b & ((1u << kSub) - 1));
  return ((mant + 1) << shift) - 1;
}

static uint64_t xorshift(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static size_t next_size(uint64_t* x) {
  uint64_t r = xorshift(x);
  unsigned pick = (unsigned)(r % 1000);
  uint64_t v = r >> 16;
  if (pick < 700) return 16 + v % 241;               // 16..256 B
  if (pick < 950) return 257 + v % (4096 - 256);     // ..4 KiB
  if (pick < 995) return 4097 + v % (65536 - 4096);  // ..64 KiB
  return 65537 + v % (1048576 - 65536);              // ..1 MiB
}

typedef struct {
  long vcsw, ivcsw, faults;
} Counters;

static Counters counters(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  Counters c = {ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt + ru.ru_majflt};
  return c;
}

// Books one op (outside the timed region). A slow op reads the thread's counters and
// compares them with *base, the reading after the last burst or slow op.
static void record(ThreadStats* s, int kind, uint64_t t0, uint64_t t1, unsigned cpu0, unsigned cpu1,
                   uint64_t size, uint64_t ops, uint64_t bytes, Counters* base) {
  uint64_t d = t1 - t0;
  if (t1 < t0) {
    ++s->backwards;
    d = 0;
  }
  ++s->hist[kind][bucket_of(d)];
  ++s->count[kind];
  if (d > s->max[kind]) s->max[kind] = d;
  if (d < g_detail) return;
  Counters now = counters();
  long vcsw = now.vcsw - base->vcsw, ivcsw = now.ivcsw - base->ivcsw;
  long faults = now.faults - base->faults;
  *base = now;
  if (d > g_one_ms) ++s->over[kind][vcsw > 0 ? kBlocked : ivcsw > 0 ? kPreempted : kOnCpu];
  Outlier* slot = &s->top[kind][0];
  for (int i = 1; i < kTop; ++i) {
    if (s->top[kind][i].cycles < slot->cycles) slot = &s->top[kind][i];
  }
  if (d <= slot->cycles) return;
  Outlier o = {d, t0, ops, bytes, size, vcsw, ivcsw, faults, cpu0, cpu1, (int)(s - g_stats)};
  *slot = o;
}

static void* worker(void* arg) {
  ThreadStats* s = arg;
  unsigned char* slots[kSlots] = {0};
  uint32_t sizes[kSlots];  // of the block in each slot
  uint64_t x = 0x9e3779b97f4a7c15u ^ ((uint64_t)(s - g_stats) * 0x2545f4914f6cdd1du);
  unsigned cpu;
  s->started = stamp(&cpu);
  uint64_t end = s->late ? s->started + (uint64_t)kLateMs * g_one_ms : UINT64_MAX;
  uint64_t ops = 0, bytes = 0;
  Counters base = counters();
  while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
    for (int i = 0; i < kBurst; ++i, ++ops) {
      uint64_t r = xorshift(&x);
      unsigned slot = (unsigned)(r >> 32) % kSlots;
      unsigned char* old = slots[slot];
      unsigned c0, c1;
      if (old) {
        uint64_t t0 = stamp(&c0);
        free(old);
        uint64_t t1 = stamp(&c1);
        record(s, kFree, t0, t1, c0, c1, sizes[slot], ops, bytes, &base);
      }
      size_t size = next_size(&x);
      uint64_t t0 = stamp(&c0);
      unsigned char* p = malloc(size);
      uint64_t t1 = stamp(&c1);
      if (!p) abort();
      record(s, kMalloc, t0, t1, c0, c1, size, ops, bytes, &base);
      bytes += size;
      p[0] = (unsigned char)ops;  // touch the head and the tail, outside the timed region
      p[size - 1] = (unsigned char)ops;
      slots[slot] = p;
      sizes[slot] = (uint32_t)size;
    }
    if (g_pause_us > 0) {
      struct timespec pause = {0, g_pause_us * 1000};
      nanosleep(&pause, NULL);
    }
    base = counters();
    if (stamp(&cpu) > end) break;
  }
  for (int i = 0; i < kSlots; ++i) free(slots[i]);
  return NULL;
}

// ns per TSC cycle from CLOCK_MONOTONIC over ~50 ms.
static double calibrate(void) {
#if HAVE_TSC
  unsigned cpu;
  uint64_t n0 = now_ns(), c0 = stamp(&cpu);
  struct timespec pause = {0, 50 * 1000 * 1000};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
  uint64_t n1 = now_ns(), c1 = stamp(&cpu);
  return (double)(n1 - n0) / (double)(c1 - c0);
#else
  return 1.0;
#endif
}

static uint64_t to_ns(uint64_t cycles) {
  return (uint64_t)((double)cycles * g_ns_per_cycle + 0.5);
}

static int cmp_outlier(const void* a, const void* b) {
  uint64_t x = ((const Outlier*)a)->cycles, y = ((const Outlier*)b)->cycles;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void report(int kind, int nthreads) {
  static uint64_t hist[kBuckets];
  memset(hist, 0, sizeof hist);
  uint64_t n = 0, max = 0, over[kCauses] = {0};
  for (int t = 0; t < nthreads; ++t) {
    const ThreadStats* s = &g_stats[t];
    for (int b = 0; b < kBuckets; ++b) hist[b] += s->hist[kind][b];
    n += s->count[kind];
    if (s->max[kind] > max) max = s->max[kind];
    for (int c = 0; c < kCauses; ++c) over[c] += s->over[kind][c];
  }
  static const double q[] = {0.50, 0.99, 0.999, 0.9999};
  static const char* const qname[] = {"p50", "p99", "p99.9", "p99.99"};
  printf("%s ops=%llu", kKindName[kind], (unsigned long long)n);
  for (int i = 0; i < 4; ++i) {
    uint64_t rank = (uint64_t)(q[i] * (double)n + 0.999999), seen = 0, v = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += hist[b];
      if (seen >= rank && seen > 0) {
        v = bucket_upper((unsigned)b);
        break;
      }
    }
    if (v > max) v = max;
    printf(" %s=%llu", qname[i], (unsigned long long)to_ns(v));
  }
  printf(" max=%llu over_1ms=%llu blocked=%llu preempted=%llu oncpu=%llu\n",
         (unsigned long long)to_ns(max),
         (unsigned long long)(over[kBlocked] + over[kPreempted] + over[kOnCpu]),
         (unsigned long long)over[kBlocked], (unsigned long long)over[kPreempted],
         (unsigned long long)over[kOnCpu]);
}

static void report_outliers(int kind, int nthreads) {
  static Outlier all[kMaxThreads * kTop];
  int n = 0;
  for (int t = 0; t < nthreads; ++t) {
    for (int i = 0; i < kTop; ++i) {
      if (g_stats[t].top[kind][i].cycles != 0) all[n++] = g_stats[t].top[kind][i];
    }
  }
  qsort(all, (size_t)n, sizeof all[0], cmp_outlier);
  for (int i = 0; i < n && i < kTop; ++i) {
    const Outlier* o = &all[i];
    const ThreadStats* s = &g_stats[o->thread];
    printf(
        "outlier op=%s ns=%llu thread=%d late=%d t_ms=%.3f age_ms=%.3f thread_ops=%llu "
        "thread_kib=%llu size=%llu vcsw=%ld ivcsw=%ld faults=%ld cpu=%u->%u\n",
        kKindName[kind], (unsigned long long)to_ns(o->cycles), o->thread, s->late,
        (double)to_ns(o->start - g_t0) / 1e6, (double)to_ns(o->start - s->started) / 1e6,
        (unsigned long long)o->thread_ops, (unsigned long long)(o->thread_bytes >> 10),
        (unsigned long long)o->size, o->vcsw, o->ivcsw, o->faults, o->cpu0 & 0xfffu,
        o->cpu1 & 0xfffu);
  }
}

// Median of back-to-back stamp() pairs: the floor under every measured call.
static uint64_t timer_floor(void) {
  static uint64_t d[1001];
  for (int i = 0; i < 1001; ++i) {
    unsigned c;
    uint64_t a = stamp(&c);
    uint64_t b = stamp(&c);
    d[i] = b - a;
  }
  for (int i = 1; i < 1001; ++i) {  // insertion sort
    uint64_t v = d[i];
    int j = i - 1;
    for (; j >= 0 && d[j] > v; --j) d[j + 1] = d[j];
    d[j + 1] = v;
  }
  return d[500];
}

static long arg_long(const char* s, const char* name, long lo, long hi) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "latency_probe: %s must be %ld..%ld, got '%s'\n", name, lo, hi, s);
    exit(2);
  }
  return v;
}

int main(int argc, char** argv) {
  long threads = 4, seconds = 2, late = 4;
  int opt;
  while ((opt = getopt(argc, argv, "t:s:l:p:")) != -1) {
    switch (opt) {
      case 't':
        threads = arg_long(optarg, "-t threads", 1, 128);
        break;
      case 's':
        seconds = arg_long(optarg, "-s seconds", 1, 3600);
        break;
      case 'l':
        late = arg_long(optarg, "-l late threads", 0, 128);
        break;
      case 'p':
        g_pause_us = arg_long(optarg, "-p pause_us", 0, 999999);
        break;
      default:
        fprintf(stderr, "usage: %s [-t threads] [-s seconds] [-l late_threads] [-p pause_us]\n",
                argv[0]);
        return 2;
    }
  }
  g_ns_per_cycle = calibrate();
  g_one_ms = (uint64_t)(1e6 / g_ns_per_cycle);
  g_detail = g_one_ms / 50;  // 20 us
  uint64_t floor = timer_floor();

  pthread_t tid[kMaxThreads];
  int n = 0;
  unsigned cpu;
  g_t0 = stamp(&cpu);
  uint64_t start_ns = now_ns();
  for (; n < threads; ++n) {
    if (pthread_create(&tid[n], NULL, worker, &g_stats[n]) != 0) {
      fprintf(stderr, "latency_probe: pthread_create failed\n");
      return 1;
    }
  }
  // Late threads at (i + 1) / (late + 1) of the run, then the end.
  for (long i = 0; i <= late; ++i) {
    uint64_t at =
        start_ns + (uint64_t)seconds * 1000000000u * (uint64_t)(i + 1) / (uint64_t)(late + 1);
    for (uint64_t t = now_ns(); t < at; t = now_ns()) {
      uint64_t left = at - t;
      struct timespec pause = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
      nanosleep(&pause, NULL);
    }
    if (i == late) break;
    g_stats[n].late = 1;
    if (pthread_create(&tid[n], NULL, worker, &g_stats[n]) != 0) {
      fprintf(stderr, "latency_probe: pthread_create failed\n");
      return 1;
    }
    ++n;
  }
  atomic_store(&g_stop, 1);
  for (int t = 0; t < n; ++t) pthread_join(tid[t], NULL);

  uint64_t backwards = 0;
  for (int t = 0; t < n; ++t) backwards += g_stats[t].backwards;
  printf(
      "# latency_probe: threads=%ld late=%ld seconds=%ld pause_us=%ld tsc_ghz=%.3f timer_ns=%llu",
      threads, late, seconds, g_pause_us, 1.0 / g_ns_per_cycle, (unsigned long long)to_ns(floor));
  if (backwards) printf(" tsc_backwards=%llu", (unsigned long long)backwards);
  printf("\n");
  for (int k = 0; k < kKinds; ++k) report(k, n);
  for (int k = 0; k < kKinds; ++k) report_outliers(k, n);
  return 0;
}
