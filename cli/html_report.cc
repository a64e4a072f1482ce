#include "cli/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "cli/flame.h"
#include "cli/report.h"
#include "cli/report_page.h"  // kReportPage: cli/report_page.html, embedded at build time
#include "cli/time_views.h"

namespace d9::cli {

namespace {

// What a report printer writes, as a string (the page embeds the commands' own JSON, so its
// numbers are theirs).
template <class Print>
std::string capture(Print print) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return "null";
  print(f);
  fclose(f);
  std::string out(buf, len);
  free(buf);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "null" : out;
}

// A number as JSON: whole above 1000 (bytes, variances), else 6 significant digits.
void num(std::string* out, double v) {
  char buf[32];
  if (!std::isfinite(v)) v = 0;
  snprintf(buf, sizeof(buf), std::fabs(v) >= 1000 ? "%.0f" : "%.6g", v);
  *out += buf;
}

// Per-bin amounts as whole bytes whose running sums are the rounded running sums of the
// exact amounts: the page adds them up (live = allocated - freed so far), and rounding each
// bin on its own would leave a few bytes "live" of a site whose allocations are all freed.
void round_running(std::vector<double>* v) {
  double exact = 0, emitted = 0;
  for (double& x : *v) {
    exact += x;
    x = std::round(exact) - emitted;
    emitted += x;
  }
}

// Sparse series: [bin, value, bin, value, ...] of the non-zero bins.
void sparse(std::string* out, const std::vector<double>& v) {
  *out += '[';
  bool first = true;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) continue;
    if (!first) *out += ',';
    first = false;
    *out += std::to_string(i);
    *out += ',';
    num(out, v[i]);
  }
  *out += ']';
}

void dense(std::string* out, const std::vector<double>& v) {
  *out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) *out += ',';
    num(out, v[i]);
  }
  *out += ']';
}

}  // namespace

