// The time-series estimator (cli/timeline.h) against a simulated allocation stream whose
// truth is known: the stream goes through the same Poisson byte sampler as the malloc fast
// path, and only the sampled allocations and their frees reach the Timeline.
#include "cli/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "alloc/sampler.h"
#include "cli/html_report.h"
#include "cli/time_views.h"
#include "writer/encoder.h"
#include "writer/wire_decoder.h"

namespace d9::cli {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kRate = 64 * 1024;

struct Alloc {
  uint64_t t0, t1, size;
  uint32_t site;
};

// A 10 s run with four sites: 0 ramps to a peak at 6 s and is released by 7 s; 1 leaks
// steadily; 2 churns short-lived small blocks (1 ms); 3 holds mid-sized blocks for ~2 s.
std::vector<Alloc> simulate() {
  std::vector<Alloc> v;
  uint64_t rng = mix_seed(99, 1);
  for (uint64_t t = 0; t < 6000 * kMs; t += kMs) {  // ramp: 64 MiB/s of 4 KiB blocks
    for (int i = 0; i < 16; ++i) {
      const uint64_t end = 6000 * kMs + (next_random(rng) % (1000 * kMs));
      v.push_back({t, end, 4096, 0});
    }
  }
  for (uint64_t t = 0; t < 10000 * kMs; t += kMs) v.push_back({t, UINT64_MAX, 1000, 1});
  for (uint64_t t = 0; t < 10000 * kMs; t += kMs / 8) {
    for (int i = 0; i < 64; ++i) v.push_back({t, t + kMs, 64, 2});
  }
  for (uint64_t t = 0; t < 10000 * kMs; t += 5 * kMs) {
    v.push_back({t, t + 2000 * kMs, 200000 + next_random(rng) % 100000, 3});
  }
  std::sort(v.begin(), v.end(), [](const Alloc& a, const Alloc& b) { return a.t0 < b.t0; });
  return v;
}

double truth_at(const std::vector<Alloc>& v, uint64_t t) {
  double sum = 0;
  for (const Alloc& a : v) {
    if (a.t0 <= t && t < a.t1) sum += static_cast<double>(a.size);
  }
  return sum;
}

struct Fixture {
  std::vector<Alloc> stream = simulate();
  Timeline tl;
  uint64_t sampled = 0;
  Fixture() {
    uint64_t rng = mix_seed(7, 0);
    int64_t counter = draw_gap(rng, kRate);
    // Frees are replayed in time order, as a trace has them.
    struct Free {
      uint64_t t, addr, t0;
    };
    std::vector<Free> frees;
    for (size_t i = 0; i < stream.size(); ++i) {
      const Alloc& a = stream[i];
      if (!reaches_sample_point(counter, a.size)) continue;
      counter = draw_gap(rng, kRate);
      ++sampled;
      const double w = sample_weight(a.size, kRate), p = sample_probability(a.size, kRate);
      tl.on_alloc(0, a.t0, i, a.site, a.size, w, w * w * (1 - p), 1 / p, false);
      if (a.t1 != UINT64_MAX) frees.push_back({a.t1, i, a.t0});
    }
    std::sort(frees.begin(), frees.end(), [](const Free& a, const Free& b) { return a.t < b.t; });
    for (const Free& f : frees) tl.on_free(0, f.t, f.addr, f.t0);
    tl.finish();
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

TEST(Timeline, LiveBytesAtTenMomentsWithinFivePercent) {
  const Fixture& f = fixture();
  ASSERT_GE(f.sampled, 2000u);
  for (int k = 1; k <= 10; ++k) {
    const uint64_t t = static_cast<uint64_t>(k) * 950 * kMs;  // 0.95 s ... 9.5 s
    const double truth = truth_at(f.stream, t);
    const Timeline::Live est = f.tl.live_at(0, t);
    EXPECT_NEAR(est.bytes, truth, 0.05 * truth) << "at " << t / kMs << " ms";
  }
}

// The band's coverage over independent runs (the ten moments above share their samples, so
// they say little about it): 400 seeds of a 1 s ramp of 4 KiB blocks, freed at random.
TEST(Timeline, BandCoversTheTruthNinetyFivePercentOfTheTime) {
  int covered = 0;
  double err_sum = 0;
  constexpr int kRuns = 400;
  for (int seed = 0; seed < kRuns; ++seed) {
    Timeline tl;
    uint64_t rng = mix_seed(1000 + static_cast<uint64_t>(seed), 0);
    int64_t counter = draw_gap(rng, kRate);
    double truth = 0;
    constexpr uint64_t kAt = 1000 * kMs;
    std::vector<std::pair<uint64_t, uint64_t>> frees;  // (time, index)
    for (uint64_t i = 0; i < 16000; ++i) {
      const uint64_t t0 = i * kMs / 16, t1 = t0 + next_random(rng) % (2000 * kMs);
      if (t0 <= kAt && kAt < t1) truth += 4096;
      if (!reaches_sample_point(counter, 4096)) continue;
      counter = draw_gap(rng, kRate);
      const double w = sample_weight(4096, kRate), p = sample_probability(4096, kRate);
      tl.on_alloc(0, t0, i, 0, 4096, w, w * w * (1 - p), 1 / p, false);
      frees.emplace_back(t1, i);
    }
    for (auto [t1, i] : frees) tl.on_free(0, t1, i, i * kMs / 16);
    tl.finish();
    const Timeline::Live est = tl.live_at(0, kAt);
    if (std::fabs(est.bytes - truth) <= est.ci95()) ++covered;
    err_sum += (est.bytes - truth) / truth;
  }
  EXPECT_GE(covered, kRuns * 90 / 100);
  EXPECT_LE(covered, kRuns * 99 / 100);
  EXPECT_NEAR(err_sum / kRuns, 0, 0.01);  // unbiased: the mean relative error is ~0
}

TEST(Timeline, PeakIsAtTheEndOfTheRamp) {
  const Fixture& f = fixture();
  const Timeline::Peak pk = f.tl.peak(0);
  ASSERT_TRUE(pk.found);
  const double truth = truth_at(f.stream, 6000 * kMs - 1);
  EXPECT_NEAR(static_cast<double>(pk.ts), 6000.0 * kMs, 100.0 * kMs);
  EXPECT_NEAR(pk.live.bytes, truth, 0.05 * truth);
  // The peak estimate is the live_at() of its moment.
  EXPECT_DOUBLE_EQ(pk.live.bytes, f.tl.live_at(0, pk.ts).bytes);
}

TEST(Timeline, LiveByStackSumsToLiveAt) {
  const Fixture& f = fixture();
  const uint64_t t = 3000 * kMs;
  std::vector<LiveStat> by_stack;
  f.tl.live_by_stack(0, t, &by_stack);
  double sum = 0;
  for (const LiveStat& l : by_stack) sum += l.bytes;
  EXPECT_NEAR(sum, f.tl.live_at(0, t).bytes, 1e-6 * sum + 1);
  ASSERT_GE(by_stack.size(), 2u);
  // Site 1 leaks 1000 bytes a ms: 3 MB by 3 s; the oldest sample is about 3 s old.
  EXPECT_NEAR(by_stack[1].bytes, 3000.0 * 1000, 0.15 * 3000 * 1000);
  EXPECT_GT(by_stack[1].oldest_ns, 2500 * kMs);
}

TEST(Timeline, LifetimesPutTheChurnSiteInTheTemporaryBucket) {
  const Fixture& f = fixture();
  auto lt = f.tl.lifetimes(10 * kMs);
  ASSERT_TRUE(lt.count(2));
  const Timeline::StackLifetimes& churn = lt[2];
  EXPECT_GT(churn.temporary_count / churn.count, 0.99);
  // 1 ms lifetimes land in the 1-10 ms bucket.
  EXPECT_GT(churn.hist.count[Timeline::lifetime_bucket(kMs)], 0.99 * churn.count);
  // Estimated churn count: 64 blocks every 125 µs for 10 s = 5.12 M.
  EXPECT_NEAR(churn.count, 5.12e6, 0.1 * 5.12e6);
  EXPECT_EQ(lt[1].temporary_count, 0);  // the leak is never freed
  EXPECT_GT(lt[1].hist.count[Timeline::kLifetimeBuckets - 1], 0);
  EXPECT_STREQ(Timeline::lifetime_label(Timeline::lifetime_bucket(kMs)), "1-10ms");
}

TEST(Timeline, SizesHistogramHasEachSiteInItsBucket) {
  const Fixture& f = fixture();
  const auto& sizes = f.tl.sizes();
  ASSERT_GE(sizes.size(), 3u);
  EXPECT_GT(sizes[0].count[12], 0);  // 4096 = 2^12
  EXPECT_EQ(sizes[0].count[11], 0);
  EXPECT_GT(sizes[2].count[6], 0);  // 64 = 2^6
}

TEST(Timeline, AllocationsInAWindow) {
  const Fixture& f = fixture();
  std::vector<MemStat> in_window;
  f.tl.alloc_by_stack(0, 2000 * kMs, 4000 * kMs, &in_window);
  ASSERT_GE(in_window.size(), 2u);
  // Site 1: 1000 bytes a ms for 2 s.
  EXPECT_NEAR(in_window[1].bytes, 2e6, 0.15 * 2e6);
  // Site 0: 16 x 4 KiB every ms for 2 s.
  const double ramp = 16.0 * 4096 * 2000;
  EXPECT_NEAR(in_window[0].bytes, ramp, 0.05 * ramp);
}

}  // namespace
}  // namespace d9::cli

namespace d9::cli {
namespace {

// Libd9AllocatorStats as the writer encodes it reaches the Timeline through a Profile, with
// its time from the mono_ns field; the event has no timestamp, so dial9's readers skip it.
TEST(Timeline, AllocatorStatsRoundTripThroughTheProfile) {
  Encoder e;
  e.begin_stream();
  e.clock_sync(5'000'000'000, 1'700'000'000'000'000'000);
  e.segment_metadata(5'000'000'100, {{"boot_id", "b-1"}, {"memory.sample_rate_bytes", "1"}});
  const std::vector<uint64_t> stack = {0x401000};
  e.alloc_event(5'000'001'000, 7, 4096, 0x1000, stack);
  e.allocator_stats(5'000'001'500, 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20);
  e.free_event(5'000'002'000, 7, 0x1000, 4096, 5'000'001'000);
  bool stats_timestamped = true;
  decode::ForEachEvent(e.bytes(), [&](const decode::Event& ev) {
    if (ev.name() == fmt::kAllocatorStats) stats_timestamped = ev.schema->has_timestamp;
    return true;
  });
  EXPECT_FALSE(stats_timestamped);

  Timeline tl;
  LoadOptions o;
  o.sink = &tl;
  Profile p(o);
  EXPECT_EQ(p.add_bytes("mem.bin", e.bytes()), "");
  p.finish();
  tl.finish();
  ASSERT_EQ(tl.allocator_stats(0).size(), 1u);
  const AllocatorStats& s = tl.allocator_stats(0)[0];
  EXPECT_EQ(s.mono_ns, 5'000'001'500u);
  EXPECT_EQ(s.allocated, 1u << 20);
  EXPECT_EQ(s.active, 2u << 20);
  EXPECT_EQ(s.resident, 3u << 20);
  EXPECT_EQ(s.mapped, 4u << 20);
  EXPECT_EQ(s.retained, 5u << 20);
  // Rate 1: every allocation is sampled with weight = size.
  EXPECT_DOUBLE_EQ(tl.live_at(0, 5'000'001'500).bytes, 4096);
  EXPECT_DOUBLE_EQ(tl.live_at(0, 5'000'002'000).bytes, 0);
  EXPECT_EQ(tl.peak(0).ts, 5'000'001'000u);
}

}  // namespace
}  // namespace d9::cli

namespace d9::cli {
namespace {

// Hostile input: a valid segment with allocations, frees, CPU-free stats and a live
// snapshot, mutated a few bytes at a time (wild timestamps, sizes, addresses) or cut short,
// goes through the Profile, the Timeline, the views and the report's data without crashing,
// and the data stays one JSON object. (The decoder itself has its libFuzzer target.)
TEST(Timeline, MutatedSegmentsThroughEveryView) {
  Encoder e;
  e.begin_stream();
  e.clock_sync(5'000'000'000, 1'700'000'000'000'000'000);
  e.segment_metadata(5'000'000'100, {{"boot_id", "b-1"}, {"memory.sample_rate_bytes", "4096"}});
  for (uint64_t i = 0; i < 40; ++i) {
    const std::vector<uint64_t> stack = {0x401000 + i % 5, 0x402000};
    e.alloc_event(5'000'001'000 + i * 1000, 7, 100 + i * 977, 0x1000 + i * 64, stack);
    if (i % 3)
      e.free_event(5'000'001'500 + i * 1000, 7, 0x1000 + i * 64, 0, 5'000'001'000 + i * 1000);
  }
  e.allocator_stats(5'000'050'000, 1, 2, 3, 4, 5);
  const std::vector<uint8_t> good(e.bytes().begin(), e.bytes().end());
  uint64_t rng = mix_seed(5, 5);
  for (int round = 0; round < 1500; ++round) {
    std::vector<uint8_t> bad = good;
    const int flips = 1 + static_cast<int>(next_random(rng) % 4);
    for (int k = 0; k < flips; ++k) {
      bad[next_random(rng) % bad.size()] = static_cast<uint8_t>(next_random(rng));
    }
    if (round % 5 == 0) bad.resize(next_random(rng) % bad.size());
    Timeline tl;
    LoadOptions o;
    o.sink = &tl;
    Profile p(o);
    p.add_bytes("mutated.bin", bad);
    p.finish();
    tl.finish();
    HtmlReportOptions ho;
    ho.bins = 50;
    const std::string data = html_report_data(p, tl, ho);
    ASSERT_FALSE(data.empty());
    EXPECT_EQ(data.front(), '{');
    EXPECT_EQ(data.back(), '}');
    apply_live_at(p, tl, TimeBound{TimeBound::kRelative, 0.5, 0});
  }
}

}  // namespace
}  // namespace d9::cli
