// Timeline: the views over time (`d9 peak`, `d9 lifetimes`, `--at`, `d9 report`), estimated
// from the sampled allocations, their frees and the CPU samples of a Profile.
//
// The math
//   Each sampled allocation i of size s_i, made at a_i and freed at f_i (∞ while live), has
//   the Horvitz–Thompson weight w_i = s_i / p_i, p_i = 1 - exp(-s_i / R) (alloc/sampler.h).
//   Sampling is independent per allocation and does not depend on when the allocation is
//   freed, so for every moment t
//
//       L̂(t) = Σ_i w_i · 1[a_i ≤ t < f_i]
//
//   is an unbiased estimate of the bytes live at t (likewise per site, restricting the sum),
//   with variance estimated by V(t) = Σ_{i live at t} w_i² (1 - p_i); the 95% band is
//   L̂(t) ± 1.96 √V(t) (normal approximation: fine once a few dozen samples are live, too
//   narrow when a handful of samples carry the estimate). The allocation rate over a bin is
//   Σ w_i over a_i in the bin, divided by its width: unbiased the same way. A free is matched
//   to its allocation by (address, allocation time), as everywhere in d9; a free whose
//   allocation was not sampled is not counted, which is right: its bytes were never added.
//
//   The peak is NOT unbiased. max_t L̂(t) picks the moment where the noise happened to be
//   high as well as the heap: E[max_t L̂(t)] ≥ max_t L(t). If near the true peak the series
//   is flat over K moments whose estimates are roughly independent (each new sample changes
//   the noise), the excess is about σ·E[max of K standard normals], σ = √V at the peak:
//   ≈ 1.0σ for K = 4, 1.5σ for 10, 2.5σ for 100, 3.2σ for 1000 (below √(2 ln K)). A sharp
//   peak (one moment clearly above the rest) has K ≈ 1 and almost no bias. The value at the
//   chosen moment is reported with its ±1.96σ band; only the choice of moment is biased,
//   so read a plateau's peak as "up to ~2-3σ high". The moment itself is exact to the
//   event: L̂ changes only at sampled events, so one sweep over them finds the maximum.
//
// Memory: 32 bytes per sampled allocation and 16 per CPU sample, kept until the views are
// built (the aggregate commands keep none of this; only these views need the order in
// time), plus 24 bytes per sample while peak() sorts the frees.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "cli/live_table.h"
#include "cli/profile.h"

namespace d9::cli {

class Timeline : public EventSink {
 public:
  struct Sample {
    uint64_t t0 = 0;           // allocated (monotonic ns)
    uint64_t t1 = UINT64_MAX;  // freed; UINT64_MAX while live
    uint32_t stack = 0;
    float w = 0, var = 0;  // weight s/p and variance term w²(1-p)
    uint32_t size = 0;     // sampled bytes, UINT32_MAX for 4 GiB and more
    // Estimated count 1/p = w/s (1 from 4 GiB on, where p is 1 at any sane rate).
    double count() const {
      return size == UINT32_MAX ? 1.0 : size ? static_cast<double>(w) / size : 0.0;
    }
  };
  static_assert(sizeof(Sample) == 32, "32 bytes a sampled allocation (see Memory above)");
  struct CpuPoint {
    uint64_t ts = 0;
    uint32_t thread = 0, stack = 0;
  };
  // The estimate at one moment.
  struct Live {
    double bytes = 0, variance = 0;
    double ci95() const;
  };
  struct Peak {
    uint64_t ts = 0;  // monotonic ns of the process
    Live live;
    bool found = false;
  };

  // Log buckets of lifetimes: < 1 µs, then one per decade up to ≥ 10 s, then "still live".
  static constexpr int kLifetimeBuckets = 10;
  static const char* lifetime_label(int bucket);
  // Log2 buckets of sizes: bucket b holds sizes in [2^b, 2^(b+1)) (0 for size 0).
  static constexpr int kSizeBuckets = 48;

  // EventSink
  void on_alloc(uint32_t process, uint64_t ts, uint64_t addr, uint32_t stack, uint64_t size,
                double w, double var, double inv_p, bool snapshot) override;
  void on_free(uint32_t process, uint64_t ts, uint64_t addr, uint64_t alloc_ts) override;
  void on_cpu(uint32_t process, uint32_t thread, uint64_t ts, uint32_t stack) override;
  void on_allocator_stats(uint32_t process, const AllocatorStats& s) override;

  // Sorts what was collected; call once after the Profile is loaded.
  void finish();

  size_t process_count() const { return procs_.size(); }
  const std::vector<Sample>& samples(uint32_t process) const;                  // by t0
  const std::vector<CpuPoint>& cpu(uint32_t process) const;                    // by ts
  const std::vector<AllocatorStats>& allocator_stats(uint32_t process) const;  // by mono_ns

  // Estimated live bytes of a process at t (monotonic ns): allocations made at or before t
  // and not freed by then. One pass over the samples.
  Live live_at(uint32_t process, uint64_t t) const;
  // The moment of the highest estimated live heap of a process (first such moment); found
  // by finish().
  Peak peak(uint32_t process) const;
  // Estimated live bytes per stack at t, with ages (t - allocation time) for LiveStat.
  void live_by_stack(uint32_t process, uint64_t t, std::vector<LiveStat>* out) const;
  // Estimated bytes allocated in [lo, hi) per stack.
  void alloc_by_stack(uint32_t process, uint64_t lo, uint64_t hi, std::vector<MemStat>* out) const;

  // Lifetime histogram per stack (estimated counts and bytes), filled by finish().
  struct Lifetimes {
    double count[kLifetimeBuckets] = {};
    double bytes[kLifetimeBuckets] = {};
  };
  // Sizes per stack (estimated counts), filled as allocations arrive.
  struct Sizes {
    double count[kSizeBuckets] = {};
  };
  // By stack id (shorter than the stack count when the last stacks allocated nothing).
  const std::vector<Sizes>& sizes() const { return sizes_; }
  // Lifetime bucket of a duration in ns.
  static int lifetime_bucket(uint64_t ns);
  // Per stack: histogram, and the temporary share (freed within `temporary_ns`).
  struct StackLifetimes {
    Lifetimes hist;
    double temporary_count = 0, temporary_bytes = 0, count = 0, bytes = 0;
  };
  std::unordered_map<uint32_t, StackLifetimes> lifetimes(uint64_t temporary_ns) const;

 private:
  struct Proc {
    std::vector<Sample> samples;
    std::vector<CpuPoint> cpu;
    std::vector<AllocatorStats> stats;
    BasicLiveTable<uint32_t> open;  // samples not yet freed -> index in samples
    Peak peak;
  };
  Peak find_peak(uint32_t process) const;
  Proc& proc(uint32_t process);

  std::vector<Proc> procs_;
  std::vector<Sizes> sizes_;
  bool finished_ = false;
};

}  // namespace d9::cli
