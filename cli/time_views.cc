#include "cli/time_views.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

namespace d9::cli {

double seconds_from_origin(const Profile& p, const ProcessInfo& pr, uint64_t mono) {
  return static_cast<double>(wrap_sub(mono, static_cast<uint64_t>(p.origin_mono(pr)))) / 1e9;
}

std::vector<ProcessPeak> find_peaks(const Profile& p, const Timeline& tl) {
  std::vector<ProcessPeak> out;
  for (uint32_t pi = 0; pi < p.processes.size(); ++pi) {
    const ProcessInfo& pr = p.processes[pi];
    if (pr.liveset_off()) continue;  // frees were not recorded: no live heap to follow
    ProcessPeak pk;
    pk.process = pi;
    pk.peak = tl.peak(pi);
    if (!pk.peak.found) continue;
    pk.t_s = seconds_from_origin(p, pr, pk.peak.ts);
    if (pr.first_ts < pr.last_ts) {
      pk.run_fraction = static_cast<double>(wrap_sub(pk.peak.ts, pr.first_ts)) /
                        static_cast<double>(pr.last_ts - pr.first_ts);
    }
    tl.live_by_stack(pi, pk.peak.ts, &pk.by_stack);
    out.push_back(std::move(pk));
  }
  return out;
}

namespace {

// The jemalloc figures closest to a moment, or null.
const AllocatorStats* stats_near(const Timeline& tl, uint32_t pi, uint64_t t) {
  const std::vector<AllocatorStats>& st = tl.allocator_stats(pi);
  const AllocatorStats* best = nullptr;
  uint64_t best_d = UINT64_MAX;
  for (const AllocatorStats& s : st) {
    const uint64_t d = s.mono_ns > t ? s.mono_ns - t : t - s.mono_ns;
    if (d < best_d) {
      best_d = d;
      best = &s;
    }
  }
  return best;
}

std::string process_label(const ProcessInfo& pr) {
  std::string s = pr.key;
  if (!pr.service.empty()) s = pr.service + " " + s;
  return s;
}

}  // namespace

void print_peak(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o) {
  std::vector<ProcessPeak> peaks = find_peaks(p, tl);
  if (o.json) {
    fprintf(out, "{\"processes\":[");
    for (size_t k = 0; k < peaks.size(); ++k) {
      const ProcessPeak& pk = peaks[k];
      const ProcessInfo& pr = p.processes[pk.process];
      std::vector<Row<LiveStat>> rows = group_live(p, pk.by_stack, o.group, o.trim);
      LiveStat total;
      for (const LiveStat& l : pk.by_stack) total.add(l);
      fprintf(
          out,
          "%s\n{\"process\":\"%s\",\"pid\":\"%s\",\"service\":\"%s\",\"peak\":{\"mono_ns\":%llu,"
          "\"time_ns\":%lld,\"wall_clock\":%s,\"t_s\":%.6f,\"run_fraction\":%.6f,%s}",
          k ? "," : "", json_escape(pr.key).c_str(), json_escape(pr.pid).c_str(),
          json_escape(pr.service).c_str(), static_cast<ull>(pk.peak.ts),
          static_cast<long long>(pr.wall(pk.peak.ts)), pr.has_clock ? "true" : "false", pk.t_s,
          pk.run_fraction, mem_json(total, total.bytes).c_str());
      if (const AllocatorStats* s = stats_near(tl, pk.process, pk.peak.ts)) {
        fprintf(out,
                ",\"jemalloc_near_peak\":{\"mono_ns\":%llu,\"allocated\":%llu,\"active\":%llu,"
                "\"resident\":%llu,\"mapped\":%llu,\"retained\":%llu}",
                static_cast<ull>(s->mono_ns), static_cast<ull>(s->allocated),
                static_cast<ull>(s->active), static_cast<ull>(s->resident),
                static_cast<ull>(s->mapped), static_cast<ull>(s->retained));
      }
      fprintf(out, ",\"sites\":[");
      for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
        const Row<LiveStat>& r = rows[i];
        fprintf(out, "%s\n{%s,\"oldest_age_ns\":%llu,\"labels\":%s,\"frames\":%s}", i ? "," : "",
                mem_json(r.stat, total.bytes).c_str(), static_cast<ull>(r.stat.oldest_ns),
                labels_json(p, r.key).c_str(), stack_json(p, r.rep_stack).c_str());
      }
      fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
    return;
  }
  if (peaks.empty()) {
    fprintf(out, "no sampled allocations: no peak to show\n");
    return;
  }
  for (const ProcessPeak& pk : peaks) {
    const ProcessInfo& pr = p.processes[pk.process];
    std::vector<Row<LiveStat>> rows = group_live(p, pk.by_stack, o.group, o.trim);
    fprintf(out,
            "process %s: peak estimated live heap %s ±%.1f%% (95%%) at +%.3f s (%s, %.0f%% "
            "into its run)\n",
            process_label(pr).c_str(), human_bytes(pk.peak.live.bytes).c_str(),
            pct(pk.peak.live.ci95(), pk.peak.live.bytes), pk.t_s,
            format_wall(pr.wall(pk.peak.ts)).c_str(), 100 * pk.run_fraction);
    if (const AllocatorStats* s = stats_near(tl, pk.process, pk.peak.ts)) {
      fprintf(out, "  jemalloc near then: allocated %s, active %s, resident %s, retained %s\n",
              human_bytes(static_cast<double>(s->allocated)).c_str(),
              human_bytes(static_cast<double>(s->active)).c_str(),
              human_bytes(static_cast<double>(s->resident)).c_str(),
              human_bytes(static_cast<double>(s->retained)).c_str());
    }
    fprintf(out,
            "  (the highest of a noisy series reads high: up to ~2-3x the interval on a long "
            "plateau)\n");
    fprintf(out, "  %12s %9s %7s %10s %8s  %s\n", "est. bytes", "±95%", "share", "est. allocs",
            "samples", "live at the peak (leaf first)");
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const Row<LiveStat>& r = rows[i];
      fprintf(out, "  %12s %7.1f%% %6.1f%% %10s %8llu  %s\n", human_bytes(r.stat.bytes).c_str(),
              pct(r.stat.ci95(), r.stat.bytes), pct(r.stat.bytes, pk.peak.live.bytes),
              fmt_count(r.stat.objects).c_str(), static_cast<ull>(r.stat.samples),
              site_name(p, r.key, o.group, o.frames).c_str());
    }
    if (rows.size() > o.top) fprintf(out, "  … %zu more\n", rows.size() - o.top);
  }
}

