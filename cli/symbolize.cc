#include "cli/symbolize.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_set>

#include "cli/export.h"
#include "cli/input.h"
#include "symbolize/symbolizer.h"
#include "writer/container.h"
#include "writer/encoder.h"
#include "writer/format.h"
#include "writer/wire_decoder.h"

namespace d9::cli {
namespace {

namespace fs = std::filesystem;
using symbolize::Module;
using symbolize::ModuleCheck;
using symbolize::ModuleFile;

constexpr int kZstdLevel = 3;  // as libd9 seals

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What d9 symbolize needs from one segment.
struct Scan {
  std::set<uint64_t> addrs;                 // every callchain address
  std::unordered_set<uint64_t> symbolized;  // addresses with a SymbolTableEntry
  std::vector<Module> modules;              // Libd9Module, in recorded order
  std::string boot_id;
  bool sealed = false;  // segment.complete seen
  decode::DecodeResult result;
};

Scan scan(std::span<const uint8_t> raw) {
  Scan s;
  s.result = decode::ForEachEvent(raw, [&](const decode::Event& e) {
    std::string_view name = e.name();
    if (name == fmt::kSymbolTableEntry) {
      if (const decode::Value* v = e.Find("addr")) s.symbolized.insert(v->u64());
      return;
    }
    if (name == fmt::kModuleEntry) {
      Module m;
      const decode::Value* v;
      if ((v = e.Find("path"))) m.path = std::string(v->str());
      if ((v = e.Find("build_id"))) m.build_id_hex = std::string(v->str());
      if ((v = e.Find("start"))) m.start = v->u64();
      if ((v = e.Find("end"))) m.end = v->u64();
      if ((v = e.Find("bias"))) m.bias = v->u64();
      if ((v = e.Find("loaded"))) m.loaded = v->boolean();
      s.modules.push_back(std::move(m));
      return;
    }
    if (name == fmt::kSegmentMetadataEvent) {
      if (const decode::Value* v = e.Find("entries")) {
        decode::StringMapView map = v->string_map();
        if (auto id = map.Find("boot_id")) s.boot_id = std::string(*id);
        if (auto c = map.Find("segment.complete")) s.sealed |= *c == "true";
      }
      return;
    }
    // AllocEvent, CpuSampleEvent, Libd9LiveAllocation: any stack-valued field.
    for (const decode::Value& v : e.values) {
      for (uint64_t pc : v.stack()) s.addrs.insert(pc);
    }
  });
  return s;
}

// "trace.3.bin.zst.active" -> "trace.3"; anything without ".bin" keeps its name.
std::string stem_of(std::string name) {
  for (const char* suffix : {".active", ".zst", ".gz", ".bin"}) {
    if (ends_with(name, suffix)) name.resize(name.size() - strlen(suffix));
  }
  return name;
}

const char* extension(decode::Container c) {
  switch (c) {
    case decode::Container::kZstd:
      return ".bin.zst";
    case decode::Container::kGzip:
      return ".bin.gz";
    default:
      return ".bin";
  }
}

bool compress(decode::Container c, std::span<const uint8_t> raw, std::vector<uint8_t>* out) {
  if (c == decode::Container::kZstd) {
    out->resize(ZSTD_compressBound(raw.size()));
    size_t n = ZSTD_compress(out->data(), out->size(), raw.data(), raw.size(), kZstdLevel);
    if (ZSTD_isError(n)) return false;
    out->resize(n);
    return true;
  }
  if (c == decode::Container::kGzip) {
    std::string packed =
        gzip(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()));  // one member
    if (packed.empty()) return false;
    out->assign(packed.begin(), packed.end());
    return true;
  }
  out->assign(raw.begin(), raw.end());
  return true;
}

// Writes `data` to a temporary file beside `path`, then renames it over `path` (replace) or
// to `path` only if nothing is there. Returns "" or the error.
std::string write_atomically(const std::string& path, const std::vector<uint8_t>& data, mode_t mode,
                             bool replace) {
  fs::path target(path);
  std::string tmpl =
      (target.parent_path() / ("." + target.filename().string() + ".tmpXXXXXX")).string();
  int fd = mkstemp(tmpl.data());
  if (fd < 0)
    return "cannot create a file in " + target.parent_path().string() + ": " + strerror(errno);
  size_t done = 0;
  bool ok = true;
  while (ok && done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  std::string err = ok ? "" : std::string("write failed: ") + strerror(errno);
  if (ok && fchmod(fd, mode) != 0) err = std::string("chmod failed: ") + strerror(errno);
  if (err.empty() && fsync(fd) != 0) err = std::string("fsync failed: ") + strerror(errno);
  if (close(fd) != 0 && err.empty()) err = std::string("close failed: ") + strerror(errno);
  if (err.empty()) {
    int rc = replace ? rename(tmpl.c_str(), path.c_str())
                     : renameat2(AT_FDCWD, tmpl.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0) {
      err = errno == EEXIST ? "exists (not replaced)"
                            : std::string("rename failed: ") + strerror(errno);
    }
  }
  if (!err.empty()) unlink(tmpl.c_str());
  return err;
}

// A key naming a module map exactly, to reuse one offline Symbolizer across the segments
// of a process.
std::string map_key(const std::vector<Module>& modules) {
  std::string key;
  for (const Module& m : modules) {
    key += m.path + '\0' + m.build_id_hex + '\0' + std::to_string(m.start) + '-' +
           std::to_string(m.end) + '+' + std::to_string(m.bias) + '\n';
  }
  return key;
}

// The module map of the newest sealed segment beside `path` written by the same process
// (same boot id when both are known). Sets *from to that segment.
std::vector<Module> sibling_map(const std::string& path, const std::string& boot_id,
                                std::string* from) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<std::string> siblings;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || ends_with(name, ".active")) continue;
    if (!ends_with(name, ".bin") && !ends_with(name, ".bin.zst") && !ends_with(name, ".bin.gz")) {
      continue;
    }
    if (fs::equivalent(e.path(), path, ec)) continue;
    siblings.push_back(e.path().string());
  }
  std::sort(siblings.begin(), siblings.end(), segment_order);
  for (auto it = siblings.rbegin(); it != siblings.rend(); ++it) {
    RawSegment seg;
    if (!seg.open(*it)) continue;
    Scan s = scan(seg.raw());
    if (s.modules.empty()) continue;
    if (!boot_id.empty() && !s.boot_id.empty() && s.boot_id != boot_id) continue;
    *from = *it;
    return s.modules;
  }
  return {};
}

