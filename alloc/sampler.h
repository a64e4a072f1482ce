// Poisson sampling of allocations by bytes.
//
// Model: the bytes a thread allocates form one long line; sample points fall on it as a
// Poisson process with mean gap R bytes (D9_SAMPLE_RATE). An allocation is sampled when
// at least one sample point falls inside its bytes. Because exponential gaps are
// memoryless, an allocation of s bytes is sampled with probability
//
//     p(s) = 1 - exp(-s / R)
//
// independently of what came before, so large allocations are almost always seen and
// small ones rarely. The unbiased (Horvitz–Thompson) estimate of the bytes behind one
// sample of size s is s / p(s); summing that per sample (weight first, then sum) gives
// unbiased totals per call site. dial9's toolkit uses the same weight.
//
// Mechanics: each thread keeps `bytes_until_sample`, the distance to its next sample
// point. The fast path subtracts the allocation size and branches; only when the
// counter reaches zero does the out-of-line path run: it marks the allocation as
// sampled and draws the next gap, -R * ln(U) with U uniform in (0, 1]. Drawing afresh
// after each sample is exact, again because of memorylessness.
//
// R = 1 means "every allocation" (p = 1, weight = s); R = 0 turns sampling off.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace d9 {

// xorshift64*: tiny, allocation-free, good enough for gap draws. State must be non-zero.
inline uint64_t next_random(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

// SplitMix64 finaliser: turns a seed and a thread index into a well-mixed, non-zero state.
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z ? z : 0x9E3779B97F4A7C15ULL;
}

// Exponential gap with mean `rate` bytes; at least 1 so a gap always covers a byte.
inline int64_t draw_gap(uint64_t& rng, uint64_t rate) {
  // 53 random bits -> U in (0, 1]; never 0, so log() is finite.
  double u = static_cast<double>((next_random(rng) >> 11) + 1) * 0x1.0p-53;
  double gap = -std::log(u) * static_cast<double>(rate);
  if (gap < 1.0) return 1;
  if (gap > 9.0e18) return INT64_MAX;
  return static_cast<int64_t>(gap);
}

// The fast path: charges `size` bytes to a thread's counter and returns true when a
// sample point falls inside them. Unsigned arithmetic, so a parked counter (INT64_MAX)
// minus any size never overflows.
inline bool reaches_sample_point(int64_t& bytes_until_sample, size_t size) {
  auto left = static_cast<int64_t>(static_cast<uint64_t>(bytes_until_sample) - size);
  bytes_until_sample = left;
  return __builtin_expect(left <= 0, 0);
}

// Probability that an allocation of `size` bytes is sampled at mean gap `rate`.
inline double sample_probability(uint64_t size, uint64_t rate) {
  if (rate <= 1) return 1.0;
  return -std::expm1(-static_cast<double>(size) / static_cast<double>(rate));
}

// Horvitz–Thompson weight: estimated bytes represented by one sample of `size` bytes.
inline double sample_weight(uint64_t size, uint64_t rate) {
  if (rate <= 1 || size == 0) return static_cast<double>(size);
  double x = static_cast<double>(size) / static_cast<double>(rate);
  if (x > 50) return static_cast<double>(size);  // p == 1 to double precision
  return static_cast<double>(size) / -std::expm1(-x);
}

}  // namespace d9
