#include "symbolize/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>

#include "symbolize/dwarf_index.h"
#include "symbolize/symbol_index.h"

namespace d9::symbolize {

// Above the 47-bit user address space of x86-64 (and 48-bit AArch64): kernel text, unless a
// module is mapped there (5-level paging lets a process ask for higher user addresses).
constexpr uint64_t kKernelStart = 0x800000000000ull;

struct Symbolizer::ModuleRec {
  ~ModuleRec() {
    if (alt != nullptr) dwarf_end(alt);
    if (alt_elf != nullptr) elf_end(alt_elf);
    if (elf != nullptr) elf_end(elf);
  }
  Module info;
  std::string build_id;        // raw bytes from memory (or the file for the vDSO)
  Dwfl_Module* mod = nullptr;  // null: the file could not be used; placeholders only
  std::string open_path;       // the file to open at the first lookup ("" once opened)
  uint64_t noted_ns = 0;       // CLOCK_MONOTONIC when refresh_modules() first saw it
  std::string dwfl_name;       // the module's name for libdwfl, unique
  Elf* elf = nullptr;          // opened at the first lookup, handed to libdwfl by FindElf
  std::string debug_path;      // separate debug file, if FindElf found one
  std::vector<char> image;     // the vDSO's bytes (the ELF is read from this copy)
  bool debuginfod = false;     // Options::debuginfod
  bool inflate = true;         // Options::inflate_compressed_debug_files
  bool names_only = false;     // set by FindElf: compressed debug file, DWARF left unread
  bool dwarf_checked = false;  // dwz file looked for
  Elf* alt_elf = nullptr;      // dwz file, set on the module's Dwarf
  Dwarf* alt = nullptr;
  std::unordered_map<Dwarf_Off, std::unique_ptr<CuIndex>> units;  // by CU DIE offset
  std::unique_ptr<SymbolIndex> symbols;  // built on first use, or after kPassesBeforeIndex
  // Symbol names of the last prepare()'s addresses (by pc), while there is no index.
  std::unordered_map<uint64_t, const char*> prepared;
  int passes = 0;  // SymbolIndex::find_once calls so far
};

namespace {

using ModuleRec = Symbolizer::ModuleRec;

// prepare() answers a module's batch of addresses with one pass over its symbol table, a
// third of the cost of building the index, for this many batches; then it builds the index.
// A short-lived process seals once; a long-running one soon has the index.
constexpr int kPassesBeforeIndex = 2;

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string HexBytes(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string Demangle(const char* name) {
  if (name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (d != nullptr) {
      std::string out = status == 0 ? d : name;
      free(d);
      return out;
    }
  }
  return name;
}

// ---------------------------------------------------------------------------------------
// Module discovery.

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

// Opens an ELF file for reading without keeping its descriptor: libelf maps it privately
// (ELF_C_FDREAD reads whatever is not mapped and marks the descriptor unused).
Elf* OpenElf(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf != nullptr && (elf_kind(elf) != ELF_K_ELF || elf_cntl(elf, ELF_C_FDREAD) != 0)) {
    elf_end(elf);
    elf = nullptr;
  }
  close(fd);
  return elf;
}

std::string FileBuildId(Elf* elf) {
  const void* bits = nullptr;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &bits);
  return n > 0 ? std::string(static_cast<const char*>(bits), static_cast<size_t>(n)) : "";
}

// Whether `elf` has DWARF, and whether it is stored compressed (SHF_COMPRESSED, or a legacy
// .zdebug_ section), from the section headers alone.
bool HasDwarf(Elf* elf, bool* compressed = nullptr) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name != nullptr &&
        (strcmp(name, ".debug_info") == 0 || strcmp(name, ".zdebug_info") == 0)) {
      if (compressed != nullptr) {
        *compressed = (shdr.sh_flags & SHF_COMPRESSED) != 0 || name[1] == 'z';
      }
      return true;
    }
  }
  return false;
}

