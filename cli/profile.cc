#include "cli/profile.h"

#include <cxxabi.h>
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
    if (v * scale > 1e9) return fail("more than 30 years");
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
    RawSegment seg;
    seg.open(f, size_t{1} << 20);
    uint64_t first = UINT64_MAX;
    int64_t offset = 0;
    bool clock = false;
    int n = 0;
    decode::ForEachEvent(seg.raw(), [&](const decode::Event& e) {
      if (e.timestamp != 0 && e.name() != fmt::kSymbolTableEntry) {
        first = std::min(first, e.timestamp);
      }
      if (!clock && e.name() == fmt::kClockSyncEvent) {
        if (const decode::Value* v = e.Find("realtime_ns"); v && v->AsU64() > 0) {
          clock = true;
          offset = wrap_sub(v->AsU64(), e.timestamp);
        }
      }
      return ++n < 20000;
    });
    if (first == UINT64_MAX) continue;
    mono = std::min(mono, first);
    if (clock) wall = std::min(wall, wrap_add(first, offset));
  }
  set_origin(wall == INT64_MAX ? 0 : wall, mono == UINT64_MAX ? 0 : mono);
}

bool Profile::load(const std::vector<std::string>& inputs) {
  if (options_.filter.has_relative_time() && !origin_set_) find_origin(inputs);
  Progress progress(inputs.size(), total_file_bytes(inputs), options_.progress);
  progress_ = &progress;
  progress_files_ = 0;
  for (const std::string& f : inputs) {
    std::string error = add_file(f);
    if (!error.empty() && !options_.quiet) {
      progress.clear();
      fprintf(stderr, "d9: %s\n", error.c_str());
    }
    progress.update(++progress_files_, file_bytes + damaged_bytes_);
  }
  progress.clear();
  progress_ = nullptr;
  finish();
  return files > unreadable;
}

