// Loaded and unloaded in a loop by cpu_stress: CPU samples land in a module that comes and
// goes between two refreshes of d9's unwind tables.
#include <cstdint>

extern "C" __attribute__((visibility("default"))) uint64_t dso_spin(uint64_t n) {
  uint64_t x = n;
  for (uint64_t i = 0; i < n; ++i) {
    x = x * 2862933555777941757ULL + 3037000493ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}
