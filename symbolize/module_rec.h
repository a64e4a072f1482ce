// Symbolizer::ModuleRec: what a Symbolizer keeps per module (its ELF and debug files, its
// libdwfl module, the DWARF and symbol-table indexes). Internal to symbolize/.
#pragma once

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "symbolize/dwarf_index.h"
#include "symbolize/symbol_index.h"
#include "symbolize/symbolizer.h"

namespace d9::symbolize {

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

}  // namespace d9::symbolize
