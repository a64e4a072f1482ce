#include "symbolize/symbol_index.h"

#include <algorithm>
#include <tuple>

namespace d9::symbolize {

SymbolIndex::SymbolIndex(Dwfl_Module* mod) {
  struct Sym {
    uint64_t lo, hi;
    const char* name;
    bool sized;
    int binding;  // 0 global, 1 weak, 2 local
  };
  std::vector<Sym> syms;
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &bias);
    if (name == nullptr || name[0] == '\0' || shndx == SHN_UNDEF || shndx == SHN_ABS || addr == 0) {
      continue;
    }
    int type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
    int bind = GELF_ST_BIND(sym.st_info);
    int binding = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
    uint64_t hi = addr + sym.st_size;
    if (sym.st_size == 0) {
      // Until the end of its section for now; cut at the next symbol below.
      GElf_Shdr shdr;
      Elf_Scn* scn = elf != nullptr ? elf_getscn(elf, shndx) : nullptr;
      if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) continue;
      hi = shdr.sh_addr + shdr.sh_size + bias;
      if (hi <= addr) continue;
    }
    syms.push_back({addr, hi, name, sym.st_size != 0, binding});
  }
  std::sort(syms.begin(), syms.end(), [](const Sym& a, const Sym& b) { return a.lo < b.lo; });
  for (size_t i = 0; i < syms.size(); ++i) {
    if (syms[i].sized) continue;
    for (size_t j = i + 1; j < syms.size(); ++j) {
      if (syms[j].lo > syms[i].lo) {
        syms[i].hi = std::min(syms[i].hi, syms[j].lo);
        break;
      }
    }
  }

  // Sweep: between two boundaries the best open symbol owns the addresses.
  struct Event {
    uint64_t at;
    bool open;
    uint32_t sym;
  };
  std::vector<Event> events;
  events.reserve(syms.size() * 2);
  for (size_t i = 0; i < syms.size(); ++i) {
    events.push_back({syms[i].lo, true, static_cast<uint32_t>(i)});
    events.push_back({syms[i].hi, false, static_cast<uint32_t>(i)});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.at < b.at; });
  // Best first: sized, then smaller, then stronger binding, then first in address order.
  using Key = std::tuple<bool, uint64_t, int, uint32_t>;
  auto key = [&syms](uint32_t i) {
    const Sym& s = syms[i];
    return Key(!s.sized, s.sized ? s.hi - s.lo : 0, s.binding, i);
  };
  // The open symbols as a heap, best on top; a closed one leaves only when it reaches the
  // top. A tree would allocate a node per symbol: libc's table has tens of thousands.
  std::vector<Key> open;
  std::vector<bool> closed(syms.size(), false);
  auto worse = [](const Key& a, const Key& b) { return a > b; };
  for (size_t i = 0; i < events.size();) {
    uint64_t at = events[i].at;
    for (; i < events.size() && events[i].at == at; ++i) {
      if (events[i].open) {
        open.push_back(key(events[i].sym));
        std::push_heap(open.begin(), open.end(), worse);
      } else {
        closed[events[i].sym] = true;
      }
    }
    while (!open.empty() && closed[std::get<3>(open.front())]) {
      std::pop_heap(open.begin(), open.end(), worse);
      open.pop_back();
    }
    if (open.empty() || i == events.size()) continue;
    const char* name = syms[std::get<3>(open.front())].name;
    uint64_t next = events[i].at;
    if (!segments_.empty() && segments_.back().hi == at && segments_.back().name == name) {
      segments_.back().hi = next;
    } else {
      segments_.push_back({at, next, name});
    }
  }
}

const char* SymbolIndex::find(uint64_t addr) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), addr,
                             [](uint64_t a, const Segment& s) { return a < s.lo; });
  if (it == segments_.begin()) return nullptr;
  --it;
  return addr < it->hi ? it->name : nullptr;
}

}  // namespace d9::symbolize