bool CrcMatches(const std::string& path, GElf_Word want) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uLong crc = crc32(0, nullptr, 0);
  std::vector<char> buf(1 << 16);
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  close(fd);
  return n == 0 && static_cast<GElf_Word>(crc) == want;
}

std::string BuildIdPath(const std::string& build_id) {
  if (build_id.size() < 2) return "";
  std::string hex = HexBytes(build_id);
  return "/usr/lib/debug/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
}

// Directory part of `path` and of its canonical form (for a symlinked library).
std::vector<std::string> Dirs(const std::string& path) {
  std::vector<std::string> dirs;
  if (path.empty() || path[0] != '/') return dirs;
  dirs.push_back(path.substr(0, path.rfind('/')));
  if (char* canon = realpath(path.c_str(), nullptr)) {
    std::string dir(canon, strrchr(canon, '/'));
    if (dir != dirs[0]) dirs.push_back(dir);
    free(canon);
  }
  return dirs;
}

// The separate debug file of a module, found the standard way without debuginfod: by
// build-id under /usr/lib/debug/.build-id, then by .gnu_debuglink next to the file, in its
// .debug/ and under /usr/lib/debug/<dir>/. Checked by build-id, or by CRC without one.
// *compressed tells whether its DWARF is stored compressed.
Elf* OpenDebugFile(Elf* main, const std::string& path, const std::string& build_id,
                   std::string* found, bool* compressed) {
  std::vector<std::string> candidates;
  if (!build_id.empty()) candidates.push_back(BuildIdPath(build_id));
  GElf_Word crc = 0;
  const char* link = dwelf_elf_gnu_debuglink(main, &crc);
  if (link != nullptr && link[0] != '\0' && strchr(link, '/') == nullptr) {
    for (const std::string& dir : Dirs(path)) {
      candidates.push_back(dir + "/" + link);
      candidates.push_back(dir + "/.debug/" + link);
      candidates.push_back("/usr/lib/debug" + dir + "/" + link);
    }
  }
  for (const std::string& candidate : candidates) {
    if (candidate == path) continue;
    Elf* elf = OpenElf(candidate.c_str());
    if (elf == nullptr) continue;
    bool valid =
        build_id.empty() ? crc == 0 || CrcMatches(candidate, crc) : FileBuildId(elf) == build_id;
    if (valid && HasDwarf(elf, compressed)) {
      *found = candidate;
      return elf;
    }
    elf_end(elf);
  }
  return nullptr;
}

