// Address lookups: the frames at an address (DWARF function instances, inline call sites
// and line table, else the symbol table), cached per address; prepare()'s batched passes.
#include "symbolize/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "symbolize/dwarf_index.h"
#include "symbolize/elf_files.h"
#include "symbolize/module_rec.h"
#include "symbolize/symbol_index.h"

namespace d9::symbolize {

// Above the 47-bit user address space of x86-64 (and 48-bit AArch64): kernel text, unless a
// module is mapped there (5-level paging lets a process ask for higher user addresses).
constexpr uint64_t kKernelStart = 0x800000000000ull;

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

}  // namespace

Symbolizer::~Symbolizer() {
  if (dwfl_ != nullptr) dwfl_end(dwfl_);  // before the dwz files its Dwarfs point to
  recs_.clear();
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
