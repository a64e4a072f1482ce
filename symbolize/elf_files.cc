// The files behind a module, opened without keeping descriptors (symbolize/elf_files.h).
#include "symbolize/elf_files.h"

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "symbolize/module_rec.h"

namespace d9::symbolize {

std::string HexBytes(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
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

std::string BuildIdPath(const std::string& build_id) {
  if (build_id.size() < 2) return "";
  std::string hex = HexBytes(build_id);
  return "/usr/lib/debug/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
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

namespace {

using ModuleRec = Symbolizer::ModuleRec;

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

}  // namespace

const Dwfl_Callbacks kCallbacks = {
    .find_elf = FindElf,
    .find_debuginfo = FindDebuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

}  // namespace d9::symbolize
