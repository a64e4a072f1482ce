// Offline mode (`d9 symbolize`): a Symbolizer over the recorded module map of another,
// possibly long gone, process, each module checked against its recorded build-id.
#include <elfutils/libdwfl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>

#include <algorithm>

#include "symbolize/elf_files.h"
#include "symbolize/module_rec.h"

namespace d9::symbolize {

namespace {

// "0a1b..." -> raw bytes; "" for anything that is not an even run of hex digits.
std::string BytesFromHex(const std::string& hex) {
  auto nibble = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  if (hex.size() % 2 != 0) return out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return "";
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

// A copy of this process's vDSO image (headers, sections and all), or empty.
std::vector<char> OwnVdsoImage() {
  uint64_t base = getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return {};
  const auto* ehdr = reinterpret_cast<const ElfW(Ehdr)*>(base);
  const auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(base + ehdr->e_phoff);
  uint64_t size = ehdr->e_shoff + uint64_t{ehdr->e_shnum} * ehdr->e_shentsize;
  for (int i = 0; i < ehdr->e_phnum; ++i) {
    if (phdr[i].p_type == PT_LOAD)
      size = std::max<uint64_t>(size, phdr[i].p_offset + phdr[i].p_filesz);
  }
  const char* p = reinterpret_cast<const char*>(base);
  return std::vector<char>(p, p + size);
}

}  // namespace

const char* ModuleFileName(ModuleFile f) {
  switch (f) {
    case ModuleFile::kOk:
      return "ok";
    case ModuleFile::kMissing:
      return "missing";
    case ModuleFile::kNotElf:
      return "not ELF";
    case ModuleFile::kMismatch:
      return "build-id mismatch";
    case ModuleFile::kUnavailable:
      return "not available offline";
  }
  return "?";
}

Symbolizer::Symbolizer(const std::vector<Module>& recorded, const Options& options)
    : options_(options), offline_(true) {
  elf_version(EV_CURRENT);
  dwfl_ = dwfl_begin(&kCallbacks);
  if (dwfl_ != nullptr) dwfl_report_begin_add(dwfl_);
  for (const Module& m : recorded) {
    if (m.end <= m.start) continue;
    auto owned = std::make_unique<ModuleRec>();
    ModuleRec* rec = owned.get();
    rec->info = m;
    rec->build_id = BytesFromHex(m.build_id_hex);
    rec->debuginfod = options_.debuginfod;
    rec->inflate = options_.inflate_compressed_debug_files;
    ModuleCheck check;
    check.module = m;
    if (m.path == "[vdso]") {
      // Same kernel, same vDSO: use this process's copy when the build-ids agree.
      rec->image = OwnVdsoImage();
      Elf* elf = rec->image.empty() ? nullptr : elf_memory(rec->image.data(), rec->image.size());
      if (elf != nullptr && !rec->build_id.empty() && FileBuildId(elf) == rec->build_id) {
        rec->elf = elf;
        check.opened = "[vdso]";
      } else {
        if (elf != nullptr) elf_end(elf);
        rec->image.clear();
        check.file = ModuleFile::kUnavailable;
      }
    } else if (m.path.empty() || m.path[0] != '/') {
      check.file = ModuleFile::kUnavailable;
    } else {
      struct stat st;
      bool exists = stat(m.path.c_str(), &st) == 0;
      Elf* elf = exists ? OpenElf(m.path.c_str()) : nullptr;
      if (elf != nullptr) {
        std::string id = FileBuildId(elf);
        if (!rec->build_id.empty() && id != rec->build_id) {
          check.file = ModuleFile::kMismatch;
          check.file_build_id_hex = HexBytes(id);
          elf_end(elf);
          elf = nullptr;
        } else {
          check.opened = m.path;
        }
      } else if (exists) {
        check.file = ModuleFile::kNotElf;
      } else {
        // The file is gone: its debug file carries the program headers and symbols too.
        std::string debug = BuildIdPath(rec->build_id);
        elf = debug.empty() ? nullptr : OpenElf(debug.c_str());
        if (elf != nullptr && FileBuildId(elf) == rec->build_id) {
          check.opened = debug;
        } else {
          if (elf != nullptr) elf_end(elf);
          elf = nullptr;
          check.file = ModuleFile::kMissing;
        }
      }
      rec->elf = elf;
    }
    // libdwfl reuses a module reported with the same name and range; keep names unique.
    rec->dwfl_name = m.path + " #" + std::to_string(recs_.size());
    if (rec->elf != nullptr) report(rec);
    // Later modules own the ranges they share with earlier (unloaded) ones.
    auto lo = by_start_.lower_bound(m.start);
    if (lo != by_start_.begin() && std::prev(lo)->second->info.end > m.start) --lo;
    by_start_.erase(lo, by_start_.lower_bound(m.end));
    by_start_[m.start] = rec;
    recs_.push_back(std::move(owned));
    checks_.push_back(std::move(check));
  }
  if (dwfl_ != nullptr) dwfl_report_end(dwfl_, nullptr, nullptr);
}

const ModuleCheck* Symbolizer::check_at(uint64_t addr) const {
  ModuleRec* rec = find(addr > 0 ? addr - 1 : 0);
  if (rec == nullptr) return nullptr;
  for (size_t i = 0; i < recs_.size() && i < checks_.size(); ++i) {
    if (recs_[i].get() == rec) return &checks_[i];
  }
  return nullptr;
}

}  // namespace d9::symbolize
