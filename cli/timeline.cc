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
  Key k{addr, ts, process};
  // A snapshot repeats the live samples already seen; it only adds those whose allocation
  // is in a segment no longer there (deleted by retention, or not given).
  auto [it, inserted] = open_.try_emplace(k, static_cast<uint32_t>(p.samples.size()));
  if (!inserted) {
    if (snapshot) return;
    it->second = static_cast<uint32_t>(p.samples.size());  // an address reused at the same ns
  }
  Sample s;
  s.t0 = ts;
  s.stack = stack;
  s.w = static_cast<float>(w);
  s.var = static_cast<float>(var);
  s.n = static_cast<float>(inv_p);
  p.samples.push_back(s);
  if (!snapshot) {
    const int b =
        size == 0 ? 0 : std::min(kSizeBuckets - 1, static_cast<int>(std::bit_width(size)) - 1);
    sizes_[stack].count[b] += inv_p;
  }
}

void Timeline::on_free(uint32_t process, uint64_t ts, uint64_t addr, uint64_t alloc_ts) {
  auto it = open_.find(Key{addr, alloc_ts, process});
  if (it == open_.end()) return;  // its allocation was not sampled (or is outside the inputs)
  Sample& s = procs_[process].samples[it->second];
  s.t1 = std::max(ts, s.t0);
  open_.erase(it);
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
  std::unordered_map<Key, uint32_t, KeyHash>().swap(open_);
  for (Proc& p : procs_) {
    std::stable_sort(p.samples.begin(), p.samples.end(),
                     [](const Sample& a, const Sample& b) { return a.t0 < b.t0; });
    std::stable_sort(p.cpu.begin(), p.cpu.end(),
                     [](const CpuPoint& a, const CpuPoint& b) { return a.ts < b.ts; });
    std::stable_sort(
        p.stats.begin(), p.stats.end(),
        [](const AllocatorStats& a, const AllocatorStats& b) { return a.mono_ns < b.mono_ns; });
    const size_t n = p.samples.size();
    p.t0s.resize(n);
    p.cum_w0.resize(n + 1);
    p.cum_v0.resize(n + 1);
    p.cum_w0[0] = p.cum_v0[0] = 0;
    std::vector<uint32_t> freed;
    for (size_t i = 0; i < n; ++i) {
      const Sample& s = p.samples[i];
      p.t0s[i] = s.t0;
      p.cum_w0[i + 1] = p.cum_w0[i] + s.w;
      p.cum_v0[i + 1] = p.cum_v0[i] + s.var;
      if (s.t1 != UINT64_MAX) freed.push_back(static_cast<uint32_t>(i));
    }
    std::stable_sort(freed.begin(), freed.end(),
                     [&](uint32_t a, uint32_t b) { return p.samples[a].t1 < p.samples[b].t1; });
    p.t1s.resize(freed.size());
    p.cum_w1.resize(freed.size() + 1);
    p.cum_v1.resize(freed.size() + 1);
    p.cum_w1[0] = p.cum_v1[0] = 0;
    for (size_t i = 0; i < freed.size(); ++i) {
      const Sample& s = p.samples[freed[i]];
      p.t1s[i] = s.t1;
      p.cum_w1[i + 1] = p.cum_w1[i] + s.w;
      p.cum_v1[i + 1] = p.cum_v1[i] + s.var;
    }
  }
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
  const Proc& p = procs_[process];
  // Made at or before t, minus freed at or before t (a free at t ends the interval).
  const size_t a = std::upper_bound(p.t0s.begin(), p.t0s.end(), t) - p.t0s.begin();
  const size_t f = std::upper_bound(p.t1s.begin(), p.t1s.end(), t) - p.t1s.begin();
  l.bytes = p.cum_w0[a] - p.cum_w1[f];
  l.variance = p.cum_v0[a] - p.cum_v1[f];
  return l;
}

Timeline::Peak Timeline::peak(uint32_t process) const {
  Peak best;
  if (process >= procs_.size()) return best;
  const Proc& p = procs_[process];
  // Sweep the allocation and free times in order; at equal times frees go first (an
  // allocation freed and another made in the same ns never overlap there).
  size_t a = 0, f = 0;
  double bytes = 0, var = 0;
  const size_t na = p.t0s.size(), nf = p.t1s.size();
  while (a < na) {
    const uint64_t t = p.t0s[a];
    for (; f < nf && p.t1s[f] <= t; ++f) {
      bytes -= p.cum_w1[f + 1] - p.cum_w1[f];
      var -= p.cum_v1[f + 1] - p.cum_v1[f];
    }
    for (; a < na && p.t0s[a] == t; ++a) {
      bytes += p.cum_w0[a + 1] - p.cum_w0[a];
      var += p.cum_v0[a + 1] - p.cum_v0[a];
    }
    if (!best.found || bytes > best.live.bytes) {
      best.found = true;
      best.ts = t;
      best.live.bytes = bytes;
      best.live.variance = var;
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
    l.objects += s.n;
    const uint64_t age = t - s.t0;
    l.oldest_ns = std::max(l.oldest_ns, age);
    l.age_sum_ns += static_cast<double>(age);
  }
}

void Timeline::alloc_by_stack(uint32_t process, uint64_t lo, uint64_t hi,
                              std::vector<MemStat>* out) const {
  if (process >= procs_.size()) return;
  const Proc& p = procs_[process];
  auto it = std::lower_bound(p.t0s.begin(), p.t0s.end(), lo);
  for (size_t i = static_cast<size_t>(it - p.t0s.begin()); i < p.samples.size(); ++i) {
    const Sample& s = p.samples[i];
    if (s.t0 >= hi) break;
    if (out->size() <= s.stack) out->resize(size_t{s.stack} + 1);
    MemStat& m = (*out)[s.stack];
    ++m.samples;
    m.bytes += s.w;
    m.variance += s.var;
    m.objects += s.n;
  }
}

std::unordered_map<uint32_t, Timeline::StackLifetimes> Timeline::lifetimes(
    uint64_t temporary_ns) const {
  std::unordered_map<uint32_t, StackLifetimes> out;
  for (const Proc& p : procs_) {
    for (const Sample& s : p.samples) {
      StackLifetimes& l = out[s.stack];
      const bool live = s.t1 == UINT64_MAX;
      const uint64_t life = live ? 0 : s.t1 - s.t0;
      const int b = live ? kLifetimeBuckets - 1 : lifetime_bucket(life);
      l.hist.count[b] += s.n;
      l.hist.bytes[b] += s.w;
      l.count += s.n;
      l.bytes += s.w;
      if (!live && life < temporary_ns) {
        l.temporary_count += s.n;
        l.temporary_bytes += s.w;
      }
    }
  }
  return out;
}

}  // namespace d9::cli
