#include "cli/input.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace d9::cli {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_segment_name(const std::string& name) {
  return ends_with(name, ".bin") || ends_with(name, ".bin.gz") || ends_with(name, ".bin.zst") ||
         ends_with(name, ".active");
}

// N in "stem.N.bin…", or -1.
long long segment_number(const std::string& name) {
  size_t bin = name.find(".bin");
  if (bin == std::string::npos || bin == 0) return -1;
  size_t dot = name.rfind('.', bin - 1);
  if (dot == std::string::npos || dot + 1 >= bin) return -1;
  long long n = 0;
  for (size_t i = dot + 1; i < bin; ++i) {
    if (name[i] < '0' || name[i] > '9' || n > (1LL << 50)) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// TraceBuilder plus d9's own untimestamped Libd9LiveAllocation records.
class SegmentVisitor : public decode::Visitor {
 public:
  explicit SegmentVisitor(Segment* seg) : seg_(seg), builder_(&seg->trace) {}

  void OnStreamHeader(uint64_t offset) override {
    builder_.OnStreamHeader(offset);
    stack_memo_.clear();
  }
  void OnTimestampReset(uint64_t offset, uint64_t ts) override {
    builder_.OnTimestampReset(offset, ts);
  }
  void OnSchema(const decode::Schema& schema) override {
    builder_.OnSchema(schema);
    if (schema.name != kLiveAllocationEvent) return;
    if (live_fields_.size() <= schema.serial) live_fields_.resize(schema.serial + 1);
    LiveFields& f = live_fields_[schema.serial];
    f.known = true;
    f.tid = schema.FieldIndex("tid");
    f.size = schema.FieldIndex("size");
    f.addr = schema.FieldIndex("addr");
    f.alloc_ts = schema.FieldIndex("alloc_timestamp_ns");
    f.callchain = schema.FieldIndex("callchain");
  }
  bool OnEvent(const decode::Event& e) override {
    builder_.OnEvent(e);
    if (e.schema->serial < live_fields_.size() && live_fields_[e.schema->serial].known) {
      const LiveFields& f = live_fields_[e.schema->serial];
      auto u = [&](int i) { return i < 0 ? 0 : e.values[static_cast<size_t>(i)].AsU64(); };
      LiveRecord r;
      r.tid = static_cast<uint32_t>(u(f.tid));
      r.size = u(f.size);
      r.addr = u(f.addr);
      r.alloc_ts = u(f.alloc_ts);
      if (f.callchain >= 0) r.stack = stack(e.values[static_cast<size_t>(f.callchain)]);
      seg_->live.push_back(r);
      seg_->has_live_snapshot = true;
    }
    return true;
  }
  void Finish(const decode::DecodeResult& r) { builder_.Finish(r); }

 private:
  struct LiveFields {
    bool known = false;
    int tid = -1, size = -1, addr = -1, alloc_ts = -1, callchain = -1;
  };
  decode::StackId stack(const decode::Value& v) {
    if (v.kind != decode::ValueKind::kStack) return decode::kUnresolvedStack;
    if (v.pool_entry == decode::kNoPoolEntry) return seg_->trace.stacks.Intern(v.stack());
    if (stack_memo_.size() <= v.pool_entry) {
      stack_memo_.resize(size_t{v.pool_entry} + 1, decode::kUnresolvedStack);
    }
    decode::StackId& m = stack_memo_[v.pool_entry];
    if (m == decode::kUnresolvedStack) m = seg_->trace.stacks.Intern(v.stack());
    return m;
  }

  Segment* seg_;
  decode::TraceBuilder builder_;
  std::vector<LiveFields> live_fields_;  // by schema serial
  std::vector<decode::StackId> stack_memo_;
};

void decode_into(std::span<const uint8_t> raw, Segment* seg) {
  decode::Trace& t = seg->trace;
  t.raw_bytes = raw.size();
  try {
    SegmentVisitor visitor(seg);
    decode::Decoder decoder;
    decode::DecodeResult r = decoder.Decode(raw, visitor);
    visitor.Finish(r);
  } catch (const std::bad_alloc&) {
    if (!t.error.empty()) t.error += "; ";
    t.error += "out of memory while decoding";
  }
}

}  // namespace

bool segment_order(const std::string& a, const std::string& b) {
  fs::path pa(a), pb(b);
  std::string da = pa.parent_path().string(), db = pb.parent_path().string();
  if (da != db) return da < db;
  std::string na = pa.filename().string(), nb = pb.filename().string();
  long long sa = segment_number(na), sb = segment_number(nb);
  if (sa != sb) return sa < sb;
  return na < nb;
}

std::vector<std::string> collect_inputs(const std::vector<std::string>& paths,
                                        std::vector<std::string>* missing) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) {
      fprintf(stderr, "d9: %s: no such file or directory\n", p.c_str());
      if (missing) missing->push_back(p);
      continue;
    }
    if (!fs::is_directory(st)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (auto it =
             fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code ec2;
      if (it->is_regular_file(ec2) && is_segment_name(it->path().filename().string())) {
        found.push_back(it->path().string());
      }
    }
    if (ec) fprintf(stderr, "d9: %s: %s\n", p.c_str(), ec.message().c_str());
    std::sort(found.begin(), found.end(), segment_order);
    out.insert(out.end(), found.begin(), found.end());
  }
  // The same file named twice (or found through two paths) is read once.
  std::vector<std::string> unique;
  std::vector<std::string> seen;
  for (const std::string& f : out) {
    std::error_code ec;
    std::string canon = fs::weakly_canonical(f, ec).string();
    if (ec) canon = f;
    if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
    seen.push_back(canon);
    unique.push_back(f);
  }
  return unique;
}

