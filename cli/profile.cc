// Profile: the store the reports read (processes, threads, interned frames and stacks, the
// per-stack sums and the live set), the --from/--to window and the frame and module lookups.
#include "cli/profile.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "alloc/sampler.h"

namespace d9::cli {

namespace {

std::string pid_of_boot_id(const std::string& boot_id) {
  size_t dash = boot_id.rfind('-');
  return dash == std::string::npos ? std::string() : boot_id.substr(dash + 1);
}

}  // namespace

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

}  // namespace d9::cli
