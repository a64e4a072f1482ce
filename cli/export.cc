#include "cli/export.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "alloc/sampler.h"

namespace d9::cli {

namespace {

// Minimal protobuf writer: varints, length-delimited fields and packed repeated varints.
class Pb {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire) { varint((static_cast<uint64_t>(field) << 3) | wire); }
  // int64/uint64/bool fields; proto3 leaves zero out.
  void u64(int field, uint64_t v) {
    if (v == 0) return;
    tag(field, 0);
    varint(v);
  }
  void i64(int field, int64_t v) { u64(field, static_cast<uint64_t>(v)); }
  void bytes(int field, std::string_view s) {
    tag(field, 2);
    varint(s.size());
    buf_.append(s.data(), s.size());
  }
  void msg(int field, const Pb& m) { bytes(field, m.buf_); }
  void packed(int field, const std::vector<uint64_t>& vs) {
    if (vs.empty()) return;
    Pb inner;
    for (uint64_t v : vs) inner.varint(v);
    bytes(field, inner.buf_);
  }
  const std::string& str() const { return buf_; }

 private:
  std::string buf_;
};

class StringTable {
 public:
  StringTable() { id(""); }
  int64_t id(const std::string& s) {
    auto [it, inserted] = ids_.try_emplace(s, static_cast<int64_t>(strings_.size()));
    if (inserted) strings_.push_back(s);
    return it->second;
  }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::string> strings_;
};

uint64_t rounded(double v) {
  return v > 0 ? static_cast<uint64_t>(std::llround(v)) : 0;
}

void put_json_value(std::string* out, const decode::Value& v);

void put_json_string(std::string* out, std::string_view s) {
  *out += '"';
  *out += json_escape(s);
  *out += '"';
}

void put_json_value(std::string* out, const decode::Value& v) {
  using decode::ValueKind;
  char buf[40];
  switch (v.kind) {
    case ValueKind::kU64:
      snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(v.bits));
      *out += buf;
      break;
    case ValueKind::kI64:
      snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v.i64()));
      *out += buf;
      break;
    case ValueKind::kF64:
      if (std::isfinite(v.f64())) {
        snprintf(buf, sizeof(buf), "%.17g", v.f64());
        *out += buf;
      } else {
        *out += "null";
      }
      break;
    case ValueKind::kBool:
      *out += v.boolean() ? "true" : "false";
      break;
    case ValueKind::kString:
      put_json_string(out, v.str());
      break;
    case ValueKind::kBytes: {
      *out += '"';
      for (uint64_t i = 0; i < v.size; ++i) {
        snprintf(buf, sizeof(buf), "%02x", v.data[i]);
        *out += buf;
      }
      *out += '"';
      break;
    }
    case ValueKind::kStack: {
      *out += '[';
      bool first = true;
      for (uint64_t pc : v.stack()) {
        if (!first) *out += ',';
        first = false;
        *out += '"' + hex(pc) + '"';
      }
      *out += ']';
      break;
    }
    case ValueKind::kStringMap: {
      *out += '{';
      bool first = true;
      for (auto [k, val] : v.string_map()) {
        if (!first) *out += ',';
        first = false;
        put_json_string(out, k);
        *out += ':';
        put_json_string(out, val);
      }
      *out += '}';
      break;
    }
    case ValueKind::kList: {
      *out += '[';
      bool first = true;
      for (const decode::Value& e : v.list()) {
        if (!first) *out += ',';
        first = false;
        put_json_value(out, e);
      }
      *out += ']';
      break;
    }
    case ValueKind::kMap: {
      *out += '[';
      bool first = true;
      for (const auto& [k, val] : v.map()) {
        if (!first) *out += ',';
        first = false;
        *out += '[';
        put_json_value(out, k);
        *out += ',';
        put_json_value(out, val);
        *out += ']';
      }
      *out += ']';
      break;
    }
    case ValueKind::kAbsent:
    case ValueKind::kUnresolvedString:
    case ValueKind::kUnresolvedStack:
      *out += "null";
      break;
  }
}

}  // namespace

bool parse_pprof_kind(const std::string& s, PprofKind* out) {
  if (s == "alloc") {
    *out = PprofKind::kAlloc;
  } else if (s == "live" || s == "inuse") {
    *out = PprofKind::kLive;
  } else if (s == "heap") {
    *out = PprofKind::kHeap;
  } else if (s == "cpu") {
    *out = PprofKind::kCpu;
  } else {
    return false;
  }
  return true;
}

