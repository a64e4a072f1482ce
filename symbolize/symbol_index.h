// Address -> ELF symbol for one module, built once from libdwfl's symbol table (.symtab, or
// .dynsym, plus .gnu_debugdata). dwfl_module_addrinfo scans every symbol on each call,
// which costs tens of microseconds per address in libc-sized tables; this sorts once.
#pragma once

#include <elfutils/libdwfl.h>

#include <cstdint>
#include <vector>

namespace d9::symbolize {

class SymbolIndex {
 public:
  explicit SymbolIndex(Dwfl_Module* mod);

  // Name of the function symbol covering `addr` (a runtime address), as stored (mangled,
  // possibly with an @VERSION suffix), or nullptr. A sized symbol covers its own bytes; a
  // sizeless one (assembly) covers up to the next symbol or the end of its section. When
  // several do, the smallest sized symbol wins, then global over weak over local binding.
  const char* find(uint64_t addr) const;

  size_t size() const { return segments_.size(); }

 private:
  struct Segment {
    uint64_t lo, hi;
    const char* name;  // in libelf's string table, alive as long as the module
  };
  std::vector<Segment> segments_;  // sorted, disjoint
};

}  // namespace d9::symbolize
