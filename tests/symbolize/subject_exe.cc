// Test subject linked into the symbolizer test executable, compiled -O2 -g: a three-level
// inline chain and a C++ method with a mangled name.
#include "tests/symbolize/subject_exe.h"

namespace symtest {

SYMTEST_DEFINE_RECORD

SYMTEST_INLINE void inner_fn(SymtestChain* c, int line) {
  c->call_inner_line = line;
  symtest_record(&c->leaf, __LINE__);
  SYMTEST_BARRIER();
}

// Each call passes its own line: the call site an inlined frame must report.
SYMTEST_INLINE void mid_fn(SymtestChain* c, int line) {
  c->call_mid_line = line;
  inner_fn(c, __LINE__);
  SYMTEST_BARRIER();
}

SYMTEST_NOINLINE void outer_fn(SymtestChain* c) {
  mid_fn(c, __LINE__);
  SYMTEST_BARRIER();
}

namespace {

struct Outer {
  struct Inner {
    static void probe(SymtestProbe* p);
  };
  int unused;
};

SYMTEST_INLINE void Outer::Inner::probe(SymtestProbe* p) {
  symtest_record(p, __LINE__);
  SYMTEST_BARRIER();
}

}  // namespace

SYMTEST_NOINLINE void internal_fn(SymtestProbe* p) {
  Outer::Inner::probe(p);
  SYMTEST_BARRIER();
}

}  // namespace symtest

namespace ns {

SYMTEST_NOINLINE int Klass::method(int x) {
  symtest::symtest_record(&probe, __LINE__);
  SYMTEST_BARRIER();
  return x + 1;
}

}  // namespace ns
