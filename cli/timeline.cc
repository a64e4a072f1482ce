#include "cli/timeline.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace d9::cli {

double Timeline::Live::ci95() const {
  return 1.96 * std::sqrt(std::max(0.0, variance));
}

const char* Timeline::lifetime_label(int bucket) {
  static const char* const kLabels[kLifetimeBuckets] = {"<1us",   "1-10us",   "10-100us", "0.1-1ms",
                                                        "1-10ms", "10-100ms", "0.1-1s",   "1-10s",
                                                        ">=10s",  "live"};
  return bucket >= 0 && bucket < kLifetimeBuckets ? kLabels[bucket] : "?";
}

int Timeline::lifetime_bucket(uint64_t ns) {
  int b = 0;
  for (uint64_t edge = 1000; b < kLifetimeBuckets - 2 && ns >= edge; edge *= 10) ++b;
  return b;
}

Timeline::Proc& Timeline::proc(uint32_t process) {
  if (procs_.size() <= process) procs_.resize(size_t{process} + 1);
  return procs_[process];
}

void Timeline::on_alloc(uint32_t process, uint64_t ts, uint64_t addr, uint32_t stack, uint64_t size,
                        double w, double var, double inv_p, bool snapshot) {
  Proc& p = proc(process);
  // A snapshot repeats the live samples already seen; it only adds those whose allocation
  // is in a segment no longer there (deleted by retention, or not given).
  if (snapshot && p.open.find(addr, ts)) return;
  p.open.insert(addr, ts, static_cast<uint32_t>(p.samples.size()));
  Sample s;
  s.t0 = ts;
  s.stack = stack;
  s.w = static_cast<float>(w);
  s.var = static_cast<float>(var);
  s.size = static_cast<uint32_t>(std::min<uint64_t>(size, UINT32_MAX));
  p.samples.push_back(s);
  if (!snapshot) {
    const int b =
        size == 0 ? 0 : std::min(kSizeBuckets - 1, static_cast<int>(std::bit_width(size)) - 1);
    if (sizes_.size() <= stack) sizes_.resize(size_t{stack} + 1);
    sizes_[stack].count[b] += inv_p;
  }
}

void Timeline::on_free(uint32_t process, uint64_t ts, uint64_t addr, uint64_t alloc_ts) {
  if (process >= procs_.size()) return;
  Proc& p = procs_[process];
  const uint32_t* i = p.open.find(addr, alloc_ts);
  if (!i) return;  // its allocation was not sampled (or is outside the inputs)
  Sample& s = p.samples[*i];
  s.t1 = std::max(ts, s.t0);
  p.open.erase(addr, alloc_ts);
}

void Timeline::on_cpu(uint32_t process, uint32_t thread, uint64_t ts, uint32_t stack) {
  proc(process).cpu.push_back({ts, thread, stack});
}

void Timeline::on_allocator_stats(uint32_t process, const AllocatorStats& s) {
  proc(process).stats.push_back(s);
}

void Timeline::finish() {
  if (finished_) return;
  finished_ = true;
  for (Proc& p : procs_) {
    p.open.clear();
    std::sort(p.samples.begin(), p.samples.end(),
              [](const Sample& a, const Sample& b) { return a.t0 < b.t0; });
    std::sort(p.cpu.begin(), p.cpu.end(),
              [](const CpuPoint& a, const CpuPoint& b) { return a.ts < b.ts; });
    std::stable_sort(
        p.stats.begin(), p.stats.end(),
        [](const AllocatorStats& a, const AllocatorStats& b) { return a.mono_ns < b.mono_ns; });
  }
  for (uint32_t i = 0; i < procs_.size(); ++i) procs_[i].peak = find_peak(i);
}

const std::vector<Timeline::Sample>& Timeline::samples(uint32_t process) const {
  static const std::vector<Sample> kNone;
  return process < procs_.size() ? procs_[process].samples : kNone;
}

const std::vector<Timeline::CpuPoint>& Timeline::cpu(uint32_t process) const {
  static const std::vector<CpuPoint> kNone;
  return process < procs_.size() ? procs_[process].cpu : kNone;
}

const std::vector<AllocatorStats>& Timeline::allocator_stats(uint32_t process) const {
  static const std::vector<AllocatorStats> kNone;
  return process < procs_.size() ? procs_[process].stats : kNone;
}

