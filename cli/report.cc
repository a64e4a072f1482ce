#include "cli/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

namespace d9::cli {

using ull = unsigned long long;

double pct(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

std::string fmt_count(double v) {
  char buf[32];
  if (v >= 1e9) {
    snprintf(buf, sizeof(buf), "%.2fG", v / 1e9);
  } else if (v >= 1e6) {
    snprintf(buf, sizeof(buf), "%.2fM", v / 1e6);
  } else if (v >= 1e4) {
    snprintf(buf, sizeof(buf), "%.1fk", v / 1e3);
  } else {
    snprintf(buf, sizeof(buf), "%.0f", v);
  }
  return buf;
}

std::string fmt_duration(double ns) {
  char buf[32];
  double s = ns / 1e9;
  if (s < 1e-3) {
    snprintf(buf, sizeof(buf), "%.0f us", ns / 1e3);
  } else if (s < 1) {
    snprintf(buf, sizeof(buf), "%.0f ms", s * 1e3);
  } else if (s < 120) {
    snprintf(buf, sizeof(buf), "%.2f s", s);
  } else if (s < 7200) {
    snprintf(buf, sizeof(buf), "%.1f min", s / 60);
  } else {
    snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
  }
  return buf;
}

namespace {

std::string rates_text(const Profile& p) {
  std::set<uint64_t> rates;
  for (const ProcessInfo& pr : p.processes) {
    if (pr.alloc_samples || pr.mixed_rates) rates.insert(pr.rate);
    if (pr.mixed_rates) rates.insert(0);
  }
  if (rates.empty()) return "";
  if (rates.size() > 1) return "at mixed sample rates";
  uint64_t r = *rates.begin();
  if (r <= 1) return "at a sample rate of 1 (every allocation)";
  return "at a mean rate of one per " + human_bytes(static_cast<double>(r));
}

std::string hz_text(const Profile& p) {
  std::set<double> hz;
  for (const ProcessInfo& pr : p.processes) {
    if (pr.cpu_hz > 0) hz.insert(pr.cpu_hz);
  }
  if (hz.empty()) return "";
  if (hz.size() > 1) return "mixed frequencies";
  char buf[32];
  snprintf(buf, sizeof(buf), "%g Hz", *hz.begin());
  return buf;
}

// Group stacks by key; `weight` orders the rows.
template <typename Stat, typename Weight>
std::vector<Row<Stat>> group_rows(Profile& p, const std::vector<Stat>& by_stack, Group g, bool trim,
                                  Weight weight) {
  std::map<std::vector<uint32_t>, size_t> index;
  std::vector<Row<Stat>> rows;
  for (uint32_t s = 0; s < by_stack.size(); ++s) {
    const Stat& st = by_stack[s];
    if (st.samples == 0) continue;
    std::vector<uint32_t> key = p.group_key(s, g, trim);
    auto [it, inserted] = index.try_emplace(key, rows.size());
    if (inserted) {
      rows.emplace_back();
      rows.back().key = std::move(key);
    }
    Row<Stat>& r = rows[it->second];
    r.stat.add(st);
    if (weight(st) > r.rep_weight) {
      r.rep_weight = weight(st);
      r.rep_stack = s;
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const Row<Stat>& a, const Row<Stat>& b) {
    return weight(a.stat) > weight(b.stat);
  });
  return rows;
}

}  // namespace

std::string frame_json(const Profile& p, uint32_t frame) {
  const Profile::Frame& fr = p.frame(frame);
  std::string out = "{\"addr\":\"" + hex(fr.addr) + "\"";
  if (const Module* m = p.module(fr.process, fr.addr)) {
    out += ",\"module\":\"" + json_escape(m->path) + "\",\"offset\":\"" + hex(fr.addr - m->bias) +
           "\"";
  }
  if (const std::vector<Symbol>* syms = p.symbols(frame)) {
    std::string fn;
    const Symbol* inner = nullptr;
    for (auto it = syms->rbegin(); it != syms->rend(); ++it) {
      if (it->name.empty()) continue;
      if (!inner) inner = &*it;
      if (!fn.empty()) fn += " < ";
      fn += it->name;
    }
    if (inner) {
      out += ",\"function\":\"" + json_escape(fn) + "\"";
      if (!inner->file.empty()) out += ",\"file\":\"" + json_escape(inner->file) + "\"";
      if (inner->line) out += ",\"line\":" + std::to_string(inner->line);
    }
  }
  return out + "}";
}

std::string labels_json(const Profile& p, const std::vector<uint32_t>& key) {
  std::string out = "[";
  for (size_t i = 0; i < key.size(); ++i) {
    if (i) out += ",";
    out += "\"" + json_escape(p.label(key[i])) + "\"";
  }
  return out + "]";
}

std::string stack_json(const Profile& p, uint32_t stack) {
  std::string out = "[";
  bool first = true;
  for (uint32_t f : p.stack(stack)) {
    if (!first) out += ",";
    first = false;
    out += frame_json(p, f);
  }
  return out + "]";
}

std::string mem_json(const MemStat& s, double total) {
  char buf[256];
  snprintf(buf, sizeof(buf),
           "\"est_bytes\":%.0f,\"ci95_bytes\":%.0f,\"est_allocs\":%.0f,\"samples\":%llu,"
           "\"sampled_bytes\":%llu,\"share\":%.6f",
           s.bytes, s.ci95(), s.objects, static_cast<ull>(s.samples), static_cast<ull>(s.raw_bytes),
           total > 0 ? s.bytes / total : 0.0);
  return buf;
}

std::string processes_json(const Profile& p) {
  std::string out = "[";
  for (size_t i = 0; i < p.processes.size(); ++i) {
    const ProcessInfo& pr = p.processes[i];
    if (i) out += ",";
    char buf[512];
    snprintf(buf, sizeof(buf),
             "{\"process\":\"%s\",\"service\":\"%s\",\"pid\":\"%s\",\"segments\":%llu,"
             "\"sample_rate_bytes\":%llu,\"track_liveset\":%s,\"cpu_hz\":%g,"
             "\"alloc_samples\":%llu,\"free_events\":%llu,\"cpu_samples\":%llu,"
             "\"offcpu_samples\":%llu,\"dropped_allocs\":%llu,\"dropped_frees\":%llu",
             json_escape(pr.key).c_str(), json_escape(pr.service).c_str(),
             json_escape(pr.pid).c_str(), static_cast<ull>(pr.segments), static_cast<ull>(pr.rate),
             pr.liveset.empty() ? "null" : (pr.liveset == "false" ? "false" : "true"), pr.cpu_hz,
             static_cast<ull>(pr.alloc_samples), static_cast<ull>(pr.free_events),
             static_cast<ull>(pr.cpu_samples), static_cast<ull>(pr.offcpu_samples),
             static_cast<ull>(pr.dropped_allocs), static_cast<ull>(pr.dropped_frees));
    out += buf;
    if (pr.first_ts <= pr.last_ts) {
      snprintf(buf, sizeof(buf), ",\"first_ns\":%lld,\"last_ns\":%lld,\"wall_clock\":%s",
               static_cast<long long>(pr.wall(pr.first_ts)),
               static_cast<long long>(pr.wall(pr.last_ts)), pr.has_clock ? "true" : "false");
      out += buf;
    }
    out += "}";
  }
  return out + "]";
}

namespace {

const char* group_name(Group g) {
  switch (g) {
    case Group::kFunction:
      return "function";
    case Group::kLine:
      return "line";
    case Group::kStack:
      break;
  }
  return "stack";
}

void print_drop_warning(FILE* out, const Profile& p, bool live) {
  uint64_t da = p.dropped_allocs(), df = p.dropped_frees();
  if (da) {
    fprintf(out,
            "warning: %llu allocation samples were dropped (ring full); estimates are low by "
            "about that many samples\n",
            static_cast<ull>(da));
  }
  if (df && live) {
    fprintf(out,
            "warning: %llu frees were dropped (ring full); live figures are upper bounds: some "
            "allocations shown as live were freed\n",
            static_cast<ull>(df));
  }
}

void print_mem_table(FILE* out, Profile& p, const std::vector<Row<MemStat>>& rows, double total,
                     const ReportOptions& o) {
  fprintf(out, "  %12s %9s %7s %10s %8s  %s\n", "est. bytes", "±95%", "share", "est. allocs",
          "samples",
          o.group == Group::kStack ? "allocation site (leaf first)" : group_name(o.group));
  size_t shown = 0;
  double rest = 0;
  for (const Row<MemStat>& r : rows) {
    if (shown++ >= o.top) {
      rest += r.stat.bytes;
      continue;
    }
    fprintf(out, "  %12s %7.1f%% %6.1f%% %10s %8llu  %s\n", human_bytes(r.stat.bytes).c_str(),
            pct(r.stat.ci95(), r.stat.bytes), pct(r.stat.bytes, total),
            fmt_count(r.stat.objects).c_str(), static_cast<ull>(r.stat.samples),
            site_name(p, r.key, o.group, o.frames).c_str());
  }
  if (rows.size() > o.top) {
    fprintf(out, "  %12s %8s %6.1f%%  … %zu more\n", human_bytes(rest).c_str(), "",
            pct(rest, total), rows.size() - o.top);
  }
}

void print_live_table(FILE* out, Profile& p, const std::vector<Row<LiveStat>>& rows, double total,
                      const ReportOptions& o) {
  fprintf(out, "  %12s %9s %7s %10s %8s %9s %9s  %s\n", "est. bytes", "±95%", "share",
          "est. allocs", "samples", "oldest", "mean age",
          o.group == Group::kStack ? "live allocation site (leaf first)" : group_name(o.group));
  size_t shown = 0;
  double rest = 0;
  for (const Row<LiveStat>& r : rows) {
    if (shown++ >= o.top) {
      rest += r.stat.bytes;
      continue;
    }
    double mean = r.stat.samples ? r.stat.age_sum_ns / static_cast<double>(r.stat.samples) : 0;
    fprintf(out, "  %12s %7.1f%% %6.1f%% %10s %8llu %9s %9s  %s\n",
            human_bytes(r.stat.bytes).c_str(), pct(r.stat.ci95(), r.stat.bytes),
            pct(r.stat.bytes, total), fmt_count(r.stat.objects).c_str(),
            static_cast<ull>(r.stat.samples),
            fmt_duration(static_cast<double>(r.stat.oldest_ns)).c_str(), fmt_duration(mean).c_str(),
            site_name(p, r.key, o.group, o.frames).c_str());
  }
  if (rows.size() > o.top) {
    fprintf(out, "  %12s %8s %6.1f%%  … %zu more\n", human_bytes(rest).c_str(), "",
            pct(rest, total), rows.size() - o.top);
  }
}

void print_cpu_table(FILE* out, Profile& p, const std::vector<CpuRow>& rows, double total,
                     const ReportOptions& o) {
  fprintf(out, "  %8s %7s %8s %7s %10s  %s\n", "self", "self%", "total", "total%", "self time",
          o.group == Group::kStack ? "stack (leaf first)" : group_name(o.group));
  size_t shown = 0;
  for (const CpuRow& r : rows) {
    if (shown++ >= o.top) break;
    fprintf(out, "  %8llu %6.1f%% %8llu %6.1f%% %10s  %s\n", static_cast<ull>(r.self.samples),
            pct(static_cast<double>(r.self.samples), total), static_cast<ull>(r.total.samples),
            pct(static_cast<double>(r.total.samples), total), fmt_duration(r.self.ns).c_str(),
            site_name(p, r.key, o.group, o.frames).c_str());
  }
  if (rows.size() > o.top) fprintf(out, "  … %zu more\n", rows.size() - o.top);
}

// Processes whose metadata says frees were not recorded.
size_t liveset_off_count(const Profile& p) {
  size_t n = 0;
  for (const ProcessInfo& pr : p.processes) n += pr.liveset_off();
  return n;
}

std::string thread_title(const Profile& p, const ThreadInfo& t) {
  std::string s = "thread " + std::to_string(t.tid);
  if (!t.name.empty()) s += " (" + t.name + ")";
  if (p.processes.size() > 1) s += " in " + p.processes[t.process].key;
  return s;
}

}  // namespace

std::vector<Row<MemStat>> group_alloc(Profile& p, Group g, bool trim) {
  return group_rows(p, p.alloc(), g, trim, [](const MemStat& s) { return s.bytes; });
}

std::vector<Row<LiveStat>> group_live(Profile& p, Group g, bool trim) {
  return group_live(p, p.live(), g, trim);
}

std::vector<Row<LiveStat>> group_live(Profile& p, const std::vector<LiveStat>& by_stack, Group g,
                                      bool trim) {
  return group_rows(p, by_stack, g, trim, [](const LiveStat& s) { return s.bytes; });
}

std::vector<CpuRow> group_cpu(Profile& p, Group g, int64_t thread) {
  std::vector<CpuStat> by_stack;
  const std::vector<CpuStat>* src = &p.cpu();
  if (thread >= 0) {
    by_stack.assign(p.stack_count(), CpuStat{});
    for (const auto& [key, st] : p.cpu_by_thread()) {
      if (static_cast<int64_t>(key >> 32) == thread) by_stack[key & 0xFFFFFFFF].add(st);
    }
    src = &by_stack;
  }
  std::map<std::vector<uint32_t>, size_t> index;
  std::vector<CpuRow> rows;
  auto row = [&](std::vector<uint32_t> key) -> CpuRow& {
    auto [it, inserted] = index.try_emplace(key, rows.size());
    if (inserted) {
      rows.emplace_back();
      rows.back().key = std::move(key);
    }
    return rows[it->second];
  };
  std::vector<double> rep(0);
  for (uint32_t s = 0; s < src->size(); ++s) {
    const CpuStat& st = (*src)[s];
    if (st.samples == 0) continue;
    CpuRow& self = row(p.group_key(s, g));
    if (self.self.samples < st.samples) self.rep_stack = s;
    self.self.add(st);
    if (g == Group::kStack) {
      self.total.add(st);
      continue;
    }
    // Total: every distinct label anywhere in the stack, once per sample.
    std::set<uint32_t> seen;
    for (uint32_t f : p.stack(s)) {
      for (uint32_t l : p.labels(f, g)) seen.insert(l);
    }
    if (p.stack(s).empty()) seen.insert(p.group_key(s, g)[0]);
    for (uint32_t l : seen) row({l}).total.add(st);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const CpuRow& a, const CpuRow& b) {
    if (a.self.samples != b.self.samples) return a.self.samples > b.self.samples;
    return a.total.samples > b.total.samples;
  });
  return rows;
}

std::string site_name(const Profile& p, const std::vector<uint32_t>& key, Group g, int frames) {
  std::string out;
  int n = 0;
  for (uint32_t l : key) {
    if (g == Group::kStack && n >= frames) {
      out += " <- …";
      break;
    }
    if (n++) out += " <- ";
    out += p.label(l);
  }
  return out;
}

std::string key_string(const Profile& p, const std::vector<uint32_t>& key) {
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    if (i) out += ";";
    out += p.label(key[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

void print_alloc(FILE* out, Profile& p, const ReportOptions& o) {
  const MemStat total = p.alloc_total();
  std::vector<Row<MemStat>> rows = group_alloc(p, o.group, o.trim);
  if (o.json) {
    fprintf(out, "{\"group\":\"%s\",\"segments\":%llu,\"processes\":%s,\"total\":{%s},\"sites\":[",
            group_name(o.group), static_cast<ull>(p.files - p.unreadable - p.skipped),
            processes_json(p).c_str(), mem_json(total, total.bytes).c_str());
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const Row<MemStat>& r = rows[i];
      fprintf(out, "%s\n{%s,\"labels\":%s,\"frames\":%s}", i ? "," : "",
              mem_json(r.stat, total.bytes).c_str(), labels_json(p, r.key).c_str(),
              stack_json(p, r.rep_stack).c_str());
    }
    fprintf(out, "]}\n");
    return;
  }
  std::string rates = rates_text(p);
  fprintf(out, "%llu segment(s), %zu process(es), %llu allocation samples %s\n",
          static_cast<ull>(p.files - p.unreadable - p.skipped), p.processes.size(),
          static_cast<ull>(total.samples), rates.c_str());
  if (total.samples == 0) {
    fprintf(out, "no allocation samples in the input%s\n",
            p.options().filter.has_time() || !p.options().filter.tids.empty()
                ? " (after --from/--to/--tid filters)"
                : "");
    return;
  }
  fprintf(out, "estimated bytes allocated: %s ±%.1f%% (95%%), about %s allocations\n",
          human_bytes(total.bytes).c_str(), pct(total.ci95(), total.bytes),
          fmt_count(total.objects).c_str());
  print_drop_warning(out, p, false);
  print_mem_table(out, p, rows, total.bytes, o);
}

void print_leaks(FILE* out, Profile& p, const ReportOptions& o) {
  const LiveStat total = p.live_total();
  std::vector<Row<LiveStat>> rows = group_live(p, o.group, o.trim);
  const size_t off = liveset_off_count(p);
  bool snapshot = false, paired = false, unknown_no_frees = false;
  for (const ProcessInfo& pr : p.processes) {
    if (pr.liveset_off()) continue;
    if (pr.live_snapshot) {
      snapshot = true;
    } else {
      paired = true;
      if (pr.liveset.empty() && pr.free_events == 0 && pr.alloc_samples > 0) {
        unknown_no_frees = true;
      }
    }
  }
  if (o.json) {
    fprintf(out,
            "{\"group\":\"%s\",%s\"processes\":%s,\"liveset_off_processes\":%zu,"
            "\"dropped_frees\":%llu,\"upper_bound\":%s,\"total\":{%s},\"sites\":[",
            group_name(o.group),
            o.at.empty() ? "" : ("\"at\":\"" + json_escape(o.at) + "\",").c_str(),
            processes_json(p).c_str(), off, static_cast<ull>(p.dropped_frees()),
            p.dropped_frees() ? "true" : "false", mem_json(total, total.bytes).c_str());
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const Row<LiveStat>& r = rows[i];
      double mean = r.stat.samples ? r.stat.age_sum_ns / static_cast<double>(r.stat.samples) : 0;
      fprintf(
          out, "%s\n{%s,\"oldest_age_ns\":%llu,\"mean_age_ns\":%.0f,\"labels\":%s,\"frames\":%s}",
          i ? "," : "", mem_json(r.stat, total.bytes).c_str(), static_cast<ull>(r.stat.oldest_ns),
          mean, labels_json(p, r.key).c_str(), stack_json(p, r.rep_stack).c_str());
    }
    fprintf(out, "]}\n");
    return;
  }
  if (!p.processes.empty() && off == p.processes.size()) {
    fprintf(out,
            "no live set: memory.track_liveset=false in %s, so frees were not recorded and "
            "nothing can be said about leaks.\nProfile again with D9_LIVESET=1 (the default; "
            "`d9 run` without --no-liveset).\n",
            p.processes.size() == 1 ? "the trace" : "every process");
    return;
  }
  if (off) {
    fprintf(out,
            "note: memory.track_liveset=false in %zu of %zu processes; their allocations are "
            "left out\n",
            off, p.processes.size());
  }
  if (!o.at.empty()) {
    fprintf(out, "live set at %s: sampled allocations made by then and not freed by then\n",
            o.at.c_str());
    snapshot = paired = false;
  }
  if (snapshot) {
    fprintf(out,
            "live set: the Libd9LiveAllocation snapshot written at the last seal, updated by "
            "later allocations and frees\n");
  }
  if (paired) {
    fprintf(out,
            "live set: sampled allocations without a matching FreeEvent (paired on address "
            "and allocation time)\n");
  }
  if (unknown_no_frees) {
    fprintf(out,
            "note: no FreeEvent and no memory.track_liveset in %s: if frees were not tracked, "
            "every sampled allocation shows as live\n",
            p.processes.size() == 1 ? "the trace" : "some processes");
  }
  print_drop_warning(out, p, true);
  fprintf(out, "live at %s: %llu sampled allocations, estimated %s ±%.1f%% (95%%) in %zu sites\n",
          o.at.empty() ? "the end" : o.at.c_str(), static_cast<ull>(total.samples),
          human_bytes(total.bytes).c_str(), pct(total.ci95(), total.bytes), rows.size());
  if (total.samples == 0) return;
  print_live_table(out, p, rows, total.bytes, o);
}

void print_cpu(FILE* out, Profile& p, const ReportOptions& o) {
  const CpuStat total = p.cpu_total();
  uint64_t off = 0;
  size_t threads = 0;
  for (const ProcessInfo& pr : p.processes) off += pr.offcpu_samples;
  for (const ThreadInfo& t : p.threads) threads += t.cpu_samples > 0;
  std::vector<CpuRow> rows = group_cpu(p, o.group);
  if (o.json) {
    auto rows_json = [&](const std::vector<CpuRow>& rs) {
      std::string s = "[";
      for (size_t i = 0; i < rs.size() && i < o.top; ++i) {
        char buf[160];
        snprintf(buf, sizeof(buf),
                 "%s\n{\"self\":%llu,\"total\":%llu,\"self_ns\":%.0f,\"total_ns\":%.0f,",
                 i ? "," : "", static_cast<ull>(rs[i].self.samples),
                 static_cast<ull>(rs[i].total.samples), rs[i].self.ns, rs[i].total.ns);
        s += buf;
        s += "\"labels\":" + labels_json(p, rs[i].key) + "}";
      }
      return s + "]";
    };
    fprintf(out,
            "{\"group\":\"%s\",\"processes\":%s,\"samples\":%llu,\"cpu_ns\":%.0f,"
            "\"offcpu_samples\":%llu,\"functions\":%s",
            group_name(o.group), processes_json(p).c_str(), static_cast<ull>(total.samples),
            total.ns, static_cast<ull>(off), rows_json(rows).c_str());
    if (o.by_thread) {
      fprintf(out, ",\"threads\":[");
      bool first = true;
      for (size_t ti = 0; ti < p.threads.size(); ++ti) {
        const ThreadInfo& t = p.threads[ti];
        if (!t.cpu_samples) continue;
        fprintf(out,
                "%s\n{\"process\":\"%s\",\"tid\":%u,\"name\":\"%s\",\"samples\":%llu,"
                "\"functions\":%s}",
                first ? "" : ",", json_escape(p.processes[t.process].key).c_str(), t.tid,
                json_escape(t.name).c_str(), static_cast<ull>(t.cpu_samples),
                rows_json(group_cpu(p, o.group, static_cast<int64_t>(ti))).c_str());
        first = false;
      }
      fprintf(out, "]");
    }
    fprintf(out, "}\n");
    return;
  }
  if (total.samples == 0) {
    std::string hz = hz_text(p);
    fprintf(out, "no on-CPU samples in the input%s%s\n",
            hz.empty() ? "" : " (cpu.profile.frequency_hz: ", hz.empty() ? "" : (hz + ")").c_str());
    if (off) fprintf(out, "%llu off-CPU samples\n", static_cast<ull>(off));
    return;
  }
  std::string hz = hz_text(p);
  fprintf(out, "%llu on-CPU samples%s%s, about %s of CPU, in %zu process(es) and %zu thread(s)\n",
          static_cast<ull>(total.samples), hz.empty() ? "" : " at ", hz.c_str(),
          fmt_duration(total.ns).c_str(), p.processes.size(), threads);
  if (off) {
    fprintf(out, "(%llu off-CPU samples are not counted)\n", static_cast<ull>(off));
  }
  if (!o.by_thread) {
    print_cpu_table(out, p, rows, static_cast<double>(total.samples), o);
    return;
  }
  std::vector<size_t> order;
  for (size_t ti = 0; ti < p.threads.size(); ++ti) {
    if (p.threads[ti].cpu_samples) order.push_back(ti);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return p.threads[a].cpu_samples > p.threads[b].cpu_samples;
  });
  for (size_t ti : order) {
    const ThreadInfo& t = p.threads[ti];
    fprintf(out, "\n%s: %llu samples (%.1f%%)\n", thread_title(p, t).c_str(),
            static_cast<ull>(t.cpu_samples),
            pct(static_cast<double>(t.cpu_samples), static_cast<double>(total.samples)));
    print_cpu_table(out, p, group_cpu(p, o.group, static_cast<int64_t>(ti)),
                    static_cast<double>(t.cpu_samples), o);
  }
}

void print_summary(FILE* out, Profile& p, const ReportOptions& o) {
  const MemStat alloc = p.alloc_total();
  const LiveStat live = p.live_total();
  const CpuStat cpu = p.cpu_total();
  uint64_t frees = 0, off_cpu = 0;
  for (const ProcessInfo& pr : p.processes) {
    frees += pr.free_events;
    off_cpu += pr.offcpu_samples;
  }
  int64_t first = 0, last = 0;
  bool wall = false;
  const bool has_span = p.span(&first, &last, &wall);
  const size_t off = liveset_off_count(p);
  if (o.json) {
    fprintf(out,
            "{\"segments\":%llu,\"unreadable\":%llu,\"damaged\":%llu,\"bytes_on_disk\":%llu,"
            "\"bytes_decoded\":%llu,\"threads\":%zu,\"processes\":%s,\"alloc\":{%s},"
            "\"live\":{%s},\"cpu\":{\"samples\":%llu,\"ns\":%.0f,\"offcpu_samples\":%llu},"
            "\"frees\":%llu,\"dropped_allocs\":%llu,\"dropped_frees\":%llu",
            static_cast<ull>(p.files - p.unreadable - p.skipped), static_cast<ull>(p.unreadable),
            static_cast<ull>(p.damaged), static_cast<ull>(p.file_bytes),
            static_cast<ull>(p.raw_bytes), p.threads.size(), processes_json(p).c_str(),
            mem_json(alloc, alloc.bytes).c_str(), mem_json(live, live.bytes).c_str(),
            static_cast<ull>(cpu.samples), cpu.ns, static_cast<ull>(off_cpu),
            static_cast<ull>(frees), static_cast<ull>(p.dropped_allocs()),
            static_cast<ull>(p.dropped_frees()));
    if (has_span) {
      fprintf(out, ",\"first_ns\":%lld,\"last_ns\":%lld,\"wall_clock\":%s",
              static_cast<long long>(first), static_cast<long long>(last), wall ? "true" : "false");
    }
    fprintf(out, "}\n");
    return;
  }
  fprintf(out, "%llu segment(s): %s on disk, %s decoded",
          static_cast<ull>(p.files - p.unreadable - p.skipped),
          human_bytes(static_cast<double>(p.file_bytes)).c_str(),
          human_bytes(static_cast<double>(p.raw_bytes)).c_str());
  if (p.unreadable) fprintf(out, "; %llu unreadable", static_cast<ull>(p.unreadable));
  if (p.damaged) fprintf(out, "; %llu damaged (see above)", static_cast<ull>(p.damaged));
  if (p.skipped) fprintf(out, "; %llu left out by --pid/--process", static_cast<ull>(p.skipped));
  fprintf(out, "\nprocesses: %zu, threads: %zu\n", p.processes.size(), p.threads.size());
  size_t shown = 0;
  for (const ProcessInfo& pr : p.processes) {
    if (shown++ >= 10) {
      fprintf(out, "  … %zu more\n", p.processes.size() - 10);
      break;
    }
    fprintf(out, "  %-16s %-16s pid %-8s %3llu segment(s)", pr.key.c_str(),
            pr.service.empty() ? "-" : pr.service.c_str(), pr.pid.empty() ? "-" : pr.pid.c_str(),
            static_cast<ull>(pr.segments));
    if (pr.first_ts <= pr.last_ts) {
      fprintf(out, "  %s, %s",
              pr.has_clock ? format_wall(pr.wall(pr.first_ts)).c_str() : "(no clock sync)",
              fmt_duration(static_cast<double>(pr.last_ts - pr.first_ts)).c_str());
    }
    fprintf(out, "\n");
  }
  if (has_span) {
    if (wall) {
      fprintf(out, "time span: %s → %s (%s)\n", format_wall(first).c_str(),
              format_wall(last).c_str(),
              fmt_duration(static_cast<double>(last) - static_cast<double>(first)).c_str());
    } else {
      fprintf(out, "time span: %s (no ClockSyncEvent in some processes: no wall clock)\n",
              fmt_duration(static_cast<double>(last) - static_cast<double>(first)).c_str());
    }
  }
  std::string rates = rates_text(p);
  fprintf(out, "allocation samples: %llu %s", static_cast<ull>(alloc.samples), rates.c_str());
  if (alloc.samples) {
    fprintf(out, "; estimated %s ±%.1f%% allocated, about %s allocations",
            human_bytes(alloc.bytes).c_str(), pct(alloc.ci95(), alloc.bytes),
            fmt_count(alloc.objects).c_str());
  }
  fprintf(out, "\nfrees: %llu", static_cast<ull>(frees));
  if (off == p.processes.size() && off) {
    fprintf(out, " (memory.track_liveset=false: frees not tracked, no live set)\n");
  } else {
    fprintf(out, "; live at the end: %llu sampled allocations, estimated %s ±%.1f%%\n",
            static_cast<ull>(live.samples), human_bytes(live.bytes).c_str(),
            pct(live.ci95(), live.bytes));
  }
  std::string hz = hz_text(p);
  fprintf(out, "CPU samples: %llu on-CPU", static_cast<ull>(cpu.samples));
  if (off_cpu) fprintf(out, ", %llu off-CPU", static_cast<ull>(off_cpu));
  if (!hz.empty()) fprintf(out, " at %s", hz.c_str());
  if (cpu.samples) fprintf(out, ", about %s of CPU", fmt_duration(cpu.ns).c_str());
  fprintf(out, "\ndropped: %llu allocation samples, %llu frees\n",
          static_cast<ull>(p.dropped_allocs()), static_cast<ull>(p.dropped_frees()));
  if (p.dropped_frees() && live.samples) {
    fprintf(out, "warning: frees were dropped, so live figures are upper bounds\n");
  }
  if (alloc.samples) {
    fprintf(out, "\ntop allocation sites:\n");
    print_mem_table(out, p, group_alloc(p, o.group, o.trim), alloc.bytes, o);
  }
  if (cpu.samples) {
    fprintf(out, "\ntop CPU functions:\n");
    ReportOptions co = o;
    if (co.group == Group::kStack) co.group = Group::kFunction;
    print_cpu_table(out, p, group_cpu(p, co.group), static_cast<double>(cpu.samples), co);
  }
  if (live.samples && off < p.processes.size()) {
    fprintf(out, "\ntop live sites:\n");
    print_live_table(out, p, group_live(p, o.group, o.trim), live.bytes, o);
  }
}

void print_diff(FILE* out, Profile& a, Profile& b, const std::string& name_a,
                const std::string& name_b, const ReportOptions& o) {
  struct D {
    std::string name;
    MemStat a, b;
  };
  std::map<std::string, D> sites;
  auto fold = [&](Profile& p, bool second) {
    for (const Row<MemStat>& r : group_alloc(p, o.group, o.trim)) {
      D& d = sites[key_string(p, r.key)];
      if (d.name.empty()) d.name = site_name(p, r.key, o.group, o.frames);
      (second ? d.b : d.a).add(r.stat);
    }
  };
  fold(a, false);
  fold(b, true);
  std::vector<const D*> rows;
  for (const auto& [k, d] : sites) rows.push_back(&d);
  std::stable_sort(rows.begin(), rows.end(), [](const D* x, const D* y) {
    return std::fabs(x->b.bytes - x->a.bytes) > std::fabs(y->b.bytes - y->a.bytes);
  });
  const MemStat ta = a.alloc_total(), tb = b.alloc_total();
  const CpuStat ca = a.cpu_total(), cb = b.cpu_total();

  struct C {
    std::string name;
    double a = 0, b = 0;  // self share
  };
  std::map<std::string, C> funcs;
  Group cg = o.group == Group::kStack ? Group::kFunction : o.group;
  auto fold_cpu = [&](Profile& p, bool second, double total) {
    if (total <= 0) return;
    for (const CpuRow& r : group_cpu(p, cg)) {
      C& c = funcs[key_string(p, r.key)];
      if (c.name.empty()) c.name = site_name(p, r.key, cg, o.frames);
      (second ? c.b : c.a) += static_cast<double>(r.self.samples) / total;
    }
  };
  fold_cpu(a, false, static_cast<double>(ca.samples));
  fold_cpu(b, true, static_cast<double>(cb.samples));
  std::vector<const C*> crows;
  for (const auto& [k, c] : funcs) crows.push_back(&c);
  std::stable_sort(crows.begin(), crows.end(), [](const C* x, const C* y) {
    return std::fabs(x->b - x->a) > std::fabs(y->b - y->a);
  });

  if (o.json) {
    fprintf(out, "{\"group\":\"%s\",\"a\":{%s},\"b\":{%s},\"sites\":[", group_name(o.group),
            mem_json(ta, ta.bytes).c_str(), mem_json(tb, tb.bytes).c_str());
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const D& d = *rows[i];
      fprintf(out,
              "%s\n{\"site\":\"%s\",\"a_bytes\":%.0f,\"b_bytes\":%.0f,\"change_bytes\":%.0f,"
              "\"ci95_change\":%.0f}",
              i ? "," : "", json_escape(d.name).c_str(), d.a.bytes, d.b.bytes,
              d.b.bytes - d.a.bytes, 1.96 * std::sqrt(d.a.variance + d.b.variance));
    }
    fprintf(out, "],\"cpu\":{\"a_samples\":%llu,\"b_samples\":%llu,\"functions\":[",
            static_cast<ull>(ca.samples), static_cast<ull>(cb.samples));
    for (size_t i = 0; i < crows.size() && i < o.top; ++i) {
      fprintf(out, "%s\n{\"function\":\"%s\",\"a_share\":%.6f,\"b_share\":%.6f}", i ? "," : "",
              json_escape(crows[i]->name).c_str(), crows[i]->a, crows[i]->b);
    }
    fprintf(out, "]}}\n");
    return;
  }

