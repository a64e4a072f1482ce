// Profile: everything the `d9` subcommands report, aggregated while the segments stream by.
//
// Model
//   - A *process* is one boot_id (segment metadata), or one file when the metadata has none.
//     Addresses and symbols are scoped by process: ASLR gives every process its own layout.
//   - A *frame* is (process, address); a *stack* is a sequence of frames, leaf first. Both
//     are interned once, so per-event work is an array lookup and an add.
//   - Allocation samples are weighted one by one with the Horvitz–Thompson weight
//     w = s / p(s), p(s) = 1 - exp(-s / R), R the process's `memory.sample_rate_bytes`, and
//     only then summed per stack (never sum then unbias). The variance of a sum is estimated
//     by Σ w² (1 - p), which gives the ±95% interval 1.96 √(Σ w² (1 - p)).
//   - The live set (`d9 leaks`, `--kind live`) is, per process: the last Libd9LiveAllocation
//     snapshot when the segments carry one, updated by the allocations and frees that
//     follow it; otherwise every sampled allocation not matched by a FreeEvent on
//     (addr, alloc_timestamp_ns), as dial9's toolkit pairs them.
//   - Symbols (SymbolTableEntry, appended at seal) are applied when reports are built, so a
//     symbol table in a later segment names frames seen in earlier ones.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cli/format.h"
#include "cli/input.h"
#include "cli/live_table.h"
#include "cli/names.h"
#include "cli/time_bound.h"