std::string build_pprof(Profile& p, PprofKind kind) {
  StringTable strings;
  Pb prof;
  auto value_type = [&](const char* type, const char* unit) {
    Pb vt;
    vt.i64(1, strings.id(type));
    vt.i64(2, strings.id(unit));
    return vt;
  };
  const bool cpu = kind == PprofKind::kCpu;
  const bool alloc = kind == PprofKind::kAlloc || kind == PprofKind::kHeap;
  const bool live = kind == PprofKind::kLive || kind == PprofKind::kHeap;
  if (cpu) {
    prof.msg(1, value_type("samples", "count"));
    prof.msg(1, value_type("cpu", "nanoseconds"));
  }
  if (alloc) {
    prof.msg(1, value_type("alloc_objects", "count"));
    prof.msg(1, value_type("alloc_space", "bytes"));
  }
  if (live) {
    prof.msg(1, value_type("inuse_objects", "count"));
    prof.msg(1, value_type("inuse_space", "bytes"));
  }

  // Samples, and the frames they use.
  std::vector<bool> frame_used(p.frame_count(), false);
  auto locations = [&](uint32_t stack) {
    std::vector<uint64_t> ids;
    for (uint32_t f : p.stack(stack)) {
      frame_used[f] = true;
      ids.push_back(uint64_t{f} + 1);
    }
    return ids;
  };
  if (cpu) {
    for (const auto& [key, st] : p.cpu_by_thread()) {
      const ThreadInfo& t = p.threads[key >> 32];
      Pb s;
      s.packed(1, locations(static_cast<uint32_t>(key & 0xFFFFFFFF)));
      s.packed(2, {st.samples, rounded(st.ns)});
      Pb tid;
      tid.i64(1, strings.id("tid"));
      tid.i64(3, t.tid);
      s.msg(3, tid);
      if (!t.name.empty()) {
        Pb name;
        name.i64(1, strings.id("thread"));
        name.i64(2, strings.id(t.name));
        s.msg(3, name);
      }
      if (p.processes.size() > 1) {
        Pb proc;
        proc.i64(1, strings.id("process"));
        proc.i64(2, strings.id(p.processes[t.process].key));
        s.msg(3, proc);
      }
      prof.msg(2, s);
    }
  } else {
    for (uint32_t id = 0; id < p.stack_count(); ++id) {
      const MemStat& a = p.alloc()[id];
      const LiveStat& l = p.live()[id];
      if ((!alloc || a.samples == 0) && (!live || l.samples == 0)) continue;
      std::vector<uint64_t> values;
      if (alloc) {
        values.push_back(rounded(a.objects));
        values.push_back(rounded(a.bytes));
      }
      if (live) {
        values.push_back(rounded(l.objects));
        values.push_back(rounded(l.bytes));
      }
      Pb s;
      s.packed(1, locations(id));
      s.packed(2, values);
      if (p.processes.size() > 1) {
        Pb proc;
        proc.i64(1, strings.id("process"));
        proc.i64(2, strings.id(p.processes[p.stack_process(id)].key));
        s.msg(3, proc);
      }
      prof.msg(2, s);
    }
  }

  // Mappings: one per module of the module map (path, build-id, range, file offset), and
  // for frames outside every module one per process spanning the addresses seen.
  struct Mapping {
    const Module* module = nullptr;
    uint32_t process = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    bool functions = false, files = false, lines = false, inlines = false;
  };
  std::vector<Mapping> mappings;
  std::map<std::pair<uint32_t, const Module*>, size_t> mapping_index;
  std::map<std::pair<std::string, std::string>, uint64_t> function_ids;
  std::vector<std::pair<std::string, std::string>> functions;
  for (uint32_t f = 0; f < p.frame_count(); ++f) {
    if (!frame_used[f]) continue;
    const Profile::Frame& fr = p.frame(f);
    const Module* mod = p.module(fr.process, fr.addr);
    auto [mit, added] = mapping_index.try_emplace({fr.process, mod}, mappings.size());
    if (added) mappings.push_back({mod, fr.process});
    Mapping& r = mappings[mit->second];
    r.lo = std::min(r.lo, fr.addr);
    r.hi = std::max(r.hi, fr.addr + 1);
    Pb loc;
    loc.u64(1, uint64_t{f} + 1);
    loc.u64(2, mit->second + 1);
    loc.u64(3, fr.addr);
    if (const std::vector<Symbol>* syms = p.symbols(f)) {
      int named = 0;
      // pprof wants the innermost (inlined) function first, the physical one last.
      for (auto it = syms->rbegin(); it != syms->rend(); ++it) {
        if (it->name.empty()) continue;
        ++named;
        auto key = std::make_pair(it->name, it->file);
        auto [fit, inserted] = function_ids.try_emplace(key, functions.size() + 1);
        if (inserted) functions.push_back(key);
        Pb line;
        line.u64(1, fit->second);
        line.i64(2, static_cast<int64_t>(it->line));
        loc.msg(4, line);
        r.functions = true;
        if (!it->file.empty()) r.files = true;
        if (it->line) r.lines = true;
      }
      if (named > 1) r.inlines = true;
    }
    prof.msg(4, loc);
  }
  for (size_t i = 0; i < mappings.size(); ++i) {
    const Mapping& r = mappings[i];
    const ProcessInfo& pr = p.processes[r.process];
    Pb m;
    m.u64(1, i + 1);
    if (r.module) {
      m.u64(2, r.module->start);
      m.u64(3, r.module->end);
      m.u64(4, r.module->start - r.module->bias);
      m.i64(5, strings.id(r.module->path));
      m.i64(6, strings.id(r.module->build_id));
    } else {
      m.u64(2, r.lo);
      m.u64(3, r.hi);
      m.i64(5, strings.id(pr.service.empty() ? pr.key : pr.service));
    }
    m.u64(7, r.functions);
    m.u64(8, r.files);
    m.u64(9, r.lines);
    m.u64(10, r.inlines);
    prof.msg(3, m);
  }
  for (size_t i = 0; i < functions.size(); ++i) {
    Pb fn;
    fn.u64(1, i + 1);
    fn.i64(2, strings.id(functions[i].first));
    fn.i64(3, strings.id(functions[i].first));
    fn.i64(4, strings.id(functions[i].second));
    prof.msg(5, fn);
  }

  int64_t first = 0, last = 0;
  bool wall = false;
  if (p.span(&first, &last, &wall) && wall) {
    prof.i64(9, first);
    prof.i64(10, wrap_sub(static_cast<uint64_t>(last), static_cast<uint64_t>(first)));
  }
  if (cpu) {
    double hz = 0;
    for (const ProcessInfo& pr : p.processes) hz = std::max(hz, pr.cpu_hz);
    if (hz <= 0) hz = 99;
    prof.msg(11, value_type("cpu", "nanoseconds"));
    prof.i64(12, std::llround(1e9 / hz));
  } else {
    uint64_t rate = 0;
    for (const ProcessInfo& pr : p.processes) rate = std::max(rate, pr.rate);
    prof.msg(11, value_type("space", "bytes"));
    prof.i64(12, static_cast<int64_t>(rate));
  }
  prof.i64(13, strings.id(cpu ? "d9: on-CPU samples"
                              : "d9: Horvitz-Thompson estimates from sampled allocations"));
  prof.i64(14, strings.id(cpu ? "cpu" : (live ? "inuse_space" : "alloc_space")));
  // The string table goes last: every id above has been handed out by now.
  for (const std::string& s : strings.strings()) prof.bytes(6, s);
  return prof.str();
}

