// container_churn: C++ standard-container churn for the peer benchmark
// (scripts/bench_peers.sh). Linked only to libstdc++/libc, so the allocator under test
// is whatever LD_PRELOAD supplies; operator new/delete reach it through malloc/free.
//
// Usage: container_churn [rounds]   (default 150000, ~1 s with jemalloc)
// One op = one round: insert 16 std::string keys (some longer than the SSO buffer)
// into a std::map<std::string, std::vector<int>> with vectors of 1..64 ints, then erase
// 16 keys, so the map holds a steady ~1000 entries. Prints
// "ns_per_op=<wall> cpu_ns_per_op=<cpu>" on stdout, like the other bench programs.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

uint64_t now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

volatile uint64_t sink;

}  // namespace

int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 150000L;
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s [rounds>0]\n", argv[0]);
    return 2;
  }
  uint64_t x = 0x9e3779b97f4a7c15u;  // xorshift64: deterministic pattern
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::map<std::string, std::vector<int>> m;
  uint64_t sum = 0;

  uint64_t t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < n; ++i) {
    for (int k = 0; k < 16; ++k) {
      uint64_t r = next();
      // Keys of 8..48 chars: about half exceed the 15-char SSO buffer and allocate.
      std::string key = "k" + std::to_string(r % 1024);
      key.append(static_cast<size_t>((r >> 12) % 41), 'x');
      std::vector<int> v;
      for (int j = 0, len = 1 + static_cast<int>((r >> 20) % 64); j < len; ++j) v.push_back(j);
      m[std::move(key)] = std::move(v);  // replaces (frees) the old vector on a hit
    }
    for (int k = 0; k < 16 && !m.empty(); ++k) {
      auto it = m.lower_bound("k" + std::to_string(next() % 1024));
      if (it == m.end()) it = m.begin();
      sum += it->second.size();
      m.erase(it);
    }
  }
  uint64_t t1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_PROCESS_CPUTIME_ID);

  sink = sum + m.size();
  std::printf("ns_per_op=%.3f cpu_ns_per_op=%.3f\n",
              static_cast<double>(t1 - t0) / static_cast<double>(n),
              static_cast<double>(c1 - c0) / static_cast<double>(n));
  return 0;
}