bool Profile::process_index(const std::string& path, const std::string& boot_id,
                            const std::string& pid_meta, uint32_t* index) {
  std::string key = boot_id.empty() ? path : boot_id;
  std::string pid = pid_meta.empty() ? pid_of_boot_id(boot_id) : pid_meta;
  const Filter& f = options_.filter;
  if (!f.processes.empty() &&
      std::find(f.processes.begin(), f.processes.end(), key) == f.processes.end()) {
    return false;
  }
  if (!f.pids.empty() && std::find(f.pids.begin(), f.pids.end(), pid) == f.pids.end()) {
    return false;
  }
  auto it = process_by_key_.find(key);
  if (it != process_by_key_.end()) {
    *index = it->second;
    return true;
  }
  *index = static_cast<uint32_t>(processes.size());
  process_by_key_.emplace(key, *index);
  ProcessInfo p;
  p.key = key;
  p.boot_id = boot_id;
  p.pid = pid;
  processes.push_back(std::move(p));
  live_state_.emplace_back();
  modules_.emplace_back();
  return true;
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

uint32_t Profile::intern_stack(uint32_t process, decode::U64ArrayView pcs) {
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

int64_t Profile::origin_mono(const ProcessInfo& p) const {
  return p.has_clock && origin_wall_ != 0
             ? wrap_sub(static_cast<uint64_t>(origin_wall_), static_cast<uint64_t>(p.clock_offset))
             : static_cast<int64_t>(origin_mono_);
}

int64_t Profile::to_mono(const ProcessInfo& p, const TimeBound& b) const {
  if (b.kind == TimeBound::kRelative) {
    return wrap_add(static_cast<uint64_t>(origin_mono(p)),
                    static_cast<int64_t>(std::llround(b.seconds * 1e9)));
  }
  if (b.kind == TimeBound::kWall && p.has_clock) {
    return wrap_sub(static_cast<uint64_t>(b.wall_ns), static_cast<uint64_t>(p.clock_offset));
  }
  return INT64_MIN;
}

void Profile::resolve_window(const ProcessInfo& p, int64_t* lo, int64_t* hi) const {
  *lo = INT64_MIN;
  *hi = INT64_MAX;
  const TimeBound& from = options_.filter.from;
  const TimeBound& to = options_.filter.to;
  if (from.kind == TimeBound::kRelative || (from.kind == TimeBound::kWall && p.has_clock)) {
    *lo = to_mono(p, from);
  }
  if (to.kind == TimeBound::kRelative || (to.kind == TimeBound::kWall && p.has_clock)) {
    *hi = to_mono(p, to);
  }
}

bool Profile::keep_tid(uint32_t tid) const {
  const std::vector<uint32_t>& tids = options_.filter.tids;
  return tids.empty() || std::find(tids.begin(), tids.end(), tid) != tids.end();
}

// Folds one file's events into the Profile as the decoder visits them. The process is
// resolved on the first event that needs it, by then the metadata (second event of every
// segment) has been seen.
class Profile::Folder : public decode::Visitor {
 public:
  Folder(Profile& p, const std::string& path, uint64_t file_size, uint64_t raw_size)
      : p_(p), path_(path), file_size_(file_size), raw_size_(raw_size) {}

  void OnSchema(const decode::Schema& schema) override {
    if (bind_.size() <= schema.serial) bind_.resize(size_t{schema.serial} + 1);
    Binding& b = bind_[schema.serial];
    auto bind = [&](Kind kind, std::initializer_list<const char*> fields) {
      b.kind = kind;
      int i = 0;
      for (const char* f : fields) b.f[i++] = static_cast<int16_t>(schema.FieldIndex(f));
    };
    const std::string_view n = schema.name;
    if (n == fmt::kAllocEvent) {
      bind(kAlloc, {"tid", "size", "addr", "callchain"});
    } else if (n == fmt::kFreeEvent) {
      bind(kFree, {"tid", "addr", "size", "alloc_timestamp_ns"});
    } else if (n == fmt::kCpuSampleEvent) {
      bind(kCpu, {"tid", "source", "thread_name", "callchain"});
    } else if (n == fmt::kMemoryProfileOverflowEvent) {
      bind(kOverflow, {"dropped_allocs", "dropped_frees"});
    } else if (n == fmt::kClockSyncEvent) {
      bind(kClock, {"realtime_ns"});
    } else if (n == fmt::kSegmentMetadataEvent) {
      bind(kMeta, {"entries"});
    } else if (n == fmt::kSymbolTableEntry) {
      bind(kSymbol, {"addr", "symbol_name", "inline_depth", "source_file", "source_line"});
    } else if (n == kLiveAllocationEvent) {
      bind(kLive, {"tid", "size", "addr", "alloc_timestamp_ns", "callchain"});
    } else if (n == kModuleEvent) {
      bind(kModule, {"path", "build_id", "start", "end", "bias"});
    } else if (n == kAllocatorStatsEvent && sink_) {
      bind(kStats, {"mono_ns", "allocated", "active", "resident", "mapped"});
      retained_field_ = static_cast<int16_t>(schema.FieldIndex("retained"));
    }
  }

  bool OnEvent(const decode::Event& e) override {
    if (p_.progress_ && (++events_ & 0xFFFF) == 0) {
      // Within a large file: the share of its raw stream decoded so far.
      p_.progress_->update(p_.progress_files_,
                           p_.file_bytes + p_.damaged_bytes_ +
                               static_cast<uint64_t>(static_cast<double>(file_size_) *
                                                     static_cast<double>(e.offset) /
                                                     static_cast<double>(raw_size_ + 1)));
    }
    const Binding& b = bind_[e.schema->serial];
    switch (b.kind) {
      case kOther:
        return true;
      case kMeta:
        metadata(e, b);
        return true;
      case kClock:
        clock(e.timestamp, u(e, b.f[0]));
        return true;
      default:
        break;
    }
    if (!proc_ && !resolve()) return false;  // left out by --pid/--process: stop reading
    ProcessInfo& p = p_.processes[pi_];
    const uint64_t ts = e.timestamp;
    switch (b.kind) {
      case kAlloc: {
        seen(ts);
        const uint32_t tid = static_cast<uint32_t>(u(e, b.f[0]));
        if (!keep(tid, ts)) return true;
        const uint64_t size = u(e, b.f[1]);
        const uint32_t s = stack(e, b.f[3]);
        ++p.alloc_samples;
        ++p_.threads[thread(tid)].alloc_samples;
        const Weight& w = weight(size);
        MemStat& m = p_.alloc_[s];
        ++m.samples;
        m.raw_bytes += size;
        m.bytes += w.w;
        m.variance += w.var;
        m.objects += w.inv_p;
        if (track_) p_.live_state_[pi_].insert(u(e, b.f[2]), ts, {s, tid, size, rate_});
        if (sink_) sink_->on_alloc(pi_, ts, u(e, b.f[2]), s, size, w.w, w.var, w.inv_p, false);
        return true;
      }
      case kFree:
        seen(ts);
        ++p.free_events;
        if (track_) p_.live_state_[pi_].erase(u(e, b.f[1]), u(e, b.f[3]));
        if (sink_) sink_->on_free(pi_, ts, u(e, b.f[1]), u(e, b.f[3]));
        return true;
      case kStats: {
        AllocatorStats st;
        st.mono_ns = u(e, b.f[0]);
        st.allocated = u(e, b.f[1]);
        st.active = u(e, b.f[2]);
        st.resident = u(e, b.f[3]);
        st.mapped = u(e, b.f[4]);
        st.retained = u(e, retained_field_);
        sink_->on_allocator_stats(pi_, st);
        return true;
      }
      case kLive: {
        if (!p_.options_.track_live) return true;
        if (!snapshot_) {
          // The snapshot is the live set at seal; it supersedes what pairing found so far.
          snapshot_ = true;
          p.live_snapshot = true;
          p_.live_state_[pi_].clear();
        }
        const uint32_t tid = static_cast<uint32_t>(u(e, b.f[0]));
        const uint64_t alloc_ts = u(e, b.f[3]);
        if (!keep(tid, alloc_ts)) return true;
        const uint32_t s = stack(e, b.f[4]);
        const uint64_t size = u(e, b.f[1]);
        p_.live_state_[pi_].insert(u(e, b.f[2]), alloc_ts, {s, tid, size, rate_});
        if (sink_) {
          const Weight& w = weight(size);
          sink_->on_alloc(pi_, alloc_ts, u(e, b.f[2]), s, size, w.w, w.var, w.inv_p, true);
        }
        return true;
      }
      case kCpu: {
        seen(ts);
        const uint32_t tid = static_cast<uint32_t>(u(e, b.f[0]));
        if (!keep(tid, ts)) return true;
        const uint32_t ti = thread(tid);
        if (b.f[2] >= 0) {
          const decode::Value& name = e.values[static_cast<size_t>(b.f[2])];
          if (name.kind == decode::ValueKind::kString && !name.str().empty()) {
            p_.threads[ti].name.assign(name.str());
          }
        }
        if (u(e, b.f[1]) != 0) {
          ++p.offcpu_samples;
          return true;
        }
        ++p.cpu_samples;
        ++p_.threads[ti].cpu_samples;
        const uint32_t s = stack(e, b.f[3]);
        CpuStat& st = p_.cpu_[s];
        ++st.samples;
        st.ns += ns_per_sample_;
        CpuStat& bt = p_.cpu_by_thread_[(uint64_t{ti} << 32) | s];
        ++bt.samples;
        bt.ns += ns_per_sample_;
        if (sink_) sink_->on_cpu(pi_, ti, ts, s);
        return true;
      }
      case kOverflow:
        seen(ts);
        p.dropped_allocs += u(e, b.f[0]);
        p.dropped_frees += u(e, b.f[1]);
        return true;
      case kModule: {
        Module m;
        m.path.assign(str(e, b.f[0]));
        m.build_id.assign(str(e, b.f[1]));
        m.start = u(e, b.f[2]);
        m.end = u(e, b.f[3]);
        m.bias = u(e, b.f[4]);
        if (m.start < m.end) p_.modules_[pi_].push_back(std::move(m));
        return true;
      }
      case kSymbol: {
        const uint64_t depth = u(e, b.f[2]);
        if (depth > 255) return true;
        std::vector<Symbol>& v = p_.symbols_[AddrKey{pi_, u(e, b.f[0])}];
        if (v.size() <= depth) v.resize(depth + 1);
        Symbol& sym = v[depth];
        sym.name.assign(str(e, b.f[1]));
        sym.file.assign(str(e, b.f[3]));
        sym.line = u(e, b.f[4]);
        ++p.symbols;
        return true;
      }
      default:
        return true;
    }
  }

  // End of the file: a file with metadata but no samples still counts for its process.
  void finish(bool readable) {
    if (!proc_ && readable && !excluded_) resolve();
    if (!proc_) return;
    ProcessInfo& p = p_.processes[pi_];
    ++p.segments;
    if (first_ <= last_) {
      p.first_ts = std::min(p.first_ts, first_);
      p.last_ts = std::max(p.last_ts, last_);
    }
  }
  bool excluded() const { return excluded_; }
  bool resolved() const { return proc_; }
  uint32_t process() const { return pi_; }

 private:
  enum Kind : uint8_t {
    kOther,
    kAlloc,
    kFree,
    kCpu,
    kOverflow,
    kClock,
    kMeta,
    kSymbol,
    kLive,
    kModule,
    kStats
  };
  struct Binding {
    Kind kind = kOther;
    int16_t f[5] = {-1, -1, -1, -1, -1};
  };
  struct Weight {
    uint64_t size = ~uint64_t{0};
    double w = 0, var = 0, inv_p = 0;
  };

  static uint64_t u(const decode::Event& e, int idx) {
    return idx < 0 ? 0 : e.values[static_cast<size_t>(idx)].AsU64();
  }
  static std::string_view str(const decode::Event& e, int idx) {
    if (idx < 0) return {};
    const decode::Value& v = e.values[static_cast<size_t>(idx)];
    return v.kind == decode::ValueKind::kString ? v.str() : std::string_view();
  }

  void metadata(const decode::Event& e, const Binding& b) {
    if (b.f[0] < 0) return;
    for (auto [key, value] : e.values[static_cast<size_t>(b.f[0])].string_map()) {
      if (key == "boot_id") {
        boot_id_.assign(value);
      } else if (key == "process.pid") {
        pid_.assign(value);
      } else if (key == "service") {
        service_.assign(value);
      } else if (key == "memory.sample_rate_bytes") {
        uint64_t r;
        if (parse_u64(std::string(value), &r) && r > 0) set_rate(r);
      } else if (key == "memory.track_liveset") {
        liveset_.assign(value);
      } else if (key == "cpu.profile.frequency_hz") {
        double h = strtod(std::string(value).c_str(), nullptr);
        if (h > 0) hz_ = h;
      }
    }
    if (proc_) apply_metadata();
  }

  void apply_metadata() {
    ProcessInfo& p = p_.processes[pi_];
    if (!service_.empty()) p.service = service_;
    if (!pid_.empty()) p.pid = pid_;
    if (!liveset_.empty()) p.liveset = liveset_;
    if (hz_ > 0) p.cpu_hz = hz_;
    if (rate_seen_) {
      if (p.segments > 0 && rate_ != p.rate) p.mixed_rates = true;
      p.rate = rate_;
    }
    const double hz = p.cpu_hz > 0 ? p.cpu_hz : kDefaultCpuHz;
    ns_per_sample_ = 1e9 / hz;
    track_ = p_.options_.track_live && !p.liveset_off();
  }

  void set_rate(uint64_t r) {
    rate_seen_ = true;
    if (r == rate_) return;
    rate_ = r;
    for (Weight& w : weights_) w.size = ~uint64_t{0};
  }

  void clock(uint64_t ts, uint64_t realtime) {
    seen(ts);
    if (realtime == 0 || has_clock_) return;
    has_clock_ = true;
    offset_ = wrap_sub(realtime, ts);
    if (proc_) apply_clock();
  }

  void apply_clock() {
    ProcessInfo& p = p_.processes[pi_];
    if (has_clock_ && !p.has_clock) {
      p.has_clock = true;
      p.clock_offset = offset_;
    }
    if (p_.options_.filter.has_time()) {
      p_.resolve_window(p, &lo_, &hi_);
      if (!p.has_clock && !p_.warned_no_clock_ &&
          (p_.options_.filter.from.kind == TimeBound::kWall ||
           p_.options_.filter.to.kind == TimeBound::kWall)) {
        p_.warned_no_clock_ = true;
        fprintf(stderr, "d9: %s: no ClockSyncEvent, so wall-clock --from/--to cannot apply\n",
                path_.c_str());
      }
    }
  }

  bool resolve() {
    if (excluded_) return false;
    uint32_t idx;
    if (!p_.process_index(path_, boot_id_, pid_, &idx)) {
      excluded_ = true;
      return false;
    }
    proc_ = true;
    pi_ = idx;
    apply_metadata();
    apply_clock();
    return true;
  }

  void seen(uint64_t ts) {
    if (ts == 0) return;
    first_ = std::min(first_, ts);
    last_ = std::max(last_, ts);
  }

  bool keep(uint32_t tid, uint64_t ts) const {
    const auto t = static_cast<int64_t>(ts);
    return t >= lo_ && t < hi_ && (!filter_tids_ || p_.keep_tid(tid));
  }

  uint32_t thread(uint32_t tid) {
    if (tid != last_tid_) {
      last_tid_ = tid;
      last_thread_ = p_.thread_index(pi_, tid);
    }
    return last_thread_;
  }

  uint32_t stack(const decode::Event& e, int idx) {
    if (idx < 0) return empty_stack();
    const decode::Value& v = e.values[static_cast<size_t>(idx)];
    if (v.kind != decode::ValueKind::kStack) return empty_stack();
    if (v.pool_entry == decode::kNoPoolEntry) return p_.intern_stack(pi_, v.stack());
    if (memo_.size() <= v.pool_entry) memo_.resize(size_t{v.pool_entry} + 1, kUnset);
    uint32_t& m = memo_[v.pool_entry];
    if (m == kUnset) m = p_.intern_stack(pi_, v.stack());
    return m;
  }
  uint32_t empty_stack() {
    if (empty_stack_ == kUnset) empty_stack_ = p_.intern_stack(pi_, {});
    return empty_stack_;
  }

  // Horvitz–Thompson terms per size, cached: services allocate a few sizes over and over.
  const Weight& weight(uint64_t size) {
    Weight& w = weights_[(size ^ (size >> 6) ^ (size >> 12)) & (kWeightSlots - 1)];
    if (w.size != size) {
      w.size = size;
      w.w = sample_weight(size, rate_);
      const double q = sample_probability(size, rate_);
      w.var = w.w * w.w * (1 - q);
      w.inv_p = q > 0 ? 1 / q : 0;
    }
    return w;
  }

  static constexpr uint32_t kUnset = ~uint32_t{0};
  static constexpr size_t kWeightSlots = 256;

  Profile& p_;
  const std::string& path_;
  const uint64_t file_size_, raw_size_;
  uint64_t events_ = 0;
  std::vector<Binding> bind_;   // by schema serial
  std::vector<uint32_t> memo_;  // pool entry -> profile stack id
  uint32_t empty_stack_ = kUnset;
  std::string boot_id_, pid_, service_, liveset_;
  double hz_ = 0;
  uint64_t rate_ = kDefaultRate;
  bool rate_seen_ = false;
  bool has_clock_ = false;
  int64_t offset_ = 0;
  bool proc_ = false, excluded_ = false;
  uint32_t pi_ = 0;
  bool track_ = false;
  bool snapshot_ = false;
  double ns_per_sample_ = 1e9 / kDefaultCpuHz;
  int64_t lo_ = INT64_MIN, hi_ = INT64_MAX;
  const bool filter_tids_ = !p_.options_.filter.tids.empty();
  EventSink* const sink_ = p_.options_.sink;
  int16_t retained_field_ = -1;
  uint64_t first_ = UINT64_MAX, last_ = 0;
  uint32_t last_tid_ = ~uint32_t{0}, last_thread_ = 0;
  Weight weights_[kWeightSlots];
};

std::string Profile::add_file(const std::string& path) {
  RawSegment seg;
  seg.open(path);
  return add_raw(path, seg);
}

std::string Profile::add_bytes(const std::string& path, std::span<const uint8_t> data) {
  RawSegment seg;
  seg.assign(path, data);
  return add_raw(path, seg);
}

std::string Profile::add_raw(const std::string& path, const RawSegment& seg) {
  ++files;
  if (!decoder_) decoder_ = std::make_unique<decode::Decoder>();
  Folder folder(*this, path, seg.file_bytes(), seg.raw().size());
  decode::DecodeResult r;
  if (!seg.raw().empty() || seg.error().empty()) r = decoder_->Decode(seg.raw(), folder);
  const bool readable = r.events > 0;
  folder.finish(readable);
  std::string error;
  if (!seg.error().empty() || !r.ok()) {
    ++damaged;
    error = describe_error(path, seg.container(), seg.error(), r);
  }
  if (!readable) {
    ++unreadable;
    damaged_bytes_ += seg.file_bytes();
  } else if (folder.excluded()) {
    ++skipped;
    damaged_bytes_ += seg.file_bytes();
    return {};  // stopped on purpose
  } else {
    raw_bytes += seg.raw().size();
    file_bytes += seg.file_bytes();
    if (folder.resolved()) processes[folder.process()].raw_bytes += seg.raw().size();
  }
  return error;
}

void Profile::finish() {
  if (finished_) return;
  finished_ = true;
  // Every segment repeats its process's module map: keep one of each, newest last wins.
  for (std::vector<Module>& mods : modules_) {
    std::stable_sort(mods.begin(), mods.end(), [](const Module& a, const Module& b) {
      return a.start != b.start ? a.start < b.start : a.end < b.end;
    });
    std::vector<Module> unique;
    for (Module& m : mods) {
      if (!unique.empty() && unique.back().start == m.start && unique.back().end == m.end &&
          unique.back().path == m.path) {
        unique.back() = std::move(m);
      } else {
        unique.push_back(std::move(m));
      }
    }
    mods.swap(unique);
  }
  live_.assign(stack_count(), LiveStat{});
  for (size_t pi = 0; pi < processes.size(); ++pi) {
    const ProcessInfo& p = processes[pi];
    live_state_[pi].for_each([&](uint64_t /*addr*/, uint64_t ts, const LiveAlloc& a) {
      LiveStat& s = live_[a.stack];
      s.add_sample(a.size, a.rate);
      uint64_t age = p.last_ts > ts ? p.last_ts - ts : 0;
      s.oldest_ns = std::max(s.oldest_ns, age);
      s.age_sum_ns += static_cast<double>(age);
    });
    live_state_[pi].clear();
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

const Module* Profile::module(uint32_t process, uint64_t addr) const {
  if (process >= modules_.size()) return nullptr;
  const std::vector<Module>& mods = modules_[process];
  // Sorted by start; modules do not overlap (a reused range has the newest last).
  auto it = std::upper_bound(mods.begin(), mods.end(), addr,
                             [](uint64_t a, const Module& m) { return a < m.start; });
  while (it != mods.begin()) {
    --it;
    if (addr >= it->start && addr < it->end) return &*it;
    if (it->end <= addr) break;
  }
  return nullptr;
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
      // The writer names what it could not resolve "[unknown] 0x…": the module and file
      // offset below say more.
      if (it->name.empty() || it->name.starts_with("[unknown]")) continue;
      std::string name = full_names_ ? it->name : simplify_name(it->name);
      if (g == Group::kLine && !it->file.empty()) {
        name += " " + basename_of(it->file);
        if (it->line) name += ":" + std::to_string(it->line);
      }
      out.push_back(intern_label(name));
    }
  }
  if (out.empty()) {
    // No symbol: "libfoo.so+0x1234" (file address) when the module map knows the address.
    const Frame& f = frames_[frame];
    if (const Module* m = module(f.process, f.addr)) {
      out.push_back(intern_label(basename_of(m->path) + "+" + hex(f.addr - m->bias)));
    } else {
      out.push_back(intern_label(hex(f.addr)));
    }
  }
  return out;
}

std::vector<uint32_t> Profile::group_key(uint32_t stack_id, Group g, bool trim) {
  std::span<const uint32_t> frames = stack(stack_id);
  if (frames.empty()) return {intern_label("(no stack)")};
  std::vector<uint32_t> fn;
  for (uint32_t f : frames) {
    const std::vector<uint32_t>& l = labels(f, Group::kFunction);
    fn.insert(fn.end(), l.begin(), l.end());
  }
  size_t start = 0;
  if (trim) {
    auto plumbing = [&](uint32_t label) {
      if (plumbing_.size() <= label) plumbing_.resize(label_strings_.size(), -1);
      int8_t& p = plumbing_[label];
      if (p < 0) p = is_alloc_plumbing(simplify_name(label_strings_[label])) ? 1 : 0;
      return p == 1;
    };
    while (start + 1 < fn.size() && plumbing(fn[start])) ++start;
  }
  if (g == Group::kFunction) return {fn[start]};
  if (g == Group::kLine) {
    // Line labels come one per function label, in the same order.
    size_t i = 0;
    for (uint32_t f : frames) {
      for (uint32_t l : labels(f, Group::kLine)) {
        if (i++ == start) return {l};
      }
    }
    return {fn[start]};
  }
  return std::vector<uint32_t>(fn.begin() + static_cast<std::ptrdiff_t>(start), fn.end());
}

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

// Index just past the bracket matching s[i] (one of "<({["), or s.size().
size_t skip_balanced(std::string_view s, size_t i) {
  const char open = s[i];
  const char close = open == '<' ? '>' : open == '(' ? ')' : open == '{' ? '}' : ']';
  int depth = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == open) ++depth;
    if (s[i] == close && --depth == 0) return i + 1;
  }
  return s.size();
}

}  // namespace

