// Test subjects for the symbolizer: code compiled -O2 -g that reports, for each probe, the
// return address of a call and the source line of that call (__LINE__), so the tests assert
// exact lines without hard-coding numbers.
#pragma once

#include <cstdint>

#if defined(__clang__)
#define SYMTEST_NOINLINE __attribute__((noinline))
#else
#define SYMTEST_NOINLINE __attribute__((noipa))
#endif
#define SYMTEST_INLINE inline __attribute__((always_inline))
// Keeps a call out of tail position, so its return address stays in the caller.
#define SYMTEST_BARRIER() asm volatile("" ::: "memory")

struct SymtestProbe {
  uint64_t addr = 0;  // return address of the probe call
  int line = 0;       // line of the probe call
};

// Inline chain outer -> mid -> inner: lines of the two inlined call sites and the probe.
struct SymtestChain {
  int call_mid_line = 0;
  int call_inner_line = 0;
  SymtestProbe leaf;
};

// Filled by the shared libraries' symtest_dso_fill().
struct SymtestDsoProbes {
  SymtestChain chain;       // dso_outer (noinline) -> dso_inlined (always_inline) -> probe
  SymtestProbe direct;      // probe in the noinline dso_direct
  uint64_t local_function;  // address of a static function (stripped library: no symbol)
  SymtestProbe exported;    // probe in an exported function
};
using SymtestDsoFill = void (*)(SymtestDsoProbes*);

// Records __builtin_return_address(0) and `line` in *p. Each subject defines its own copy.
#define SYMTEST_DEFINE_RECORD                                              \
  SYMTEST_NOINLINE static void symtest_record(SymtestProbe* p, int line) { \
    p->addr = reinterpret_cast<uint64_t>(__builtin_return_address(0));     \
    p->line = line;                                                        \
    SYMTEST_BARRIER();                                                     \
  }