std::string html_report_data(Profile& p, const Timeline& tl, const HtmlReportOptions& o) {
  ReportOptions ro;
  ro.json = true;
  ro.group = Group::kFunction;
  ro.top = 5;
  ro.frames = 4;
  std::string out =
      "{\"title\":\"" + json_escape(o.title) + "\",\"damage\":\"" + json_escape(o.damage) + "\"";
  out += ",\"summary\":" + capture([&](FILE* f) { print_summary(f, p, ro); });
  ro.top = o.top_rows;
  out += ",\"peak\":" + capture([&](FILE* f) { print_peak(f, p, tl, ro); });
  out += ",\"alloc\":" + capture([&](FILE* f) { print_alloc(f, p, ro); });
  out += ",\"leaks\":" + capture([&](FILE* f) { print_leaks(f, p, ro); });
  out += ",\"lifetimes\":" +
         capture([&](FILE* f) { print_lifetimes(f, p, tl, ro, LifetimeOptions{o.temporary_ns}); });
  ro.top = std::min<size_t>(o.top_rows, 20);
  out += ",\"sizes\":" + capture([&](FILE* f) { print_sizes(f, p, tl, ro); });

  // The time axis: seconds from the trace's origin, over every process.
  double t0 = INFINITY, t1 = -INFINITY;
  for (const ProcessInfo& pr : p.processes) {
    if (pr.first_ts > pr.last_ts) continue;
    t0 = std::min(t0, seconds_from_origin(p, pr, pr.first_ts));
    t1 = std::max(t1, seconds_from_origin(p, pr, pr.last_ts));
  }
  if (!(t0 <= t1)) t0 = t1 = 0;
  const size_t bins = std::max<size_t>(1, o.bins);
  const double width = std::max(1e-6, (t1 - t0) / static_cast<double>(bins));
  auto bin_of = [&](const ProcessInfo& pr, uint64_t mono) {
    const double b = std::floor((seconds_from_origin(p, pr, mono) - t0) / width);
    return static_cast<size_t>(std::clamp(b, 0.0, static_cast<double>(bins - 1)));
  };

  // The heaviest stacks by their largest share of anything drawn: allocated bytes, live
  // bytes at the end, at a peak, CPU samples.
  const size_t n_stacks = p.stack_count();
  std::vector<double> score(n_stacks, 0);
  auto rank = [&](const std::vector<double>& v) {
    double total = 0;
    for (double x : v) total += x;
    if (total <= 0) return;
    for (size_t s = 0; s < v.size() && s < n_stacks; ++s) {
      score[s] = std::max(score[s], v[s] / total);
    }
  };
  {
    std::vector<double> v(n_stacks);
    for (size_t s = 0; s < n_stacks; ++s) v[s] = p.alloc()[s].bytes;
    rank(v);
    for (size_t s = 0; s < n_stacks; ++s) v[s] = s < p.live().size() ? p.live()[s].bytes : 0;
    rank(v);
    for (size_t s = 0; s < n_stacks; ++s) v[s] = static_cast<double>(p.cpu()[s].samples);
    rank(v);
    for (const ProcessPeak& pk : find_peaks(p, tl)) {
      std::fill(v.begin(), v.end(), 0);
      for (size_t s = 0; s < pk.by_stack.size() && s < n_stacks; ++s) v[s] = pk.by_stack[s].bytes;
      rank(v);
    }
  }
  std::vector<uint32_t> order;
  for (uint32_t s = 0; s < n_stacks; ++s) {
    if (score[s] > 0) order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return score[a] > score[b]; });
  if (order.size() > o.top_stacks) order.resize(o.top_stacks);
  std::unordered_map<uint32_t, uint32_t> slot;  // stack id -> index in `order`
  for (uint32_t i = 0; i < order.size(); ++i) slot.emplace(order[i], i);

  struct StackSeries {
    std::vector<double> alloc, freed, cpu;
  };
  std::vector<StackSeries> ss(order.size());
  for (StackSeries& s : ss) {
    s.alloc.assign(bins, 0);
    s.freed.assign(bins, 0);
    s.cpu.assign(bins, 0);
  }
  std::vector<double> alloc(bins, 0), freed(bins, 0), var_in(bins, 0), var_out(bins, 0);
  for (uint32_t pi = 0; pi < p.processes.size(); ++pi) {
    const ProcessInfo& pr = p.processes[pi];
    for (const Timeline::Sample& s : tl.samples(pi)) {
      const size_t b = bin_of(pr, s.t0);
      alloc[b] += s.w;
      var_in[b] += s.var;
      auto it = slot.find(s.stack);
      if (it != slot.end()) ss[it->second].alloc[b] += s.w;
      if (s.t1 == UINT64_MAX) continue;
      const size_t f = bin_of(pr, s.t1);
      freed[f] += s.w;
      var_out[f] += s.var;
      if (it != slot.end()) ss[it->second].freed[f] += s.w;
    }
    for (const Timeline::CpuPoint& c : tl.cpu(pi)) {
      auto it = slot.find(c.stack);
      if (it != slot.end()) ss[it->second].cpu[bin_of(pr, c.ts)] += 1;
    }
  }
  for (StackSeries& s : ss) {
    round_running(&s.alloc);
    round_running(&s.freed);
  }
  // Live bytes and variance at each bin's end, over all stacks.
  std::vector<double> live(bins), var(bins);
  double l = 0, v = 0;
  for (size_t b = 0; b < bins; ++b) {
    l += alloc[b] - freed[b];
    v += var_in[b] - var_out[b];
    live[b] = std::max(0.0, l);
    var[b] = std::max(0.0, v);
  }

  // CPU samples per thread and bin: the 12 busiest threads, the rest as "other threads".
  std::vector<uint32_t> threads;
  for (uint32_t t = 0; t < p.threads.size(); ++t) {
    if (p.threads[t].cpu_samples) threads.push_back(t);
  }
  std::stable_sort(threads.begin(), threads.end(), [&](uint32_t a, uint32_t b) {
    return p.threads[a].cpu_samples > p.threads[b].cpu_samples;
  });
  const size_t kThreads = 12;
  std::unordered_map<uint32_t, size_t> thread_slot;
  for (size_t i = 0; i < threads.size(); ++i) thread_slot[threads[i]] = std::min(i, kThreads);
  std::vector<std::vector<double>> cpu_threads(std::min(threads.size(), kThreads + 1),
                                               std::vector<double>(bins, 0));
  for (uint32_t pi = 0; pi < p.processes.size(); ++pi) {
    for (const Timeline::CpuPoint& c : tl.cpu(pi)) {
      auto it = thread_slot.find(c.thread);
      if (it != thread_slot.end()) cpu_threads[it->second][bin_of(p.processes[pi], c.ts)] += 1;
    }
  }

  // The axis as the page reads it: t0 and the bin width exactly as the bins were cut.
  char axis[128];
  snprintf(axis, sizeof(axis), ",\"timeline\":{\"t0\":%.17g,\"t1\":%.17g,\"bin_s\":%.17g", t0, t1,
           width);
  out += axis;
  out += ",\"bins\":" + std::to_string(bins) + ",\"alloc\":";
  dense(&out, alloc);
  out += ",\"live\":";
  dense(&out, live);
  out += ",\"var\":";
  dense(&out, var);
  out += ",\"threads\":[";
  for (size_t i = 0; i < cpu_threads.size(); ++i) {
    if (i) out += ',';
    std::string name = "other threads";
    if (i < kThreads) {
      const ThreadInfo& t = p.threads[threads[i]];
      name = "thread " + std::to_string(t.tid);
      if (!t.name.empty()) name += " (" + t.name + ")";
      if (p.processes.size() > 1) name += " in " + p.processes[t.process].key;
    }
    out += "{\"name\":\"" + json_escape(name) + "\",\"samples\":";
    sparse(&out, cpu_threads[i]);
    out += '}';
  }
  out += "],\"jemalloc\":[";
  for (uint32_t pi = 0; pi < p.processes.size(); ++pi) {
    const ProcessInfo& pr = p.processes[pi];
    const std::vector<AllocatorStats>& st = tl.allocator_stats(pi);
    if (pi) out += ',';
    out += "{\"process\":\"" + json_escape(pr.key) + "\",\"points\":[";
    const size_t step = std::max<size_t>(1, st.size() / 2000);
    for (size_t i = 0; i < st.size(); i += step) {
      if (i) out += ',';
      out += '[';
      num(&out, std::round(seconds_from_origin(p, pr, st[i].mono_ns) * 1e6) / 1e6);
      for (uint64_t x :
           {st[i].allocated, st[i].active, st[i].resident, st[i].mapped, st[i].retained}) {
        out += ',' + std::to_string(x);
      }
      out += ']';
    }
    out += "]}";
  }
  // The top stacks: frames as indices into a label table, the site (leaf function outside
  // the allocation plumbing), and their series.
  std::vector<std::string> labels;
  std::unordered_map<std::string, uint32_t> label_ids;
  auto label = [&](const std::string& s) {
    auto [it, inserted] = label_ids.try_emplace(s, static_cast<uint32_t>(labels.size()));
    if (inserted) labels.push_back(s);
    return it->second;
  };
  out += "],\"stacks\":[";
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t s = order[i];
    if (i) out += ',';
    out += "{\"frames\":[";
    bool first = true;
    for (const std::string& f : flame_frames(p, s, Group::kFunction)) {
      if (!first) out += ',';
      first = false;
      out += std::to_string(label(f));
    }
    const std::vector<uint32_t> key = p.group_key(s, Group::kFunction, true);
    out += "],\"site\":" + std::to_string(label(key.empty() ? "(no stack)" : p.label(key[0])));
    out += ",\"alloc\":";
    sparse(&out, ss[i].alloc);
    out += ",\"freed\":";
    sparse(&out, ss[i].freed);
    out += ",\"cpu\":";
    sparse(&out, ss[i].cpu);
    out += '}';
  }
  out += "],\"labels\":[";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += "\"" + json_escape(labels[i]) + "\"";
  }
  out += "]}}";
  return out;
}

void write_html_report(FILE* out, Profile& p, const Timeline& tl, const HtmlReportOptions& o) {
  std::string data = html_report_data(p, tl, o);
  // Inside <script>, "</script" or "<!--" would end or change the element. '<' only occurs
  // inside JSON strings, where \u003c is the same character.
  std::string safe;
  safe.reserve(data.size());
  for (char c : data) {
    if (c == '<') {
      safe += "\\u003c";
    } else {
      safe += c;
    }
  }
  const std::string page = kReportPage;
  const std::string marker = "/*D9_DATA*/null";
  const size_t at = page.find(marker);
  if (at == std::string::npos) return;
  fwrite(page.data(), 1, at, out);
  fwrite(safe.data(), 1, safe.size(), out);
  const size_t rest = at + marker.size();
  fwrite(page.data() + rest, 1, page.size() - rest, out);
}

}  // namespace d9::cli
