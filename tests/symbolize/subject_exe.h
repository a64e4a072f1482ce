// See subject_exe.cc.
#pragma once

#include "tests/symbolize/symtest.h"

namespace symtest {
void outer_fn(SymtestChain* c);  // outer_fn -> mid_fn -> inner_fn (both inlined) -> probe
// internal_fn -> Outer::Inner::probe (inlined) -> probe. Outer sits in an anonymous
// namespace, so its members have internal linkage and no DWARF linkage name.
void internal_fn(SymtestProbe* p);
}  // namespace symtest

namespace ns {
struct Klass {
  int method(int x);  // probe in ns::Klass::method(int)
  SymtestProbe probe;
};
}  // namespace ns
