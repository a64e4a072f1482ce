// Address -> chain of function instances for one DWARF compile unit, built in one walk.
//
// dwarf_getscopes and dwarf_getscopes_die walk the unit's DIE tree from the top on every
// call; for the large units of -O2 C++ (thousands of inlined instances) that cost
// milliseconds per address. CuIndex walks the unit once, keeps every function instance with
// code (DW_TAG_subprogram, DW_TAG_inlined_subroutine, DW_TAG_entry_point) and its enclosing
// instance, and paints their address ranges, innermost over outer, into sorted segments.
// A lookup is then a binary search and a walk up the parents.
//
// It also remembers the namespace/class prefix of every subprogram DIE declared inside a
// namespace or class, to name functions that have no DW_AT_linkage_name.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace d9::symbolize {

class CuIndex {
 public:
  explicit CuIndex(Dwarf_Die cu);

  // Function instances containing `addr` (a DWARF address: runtime address minus bias),
  // innermost first, ending with the real function. Empty when none does.
  void chain(Dwarf_Addr addr, std::vector<Dwarf_Die>* out) const;

  // "ns::Klass::" for a subprogram DIE of this unit declared in namespace ns, class Klass;
  // "" for one at the top of this unit; nullptr for a DIE of another unit.
  const std::string* prefix(Dwarf_Die* decl) const;

  Dwarf_Die* cu() { return &cu_; }

  // Function names by DIE offset, filled by the symbolizer.
  struct Name {
    std::string name;
    bool linkage;  // from DW_AT_linkage_name (else the qualified DW_AT_name, or "")
  };
  std::unordered_map<Dwarf_Off, Name>& names() { return names_; }

  size_t instances() const { return funcs_.size(); }
  size_t segments() const { return segments_.size(); }

 private:
  struct Instance {
    Dwarf_Die die;
    int32_t parent;  // enclosing instance, -1 for a top-level function
  };
  struct Segment {
    Dwarf_Addr lo, hi;
    int32_t instance;
  };

  Dwarf_Die cu_;
  std::vector<Instance> funcs_;
  std::vector<Segment> segments_;                        // sorted, disjoint
  std::vector<std::string> prefixes_{std::string()};     // [0] = top level
  std::unordered_map<Dwarf_Off, uint32_t> decl_prefix_;  // subprogram DIE -> prefixes_ index
  std::unordered_map<Dwarf_Off, Name> names_;
};

}  // namespace d9::symbolize
