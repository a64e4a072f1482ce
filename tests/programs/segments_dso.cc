// libsegments_dso.so: a shared library segments_subject loads with dlopen, calls (it
// allocates, through an inlined helper) and unloads with dlclose before it exits, so the
// golden test can check that addresses in an unloaded library still resolve at seal. The
// dlopen-loop mode loads, calls and unloads it again and again.
#include <stdint.h>
#include <stdlib.h>

namespace segdso {

// Sizes the test looks for; distinct from every other allocation of the subject.
constexpr size_t kDsoSize = 4343;

int g_helper_line = 0;
int g_call_line = 0;

__attribute__((always_inline)) inline void* dso_inline_helper(size_t n) {
  void* p = malloc((g_helper_line = __LINE__, n));  // records the malloc's own line
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

__attribute__((noinline, noclone)) void* dso_alloc(size_t n) {
  void* p = dso_inline_helper((g_call_line = __LINE__, n));  // the helper's call line
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

}  // namespace segdso

// Allocates `rounds` blocks of kDsoSize at the site above, frees them, and reports the
// source lines of the malloc (inlined helper) and of the helper's call (dso_alloc).
extern "C" __attribute__((visibility("default"))) void segdso_run(int rounds, int* helper_line,
                                                                  int* call_line) {
  for (int i = 0; i < rounds; ++i) free(segdso::dso_alloc(segdso::kDsoSize));
  *helper_line = segdso::g_helper_line;
  *call_line = segdso::g_call_line;
}

// Allocates `rounds` blocks at the same site, fills each with bytes that depend on `seed`,
// folds them into a checksum (FNV-1a) and frees them.
extern "C" __attribute__((visibility("default"))) uint64_t segdso_churn(int rounds, uint64_t seed) {
  uint64_t sum = 1469598103934665603ULL;
  for (int i = 0; i < rounds; ++i) {
    auto* p = static_cast<unsigned char*>(segdso::dso_alloc(segdso::kDsoSize));
    for (size_t j = 0; j < segdso::kDsoSize; ++j) {
      p[j] = static_cast<unsigned char>(seed + static_cast<uint64_t>(i) * 31 + j);
    }
    for (size_t j = 0; j < segdso::kDsoSize; j += 97) sum = (sum ^ p[j]) * 1099511628211ULL;
    free(p);
  }
  return sum;
}