namespace d9::cli {

enum class Group { kFunction, kStack, kLine };
bool parse_group(const std::string& s, Group* out);

struct Filter {
  TimeBound from, to;
  std::vector<uint32_t> tids;
  std::vector<std::string> pids;       // process.pid metadata, or the pid part of boot_id
  std::vector<std::string> processes;  // boot ids
  bool has_time() const { return from.kind != TimeBound::kNone || to.kind != TimeBound::kNone; }
  bool has_relative_time() const {
    return from.kind == TimeBound::kRelative || to.kind == TimeBound::kRelative;
  }
};

// Horvitz–Thompson sums over allocation samples.
struct MemStat {
  uint64_t samples = 0;
  uint64_t raw_bytes = 0;  // sampled bytes, unweighted
  double bytes = 0;        // Σ w: estimated bytes
  double variance = 0;     // Σ w² (1 - p)
  double objects = 0;      // Σ 1/p: estimated allocation count
  void add_sample(uint64_t size, uint64_t rate);
  void add(const MemStat& o);
  double ci95() const;  // half-width of the 95% interval of `bytes`
};

struct LiveStat : MemStat {
  uint64_t oldest_ns = 0;  // age of the oldest sample at the end of its process
  double age_sum_ns = 0;   // over samples, for the mean age
  void add(const LiveStat& o);
};

struct CpuStat {
  uint64_t samples = 0;
  double ns = 0;  // CPU time the samples stand for: Σ 1e9 / cpu.profile.frequency_hz
  void add(const CpuStat& o) {
    samples += o.samples;
    ns += o.ns;
  }
};

// a + b and a - b with two's-complement wrap-around: timestamps in a damaged or hostile file
// can be anything, and the arithmetic on them must stay defined.
inline int64_t wrap_add(uint64_t a, int64_t b) {
  return static_cast<int64_t>(a + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(uint64_t a, uint64_t b) {
  return static_cast<int64_t>(a - b);
}

struct ProcessInfo {
  std::string key;  // boot_id, or the file path when the metadata has none
  std::string boot_id, service, pid;
  uint64_t rate = 524288;  // memory.sample_rate_bytes of the latest segment
  bool mixed_rates = false;
  std::string liveset;  // memory.track_liveset: "true", "false" or "" when not recorded
  double cpu_hz = 0;    // cpu.profile.frequency_hz; 0 when not recorded
  uint64_t segments = 0, raw_bytes = 0;
  uint64_t first_ts = UINT64_MAX, last_ts = 0;  // monotonic ns, over timestamped events
  bool has_clock = false;
  int64_t clock_offset = 0;  // realtime - monotonic, from the first ClockSyncEvent
  uint64_t alloc_samples = 0, free_events = 0, cpu_samples = 0, offcpu_samples = 0;
  uint64_t dropped_allocs = 0, dropped_frees = 0;
  uint64_t symbols = 0;
  bool live_snapshot = false;  // the live set came from a Libd9LiveAllocation snapshot
  bool liveset_off() const { return liveset == "false"; }
  int64_t wall(uint64_t mono) const { return wrap_add(mono, has_clock ? clock_offset : 0); }
};

struct ThreadInfo {
  uint32_t process = 0;
  uint32_t tid = 0;
  std::string name;
  uint64_t alloc_samples = 0, cpu_samples = 0;
};

struct Symbol {
  std::string name, file;  // file "" when unknown
  uint64_t line = 0;
};

// One module of a process (Libd9Module, written at seal): an executable or library mapping.
struct Module {
  std::string path, build_id;
  uint64_t start = 0, end = 0;  // [start, end) in the process
  uint64_t bias = 0;            // load bias: file address = runtime address - bias
};
inline constexpr char kModuleEvent[] = "Libd9Module";

// jemalloc's own figures at one moment (Libd9AllocatorStats, written by the writer thread
// about once a second): what the allocator really holds beside the sampled estimate.
struct AllocatorStats {
  uint64_t mono_ns = 0;
  uint64_t allocated = 0, active = 0, resident = 0, mapped = 0, retained = 0;
};
inline constexpr char kAllocatorStatsEvent[] = "Libd9AllocatorStats";

// Receives the events a Profile folds in, one at a time, for the views over time
// (cli/timeline.h). Only events the filters keep; process, thread and stack are the
// Profile's indices.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // A sampled allocation with its Horvitz–Thompson weight w, variance term w²(1-p) and
  // estimated count 1/p. `snapshot`: from a Libd9LiveAllocation (it may repeat one seen).
  virtual void on_alloc(uint32_t process, uint64_t ts, uint64_t addr, uint32_t stack, uint64_t size,
                        double w, double var, double inv_p, bool snapshot) = 0;
  virtual void on_free(uint32_t process, uint64_t ts, uint64_t addr, uint64_t alloc_ts) = 0;
  virtual void on_cpu(uint32_t process, uint32_t thread, uint64_t ts, uint32_t stack) = 0;
  virtual void on_allocator_stats(uint32_t process, const AllocatorStats& s) = 0;
};

struct LoadOptions {
  Filter filter;
  EventSink* sink = nullptr;  // also told every event kept
  bool track_live = true;     // pair frees with allocations (leaks, summary, live flame/export)
  bool progress = true;       // progress line on a terminal
  bool quiet = false;         // no per-file error lines
};

class Profile {
 public:
  explicit Profile(LoadOptions options = {});

  // Reads the files one at a time (collect_inputs order) and folds each in, then calls
  // finish(). Prints one line per unreadable or damaged file. Returns false when no file
  // had anything readable.
  bool load(const std::vector<std::string>& files);
  // Reads one file and folds its events in as the decoder visits them; segments of a
  // process must come in order. Returns "" or the line describing the damage.
  std::string add_file(const std::string& path);
  // The same for a file's bytes (any container), as if read from `path`.
  std::string add_bytes(const std::string& path, std::span<const uint8_t> data);
  // Computes the live set. Called by load(); call it once yourself after add_file().
  void finish();

  // Earliest event of the inputs on the wall clock (and on the monotonic clock, for
  // processes without a ClockSyncEvent). load() finds it first when a relative --from/--to
  // is given; set it directly when calling add().
  void set_origin(int64_t wall_ns, uint64_t mono_ns);

  const LoadOptions& options() const { return options_; }

  // Finds the origin from the first events of every file (see set_origin).
  void find_origin(const std::vector<std::string>& files);
  // The --from/--to window of a process on its monotonic clock: [lo, hi).
  void resolve_window(const ProcessInfo& p, int64_t* lo, int64_t* hi) const;
  // A time bound on a process's monotonic clock (needs the origin for relative bounds).
  int64_t to_mono(const ProcessInfo& p, const TimeBound& b) const;
  // The trace's origin on a process's monotonic clock (what relative times count from).
  int64_t origin_mono(const ProcessInfo& p) const;
  // Replaces the live set (for `--at`: the live set at another moment, cli/timeline.h).
  void set_live(std::vector<LiveStat> live) { live_ = std::move(live); }
  // Inside the --tid list?
  bool keep_tid(uint32_t tid) const;

  // Inputs.
  uint64_t files = 0, unreadable = 0, damaged = 0, skipped = 0;
  uint64_t raw_bytes = 0, file_bytes = 0;
  std::vector<ProcessInfo> processes;
  std::vector<ThreadInfo> threads;

  // Per stack id.
  size_t stack_count() const { return stack_offsets_.size() - 1; }
  std::span<const uint32_t> stack(uint32_t id) const {
    return {stack_frames_.data() + stack_offsets_[id], stack_offsets_[id + 1] - stack_offsets_[id]};
  }
  uint32_t stack_process(uint32_t id) const { return stack_process_[id]; }
  const std::vector<MemStat>& alloc() const { return alloc_; }
  const std::vector<CpuStat>& cpu() const { return cpu_; }
  const std::vector<LiveStat>& live() const { return live_; }
  // On-CPU samples per (thread index << 32 | stack id).
  const std::unordered_map<uint64_t, CpuStat>& cpu_by_thread() const { return cpu_by_thread_; }

  MemStat alloc_total() const;
  LiveStat live_total() const;
  CpuStat cpu_total() const;
  uint64_t dropped_allocs() const;
  uint64_t dropped_frees() const;
  // Time span over all processes on the wall clock (ns since the epoch when every process
  // has a ClockSyncEvent, else monotonic ns). False when no timestamped event was seen.
  bool span(int64_t* first, int64_t* last, bool* wall) const;

  // Frames and symbols.
  struct Frame {
    uint32_t process = 0;
    uint64_t addr = 0;
  };
  const Frame& frame(uint32_t id) const { return frames_[id]; }
  size_t frame_count() const { return frames_.size(); }
  // Symbols at a frame's address, by inline depth (0 = the outermost function), or null.
  const std::vector<Symbol>* symbols(uint32_t frame) const;
  const std::vector<Symbol>* symbols(uint32_t process, uint64_t addr) const;
  // The module holding a frame's address, or null (no module map, or outside every module).
  const Module* module(uint32_t process, uint64_t addr) const;
  const std::vector<Module>& modules(uint32_t process) const { return modules_[process]; }

  // Display labels of a frame, innermost (inlined) first: one per inline depth at function
  // granularity, or "function file:line" at line granularity; the hex address when the
  // frame has no symbol. Label ids index label().
  const std::vector<uint32_t>& labels(uint32_t frame, Group g);
  const std::string& label(uint32_t id) const { return label_strings_[id]; }
  uint32_t intern_label(const std::string& s);
  // The labels a stack groups under: the leaf's innermost label (function, line) or every
  // frame's labels (stack), leaf first. "(no stack)" for an empty stack. With `trim`, leaf-side
  // frames of the allocation plumbing (std::, __gnu_cxx::, operator new, malloc…) are skipped
  // while another frame remains, so a site is named by the code that asked for the memory.
  std::vector<uint32_t> group_key(uint32_t stack_id, Group g, bool trim = false);
  // Labels use simplify_name() unless this is set (before the first report).
  void set_full_names(bool full) { full_names_ = full; }

 private:
  class Folder;  // the decoder visitor that folds one file in
  friend class Folder;

  std::string add_raw(const std::string& path, const RawSegment& seg);
  // The process of a file from its metadata; false when --pid/--process leave it out.
  bool process_index(const std::string& path, const std::string& boot_id, const std::string& pid,
                     uint32_t* index);
  uint32_t thread_index(uint32_t process, uint32_t tid);
  uint32_t intern_frame(uint32_t process, uint64_t addr);
  uint32_t intern_stack(uint32_t process, decode::U64ArrayView frames);

  LoadOptions options_;
  bool origin_set_ = false;
  int64_t origin_wall_ = 0;
  uint64_t origin_mono_ = 0;
  bool warned_no_clock_ = false;
  uint64_t damaged_bytes_ = 0;    // on disk, of files not counted in file_bytes
  Progress* progress_ = nullptr;  // during load()
  uint64_t progress_files_ = 0;
  bool finished_ = false;

  std::unordered_map<std::string, uint32_t> process_by_key_;
  std::unordered_map<uint64_t, uint32_t> thread_by_key_;
  std::vector<LiveTable> live_state_;         // per process
  std::vector<std::vector<Module>> modules_;  // per process, sorted by start after finish()
  std::unique_ptr<decode::Decoder> decoder_;

  struct AddrKey {
    uint32_t process;
    uint64_t addr;
    bool operator==(const AddrKey&) const = default;
  };
  struct AddrKeyHash {
    size_t operator()(const AddrKey& k) const {
      uint64_t h = (k.addr ^ (uint64_t{k.process} << 47)) * 0x9E3779B97F4A7C15ULL;
      return static_cast<size_t>(h ^ (h >> 31));
    }
  };

  std::vector<Frame> frames_;
  std::unordered_map<AddrKey, uint32_t, AddrKeyHash> frame_ids_;
  std::vector<uint32_t> stack_frames_;
  std::vector<size_t> stack_offsets_{0};
  std::vector<uint32_t> stack_process_;
  std::unordered_map<std::string, uint32_t> stack_ids_;  // frame ids as bytes -> stack id
  std::string stack_key_;                                // scratch

  std::vector<MemStat> alloc_;
  std::vector<CpuStat> cpu_;
  std::vector<LiveStat> live_;
  std::unordered_map<uint64_t, CpuStat> cpu_by_thread_;

  std::unordered_map<AddrKey, std::vector<Symbol>, AddrKeyHash> symbols_;
  std::vector<std::vector<uint32_t>> fn_labels_, line_labels_;  // by frame, lazily
  std::vector<std::string> label_strings_;
  std::vector<int8_t> plumbing_;  // by label id: -1 unknown, 0 no, 1 yes
  bool full_names_ = false;
  std::unordered_map<std::string, uint32_t> label_ids_;
};

}  // namespace d9::cli
