// Address -> ELF symbol for one module, from libdwfl's symbol table (.symtab, or .dynsym,
// plus .gnu_debugdata). dwfl_module_addrinfo scans every symbol on each call, which costs
// tens of microseconds per address in libc-sized tables; SymbolIndex sorts once, and
// SymbolIndex::find_once answers a batch of addresses from one pass without sorting.
//
// The rules, the same for both: the code symbols are FUNC, IFUNC and NOTYPE ones with a
// name, a section and a non-zero address. A sized symbol covers its own bytes; a sizeless
// one (assembly) covers up to the next symbol or the end of its section. When several
// cover an address, the smallest sized symbol wins, then global over weak over local
// binding, then the lowest address, then the first in the table.
#pragma once

#include <elfutils/libdwfl.h>

#include <cstdint>
#include <span>
#include <vector>

namespace d9::symbolize {

class SymbolIndex {
 public:
  explicit SymbolIndex(Dwfl_Module* mod);

  // Name of the function symbol covering `addr` (a runtime address), as stored (mangled,
  // possibly with an @VERSION suffix), or nullptr.
  const char* find(uint64_t addr) const;

  size_t size() const { return segments_.size(); }

  // What find() would answer for each of `addrs` (ascending), from one pass over the table
  // and no index: for a handful of addresses a third of the cost of building one (libc's
  // 10k symbols: 0.4 against 1.2 ms).
  static std::vector<const char*> find_once(Dwfl_Module* mod, std::span<const uint64_t> addrs);

 private:
  struct Segment {
    uint64_t lo, hi;
    const char* name;  // in libelf's string table, alive as long as the module
  };
  std::vector<Segment> segments_;  // sorted, disjoint
};

}  // namespace d9::symbolize
