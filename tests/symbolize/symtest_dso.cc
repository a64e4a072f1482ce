// A shared library the symbolizer tests dlopen: an inlined callee, a noinline function, a
// static function and an exported C++ method. Built several ways (see CMakeLists.txt):
// with DWARF, with DWARF split into a .debug file, and stripped; SYMTEST_NS names the
// namespace so each build has its own function names.
#include "tests/symbolize/symtest.h"

#ifndef SYMTEST_NS
#define SYMTEST_NS symtest_dso
#endif

namespace SYMTEST_NS {

SYMTEST_DEFINE_RECORD

SYMTEST_INLINE void dso_inlined(SymtestChain* c, int line) {
  c->call_mid_line = line;
  symtest_record(&c->leaf, __LINE__);
  SYMTEST_BARRIER();
}

SYMTEST_NOINLINE void dso_outer(SymtestChain* c) {
  dso_inlined(c, __LINE__);  // passes the line of its own call site
  SYMTEST_BARRIER();
}

SYMTEST_NOINLINE void dso_direct(SymtestProbe* p) {
  symtest_record(p, __LINE__);
  SYMTEST_BARRIER();
}

SYMTEST_NOINLINE static int dso_local(int x) {
  SYMTEST_BARRIER();
  return x * 3 + 1;
}

struct __attribute__((visibility("default"))) Widget {
  static void probe(SymtestProbe* p);
};

SYMTEST_NOINLINE void Widget::probe(SymtestProbe* p) {
  symtest_record(p, __LINE__);
  SYMTEST_BARRIER();
}

}  // namespace SYMTEST_NS

extern "C" __attribute__((visibility("default"))) void symtest_dso_fill(SymtestDsoProbes* out) {
  SYMTEST_NS::dso_outer(&out->chain);
  SYMTEST_NS::dso_direct(&out->direct);
  int (*volatile local)(int) = SYMTEST_NS::dso_local;
  out->local_function = reinterpret_cast<uint64_t>(local) + 1;  // +1: as a return address
  local(1);
  SYMTEST_NS::Widget::probe(&out->exported);
}