std::string hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

class Run {
 public:
  Run(const SymbolizeOptions& o, FILE* report) : o_(o), report_(report) {}

  SymbolizeFileResult file(const std::string& path, const std::string& root);

 private:
  void problem(const std::string& path, const std::string& what) {
    fprintf(stderr, "d9: %s: %s\n", path.c_str(), what.c_str());
  }
  std::string output_path(const std::string& path, const std::string& root,
                          decode::Container c) const;
  symbolize::Symbolizer& symbolizer(const std::vector<Module>& modules);

  const SymbolizeOptions& o_;
  FILE* report_;
  std::set<std::string> written_;  // canonical outputs of this run
  std::unique_ptr<symbolize::Symbolizer> sym_;
  std::string sym_key_;
};

symbolize::Symbolizer& Run::symbolizer(const std::vector<Module>& modules) {
  std::string key = map_key(modules);
  if (!sym_ || key != sym_key_) {
    sym_.reset();
    symbolize::Options so;
    so.debuginfod = o_.debuginfod;
    sym_ = std::make_unique<symbolize::Symbolizer>(modules, so);
    sym_key_ = std::move(key);
  }
  return *sym_;
}

std::string Run::output_path(const std::string& path, const std::string& root,
                             decode::Container c) const {
  fs::path in(path);
  std::string name = stem_of(in.filename().string()) + extension(c);
  if (o_.out_dir.empty()) return (in.parent_path() / name).string();
  fs::path dir(o_.out_dir);
  if (!root.empty()) {
    std::error_code ec;
    fs::path rel = fs::relative(in.parent_path(), root, ec);
    if (!ec && !rel.empty() && rel != "." && *rel.begin() != "..") dir /= rel;
  }
  return (dir / name).string();
}