// The dwz file a module's DWARF shares (.gnu_debugaltlink), opened without a descriptor.
bool OpenAltFile(Dwarf* dw, const std::string& dwarf_path, Elf** alt_elf, Dwarf** alt) {
  const char* name = nullptr;
  const void* id = nullptr;
  ssize_t id_len = dwelf_dwarf_gnu_debugaltlink(dw, &name, &id);
  if (id_len <= 0) return false;
  std::string build_id(static_cast<const char*>(id), static_cast<size_t>(id_len));
  std::vector<std::string> candidates = {BuildIdPath(build_id)};
  if (name[0] == '/') {
    candidates.push_back(name);
  } else if (!dwarf_path.empty() && dwarf_path[0] == '/') {
    candidates.push_back(dwarf_path.substr(0, dwarf_path.rfind('/') + 1) + name);
  }
  for (const std::string& candidate : candidates) {
    Elf* elf = OpenElf(candidate.c_str());
    if (elf == nullptr) continue;
    if (FileBuildId(elf) == build_id) {
      *alt = dwarf_begin_elf(elf, DWARF_C_READ, nullptr);
      if (*alt != nullptr) {
        *alt_elf = elf;
        return true;
      }
    }
    elf_end(elf);
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// libdwfl callbacks. libdwfl keeps every descriptor it is given open until dwfl_end (and
// then closes it, whatever it has become if the host closed and reused it). So d9 opens all
// files itself, reads them into ELF handles without descriptors, and hands over those.

// Hands over the module's ELF: its separate debug file when there is one (it carries the
// program headers, DWARF and .symtab), otherwise the file itself. A debug file with
// compressed DWARF is handed over all the same, for its .symtab (which is never compressed),
// but marked names_only unless the options ask to inflate it.
int FindElf(Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, char** file_name, Elf** elfp) {
  auto* rec = static_cast<ModuleRec*>(*userdata);
  *elfp = nullptr;
  if (rec == nullptr || rec->elf == nullptr) return -1;
  if (!HasDwarf(rec->elf)) {
    bool compressed = false;
    Elf* debug = OpenDebugFile(rec->elf, rec->image.empty() ? rec->info.path : "", rec->build_id,
                               &rec->debug_path, &compressed);
    if (debug != nullptr) {
      elf_end(rec->elf);
      rec->elf = debug;
      rec->names_only = compressed && !rec->inflate;
    }
  }
  *elfp = rec->elf;
  rec->elf = nullptr;                  // libdwfl owns it now
  if (!rec->image.empty()) return -1;  // the vDSO: no file name
  free(*file_name);
  *file_name = strdup(rec->debug_path.empty() ? rec->info.path.c_str() : rec->debug_path.c_str());
  return -1;
}

// Called when the ELF from FindElf has no DWARF, and for dwz files. Everything local was
// tried already; only debuginfod, when asked for, is left.
int FindDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                  const char* file_name, const char* debuglink, GElf_Word crc,
                  char** debuginfo_file_name) {
  auto* rec = static_cast<ModuleRec*>(*userdata);
  if (rec == nullptr || !rec->debuginfod) return -1;
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink, crc,
                                      debuginfo_file_name);
}

const Dwfl_Callbacks kCallbacks = {
    .find_elf = FindElf,
    .find_debuginfo = FindDebuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

// ---------------------------------------------------------------------------------------
// DWARF helpers.

// Demangled DW_AT_linkage_name, through DW_AT_abstract_origin and DW_AT_specification.
// GCC gives none to functions with internal linkage (static, anonymous namespace).
std::string LinkageName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (linkage == nullptr) {
    linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  }
  return linkage != nullptr ? Demangle(linkage) : "";
}

// DW_AT_name qualified by the enclosing namespaces and classes of its declaration
// ("ns::Klass::helper", no parameters).
std::string QualifiedName(Dwarf_Die* die, const CuIndex& unit) {
  Dwarf_Die decl = *die;
  for (int hops = 0; hops < 8; ++hops) {  // concrete -> abstract -> declaration
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if ((dwarf_attr(&decl, DW_AT_abstract_origin, &attr) != nullptr ||
         dwarf_attr(&decl, DW_AT_specification, &attr) != nullptr) &&
        dwarf_formref_die(&attr, &next) != nullptr) {
      decl = next;
    } else {
      break;
    }
  }
  const char* name = dwarf_diename(&decl);
  if (name == nullptr) return "";
  if (const std::string* prefix = unit.prefix(&decl)) return *prefix + name;
  // Declared in another unit (a dwz partial unit, say): ask libdw, which walks that unit.
  std::string out = name;
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes_die(&decl, &scopes);
  for (int i = 1; i < n; ++i) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag != DW_TAG_namespace && tag != DW_TAG_class_type && tag != DW_TAG_structure_type &&
        tag != DW_TAG_union_type) {
      continue;
    }
    const char* scope = dwarf_diename(&scopes[i]);
    out = std::string(scope != nullptr ? scope : "(anonymous namespace)") + "::" + out;
  }
  free(scopes);
  return out;
}

// DWARF name of a function instance, cached per DIE.
const CuIndex::Name& DwarfName(Dwarf_Die* die, CuIndex& unit) {
  auto [it, inserted] = unit.names().try_emplace(dwarf_dieoffset(die));
  if (inserted) {
    it->second.name = LinkageName(die);
    it->second.linkage = !it->second.name.empty();
    if (!it->second.linkage) it->second.name = QualifiedName(die, unit);
  }
  return it->second;
}