std::vector<LifetimeRow> group_lifetimes(Profile& p, const Timeline& tl, Group g, bool trim,
                                         uint64_t temporary_ns) {
  std::map<std::vector<uint32_t>, size_t> index;
  std::vector<LifetimeRow> rows;
  std::vector<double> rep;
  for (const auto& [stack, l] : tl.lifetimes(temporary_ns)) {
    std::vector<uint32_t> key = p.group_key(stack, g, trim);
    auto [it, inserted] = index.try_emplace(key, rows.size());
    if (inserted) {
      rows.emplace_back();
      rows.back().key = std::move(key);
      rep.push_back(-1);
    }
    LifetimeRow& r = rows[it->second];
    for (int b = 0; b < Timeline::kLifetimeBuckets; ++b) {
      r.stat.hist.count[b] += l.hist.count[b];
      r.stat.hist.bytes[b] += l.hist.bytes[b];
    }
    r.stat.count += l.count;
    r.stat.bytes += l.bytes;
    r.stat.temporary_count += l.temporary_count;
    r.stat.temporary_bytes += l.temporary_bytes;
    if (l.count > rep[it->second]) {
      rep[it->second] = l.count;
      r.rep_stack = stack;
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const LifetimeRow& a, const LifetimeRow& b) {
    if (a.stat.temporary_count != b.stat.temporary_count) {
      return a.stat.temporary_count > b.stat.temporary_count;
    }
    return a.stat.count > b.stat.count;
  });
  return rows;
}

void print_lifetimes(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o,
                     const LifetimeOptions& lo) {
  std::vector<LifetimeRow> rows = group_lifetimes(p, tl, o.group, o.trim, lo.temporary_ns);
  double all = 0, temp = 0;
  for (const LifetimeRow& r : rows) {
    all += r.stat.count;
    temp += r.stat.temporary_count;
  }
  if (o.json) {
    fprintf(out, "{\"temporary_ns\":%llu,\"est_allocs\":%.0f,\"est_temporary\":%.0f,\"buckets\":[",
            static_cast<ull>(lo.temporary_ns), all, temp);
    for (int b = 0; b < Timeline::kLifetimeBuckets; ++b) {
      fprintf(out, "%s\"%s\"", b ? "," : "", Timeline::lifetime_label(b));
    }
    fprintf(out, "],\"sites\":[");
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const LifetimeRow& r = rows[i];
      fprintf(out,
              "%s\n{\"est_allocs\":%.0f,\"est_bytes\":%.0f,\"est_temporary\":%.0f,"
              "\"est_temporary_bytes\":%.0f,\"temporary_share\":%.6f,\"histogram\":[",
              i ? "," : "", r.stat.count, r.stat.bytes, r.stat.temporary_count,
              r.stat.temporary_bytes, r.stat.count > 0 ? r.stat.temporary_count / r.stat.count : 0);
      for (int b = 0; b < Timeline::kLifetimeBuckets; ++b) {
        fprintf(out, "%s%.0f", b ? "," : "", r.stat.hist.count[b]);
      }
      fprintf(out, "],\"labels\":%s,\"frames\":%s}", labels_json(p, r.key).c_str(),
              stack_json(p, r.rep_stack).c_str());
    }
    fprintf(out, "]}\n");
    return;
  }
  fprintf(out,
          "lifetimes of sampled allocations; temporary = freed within %s: estimated %s of %s "
          "allocations (%.1f%%)\n",
          fmt_duration(static_cast<double>(lo.temporary_ns)).c_str(), fmt_count(temp).c_str(),
          fmt_count(all).c_str(), pct(temp, all));
  fprintf(out, "  histogram columns: ");
  for (int b = 0; b < Timeline::kLifetimeBuckets; ++b) {
    fprintf(out, "%s%s", b ? " " : "", Timeline::lifetime_label(b));
  }
  fprintf(out, " (share of the site's allocations, 0-9)\n");
  fprintf(out, "  %10s %10s %6s  %-10s  %s\n", "est. temp", "est. allocs", "temp%", "histogram",
          "site (leaf first), by temporary churn");
  for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
    const LifetimeRow& r = rows[i];
    std::string hist;
    for (int b = 0; b < Timeline::kLifetimeBuckets; ++b) {
      const double share = r.stat.count > 0 ? r.stat.hist.count[b] / r.stat.count : 0;
      hist += share <= 0 ? '.' : static_cast<char>('0' + std::min(9, static_cast<int>(share * 10)));
    }
    fprintf(out, "  %10s %10s %5.1f%%  %-10s  %s\n", fmt_count(r.stat.temporary_count).c_str(),
            fmt_count(r.stat.count).c_str(), pct(r.stat.temporary_count, r.stat.count),
            hist.c_str(), site_name(p, r.key, o.group, o.frames).c_str());
  }
  if (rows.size() > o.top) fprintf(out, "  … %zu more\n", rows.size() - o.top);
}