std::string describe_error(const std::string& path, const decode::Trace& t) {
  std::string what = t.error;
  // ReadTraceFile prefixes decompression errors with the path already.
  if (what.compare(0, path.size() + 2, path + ": ") == 0) what = what.substr(path.size() + 2);
  std::string msg = path + ": " + what;
  if (t.container == decode::Container::kGzip || t.container == decode::Container::kZstd) {
    if (!t.decode.ok() && t.decode.status != decode::DecodeStatus::kEmpty) {
      msg += " (offset in the decompressed stream)";
    }
  }
  if (t.decoded_anything()) {
    msg += "; kept the " + std::to_string(t.decode.events) + " events before it";
  } else {
    msg += "; nothing readable";
  }
  return msg;
}

Segment decode_segment(const std::string& path, std::vector<uint8_t> data) {
  Segment seg;
  seg.path = path;
  seg.file_bytes = data.size();
  decode::Trace& t = seg.trace;
  t.container = decode::DetectContainer(data);
  if (t.container == decode::Container::kRaw) {
    decode_into(data, &seg);
  } else {
    decode::RawTrace raw = decode::Decompress(data, {});
    data.clear();
    data.shrink_to_fit();
    t.error = raw.error;
    if (!raw.bytes.empty() || raw.ok()) decode_into(raw.bytes, &seg);
  }
  if (!t.ok()) seg.error = describe_error(path, t);
  return seg;
}

Segment read_segment(const std::string& path) {
  Segment seg;
  seg.path = path;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) seg.file_bytes = static_cast<uint64_t>(st.st_size);
  decode::Trace& t = seg.trace;
  {
    decode::RawTrace raw = decode::ReadTraceFile(path);
    t.container = raw.container;
    t.error = raw.error;
    if (!raw.bytes.empty() || raw.ok()) decode_into(raw.bytes, &seg);
  }  // the raw bytes go here: the Trace owns copies of everything it keeps
  if (!t.ok()) seg.error = describe_error(path, t);
  return seg;
}

uint64_t total_file_bytes(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const std::string& f : files) {
    struct stat st;
    if (stat(f.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

Progress::Progress(uint64_t total_files, uint64_t total_bytes, bool enabled)
    : total_files_(total_files), total_bytes_(total_bytes), enabled_(enabled && isatty(2)) {
  start_ = now_seconds();
}

Progress::~Progress() {
  clear();
}

void Progress::update(uint64_t files_done, uint64_t bytes_done) {
  if (!enabled_) return;
  double now = now_seconds();
  if (now - start_ < 1.0 || now - last_ < 0.1) return;
  last_ = now;
  double pct = total_bytes_
                   ? 100.0 * static_cast<double>(bytes_done) / static_cast<double>(total_bytes_)
                   : 0.0;
  fprintf(stderr, "\r\033[Kd9: read %llu/%llu files, %.1f/%.1f MB on disk (%.0f%%), %.0f s",
          static_cast<unsigned long long>(files_done),
          static_cast<unsigned long long>(total_files_), static_cast<double>(bytes_done) / 1e6,
          static_cast<double>(total_bytes_) / 1e6, pct, now - start_);
  fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  fprintf(stderr, "\r\033[K");
  fflush(stderr);
  shown_ = false;
}

}  // namespace d9::cli