// File name for a DW_AT_call_file index, from the line table of the unit holding `die`.
std::string CallFile(Dwarf_Die* die, Dwarf_Die* fallback_cu) {
  Dwarf_Attribute attr;
  Dwarf_Word index = 0;
  if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attr), &index) != 0) return "";
  Dwarf_Die cu_mem;
  Dwarf_Die* cu = dwarf_diecu(die, &cu_mem, nullptr, nullptr);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if ((cu == nullptr || dwarf_getsrcfiles(cu, &files, &nfiles) != 0) &&
      dwarf_getsrcfiles(fallback_cu, &files, &nfiles) != 0) {
    return "";
  }
  const char* name = dwarf_filesrc(files, index, nullptr, nullptr);
  return name != nullptr ? name : "";
}

uint32_t CallLine(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  Dwarf_Word line = 0;
  if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attr), &line) != 0) return 0;
  return static_cast<uint32_t>(line);
}

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

// ---------------------------------------------------------------------------------------

Symbolizer::Symbolizer(const Options& options) : options_(options) {
  elf_version(EV_CURRENT);
  dwfl_ = dwfl_begin(&kCallbacks);
  refresh_modules();
}

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

Symbolizer::~Symbolizer() {
  if (dwfl_ != nullptr) dwfl_end(dwfl_);  // before the dwz files its Dwarfs point to
  recs_.clear();
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

const std::vector<Frame>& Symbolizer::resolve(uint64_t addr) {
  auto it = cache_.find(addr);
  if (it != cache_.end()) return it->second;

  std::vector<Frame> frames;
  uint64_t pc = addr > 0 ? addr - 1 : 0;
  ModuleRec* rec = find(pc);
  if (rec == nullptr && addr >= kKernelStart) {
    frames.push_back(Frame{"[kernel] " + Hex(addr), "kernel", 0});
  } else {
    if (rec == nullptr && !offline_ && loader_changed()) {
      refresh_modules();
      rec = find(pc);
    }
    if (rec != nullptr) {
      open(rec);
      resolve_in(rec, addr, pc, frames);
    }
    if (frames.empty()) {
      frames.push_back(Frame{"[unknown] " + Hex(addr), rec != nullptr ? rec->info.path : "", 0});
    }
  }
  return cache_.emplace(addr, std::move(frames)).first->second;
}

void Symbolizer::prepare(std::span<const uint64_t> addrs) {
  std::unordered_map<ModuleRec*, std::vector<uint64_t>> pcs;
  for (const auto& rec : recs_) rec->prepared.clear();  // the last batch is resolved
  for (uint64_t addr : addrs) {
    if (addr == 0 || cache_.count(addr) != 0) continue;
    ModuleRec* rec = find(addr - 1);
    if (rec != nullptr) open(rec);
    if (rec != nullptr && rec->mod != nullptr && rec->symbols == nullptr) {
      pcs[rec].push_back(addr - 1);
    }
  }
  for (auto& [rec, batch] : pcs) {
    if (rec->passes >= kPassesBeforeIndex) {
      rec->symbols = std::make_unique<SymbolIndex>(rec->mod);
      continue;
    }
    ++rec->passes;
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    std::vector<const char*> names = SymbolIndex::find_once(rec->mod, batch);
    for (size_t i = 0; i < batch.size(); ++i) rec->prepared.emplace(batch[i], names[i]);
  }
}

size_t Symbolizer::symbol_indexes() const {
  return std::count_if(recs_.begin(), recs_.end(),
                       [](const auto& r) { return r->symbols != nullptr; });
}

const char* Symbolizer::symbol_name(ModuleRec* rec, uint64_t pc) {
  if (rec->symbols == nullptr) {
    auto it = rec->prepared.find(pc);
    if (it != rec->prepared.end()) return it->second;
    rec->symbols = std::make_unique<SymbolIndex>(rec->mod);
    rec->prepared.clear();
  }
  return rec->symbols->find(pc);
}

void Symbolizer::resolve_in(ModuleRec* rec, uint64_t addr, uint64_t pc, std::vector<Frame>& out) {
  Dwfl_Module* mod = rec->mod;
  if (mod == nullptr) return;

  Dwarf_Addr bias = 0;
  if (!rec->dwarf_checked) {
    rec->dwarf_checked = true;
    // The ELF first: FindElf decides whether the DWARF may be opened (names_only). Anything
    // that asks libdwfl for DWARF (getdwarf, addrdie, getsrc) would inflate all of it.
    Dwarf* dw = dwfl_module_getelf(mod, &bias) != nullptr && !rec->names_only
                    ? dwfl_module_getdwarf(mod, &bias)
                    : nullptr;
    // Set the dwz file before libdw looks for it itself (keeping a descriptor).
    if (dw != nullptr && OpenAltFile(dw, rec->debug_path.empty() ? rec->info.path : rec->debug_path,
                                     &rec->alt_elf, &rec->alt)) {
      dwarf_setalt(dw, rec->alt);
    }
  }

  // DWARF: the function instances at pc, innermost first, from the unit's index.
  Dwarf_Die* cudie = rec->names_only ? nullptr : dwfl_module_addrdie(mod, pc, &bias);
  CuIndex* unit = nullptr;
  bool outermost_has_linkage = false;
  std::vector<Dwarf_Die> chain;
  if (cudie != nullptr) {
    std::unique_ptr<CuIndex>& slot = rec->units[dwarf_dieoffset(cudie)];
    if (slot == nullptr) slot = std::make_unique<CuIndex>(*cudie);
    unit = slot.get();
    unit->chain(pc - bias, &chain);
    size_t depth = chain.size();
    out.resize(depth);
    for (size_t d = 0; d < depth; ++d) {
      Dwarf_Die* die = &chain[depth - 1 - d];
      const CuIndex::Name& name = DwarfName(die, *unit);
      out[d].function = name.name;
      if (d == 0) outermost_has_linkage = name.linkage;
      if (d + 1 < depth) {
        Dwarf_Die* callee = &chain[depth - 2 - d];
        out[d].file = CallFile(callee, unit->cu());
        out[d].line = CallLine(callee);
      }
    }
    if (depth > 0) {
      Dwarf_Line* line = dwarf_getsrc_die(unit->cu(), pc - bias);
      const char* file = line != nullptr ? dwarf_linesrc(line, nullptr, nullptr) : nullptr;
      int lineno = 0;
      if (file != nullptr && dwarf_lineno(line, &lineno) == 0) {
        out.back().file = file;
        out.back().line = lineno > 0 ? static_cast<uint32_t>(lineno) : 0;
      }
    }
  }

  // Symbol table: names the real function when DWARF has no linkage name for it (C,
  // internal-linkage C++: the symbol carries the signature), or when there is no DWARF.
  if (!outermost_has_linkage) {
    const char* name = symbol_name(rec, pc);
    if (name != nullptr) {
      if (out.empty()) {
        // No function in DWARF (assembly, say): the line table may still know the place.
        Dwarf_Line* line = unit != nullptr ? dwarf_getsrc_die(unit->cu(), pc - bias) : nullptr;
        const char* file = line != nullptr ? dwarf_linesrc(line, nullptr, nullptr) : nullptr;
        int lineno = 0;
        if (file != nullptr && dwarf_lineno(line, &lineno) == 0 && lineno > 0) {
          out.push_back(Frame{"", file, static_cast<uint32_t>(lineno)});
        } else {
          out.push_back(Frame{"", rec->info.path, 0});
        }
      }
      // "fopen@@GLIBC_2.2.5": the version is not part of the name.
      const char* at = strchr(name, '@');
      out[0].function = Demangle(at != nullptr ? std::string(name, at).c_str() : name);
    }
  }
  for (Frame& f : out) {
    if (f.function.empty()) f.function = "[unknown] " + Hex(addr);
  }
}

}  // namespace d9::symbolize
