// Statistical tests of the Poisson sampler: the gap distribution and the unbiasedness of
// Horvitz–Thompson totals, using the same counter arithmetic as the malloc fast path.
#include "alloc/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace d9 {
namespace {

TEST(Sampler, MeanGapWithinOnePercent) {
  constexpr uint64_t kRate = 524288;
  constexpr int kDraws = 1000000;
  uint64_t rng = mix_seed(42, 0);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kDraws; ++i) {
    double g = static_cast<double>(draw_gap(rng, kRate));
    sum += g;
    sum_sq += g * g;
  }
  double mean = sum / kDraws;
  EXPECT_NEAR(mean, kRate, kRate * 0.01);
  // Exponential: standard deviation equals the mean.
  double sd = std::sqrt(sum_sq / kDraws - mean * mean);
  EXPECT_NEAR(sd, kRate, kRate * 0.02);
}

TEST(Sampler, GapsAreAtLeastOneByte) {
  uint64_t rng = mix_seed(7, 3);
  for (int i = 0; i < 100000; ++i) ASSERT_GE(draw_gap(rng, 2), 1);
}

TEST(Sampler, SampleProbabilityAndWeight) {
  EXPECT_DOUBLE_EQ(sample_probability(100, 1), 1.0);
  EXPECT_DOUBLE_EQ(sample_weight(100, 1), 100.0);
  EXPECT_NEAR(sample_probability(524288, 524288), 1 - std::exp(-1.0), 1e-12);
  EXPECT_NEAR(sample_weight(524288, 524288), 524288 / (1 - std::exp(-1.0)), 1e-6);
  EXPECT_DOUBLE_EQ(sample_weight(1ULL << 40, 524288), static_cast<double>(1ULL << 40));
  // Tiny allocations weigh about R each.
  EXPECT_NEAR(sample_weight(8, 524288), 524288 + 4, 1);
}

TEST(Sampler, CounterReachesSamplePointOnlyWhenExhausted) {
  int64_t counter = 100;
  EXPECT_FALSE(reaches_sample_point(counter, 40));
  EXPECT_FALSE(reaches_sample_point(counter, 59));
  EXPECT_TRUE(reaches_sample_point(counter, 1));
  int64_t parked = INT64_MAX;
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(reaches_sample_point(parked, 1ULL << 40));
  int64_t fresh = 0;  // zero-initialised TLS: the first allocation takes the slow path
  EXPECT_TRUE(reaches_sample_point(fresh, 0));
}

// Simulates a thread's allocation stream through the counter exactly as the shim does
// (sample when the counter runs out, then draw a fresh gap) and checks that the
// Horvitz–Thompson sums recover each size class and the total.
struct Stream {
  uint64_t size;
  uint64_t count;
};

TEST(Sampler, HorvitzThompsonTotalsAreUnbiased) {
  constexpr uint64_t kRate = 524288;
  const std::vector<Stream> mix = {
      {16, 40000000}, {200, 8000000}, {4096, 1000000}, {65536, 60000}, {8 << 20, 400}};
  uint64_t rng = mix_seed(1234, 0);
  int64_t counter = draw_gap(rng, kRate);
  std::vector<double> estimate(mix.size(), 0.0);
  double truth_total = 0, estimate_total = 0;
  // Interleave the classes round-robin so the stream is mixed, as in a real program.
  std::vector<uint64_t> left;
  for (const Stream& s : mix) left.push_back(s.count);
  for (bool any = true; any;) {
    any = false;
    for (size_t c = 0; c < mix.size(); ++c) {
      uint64_t burst = std::min<uint64_t>(left[c], 97);
      left[c] -= burst;
      any |= left[c] > 0;
      for (uint64_t i = 0; i < burst; ++i) {
        if (reaches_sample_point(counter, mix[c].size)) {
          estimate[c] += sample_weight(mix[c].size, kRate);
          counter = draw_gap(rng, kRate);
        }
      }
    }
  }
  for (size_t c = 0; c < mix.size(); ++c) {
    double truth = static_cast<double>(mix[c].size * mix[c].count);
    truth_total += truth;
    estimate_total += estimate[c];
    EXPECT_NEAR(estimate[c] / truth, 1.0, 0.05) << "size class " << mix[c].size;
  }
  EXPECT_NEAR(estimate_total / truth_total, 1.0, 0.02);
}

TEST(Sampler, SeedsGiveDistinctStreams) {
  uint64_t a = mix_seed(5, 0), b = mix_seed(5, 1), c = mix_seed(6, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(mix_seed(0, 0), 0u);
}

}  // namespace
}  // namespace d9