void print_sizes(FILE* out, Profile& p, const Timeline& tl, const ReportOptions& o) {
  // Sites by estimated bytes, as `d9 alloc`, each with its size histogram.
  std::vector<Row<MemStat>> rows = group_alloc(p, o.group, o.trim);
  std::map<std::vector<uint32_t>, size_t> index;
  for (size_t i = 0; i < rows.size(); ++i) index.emplace(rows[i].key, i);
  std::vector<Timeline::Sizes> hist(rows.size());
  for (uint32_t stack = 0; stack < tl.sizes().size(); ++stack) {
    const Timeline::Sizes& s = tl.sizes()[stack];
    if (std::all_of(std::begin(s.count), std::end(s.count), [](double c) { return c == 0; })) {
      continue;
    }
    auto it = index.find(p.group_key(stack, o.group, o.trim));
    if (it == index.end()) continue;
    for (int b = 0; b < Timeline::kSizeBuckets; ++b) hist[it->second].count[b] += s.count[b];
  }
  auto lo_of = [](int b) { return b == 0 ? uint64_t{0} : uint64_t{1} << b; };
  if (o.json) {
    fprintf(out, "{\"sites\":[");
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      fprintf(out, "%s\n{%s,\"sizes\":[", i ? "," : "", mem_json(rows[i].stat, 0).c_str());
      bool first = true;
      for (int b = 0; b < Timeline::kSizeBuckets; ++b) {
        if (hist[i].count[b] <= 0) continue;
        fprintf(out, "%s{\"min\":%llu,\"max\":%llu,\"est_allocs\":%.0f}", first ? "" : ",",
                static_cast<ull>(lo_of(b)), static_cast<ull>((uint64_t{2} << b) - 1),
                hist[i].count[b]);
        first = false;
      }
      fprintf(out, "],\"labels\":%s,\"frames\":%s}", labels_json(p, rows[i].key).c_str(),
              stack_json(p, rows[i].rep_stack).c_str());
    }
    fprintf(out, "]}\n");
    return;
  }
  fprintf(out, "allocation sizes per site (estimated allocation counts per power-of-two range)\n");
  for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
    double n = 0;
    for (double c : hist[i].count) n += c;
    fprintf(out, "%s  (%s, %s allocations)\n", site_name(p, rows[i].key, o.group, o.frames).c_str(),
            human_bytes(rows[i].stat.bytes).c_str(), fmt_count(n).c_str());
    for (int b = 0; b < Timeline::kSizeBuckets; ++b) {
      if (hist[i].count[b] <= 0) continue;
      const double share = n > 0 ? hist[i].count[b] / n : 0;
      fprintf(out, "  %10s - %-10s %10s %5.1f%%  %s\n",
              human_bytes(static_cast<double>(lo_of(b))).c_str(),
              human_bytes(static_cast<double>((uint64_t{2} << b) - 1)).c_str(),
              fmt_count(hist[i].count[b]).c_str(), 100 * share,
              std::string(static_cast<size_t>(std::lround(share * 40)), '#').c_str());
    }
  }
  if (rows.size() > o.top) fprintf(out, "… %zu more sites\n", rows.size() - o.top);
}

void apply_live_at(Profile& p, const Timeline& tl, const TimeBound& at) {
  std::vector<LiveStat> live(p.stack_count());
  for (uint32_t pi = 0; pi < p.processes.size(); ++pi) {
    const int64_t t = p.to_mono(p.processes[pi], at);
    if (t == INT64_MIN) continue;  // a wall-clock moment and no ClockSyncEvent
    tl.live_by_stack(pi, static_cast<uint64_t>(t), &live);
  }
  live.resize(p.stack_count());
  p.set_live(std::move(live));
}

}  // namespace d9::cli
