// The module map of the running process: objects found with dl_iterate_phdr, opened at
// their first lookup (or Options::open_after_ms after they were noted) and reported to
// libdwfl; the newest mapping of a range wins lookups.
#include <elfutils/libdwfl.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include "symbolize/elf_files.h"
#include "symbolize/module_rec.h"

namespace d9::symbolize {

namespace {

struct Seen {
  std::string name;  // dlpi_name ("" for the main program)
  uint64_t bias = 0;
  uint64_t start = 0, end = 0;
  std::string build_id;
  bool vdso = false;
};

std::string BuildIdFromNotes(const char* p, size_t size, size_t align) {
  size_t off = 0;
  auto up = [align](size_t n) { return (n + align - 1) & ~(align - 1); };
  while (off + sizeof(ElfW(Nhdr)) <= size) {
    ElfW(Nhdr) nh;
    memcpy(&nh, p + off, sizeof nh);
    size_t name_off = off + sizeof nh;
    size_t desc_off = name_off + up(nh.n_namesz);
    size_t next = desc_off + up(nh.n_descsz);
    if (next > size || next <= off) break;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + name_off, "GNU", 4) == 0) {
      return std::string(p + desc_off, nh.n_descsz);
    }
    off = next;
  }
  return "";
}

struct IterateState {
  std::vector<Seen>* out;
  uint64_t vdso_ehdr;
  uint64_t adds = 0, subs = 0;
  bool counters_only = false;
};

int OnObject(struct dl_phdr_info* info, size_t size, void* data) {
  auto* st = static_cast<IterateState*>(data);
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    st->adds = info->dlpi_adds;
    st->subs = info->dlpi_subs;
  }
  if (st->counters_only) return 1;
  Seen s;
  s.name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  s.bias = info->dlpi_addr;
  bool have_load = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uint64_t align = ph.p_align > 1 ? ph.p_align : 1;
    uint64_t lo = s.bias + (ph.p_vaddr & ~(align - 1));
    uint64_t hi = s.bias + ph.p_vaddr + ph.p_memsz;
    if (!have_load || lo < s.start) s.start = lo;
    if (!have_load || hi > s.end) s.end = hi;
    have_load = true;
  }
  if (!have_load) return 0;
  for (int i = 0; i < info->dlpi_phnum && s.build_id.empty(); ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    s.build_id = BuildIdFromNotes(reinterpret_cast<const char*>(s.bias + ph.p_vaddr), ph.p_memsz,
                                  ph.p_align == 8 ? 8 : 4);
  }
  s.vdso = st->vdso_ehdr != 0 && st->vdso_ehdr >= s.start && st->vdso_ehdr < s.end;
  st->out->push_back(std::move(s));
  return 0;
}

// Path of the file mapped at `addr`, from /proc/self/maps ("" if none).
std::string MappedPath(uint64_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t lo = 0, hi = 0;
    if (sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64, &lo, &hi) != 2) continue;
    if (addr < lo || addr >= hi) continue;
    size_t slash = line.find('/');
    if (slash == std::string::npos) return "";
    std::string path = line.substr(slash);
    const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() &&
        path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0) {
      path.resize(path.size() - deleted.size());
    }
    return path;
  }
  return "";
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec);
}

std::string ExePath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

Symbolizer::Symbolizer(const Options& options) : options_(options) {
  elf_version(EV_CURRENT);
  dwfl_ = dwfl_begin(&kCallbacks);
  refresh_modules();
}

bool Symbolizer::loader_changed() const {
  IterateState st{nullptr, 0};
  st.counters_only = true;
  dl_iterate_phdr(OnObject, &st);
  return st.adds != loader_adds_ || st.subs != loader_subs_;
}