std::string simplify_name(std::string_view s) {
  static constexpr std::string_view kAnon = "(anonymous namespace)";
  // jemalloc inside libd9.so (CPU profiles): its entry points carry d9's prefix
  // ("d9_je_malloc", and its C++ operators still mangled: "d9_je__Znwm") and its internals
  // a second "je_" ("je_je_sdallocx_noflags"). Shown as jemalloc itself names them.
  std::string demangled;
  if (s.starts_with("d9_je_")) {
    s.remove_prefix(6);
    int status = 0;
    char* d = s.starts_with("_Z")
                  ? abi::__cxa_demangle(std::string(s).c_str(), nullptr, nullptr, &status)
                  : nullptr;
    if (d != nullptr && status == 0) s = demangled = d;
    free(d);
  } else if (s.starts_with("je_je_")) {
    s.remove_prefix(3);
  }
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '<') {
      if (ends_with(out, "operator") || ends_with(out, "operator<") ||
          ends_with(out, "operator<<")) {
        out += c;
        ++i;
      } else if (out.empty()) {
        // A Rust qualified path, "<T as Trait>::f": kept whole.
        size_t end = skip_balanced(s, i);
        out.append(s.substr(i, end - i));
        i = end;
      } else {
        i = skip_balanced(s, i);
      }
      continue;
    }
    if (c == '(') {
      if (s.substr(i, kAnon.size()) == kAnon) {
        out += kAnon;
        i += kAnon.size();
        continue;
      }
      if (ends_with(out, "decltype") || ends_with(out, "decltype ")) {
        // Part of a return type: "decltype (…) std::construct_at<…>(…)".
        size_t end = skip_balanced(s, i);
        out.append(s.substr(i, end - i));
        i = end;
        continue;
      }
      if (ends_with(out, "operator") && s.substr(i, 2) == "()") {
        out += "()";
        i += 2;
        continue;
      }
      // The parameter list. A local entity ("f(int)::inner") goes on after it.
      i = skip_balanced(s, i);
      if (s.substr(i, 2) == "::") continue;
      break;
    }
    if (c == '{') {
      size_t end = skip_balanced(s, i);
      out.append(s.substr(i, end - i));
      i = end;
      continue;
    }
    out += c;
    ++i;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  // A function template's return type comes first: "void std::vector::_M_realloc_insert".
  // Drop everything up to the last top-level space (spaces after "operator" are its name's).
  const size_t op = out.rfind("operator");
  const size_t limit = op == std::string::npos ? out.size() : op;
  size_t last_space = std::string::npos;
  int depth = 0;
  for (size_t k = 0; k < limit; ++k) {
    if (out[k] == '(' || out[k] == '{' || out[k] == '[' || out[k] == '<') ++depth;
    if (out[k] == ')' || out[k] == '}' || out[k] == ']' || out[k] == '>') --depth;
    if (out[k] == ' ' && depth == 0) last_space = k;
  }
  if (last_space != std::string::npos && last_space + 1 < out.size()) {
    out.erase(0, last_space + 1);
  }
  return out.empty() ? std::string(s) : out;
}

