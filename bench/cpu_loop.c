/* CPU-bound workload of scripts/bench_cpu.sh: no allocation, no syscalls, a few frames
 * deep, so the cost measured is the timer signals and the stack walks.
 * Usage: cpu_loop ITERATIONS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static uint64_t leaf(uint64_t x, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}

__attribute__((noinline)) static uint64_t middle(uint64_t x, uint64_t n) {
  return leaf(x, n / 2) ^ leaf(x + 1, n - n / 2);
}

__attribute__((noinline)) static uint64_t outer(uint64_t x, uint64_t n) {
  uint64_t r = 0;
  for (uint64_t i = 0; i < 100; ++i) r += middle(x + i, n / 100);
  return r;
}

int main(int argc, char** argv) {
  uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000000ULL;
  uint64_t r = 0;
  for (uint64_t i = 0; i < 10; ++i) r += outer(i, n / 10);
  return r == 42 ? 1 : 0;
}