Timeline::Live Timeline::live_at(uint32_t process, uint64_t t) const {
  Live l;
  if (process >= procs_.size()) return l;
  // Made at or before t and not freed by then (a free at t ends the interval).
  for (const Sample& s : procs_[process].samples) {
    if (s.t0 > t) break;
    if (s.t1 <= t) continue;
    l.bytes += s.w;
    l.variance += s.var;
  }
  return l;
}

Timeline::Peak Timeline::peak(uint32_t process) const {
  return process < procs_.size() ? procs_[process].peak : Peak{};
}

Timeline::Peak Timeline::find_peak(uint32_t process) const {
  Peak best;
  if (process >= procs_.size()) return best;
  const std::vector<Sample>& samples = procs_[process].samples;
  struct Free {
    uint64_t t;
    float w, var;
  };
  std::vector<Free> frees;
  for (const Sample& s : samples) {
    if (s.t1 != UINT64_MAX) frees.push_back({s.t1, s.w, s.var});
  }
  std::sort(frees.begin(), frees.end(), [](const Free& a, const Free& b) { return a.t < b.t; });
  // Sweep the allocation and free times in order; at equal times frees go first (an
  // allocation freed and another made in the same ns never overlap there).
  size_t a = 0, f = 0;
  double bytes = 0;
  const size_t na = samples.size(), nf = frees.size();
  while (a < na) {
    const uint64_t t = samples[a].t0;
    for (; f < nf && frees[f].t <= t; ++f) bytes -= frees[f].w;
    for (; a < na && samples[a].t0 == t; ++a) bytes += samples[a].w;
    if (!best.found || bytes > best.live.bytes) {
      best.found = true;
      best.ts = t;
      best.live.bytes = bytes;
    }
  }
  if (best.found) best.live = live_at(process, best.ts);  // exact sums, no running error
  return best;
}

void Timeline::live_by_stack(uint32_t process, uint64_t t, std::vector<LiveStat>* out) const {
  if (process >= procs_.size()) return;
  for (const Sample& s : procs_[process].samples) {
    if (s.t0 > t) break;
    if (s.t1 <= t) continue;
    if (out->size() <= s.stack) out->resize(size_t{s.stack} + 1);
    LiveStat& l = (*out)[s.stack];
    ++l.samples;
    l.bytes += s.w;
    l.variance += s.var;
    l.objects += s.count();
    l.raw_bytes += s.size;
    const uint64_t age = t - s.t0;
    l.oldest_ns = std::max(l.oldest_ns, age);
    l.age_sum_ns += static_cast<double>(age);
  }
}

void Timeline::alloc_by_stack(uint32_t process, uint64_t lo, uint64_t hi,
                              std::vector<MemStat>* out) const {
  if (process >= procs_.size()) return;
  const std::vector<Sample>& samples = procs_[process].samples;
  auto it = std::lower_bound(samples.begin(), samples.end(), lo,
                             [](const Sample& s, uint64_t t) { return s.t0 < t; });
  for (; it != samples.end() && it->t0 < hi; ++it) {
    const Sample& s = *it;
    if (out->size() <= s.stack) out->resize(size_t{s.stack} + 1);
    MemStat& m = (*out)[s.stack];
    ++m.samples;
    m.bytes += s.w;
    m.variance += s.var;
    m.objects += s.count();
    m.raw_bytes += s.size;
  }
}

std::unordered_map<uint32_t, Timeline::StackLifetimes> Timeline::lifetimes(
    uint64_t temporary_ns) const {
  std::vector<StackLifetimes> by_stack;
  for (const Proc& p : procs_) {
    for (const Sample& s : p.samples) {
      if (by_stack.size() <= s.stack) by_stack.resize(size_t{s.stack} + 1);
      StackLifetimes& l = by_stack[s.stack];
      const bool live = s.t1 == UINT64_MAX;
      const uint64_t life = live ? 0 : s.t1 - s.t0;
      const int b = live ? kLifetimeBuckets - 1 : lifetime_bucket(life);
      const double n = s.count();
      l.hist.count[b] += n;
      l.hist.bytes[b] += s.w;
      l.count += n;
      l.bytes += s.w;
      if (!live && life < temporary_ns) {
        l.temporary_count += n;
        l.temporary_bytes += s.w;
      }
    }
  }
  std::unordered_map<uint32_t, StackLifetimes> out;
  for (uint32_t s = 0; s < by_stack.size(); ++s) {
    if (by_stack[s].count > 0) out.emplace(s, by_stack[s]);
  }
  return out;
}

}  // namespace d9::cli