  fprintf(out, "A: %s (%llu allocation samples, %llu CPU samples)\n", name_a.c_str(),
          static_cast<ull>(ta.samples), static_cast<ull>(ca.samples));
  fprintf(out, "B: %s (%llu allocation samples, %llu CPU samples)\n", name_b.c_str(),
          static_cast<ull>(tb.samples), static_cast<ull>(cb.samples));
  if (ta.samples || tb.samples) {
    fprintf(out, "estimated bytes allocated: A %s, B %s, change %s%s (%+.1f%%) ±%s (95%%)\n",
            human_bytes(ta.bytes).c_str(), human_bytes(tb.bytes).c_str(),
            tb.bytes >= ta.bytes ? "+" : "", human_bytes(tb.bytes - ta.bytes).c_str(),
            pct(tb.bytes - ta.bytes, ta.bytes),
            human_bytes(1.96 * std::sqrt(ta.variance + tb.variance)).c_str());
    fprintf(out, "  %12s %12s %13s %12s %8s  %s\n", "A est.", "B est.", "change", "±95%", "change%",
            o.group == Group::kStack ? "allocation site (leaf first)" : group_name(o.group));
    for (size_t i = 0; i < rows.size() && i < o.top; ++i) {
      const D& d = *rows[i];
      double delta = d.b.bytes - d.a.bytes;
      double ci = 1.96 * std::sqrt(d.a.variance + d.b.variance);
      char change[32];
      snprintf(change, sizeof(change), "%s%s", delta >= 0 ? "+" : "", human_bytes(delta).c_str());
      char rel[16] = "new";
      if (d.a.bytes > 0) snprintf(rel, sizeof(rel), "%+.1f%%", pct(delta, d.a.bytes));
      fprintf(out, "  %12s %12s %13s %11s %8s %s %s\n", human_bytes(d.a.bytes).c_str(),
              human_bytes(d.b.bytes).c_str(), change, human_bytes(ci).c_str(), rel,
              std::fabs(delta) > ci ? "*" : " ", d.name.c_str());
    }
    fprintf(out, "  (* = change larger than its 95%% interval)\n");
  }
  if (ca.samples || cb.samples) {
    fprintf(out, "\nCPU share (self samples / all on-CPU samples):\n");
    fprintf(out, "  %8s %8s %9s  %s\n", "A", "B", "change", group_name(cg));
    for (size_t i = 0; i < crows.size() && i < o.top; ++i) {
      const C& c = *crows[i];
      fprintf(out, "  %7.1f%% %7.1f%% %+8.1fpp  %s\n", 100 * c.a, 100 * c.b, 100 * (c.b - c.a),
              c.name.c_str());
    }
  }
  if (!ta.samples && !tb.samples && !ca.samples && !cb.samples) {
    fprintf(out, "no samples in either input\n");
  }
}

}  // namespace d9::cli
