#include "symbolize/symbol_index.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace d9::symbolize {
namespace {

struct Sym {
  uint64_t lo, hi;  // hi: end of the section for a sizeless symbol, until cut
  const char* name;
  uint32_t order;  // position in the table
  bool sized;
  int binding;  // 0 global, 1 weak, 2 local
};

// The code symbols (see the header), in table order.
std::vector<Sym> collect(Dwfl_Module* mod) {
  std::vector<Sym> syms;
  int n = dwfl_module_getsymtab(mod);
  if (n > 1) syms.reserve(static_cast<size_t>(n));
  // Section ends for sizeless symbols, by section index, of the ELF last asked.
  Elf* ends_of = nullptr;
  std::vector<uint64_t> section_end;
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
      if (elf == nullptr) continue;
      if (elf != ends_of) {
        ends_of = elf;
        section_end.clear();
      }
      if (shndx >= section_end.size()) section_end.resize(shndx + 1, 0);
      if (section_end[shndx] == 0) {
        GElf_Shdr shdr;
        Elf_Scn* scn = elf_getscn(elf, shndx);
        if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) continue;
        section_end[shndx] = shdr.sh_addr + shdr.sh_size;
      }
      hi = section_end[shndx] + bias;
      if (hi <= addr) continue;
    }
    syms.push_back({addr, hi, name, static_cast<uint32_t>(i), sym.st_size != 0, binding});
  }
  return syms;
}

// Orders candidates for one address, best first.
using Rank = std::tuple<bool, uint64_t, int, uint64_t, uint32_t>;
Rank rank(const Sym& s) {
  return Rank(!s.sized, s.sized ? s.hi - s.lo : 0, s.binding, s.lo, s.order);
}

}  // namespace

SymbolIndex::SymbolIndex(Dwfl_Module* mod) {
  std::vector<Sym> syms = collect(mod);
  std::sort(syms.begin(), syms.end(), [](const Sym& a, const Sym& b) {
    return a.lo != b.lo ? a.lo < b.lo : a.order < b.order;
  });
  // A sizeless symbol ends where the next one starts.
  for (size_t i = 0; i < syms.size(); ++i) {
    if (syms[i].sized) continue;
    for (size_t j = i + 1; j < syms.size(); ++j) {
      if (syms[j].lo > syms[i].lo) {
        syms[i].hi = std::min(syms[i].hi, syms[j].lo);
        break;
      }
    }
  }

  // Sweep over the boundaries, opening symbols in address order and closing them in end
  // order: between two boundaries the best open symbol owns the addresses. Sorted by
  // address and table order, a symbol's position stands for the last two ranks.
  std::vector<std::pair<uint64_t, uint32_t>> closes(syms.size());
  for (size_t i = 0; i < syms.size(); ++i) closes[i] = {syms[i].hi, static_cast<uint32_t>(i)};
  std::sort(closes.begin(), closes.end());
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
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  const size_t n = syms.size();
  size_t o = 0, c = 0;
  auto next_boundary = [&] {
    return std::min(o < n ? syms[o].lo : kNone, c < n ? closes[c].first : kNone);
  };
  while (o < n || c < n) {
    uint64_t at = next_boundary();
    for (; o < n && syms[o].lo == at; ++o) {
      open.push_back(key(static_cast<uint32_t>(o)));
      std::push_heap(open.begin(), open.end(), worse);
    }
    for (; c < n && closes[c].first == at; ++c) closed[closes[c].second] = true;
    while (!open.empty() && closed[std::get<3>(open.front())]) {
      std::pop_heap(open.begin(), open.end(), worse);
      open.pop_back();
    }
    uint64_t next = next_boundary();
    if (open.empty() || next == kNone) continue;
    const char* name = syms[std::get<3>(open.front())].name;
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

std::vector<const char*> SymbolIndex::find_once(Dwfl_Module* mod, std::span<const uint64_t> addrs) {
  const size_t k = addrs.size();
  std::vector<const char*> names(k, nullptr);
  if (k == 0) return names;
  std::vector<Sym> syms = collect(mod);
  auto first_at_or_above = [&addrs](uint64_t a) {
    return static_cast<size_t>(std::lower_bound(addrs.begin(), addrs.end(), a) - addrs.begin());
  };
  // The highest symbol start at or below each address: a sizeless symbol covers an
  // address only if it starts there, as it ends where the next symbol starts.
  std::vector<uint64_t> nearest(k, 0);
  for (const Sym& s : syms) {
    size_t j = first_at_or_above(s.lo);
    if (j < k) nearest[j] = std::max(nearest[j], s.lo);
  }
  for (size_t j = 1; j < k; ++j) nearest[j] = std::max(nearest[j], nearest[j - 1]);

  std::vector<const Sym*> best(k, nullptr);
  for (const Sym& s : syms) {
    for (size_t j = first_at_or_above(s.lo); j < k && addrs[j] < s.hi; ++j) {
      if (!s.sized && nearest[j] != s.lo) break;  // a later symbol starts before addrs[j]
      if (best[j] == nullptr || rank(s) < rank(*best[j])) best[j] = &s;
    }
  }
  for (size_t j = 0; j < k; ++j) names[j] = best[j] != nullptr ? best[j]->name : nullptr;
  return names;
}

}  // namespace d9::symbolize
