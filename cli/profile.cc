#include "cli/profile.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "alloc/sampler.h"

namespace d9::cli {

namespace {

constexpr uint64_t kDefaultRate = 524288;  // dial9's default when the metadata has none
constexpr double kDefaultCpuHz = 99;       // D9_CPU_HZ's default

const std::string* find_meta(const decode::Trace& t, const char* key) {
  auto it = t.metadata.find(key);
  return it == t.metadata.end() ? nullptr : &it->second;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

std::string pid_of_boot_id(const std::string& boot_id) {
  size_t dash = boot_id.rfind('-');
  return dash == std::string::npos ? std::string() : boot_id.substr(dash + 1);
}

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool parse_group(const std::string& s, Group* out) {
  if (s == "function" || s == "func" || s == "fn") {
    *out = Group::kFunction;
  } else if (s == "stack") {
    *out = Group::kStack;
  } else if (s == "line") {
    *out = Group::kLine;
  } else {
    return false;
  }
  return true;
}

bool parse_time(const std::string& s, TimeBound* out, std::string* error) {
  auto fail = [&](const char* why) {
    *error = "bad time '" + s + "': " + why;
    return false;
  };
  if (s.empty()) return fail("empty");
  if (s[0] == '@') {
    // Integer and fraction apart: a double cannot hold epoch nanoseconds exactly.
    const char* p = s.c_str() + 1;
    char* end = nullptr;
    errno = 0;
    long long secs = strtoll(p, &end, 10);
    if (end == p || errno || secs < 0 || secs > 9'000'000'000LL) {
      return fail("expected @UNIX_SECONDS");
    }
    int64_t frac = 0;
    if (*end == '.') {
      int64_t scale = 100'000'000;
      for (++end; *end >= '0' && *end <= '9'; ++end, scale /= 10) frac += (*end - '0') * scale;
    }
    if (*end) return fail("expected @UNIX_SECONDS");
    out->kind = TimeBound::kWall;
    out->wall_ns = secs * 1'000'000'000LL + frac;
    return true;
  }
  // Relative: a number with an optional unit.
  if (s.find('-') == std::string::npos && s.find(':') == std::string::npos) {
    char* end = nullptr;
    double v = strtod(s.c_str(), &end);
    if (end == s.c_str() || !std::isfinite(v) || v < 0) {
      return fail("expected seconds (12, 1.5s, 300ms, 2m, 1h) or a date");
    }
    std::string unit(end);
    double scale;
    if (unit.empty() || unit == "s") {
      scale = 1;
    } else if (unit == "ms") {
      scale = 1e-3;
    } else if (unit == "us") {
      scale = 1e-6;
    } else if (unit == "m" || unit == "min") {
      scale = 60;
    } else if (unit == "h") {
      scale = 3600;
    } else {
      return fail("unknown unit (use s, ms, us, m or h)");
    }
    out->kind = TimeBound::kRelative;
    out->seconds = v * scale;
    return true;
  }
  // Wall clock: YYYY-MM-DD[T ]HH:MM[:SS[.frac]][Z|±HH[:MM]].
  int y, mo, d, h, mi, n = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2d%*1[T ]%2d:%2d%n", &y, &mo, &d, &h, &mi, &n) != 5 || n == 0) {
    return fail("expected YYYY-MM-DDTHH:MM[:SS[.fff]][Z|+HH:MM]");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59) return fail("no such date");
  const char* p = s.c_str() + n;
  double sec = 0;
  if (*p == ':') {
    char* end = nullptr;
    sec = strtod(p + 1, &end);
    if (end == p + 1 || sec < 0 || sec >= 61) return fail("bad seconds");
    p = end;
  }
  bool zoned = false;
  long offset_s = 0;
  if (*p == 'Z') {
    zoned = true;
    ++p;
  } else if (*p == '+' || *p == '-') {
    int oh = 0, om = 0, m = 0;
    if (sscanf(p + 1, "%2d%n", &oh, &m) != 1) return fail("bad zone");
    const char* q = p + 1 + m;
    if (*q == ':') ++q;
    int m2 = 0;
    if (*q >= '0' && *q <= '9' && sscanf(q, "%2d%n", &om, &m2) == 1) q += m2;
    offset_s = (*p == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
    zoned = true;
    p = q;
  }
  if (*p) return fail("trailing characters");
  struct tm tm = {};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = 0;
  tm.tm_isdst = -1;
  time_t base = zoned ? timegm(&tm) - offset_s : mktime(&tm);
  if (base == static_cast<time_t>(-1)) return fail("not a valid date");
  out->kind = TimeBound::kWall;
  out->wall_ns = static_cast<int64_t>(base) * 1000000000LL + std::llround(sec * 1e9);
  return true;
}

// ---------------------------------------------------------------------------------------------

void MemStat::add_sample(uint64_t size, uint64_t rate) {
  const double w = sample_weight(size, rate);
  const double p = sample_probability(size, rate);
  ++samples;
  raw_bytes += size;
  bytes += w;
  variance += w * w * (1 - p);
  objects += p > 0 ? 1 / p : 0;
}

void MemStat::add(const MemStat& o) {
  samples += o.samples;
  raw_bytes += o.raw_bytes;
  bytes += o.bytes;
  variance += o.variance;
  objects += o.objects;
}

double MemStat::ci95() const {
  return 1.96 * std::sqrt(variance);
}

void LiveStat::add(const LiveStat& o) {
  MemStat::add(o);
  oldest_ns = std::max(oldest_ns, o.oldest_ns);
  age_sum_ns += o.age_sum_ns;
}

// ---------------------------------------------------------------------------------------------

Profile::Profile(LoadOptions options) : options_(std::move(options)) {}

void Profile::set_origin(int64_t wall_ns, uint64_t mono_ns) {
  origin_set_ = true;
  origin_wall_ = wall_ns;
  origin_mono_ = mono_ns;
}

void Profile::find_origin(const std::vector<std::string>& files) {
  // The first events of each file are enough: every segment opens with a ClockSyncEvent,
  // and samples taken before the file was opened come right after it.
  int64_t wall = INT64_MAX;
  uint64_t mono = UINT64_MAX;
  for (const std::string& f : files) {
    decode::RawTrace raw = decode::ReadTraceFile(f, {.max_output_bytes = size_t{1} << 20});
    uint64_t first = UINT64_MAX;
    int64_t offset = 0;
    bool clock = false;
    int n = 0;
    decode::ForEachEvent(raw.bytes, [&](const decode::Event& e) {
      if (e.timestamp != 0 && e.name() != fmt::kSymbolTableEntry) {
        first = std::min(first, e.timestamp);
      }
      if (!clock && e.name() == fmt::kClockSyncEvent) {
        if (const decode::Value* v = e.Find("realtime_ns"); v && v->AsU64() > 0) {
          clock = true;
          offset = static_cast<int64_t>(v->AsU64()) - static_cast<int64_t>(e.timestamp);
        }
      }
      return ++n < 20000;
    });
    if (first == UINT64_MAX) continue;
    mono = std::min(mono, first);
    if (clock) wall = std::min(wall, static_cast<int64_t>(first) + offset);
  }
  set_origin(wall == INT64_MAX ? 0 : wall, mono == UINT64_MAX ? 0 : mono);
}

bool Profile::load(const std::vector<std::string>& inputs) {
  if (options_.filter.has_relative_time() && !origin_set_) find_origin(inputs);
  Progress progress(inputs.size(), total_file_bytes(inputs), options_.progress);
  uint64_t done = 0, done_bytes = 0;
  for (const std::string& f : inputs) {
    Segment seg = read_segment(f);
    if (!seg.error.empty() && !options_.quiet) {
      progress.clear();
      fprintf(stderr, "d9: %s\n", seg.error.c_str());
    }
    add(seg);
    done_bytes += seg.file_bytes;
    progress.update(++done, done_bytes);
  }
  progress.clear();
  finish();
  return files > unreadable;
}

uint32_t Profile::process_index(const Segment& seg, bool* excluded) {
  const decode::Trace& t = seg.trace;
  const std::string* boot = find_meta(t, "boot_id");
  std::string key = boot && !boot->empty() ? *boot : seg.path;
  std::string pid;
  if (const std::string* p = find_meta(t, "process.pid")) pid = *p;
  if (pid.empty() && boot) pid = pid_of_boot_id(*boot);
  const Filter& f = options_.filter;
  *excluded = false;
  if (!f.processes.empty() &&
      std::find(f.processes.begin(), f.processes.end(), key) == f.processes.end()) {
    *excluded = true;
  }
  if (!f.pids.empty() && std::find(f.pids.begin(), f.pids.end(), pid) == f.pids.end()) {
    *excluded = true;
  }
  if (*excluded) return 0;
  auto it = process_by_key_.find(key);
  if (it != process_by_key_.end()) return it->second;
  uint32_t idx = static_cast<uint32_t>(processes.size());
  process_by_key_.emplace(key, idx);
  ProcessInfo p;
  p.key = key;
  if (boot) p.boot_id = *boot;
  p.pid = pid;
  processes.push_back(std::move(p));
  live_state_.emplace_back();
  return idx;
}

uint32_t Profile::thread_index(uint32_t process, uint32_t tid) {
  uint64_t key = (uint64_t{process} << 32) | tid;
  auto it = thread_by_key_.find(key);
  if (it != thread_by_key_.end()) return it->second;
  uint32_t idx = static_cast<uint32_t>(threads.size());
  thread_by_key_.emplace(key, idx);
  ThreadInfo t;
  t.process = process;
  t.tid = tid;
  threads.push_back(std::move(t));
  return idx;
}

uint32_t Profile::intern_frame(uint32_t process, uint64_t addr) {
  auto [it, inserted] =
      frame_ids_.try_emplace(AddrKey{process, addr}, static_cast<uint32_t>(frames_.size()));
  if (inserted) frames_.push_back({process, addr});
  return it->second;
}

uint32_t Profile::intern_stack(uint32_t process, std::span<const uint64_t> pcs) {
  stack_key_.clear();
  // An empty stack is still per process, so it can carry the process in reports.
  stack_key_.append(reinterpret_cast<const char*>(&process), sizeof(process));
  for (uint64_t pc : pcs) {
    uint32_t f = intern_frame(process, pc);
    stack_key_.append(reinterpret_cast<const char*>(&f), sizeof(f));
  }
  auto it = stack_ids_.find(stack_key_);
  if (it != stack_ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(stack_count());
  for (size_t i = sizeof(process); i < stack_key_.size(); i += sizeof(uint32_t)) {
    uint32_t f;
    memcpy(&f, stack_key_.data() + i, sizeof(f));
    stack_frames_.push_back(f);
  }
  stack_offsets_.push_back(stack_frames_.size());
  stack_process_.push_back(process);
  stack_ids_.emplace(stack_key_, id);
  alloc_.emplace_back();
  cpu_.emplace_back();
  return id;
}

void Profile::resolve_window(const ProcessInfo& p, int64_t* lo, int64_t* hi) const {
  *lo = INT64_MIN;
  *hi = INT64_MAX;
  auto to_mono = [&](const TimeBound& b, int64_t* out) {
    if (b.kind == TimeBound::kRelative) {
      int64_t delta = static_cast<int64_t>(std::llround(b.seconds * 1e9));
      *out = p.has_clock && origin_wall_ != 0 ? origin_wall_ + delta - p.clock_offset
                                              : static_cast<int64_t>(origin_mono_) + delta;
    } else if (b.kind == TimeBound::kWall && p.has_clock) {
      *out = b.wall_ns - p.clock_offset;
    }
  };
  to_mono(options_.filter.from, lo);
  to_mono(options_.filter.to, hi);
}

bool Profile::keep_tid(uint32_t tid) const {
  const std::vector<uint32_t>& tids = options_.filter.tids;
  return tids.empty() || std::find(tids.begin(), tids.end(), tid) != tids.end();
}

void Profile::add(const Segment& seg) {
  const decode::Trace& t = seg.trace;
  ++files;
  if (!seg.error.empty()) ++damaged;
  if (!seg.readable()) {
    ++unreadable;
    return;
  }
  bool excluded = false;
  const uint32_t pi = process_index(seg, &excluded);
  if (excluded) {
    ++skipped;
    return;
  }
  raw_bytes += t.raw_bytes;
  file_bytes += seg.file_bytes;
  ProcessInfo& p = processes[pi];
  ++p.segments;
  p.raw_bytes += t.raw_bytes;

  uint64_t rate = kDefaultRate;
  if (const std::string* v = find_meta(t, "memory.sample_rate_bytes")) {
    uint64_t r;
    if (parse_u64(*v, &r) && r > 0) rate = r;
  }
  if (p.segments > 1 && rate != p.rate) p.mixed_rates = true;
  p.rate = rate;
  if (const std::string* v = find_meta(t, "memory.track_liveset")) p.liveset = *v;
  double hz = p.cpu_hz > 0 ? p.cpu_hz : kDefaultCpuHz;
  if (const std::string* v = find_meta(t, "cpu.profile.frequency_hz")) {
    double h = strtod(v->c_str(), nullptr);
    if (h > 0) hz = p.cpu_hz = h;
  }
  if (const std::string* v = find_meta(t, "service")) p.service = *v;
  if (const std::string* v = find_meta(t, "process.pid"); v && !v->empty()) p.pid = *v;

  for (const decode::ClockSync& c : t.clock_syncs) {
    if (!p.has_clock && c.realtime_ns > 0) {
      p.has_clock = true;
      p.clock_offset = static_cast<int64_t>(c.realtime_ns) - static_cast<int64_t>(c.ts);
    }
  }
  if (options_.filter.from.kind == TimeBound::kWall ||
      options_.filter.to.kind == TimeBound::kWall) {
    if (!p.has_clock && !warned_no_clock_) {
      warned_no_clock_ = true;
      fprintf(stderr, "d9: %s: no ClockSyncEvent, so wall-clock --from/--to cannot apply\n",
              seg.path.c_str());
    }
  }
  int64_t lo, hi;
  resolve_window(p, &lo, &hi);
  auto keep = [&](uint32_t tid, uint64_t ts) {
    const auto t = static_cast<int64_t>(ts);
    return t >= lo && t < hi && keep_tid(tid);
  };
  auto seen = [&](uint64_t ts) {
    if (ts == 0) return;
    p.first_ts = std::min(p.first_ts, ts);
    p.last_ts = std::max(p.last_ts, ts);
  };
  for (const decode::ClockSync& c : t.clock_syncs) seen(c.ts);
  for (const decode::Overflow& o : t.overflows) {
    seen(o.ts);
    p.dropped_allocs += o.dropped_allocs;
    p.dropped_frees += o.dropped_frees;
  }

  for (const decode::SymbolTableEntry& s : t.symbols) {
    std::vector<Symbol>& v = symbols_[AddrKey{pi, s.addr}];
    if (s.inline_depth > 255) continue;
    if (v.size() <= s.inline_depth) v.resize(s.inline_depth + 1);
    Symbol& sym = v[s.inline_depth];
    sym.name.assign(s.name);
    sym.file.assign(s.file);
    sym.line = s.line;
    ++p.symbols;
  }

  // Segment stack id -> profile stack id, filled on first use.
  std::vector<uint32_t> memo(t.stacks.size() + 1, UINT32_MAX);
  auto stack_of = [&](decode::StackId id) -> uint32_t {
    size_t slot = id < t.stacks.size() ? id : t.stacks.size();  // last slot: no stack
    uint32_t& m = memo[slot];
    if (m == UINT32_MAX) m = intern_stack(pi, t.stack(id));
    return m;
  };

  const bool track = options_.track_live && !p.liveset_off();
  LiveMap& live = live_state_[pi];
  for (const decode::AllocEvent& a : t.allocs) {
    seen(a.ts);
    if (!keep(a.tid, a.ts)) continue;
    ++p.alloc_samples;
    ++threads[thread_index(pi, a.tid)].alloc_samples;
    const uint32_t s = stack_of(a.stack);
    alloc_[s].add_sample(a.size, rate);
    if (track) live[LiveKey{a.addr, a.ts}] = LiveAlloc{s, a.tid, a.size, rate};
  }
  for (const decode::FreeEvent& f : t.frees) {
    seen(f.ts);
    ++p.free_events;
    if (track) live.erase(LiveKey{f.addr, f.alloc_ts});
  }
  if (seg.has_live_snapshot && options_.track_live) {
    // The snapshot is the live set at seal; it supersedes what the pairing found so far.
    live.clear();
    p.live_snapshot = true;
    for (const LiveRecord& r : seg.live) {
      if (!keep(r.tid, r.alloc_ts)) continue;
      live[LiveKey{r.addr, r.alloc_ts}] = LiveAlloc{stack_of(r.stack), r.tid, r.size, rate};
    }
  }

  const double ns_per_sample = 1e9 / hz;
  for (const decode::CpuSample& c : t.cpu_samples) {
    seen(c.ts);
    if (!keep(c.tid, c.ts)) continue;
    uint32_t ti = thread_index(pi, c.tid);
    if (c.thread_name && !c.thread_name->empty()) threads[ti].name.assign(*c.thread_name);
    if (c.source != 0) {
      ++p.offcpu_samples;
      continue;
    }
    ++p.cpu_samples;
    ++threads[ti].cpu_samples;
    const uint32_t s = stack_of(c.stack);
    CpuStat& st = cpu_[s];
    ++st.samples;
    st.ns += ns_per_sample;
    CpuStat& bt = cpu_by_thread_[(uint64_t{ti} << 32) | s];
    ++bt.samples;
    bt.ns += ns_per_sample;
  }
}

void Profile::finish() {
  if (finished_) return;
  finished_ = true;
  live_.assign(stack_count(), LiveStat{});
  for (size_t pi = 0; pi < processes.size(); ++pi) {
    const ProcessInfo& p = processes[pi];
    for (const auto& [key, a] : live_state_[pi]) {
      LiveStat& s = live_[a.stack];
      s.add_sample(a.size, a.rate);
      uint64_t age = p.last_ts > key.ts ? p.last_ts - key.ts : 0;
      s.oldest_ns = std::max(s.oldest_ns, age);
      s.age_sum_ns += static_cast<double>(age);
    }
    LiveMap().swap(live_state_[pi]);
  }
}

MemStat Profile::alloc_total() const {
  MemStat m;
  for (const MemStat& s : alloc_) m.add(s);
  return m;
}

LiveStat Profile::live_total() const {
  LiveStat m;
  for (const LiveStat& s : live_) m.add(s);
  return m;
}

CpuStat Profile::cpu_total() const {
  CpuStat c;
  for (const CpuStat& s : cpu_) c.add(s);
  return c;
}

uint64_t Profile::dropped_allocs() const {
  uint64_t n = 0;
  for (const ProcessInfo& p : processes) n += p.dropped_allocs;
  return n;
}

uint64_t Profile::dropped_frees() const {
  uint64_t n = 0;
  for (const ProcessInfo& p : processes) n += p.dropped_frees;
  return n;
}

bool Profile::span(int64_t* first, int64_t* last, bool* wall) const {
  *wall = true;
  bool any = false;
  for (const ProcessInfo& p : processes) {
    if (p.first_ts > p.last_ts) continue;
    any = true;
    if (!p.has_clock) *wall = false;
  }
  if (!any) return false;
  *first = INT64_MAX;
  *last = INT64_MIN;
  for (const ProcessInfo& p : processes) {
    if (p.first_ts > p.last_ts) continue;
    int64_t a = *wall ? p.wall(p.first_ts) : static_cast<int64_t>(p.first_ts);
    int64_t b = *wall ? p.wall(p.last_ts) : static_cast<int64_t>(p.last_ts);
    *first = std::min(*first, a);
    *last = std::max(*last, b);
  }
  return true;
}

const std::vector<Symbol>* Profile::symbols(uint32_t process, uint64_t addr) const {
  auto it = symbols_.find(AddrKey{process, addr});
  return it == symbols_.end() ? nullptr : &it->second;
}

const std::vector<Symbol>* Profile::symbols(uint32_t frame) const {
  const Frame& f = frames_[frame];
  return symbols(f.process, f.addr);
}

uint32_t Profile::intern_label(const std::string& s) {
  auto [it, inserted] = label_ids_.try_emplace(s, static_cast<uint32_t>(label_strings_.size()));
  if (inserted) label_strings_.push_back(s);
  return it->second;
}

const std::vector<uint32_t>& Profile::labels(uint32_t frame, Group g) {
  auto& cache = g == Group::kLine ? line_labels_ : fn_labels_;
  if (cache.size() < frames_.size()) cache.resize(frames_.size());
  std::vector<uint32_t>& out = cache[frame];
  if (!out.empty()) return out;
  if (const std::vector<Symbol>* syms = symbols(frame)) {
    for (auto it = syms->rbegin(); it != syms->rend(); ++it) {
      if (it->name.empty()) continue;
      if (g != Group::kLine || it->file.empty()) {
        out.push_back(intern_label(it->name));
        continue;
      }
      std::string l = it->name + " " + basename_of(it->file);
      if (it->line) l += ":" + std::to_string(it->line);
      out.push_back(intern_label(l));
    }
  }
  if (out.empty()) out.push_back(intern_label(hex(frames_[frame].addr)));
  return out;
}

std::vector<uint32_t> Profile::group_key(uint32_t stack_id, Group g) {
  std::span<const uint32_t> frames = stack(stack_id);
  if (frames.empty()) return {intern_label("(no stack)")};
  if (g != Group::kStack) return {labels(frames[0], g)[0]};
  std::vector<uint32_t> key;
  for (uint32_t f : frames) {
    const std::vector<uint32_t>& l = labels(f, Group::kFunction);
    key.insert(key.end(), l.begin(), l.end());
  }
  return key;
}

// ---------------------------------------------------------------------------------------------

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string format_wall(int64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1000000000LL);
  int ms = static_cast<int>((ns % 1000000000LL) / 1000000LL);
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  struct tm tm;
  localtime_r(&secs, &tm);
  char date[64], zone[16];
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
  strftime(zone, sizeof(zone), "%z", &tm);
  char buf[96];
  snprintf(buf, sizeof(buf), "%s.%03d %s", date, ms, zone);
  return buf;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace d9::cli