bool is_alloc_plumbing(std::string_view n) {
  for (std::string_view prefix : {"std::", "__gnu_cxx::", "__cxxabiv1::", "__cxa_"}) {
    if (n.substr(0, prefix.size()) == prefix) return true;
  }
  for (std::string_view f : {"operator new", "operator new[]", "malloc", "calloc", "realloc",
                             "reallocarray", "aligned_alloc", "posix_memalign", "memalign",
                             "valloc", "pvalloc", "mallocx", "rallocx", "strdup", "strndup"}) {
    if (n == f) return true;
  }
  return false;
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
  if (!localtime_r(&secs, &tm)) return std::to_string(ns) + " ns";
  char date[64], zone[16];
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
  strftime(zone, sizeof(zone), "%z", &tm);
  char buf[96];
  snprintf(buf, sizeof(buf), "%s.%03d %s", date, ms, zone);
  return buf;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0.
static size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Valid UTF-8 passes through; any other byte becomes its Latin-1 code point, so
      // every line stays valid JSON whatever a damaged file holds.
      size_t n = utf8_length(s, i);
      if (n) {
        out.append(s.substr(i, n));
        i += n - 1;
      } else {
        char buf[8];
        snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      }
      continue;
    }
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
        if (c < 0x20 || c == 0x7F) {
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