void Symbolizer::refresh_modules(bool open_all) {
  if (offline_) return;
  std::vector<Seen> seen;
  IterateState st{&seen, getauxval(AT_SYSINFO_EHDR)};
  dl_iterate_phdr(OnObject, &st);
  loader_adds_ = st.adds;
  loader_subs_ = st.subs;

  const uint64_t now = MonotonicNs();
  for (auto& rec : recs_) {
    rec->info.loaded = false;
    if (!rec->open_path.empty() && now - rec->noted_ns >= options_.open_after_ms * 1000000) {
      open(rec.get());
    }
  }
  if (dwfl_ != nullptr) dwfl_report_begin_add(dwfl_);
  bool first = true;
  for (Seen& s : seen) {
    bool main_program = first && s.name.empty();
    first = false;
    std::string path;
    if (s.vdso) {
      path = "[vdso]";
    } else if (main_program) {
      path = ExePath();
    } else if (!s.name.empty() && s.name[0] == '/') {
      path = s.name;
    } else {
      path = MappedPath(s.start);
    }
    if (path.empty()) path = s.name.empty() ? "[unknown]" : s.name;

    ModuleRec* existing = nullptr;
    size_t same_name = 0;
    for (auto& rec : recs_) {
      if (rec->info.path != path || rec->info.start != s.start || rec->info.end != s.end) continue;
      ++same_name;
      if (rec->build_id == s.build_id || s.vdso) existing = rec.get();
    }
    ModuleRec* rec = existing;
    if (rec == nullptr) {
      auto owned = std::make_unique<ModuleRec>();
      rec = owned.get();
      rec->info.path = path;
      rec->info.start = s.start;
      rec->info.end = s.end;
      rec->info.bias = s.bias;
      rec->build_id = s.build_id;
      rec->debuginfod = options_.debuginfod;
      rec->inflate = options_.inflate_compressed_debug_files;
      if (s.vdso) {
        // The kernel maps the whole image, section headers (past the PT_LOAD) included.
        const auto* ehdr = reinterpret_cast<const ElfW(Ehdr)*>(st.vdso_ehdr);
        uint64_t size = std::max<uint64_t>(
            s.end - st.vdso_ehdr, ehdr->e_shoff + uint64_t{ehdr->e_shnum} * ehdr->e_shentsize);
        rec->image.assign(reinterpret_cast<const char*>(st.vdso_ehdr),
                          reinterpret_cast<const char*>(st.vdso_ehdr) + size);
        rec->elf = elf_memory(rec->image.data(), rec->image.size());
        if (rec->elf != nullptr && rec->build_id.empty()) rec->build_id = FileBuildId(rec->elf);
      } else {
        // Opened at its first lookup. The main program through /proc/self/exe: right even
        // if the file was replaced.
        rec->open_path = main_program ? "/proc/self/exe" : path;
        rec->noted_ns = now;
      }
      rec->info.build_id_hex = HexBytes(rec->build_id);
      // libdwfl reuses a module reported with the same name and range; keep names unique.
      rec->dwfl_name = same_name == 0 ? path : path + " #" + std::to_string(recs_.size());
      if (rec->elf != nullptr) report(rec);
      recs_.push_back(std::move(owned));
    }
    rec->info.loaded = true;

    // Make this module the owner of its range; drop overlapped (unloaded) ones from the
    // lookup, and cached answers that came from them.
    auto it = by_start_.find(s.start);
    if (it != by_start_.end() && it->second == rec) continue;
    auto lo = by_start_.lower_bound(s.start);
    if (lo != by_start_.begin() && std::prev(lo)->second->info.end > s.start) --lo;
    auto hi = by_start_.lower_bound(s.end);
    bool displaced = lo != hi;
    by_start_.erase(lo, hi);
    by_start_[s.start] = rec;
    if (displaced || existing == nullptr) {
      for (auto c = cache_.begin(); c != cache_.end();) {
        uint64_t pc = c->first - 1;
        if (pc >= s.start && pc < s.end) {
          c = cache_.erase(c);
        } else {
          ++c;
        }
      }
    }
  }
  if (dwfl_ != nullptr) dwfl_report_end(dwfl_, nullptr, nullptr);
  if (open_all) {
    for (auto& rec : recs_) open(rec.get());
  }
}

void Symbolizer::report(ModuleRec* rec) {
  if (dwfl_ == nullptr) return;
  rec->mod = dwfl_report_module(dwfl_, rec->dwfl_name.c_str(), rec->info.start, rec->info.end);
  if (rec->mod != nullptr) {
    void** userdata = nullptr;
    dwfl_module_info(rec->mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    *userdata = rec;
  }
}

void Symbolizer::open(ModuleRec* rec) {
  if (rec->open_path.empty()) return;
  rec->elf = OpenElf(rec->open_path.c_str());
  rec->open_path.clear();
  // A file replaced since it was loaded would give wrong answers: refuse it.
  if (rec->elf != nullptr && !rec->build_id.empty() && FileBuildId(rec->elf) != rec->build_id) {
    elf_end(rec->elf);
    rec->elf = nullptr;
  }
  if (dwfl_ == nullptr || rec->elf == nullptr) return;
  dwfl_report_begin_add(dwfl_);
  report(rec);
  dwfl_report_end(dwfl_, nullptr, nullptr);
}

std::vector<Module> Symbolizer::modules() const {
  std::vector<Module> out;
  out.reserve(recs_.size());
  for (const auto& rec : recs_) out.push_back(rec->info);
  return out;
}

Symbolizer::ModuleRec* Symbolizer::find(uint64_t pc) const {
  auto it = by_start_.upper_bound(pc);
  if (it == by_start_.begin()) return nullptr;
  --it;
  return pc < it->second->info.end ? it->second : nullptr;
}

}  // namespace d9::symbolize