std::string gzip(const std::string& data, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out;
  out.resize(deflateBound(&zs, data.size()) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : std::string();
}

bool write_file(const std::string& path, const std::string& data) {
  FILE* f = path == "-" ? stdout : fopen(path.c_str(), "wb");
  if (!f) {
    fprintf(stderr, "d9: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (f == stdout ? fflush(f) == 0 : fclose(f) == 0) && ok;
  if (!ok) fprintf(stderr, "d9: cannot write %s: %s\n", path.c_str(), strerror(errno));
  return ok;
}

uint64_t export_jsonl(const std::vector<std::string>& files, const LoadOptions& options,
                      FILE* out) {
  Profile window(options);  // only for the --from/--to arithmetic
  if (options.filter.has_relative_time()) window.find_origin(files);
  const Filter& filter = options.filter;
  uint64_t readable = 0;
  std::string line;
  for (const std::string& path : files) {
    RawSegment seg;
    seg.open(path);
    const std::span<const uint8_t> raw = seg.raw();
    // Pass 1: metadata, clock and symbols, which come at the start and the end of a file.
    std::map<std::string, std::string> meta;
    ProcessInfo proc;
    std::unordered_map<uint64_t, std::string> names;  // addr -> "inner < outer"
    std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, std::string>>> by_depth;
    decode::ForEachEvent(raw, [&](const decode::Event& e) {
      if (e.name() == fmt::kSegmentMetadataEvent) {
        if (const decode::Value* v = e.Find("entries")) {
          for (auto [k, val] : v->string_map()) meta[std::string(k)] = std::string(val);
        }
      } else if (e.name() == fmt::kClockSyncEvent && !proc.has_clock) {
        if (const decode::Value* v = e.Find("realtime_ns"); v && v->AsU64() > 0) {
          proc.has_clock = true;
          proc.clock_offset = wrap_sub(v->AsU64(), e.timestamp);
        }
      } else if (e.name() == fmt::kSymbolTableEntry) {
        const decode::Value* a = e.Find("addr");
        const decode::Value* n = e.Find("symbol_name");
        const decode::Value* d = e.Find("inline_depth");
        if (a && n && n->kind == decode::ValueKind::kString && !n->str().empty()) {
          by_depth[a->AsU64()].emplace_back(d ? d->AsU64() : 0, std::string(n->str()));
        }
      }
    });
    for (auto& [addr, v] : by_depth) {
      std::sort(v.begin(), v.end());
      std::string s;
      for (auto it = v.rbegin(); it != v.rend(); ++it) {
        if (!s.empty()) s += " < ";
        s += it->second;
      }
      names[addr] = s;
    }
    std::string boot = meta.count("boot_id") ? meta["boot_id"] : "";
    std::string key = boot.empty() ? path : boot;
    std::string pid = meta.count("process.pid") ? meta["process.pid"] : "";
    if (pid.empty() && boot.rfind('-') != std::string::npos) pid = boot.substr(boot.rfind('-') + 1);
    if ((!filter.processes.empty() && std::find(filter.processes.begin(), filter.processes.end(),
                                                key) == filter.processes.end()) ||
        (!filter.pids.empty() &&
         std::find(filter.pids.begin(), filter.pids.end(), pid) == filter.pids.end())) {
      continue;
    }
    uint64_t rate = 524288;
    if (meta.count("memory.sample_rate_bytes")) {
      uint64_t r = strtoull(meta["memory.sample_rate_bytes"].c_str(), nullptr, 10);
      if (r) rate = r;
    }
    int64_t lo, hi;
    window.resolve_window(proc, &lo, &hi);

    // Pass 2: every event, in order.
    const std::string prefix =
        "{\"file\":\"" + json_escape(path) + "\",\"process\":\"" + json_escape(key) + "\"";
    decode::DecodeResult r = decode::ForEachEvent(raw, [&](const decode::Event& e) {
      const bool timed = e.schema->has_timestamp && e.name() != fmt::kSymbolTableEntry;
      if (timed && filter.has_time()) {
        auto t = static_cast<int64_t>(e.timestamp);
        if (t < lo || t >= hi) return;
      }
      if (!filter.tids.empty()) {
        const decode::Value* tid = e.Find("tid");
        if (tid && !window.keep_tid(static_cast<uint32_t>(tid->AsU64()))) return;
      }
      line = prefix;
      line += ",\"event\":";
      put_json_string(&line, e.name());
      if (e.schema->has_timestamp) line += ",\"ts\":" + std::to_string(e.timestamp);
      for (size_t i = 0; i < e.values.size(); ++i) {
        const decode::FieldDef& f = e.schema->fields[i];
        const decode::Value& v = e.values[i];
        line += ',';
        put_json_string(&line, f.name);
        line += ':';
        put_json_value(&line, v);
        if (v.kind == decode::ValueKind::kStack && !names.empty()) {
          line += ",\"" + json_escape(f.name) + "_symbols\":[";
          bool first = true;
          for (uint64_t pc : v.stack()) {
            if (!first) line += ',';
            first = false;
            auto it = names.find(pc);
            if (it == names.end()) {
              line += "null";
            } else {
              put_json_string(&line, it->second);
            }
          }
          line += ']';
        }
      }
      if (e.name() == fmt::kAllocEvent) {
        if (const decode::Value* size = e.Find("size")) {
          char buf[64];
          snprintf(buf, sizeof(buf), ",\"est_bytes\":%.1f", sample_weight(size->AsU64(), rate));
          line += buf;
        }
      }
      line += "}\n";
      fwrite(line.data(), 1, line.size(), out);
    });
    if (r.events > 0) ++readable;
    if ((!seg.error().empty() || !r.ok()) && !options.quiet) {
      fprintf(stderr, "d9: %s\n", describe_error(path, seg.container(), seg.error(), r).c_str());
    }
  }
  return readable;
}

}  // namespace d9::cli
