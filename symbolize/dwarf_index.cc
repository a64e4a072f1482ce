#include "symbolize/dwarf_index.h"

#include <dwarf.h>

#include <algorithm>
#include <set>
#include <utility>

namespace d9::symbolize {

namespace {

bool IsFunction(int tag) {
  return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_entry_point;
}

bool IsScope(int tag) {
  return tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
         tag == DW_TAG_union_type;
}

}  // namespace

CuIndex::CuIndex(Dwarf_Die cu) : cu_(cu) {
  struct Range {
    Dwarf_Addr lo, hi;
    int32_t instance, depth;
  };
  std::vector<Range> ranges;
  std::vector<int32_t> depth;  // per instance

  // Depth-first over the unit; each item is the first child of a DIE to visit.
  struct Item {
    Dwarf_Die first;
    int32_t parent;   // enclosing function instance
    uint32_t prefix;  // index into prefixes_
  };
  std::vector<Item> stack;
  Dwarf_Die child;
  if (dwarf_child(&cu_, &child) == 0) stack.push_back({child, -1, 0});
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    Dwarf_Die die = item.first;
    do {
      int tag = dwarf_tag(&die);
      if (IsFunction(tag)) {
        if (tag == DW_TAG_subprogram && item.prefix != 0) {
          decl_prefix_[dwarf_dieoffset(&die)] = item.prefix;
        }
        Dwarf_Addr base, lo, hi;
        ptrdiff_t off = 0;
        int32_t id = static_cast<int32_t>(funcs_.size());
        int32_t d = item.parent < 0 ? 0 : depth[item.parent] + 1;
        bool has_code = false;
        while ((off = dwarf_ranges(&die, off, &base, &lo, &hi)) > 0) {
          if (hi > lo) {
            ranges.push_back({lo, hi, id, d});
            has_code = true;
          }
        }
        // Declarations and abstract instances have no code, nor do their children.
        if (has_code) {
          funcs_.push_back({die, item.parent});
          depth.push_back(d);
          if (dwarf_child(&die, &child) == 0) stack.push_back({child, id, item.prefix});
        }
      } else if (tag == DW_TAG_lexical_block) {
        if (dwarf_child(&die, &child) == 0) stack.push_back({child, item.parent, item.prefix});
      } else if (IsScope(tag) && item.parent < 0) {
        if (dwarf_child(&die, &child) == 0) {
          const char* name = dwarf_diename(&die);
          prefixes_.push_back(prefixes_[item.prefix] +
                              (name != nullptr ? name : "(anonymous namespace)") + "::");
          stack.push_back({child, -1, static_cast<uint32_t>(prefixes_.size() - 1)});
        }
      }
    } while (dwarf_siblingof(&die, &die) == 0);
  }

  // Sweep the range boundaries; between two, the deepest open instance owns the addresses
  // (ties, from overlapping siblings in odd DWARF, go to the first in the unit).
  struct Event {
    Dwarf_Addr at;
    bool open;
    int32_t range;
  };
  std::vector<Event> events;
  events.reserve(ranges.size() * 2);
  for (size_t i = 0; i < ranges.size(); ++i) {
    events.push_back({ranges[i].lo, true, static_cast<int32_t>(i)});
    events.push_back({ranges[i].hi, false, static_cast<int32_t>(i)});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.at < b.at; });
  std::multiset<std::pair<int32_t, int32_t>> open;  // (-depth, instance)
  for (size_t i = 0; i < events.size();) {
    Dwarf_Addr at = events[i].at;
    for (; i < events.size() && events[i].at == at; ++i) {
      const Range& r = ranges[events[i].range];
      std::pair<int32_t, int32_t> key(-r.depth, r.instance);
      if (events[i].open) {
        open.insert(key);
      } else {
        open.erase(open.find(key));
      }
    }
    if (open.empty() || i == events.size()) continue;
    int32_t owner = open.begin()->second;
    Dwarf_Addr next = events[i].at;
    if (!segments_.empty() && segments_.back().hi == at && segments_.back().instance == owner) {
      segments_.back().hi = next;
    } else {
      segments_.push_back({at, next, owner});
    }
  }
}

void CuIndex::chain(Dwarf_Addr addr, std::vector<Dwarf_Die>* out) const {
  out->clear();
  auto it = std::upper_bound(segments_.begin(), segments_.end(), addr,
                             [](Dwarf_Addr a, const Segment& s) { return a < s.lo; });
  if (it == segments_.begin()) return;
  --it;
  if (addr >= it->hi) return;
  for (int32_t i = it->instance; i >= 0; i = funcs_[i].parent) {
    Dwarf_Die die = funcs_[i].die;
    out->push_back(die);
    if (dwarf_tag(&die) != DW_TAG_inlined_subroutine) break;  // the real function
  }
}

const std::string* CuIndex::prefix(Dwarf_Die* decl) const {
  Dwarf_Die cu;
  if (dwarf_diecu(decl, &cu, nullptr, nullptr) == nullptr || cu.addr != cu_.addr) return nullptr;
  auto it = decl_prefix_.find(dwarf_dieoffset(decl));
  return &prefixes_[it != decl_prefix_.end() ? it->second : 0];
}

}  // namespace d9::symbolize
