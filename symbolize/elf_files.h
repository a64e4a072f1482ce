// The files behind a module, opened by d9 itself without keeping descriptors: the ELF file,
// its separate debug file and dwz file, and the libdwfl callbacks that hand them over.
// Internal to symbolize/.
#pragma once

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include <string>

namespace d9::symbolize {

// Lowercase hex of raw bytes (a build-id).
std::string HexBytes(const std::string& bytes);
// Opens an ELF file for reading without keeping its descriptor: libelf maps it privately
// (ELF_C_FDREAD reads whatever is not mapped and marks the descriptor unused).
Elf* OpenElf(const char* path);
// The file's NT_GNU_BUILD_ID, raw bytes, or "".
std::string FileBuildId(Elf* elf);
// Where a build-id's debug file lives: /usr/lib/debug/.build-id/xx/yyyy.debug ("" if none).
std::string BuildIdPath(const std::string& build_id);
// The dwz file a module's DWARF shares (.gnu_debugaltlink), opened without a descriptor.
bool OpenAltFile(Dwarf* dw, const std::string& dwarf_path, Elf** alt_elf, Dwarf** alt);
// FindElf hands libdwfl the ELF a ModuleRec (the module's userdata) opened; debuginfod only
// when Options::debuginfod is set.
extern const Dwfl_Callbacks kCallbacks;

}  // namespace d9::symbolize
