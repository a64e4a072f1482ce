#include "symbolize/dwarf_index.h"

#include <dwarf.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

namespace d9::symbolize {

namespace {

bool IsFunction(int tag) {
  return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_entry_point;
}

constexpr Dwarf_Off kUnitEnd = ~Dwarf_Off{0};

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
    int32_t parent;  // enclosing function instance
    int32_t scope;   // enclosing namespace
  };
  std::vector<Item> stack;
  Dwarf_Die child;
  if (dwarf_child(&cu_, &child) == 0) stack.push_back({child, -1, -1});
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    Dwarf_Die die = item.first;
    const Dwarf_Off end = item.scope >= 0 ? scopes_[item.scope].end : kUnitEnd;
    bool more;
    do {
      int tag = dwarf_tag(&die);
      int32_t scope = -1;  // a scope found here: it ends where its next sibling starts
      if (IsFunction(tag)) {
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
          if (dwarf_child(&die, &child) == 0) stack.push_back({child, id, item.scope});
        }
      } else if (tag == DW_TAG_lexical_block) {
        if (dwarf_child(&die, &child) == 0) stack.push_back({child, item.parent, item.scope});
      } else if (IsScope(tag) && item.parent < 0) {
        scope = static_cast<int32_t>(scopes_.size());
        bool is_namespace = tag == DW_TAG_namespace;
        scopes_.push_back({dwarf_dieoffset(&die), end, item.scope, is_namespace, die, {}});
        if (is_namespace && dwarf_child(&die, &child) == 0) stack.push_back({child, -1, scope});
      }
      more = dwarf_siblingof(&die, &die) == 0;
      if (scope >= 0 && more) scopes_[scope].end = dwarf_dieoffset(&die);
    } while (more);
  }
  sort_scopes();

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
  static const std::string kTop;
  Dwarf_Off offset = dwarf_dieoffset(decl);
  int32_t s = innermost(offset);
  while (s >= 0 && !scopes_[s].read) {  // a class: list the classes nested in it, look again
    scopes_[s].read = true;
    Dwarf_Die child;
    if (dwarf_child(&scopes_[s].die, &child) == 0) add_scopes(child, s);
    s = innermost(offset);
  }
  return s < 0 ? &kTop : &prefix_of(s);
}

void CuIndex::add_scopes(Dwarf_Die die, int32_t parent) const {
  bool more;
  do {
    int32_t scope = -1;
    if (IsScope(dwarf_tag(&die))) {
      scope = static_cast<int32_t>(scopes_.size());
      scopes_.push_back({dwarf_dieoffset(&die), scopes_[parent].end, parent, false, die, {}});
    }
    more = dwarf_siblingof(&die, &die) == 0;
    if (scope >= 0 && more) scopes_[scope].end = dwarf_dieoffset(&die);
  } while (more);
  sort_scopes();
}

void CuIndex::sort_scopes() const {
  by_begin_.resize(scopes_.size());
  for (size_t i = 0; i < by_begin_.size(); ++i) by_begin_[i] = static_cast<int32_t>(i);
  std::sort(by_begin_.begin(), by_begin_.end(),
            [this](int32_t a, int32_t b) { return scopes_[a].begin < scopes_[b].begin; });
}

int32_t CuIndex::innermost(Dwarf_Off offset) const {
  // Scopes nest or are disjoint, so the innermost one around `offset` is the last to begin
  // at or before it, or one of that one's ancestors.
  auto it = std::upper_bound(by_begin_.begin(), by_begin_.end(), offset,
                             [this](Dwarf_Off o, int32_t s) { return o < scopes_[s].begin; });
  if (it == by_begin_.begin()) return -1;
  int32_t s = *std::prev(it);
  while (s >= 0 && offset >= scopes_[s].end) s = scopes_[s].parent;
  return s;
}

const std::string& CuIndex::prefix_of(int32_t s) const {
  Scope& scope = scopes_[s];
  if (scope.prefix.empty()) {  // never empty once built: it ends in "::"
    const char* name = dwarf_diename(&scope.die);
    scope.prefix = (scope.parent >= 0 ? prefix_of(scope.parent) : std::string()) +
                   (name != nullptr ? name : "(anonymous namespace)") + "::";
  }
  return scope.prefix;
}

}  // namespace d9::symbolize
