// Address -> chain of function instances for one DWARF compile unit, built in one walk.
//
// dwarf_getscopes and dwarf_getscopes_die walk the unit's DIE tree from the top on every
// call; for the large units of -O2 C++ (thousands of inlined instances) that cost
// milliseconds per address. CuIndex walks the unit once, keeps every function instance with
// code (DW_TAG_subprogram, DW_TAG_inlined_subroutine, DW_TAG_entry_point) and its enclosing
// instance, and paints their address ranges, innermost over outer, into sorted segments.
// A lookup is then a binary search and a walk up the parents.
//
// It also remembers where the unit's namespaces and classes lie (their DIE offset ranges),
// to name functions that have no DW_AT_linkage_name by the scopes of their declaration.
// Class bodies hold only declarations (compilers put every function with code at namespace
// level), so the walk skips them; a class's nested classes are read when a name needs them.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>
#include <deque>
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

  // "ns::Klass::" for a DIE of this unit declared in namespace ns, class Klass; "" for one
  // at the top of this unit; nullptr for a DIE of another unit.
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
  // A namespace, class, struct or union: its DIE and the offsets of its subtree.
  struct Scope {
    Dwarf_Off begin, end;  // [its DIE's offset, its next sibling's (or its parent's end))
    int32_t parent;        // enclosing scope; -1 at the top of the unit
    bool read;             // its nested scopes are listed (namespaces: from the start)
    Dwarf_Die die;
    std::string prefix;  // "ns::Klass::", once asked for
  };

  // Lists the scopes among `first` and its siblings, the children of scope `parent`.
  void add_scopes(Dwarf_Die first, int32_t parent) const;
  void sort_scopes() const;
  // Index of the innermost listed scope around `offset`, or -1.
  int32_t innermost(Dwarf_Off offset) const;
  // "ns::Klass::" of scope `s`, built on first use.
  const std::string& prefix_of(int32_t s) const;

  Dwarf_Die cu_;
  std::vector<Instance> funcs_;
  std::vector<Segment> segments_;  // sorted, disjoint
  // In the order found; by_begin_ sorts them by begin. Grows as class bodies are read (a
  // deque, so that a prefix handed out stays where it is).
  mutable std::deque<Scope> scopes_;
  mutable std::vector<int32_t> by_begin_;
  std::unordered_map<Dwarf_Off, Name> names_;
};

}  // namespace d9::symbolize