SymbolizeFileResult Run::file(const std::string& path, const std::string& root) {
  SymbolizeFileResult r;
  r.input = path;
  RawSegment seg;
  if (!seg.open(path)) {
    problem(path, seg.error().empty() ? "unreadable" : seg.error());
    return r;
  }
  Scan s = scan(seg.raw());
  std::span<const uint8_t> keep = seg.raw();
  if (!s.result.ok() || !seg.error().empty()) {
    fprintf(stderr, "%s\n", describe_error(path, seg.container(), seg.error(), s.result).c_str());
    if (s.result.bytes_consumed == 0) return r;
    if (!s.result.ok()) {
      keep = keep.first(s.result.bytes_consumed);
      problem(path, "the output keeps the " + std::to_string(keep.size()) +
                        " bytes before the damage (whole frames only)");
    }
  }

  std::vector<uint64_t> need;
  for (uint64_t a : s.addrs) {
    if (!s.symbolized.count(a)) need.push_back(a);
  }
  r.addresses = need.size();

  std::vector<Module> modules = s.modules;
  bool borrowed = false;
  if (modules.empty() && !need.empty()) {
    std::string from;
    modules = sibling_map(path, s.boot_id, &from);
    if (modules.empty()) {
      problem(path, std::string("no module map: ") +
                        (s.sealed ? "the segment was sealed without one"
                                  : "the segment was never sealed (the process was killed?)") +
                        ", and no sealed segment of the same process is beside it; cannot "
                        "symbolize it offline");
      return r;
    }
    borrowed = true;
    problem(path, "no module map (never sealed); using the one of " + from +
                      (s.boot_id.empty() ? "" : " (same process, boot id " + s.boot_id + ")"));
  }

  // Resolve.
  Encoder enc;
  enc.begin_stream();
  if (borrowed) {
    for (const Module& m : modules) {
      enc.module_entry(m.path, m.build_id_hex, m.start, m.end, m.bias, m.loaded);
    }
  }
  std::map<const ModuleCheck*, uint64_t> unresolved_in;  // nullptr: outside every module
  if (!need.empty()) {
    symbolize::Symbolizer& sym = symbolizer(modules);
    for (uint64_t addr : need) {
      const std::vector<symbolize::Frame>& frames = sym.resolve(addr);
      if (frames.empty() || frames[0].function.rfind("[unknown]", 0) == 0) {
        ++r.unresolved;
        ++unresolved_in[sym.check_at(addr)];
        continue;
      }
      ++r.resolved;
      for (size_t depth = 0; depth < frames.size(); ++depth) {
        const symbolize::Frame& f = frames[depth];
        enc.symbol_entry(addr, 0, f.function, depth, f.file, f.line);
      }
    }
  }
  for (const auto& [check, n] : unresolved_in) {
    std::string count = std::to_string(n) + " address(es)";
    if (check == nullptr) {
      problem(path, count + " outside every recorded module stay unresolved");
    } else if (check->file == ModuleFile::kMismatch) {
      problem(path, check->module.path + ": build-id mismatch (recorded " +
                        check->module.build_id_hex + ", the file has " +
                        (check->file_build_id_hex.empty() ? "none" : check->file_build_id_hex) +
                        "): refused; its " + count + " stay unresolved");
    } else if (check->file == ModuleFile::kOk) {
      problem(path, check->module.path + ": no symbol for " + count + " (first at " +
                        hex(check->module.start) + "-" + hex(check->module.end) + ")");
    } else {
      problem(path, check->module.path + ": " + ModuleFileName(check->file) + " (build-id " +
                        (check->module.build_id_hex.empty() ? "none" : check->module.build_id_hex) +
                        "); its " + count + " stay unresolved");
    }
  }

  bool add = r.resolved > 0 || borrowed;
  // Unresolved addresses get no placeholder, so a later run (debug files installed) can try
  // them again. A segment that has symbols already is done when nothing more resolves.
  if (!add && r.addresses > 0 && s.symbolized.empty()) {
    problem(path, "none of " + std::to_string(r.addresses) + " address(es) resolved; not written");
    return r;
  }
  if (!add && o_.out_dir.empty()) {
    r.ok = true;
    if (!o_.quiet) {
      std::string left = r.addresses == 0 ? ""
                                          : "; " + std::to_string(r.addresses) +
                                                " address(es) stay unresolved (above)";
      fprintf(report_, "%s: already symbolized%s, nothing to do\n", path.c_str(), left.c_str());
    }
    return r;
  }

  // Write.
  std::string out = o_.in_place ? output_path(path, "", seg.container())
                                : output_path(path, root, seg.container());
  std::error_code ec;
  bool same_as_input = fs::exists(out, ec) && fs::equivalent(out, path, ec);
  if (!o_.in_place && same_as_input) {
    problem(path, "the output would replace the input; use -o DIR or --in-place");
    return r;
  }
  std::string canon = fs::weakly_canonical(out, ec).string();
  if (written_.count(canon)) {
    problem(path, "another input was already written to " + out + "; not replaced");
    return r;
  }
  std::vector<uint8_t> raw(keep.begin(), keep.end());
  if (add) raw.insert(raw.end(), enc.bytes().begin(), enc.bytes().end());
  std::vector<uint8_t> packed;
  if (!compress(seg.container(), raw, &packed)) {
    problem(path, "compression failed");
    return r;
  }
  struct stat st;
  mode_t mode = stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0600;
  if (!o_.out_dir.empty()) fs::create_directories(fs::path(out).parent_path(), ec);
  // Next to the input nothing is replaced; in -o DIR an earlier output may be; in place the
  // input itself (or, for an `.active` input, nothing: its `.bin` must not exist yet).
  bool replace = !o_.out_dir.empty() || (o_.in_place && same_as_input);
  std::string err = write_atomically(out, packed, mode, replace);
  if (!err.empty()) {
    problem(path, out + ": " + err +
                      (o_.out_dir.empty() && !o_.in_place && err.rfind("exists", 0) == 0
                           ? "; use -o DIR or --in-place"
                           : ""));
    return r;
  }
  written_.insert(canon);
  if (o_.in_place && !same_as_input && unlink(path.c_str()) != 0) {
    problem(path, std::string("written to ") + out + " but not removed: " + strerror(errno));
  }
  r.ok = true;
  r.output = out;
  if (!o_.quiet) {
    fprintf(report_, "%s -> %s: %llu address(es) without symbols: %llu resolved, %llu unresolved\n",
            path.c_str(), out.c_str(), static_cast<unsigned long long>(r.addresses),
            static_cast<unsigned long long>(r.resolved),
            static_cast<unsigned long long>(r.unresolved));
  }
  return r;
}

}  // namespace

int symbolize_files(const std::vector<std::string>& paths, const SymbolizeOptions& options,
                    FILE* report, std::vector<SymbolizeFileResult>* results) {
  Run run(options, report);
  size_t files = 0, ok = 0;
  for (const std::string& p : paths) {
    std::error_code ec;
    std::string root = fs::is_directory(p, ec) ? p : "";
    for (const std::string& f : collect_inputs({p})) {
      ++files;
      SymbolizeFileResult r = run.file(f, root);
      ok += r.ok;
      if (results) results->push_back(std::move(r));
    }
  }
  if (files == 0) {
    fprintf(stderr, "d9: no segments found in the given path(s)\n");
    return 1;
  }
  if (ok == 0) {
    fprintf(stderr, "d9: nothing symbolized in %zu file(s)\n", files);
    return 1;
  }
  return 0;
}

}  // namespace d9::cli
