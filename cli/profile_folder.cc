// Profile::Folder: the decoder visitor that folds one file's events into a Profile as they
// are decoded (samples, frees, metadata, clocks, modules, symbols), and add_file/add_bytes.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "alloc/sampler.h"
#include "cli/profile.h"

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

}  // namespace

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

}  // namespace d9::cli
