// Cost of resolving 10k distinct addresses: cold (first use of each module's DWARF and symbol
// tables), again with tables loaded but addresses new, then from the cache. Two address
// sets: this executable (DWARF, -O2 -g) and the executable code of every loaded module
// (mostly symbol tables only). Run by hand: symbolize_bench [count]
#include <link.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "symbolize/symbolizer.h"

namespace {

struct Range {
  uint64_t lo, hi;
  bool main;
};

int CollectText(struct dl_phdr_info* info, size_t, void* data) {
  auto* ranges = static_cast<std::vector<Range>*>(data);
  bool main = ranges->empty();  // the main program comes first
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0) {
      ranges->push_back(
          {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, main});
    }
  }
  return 0;
}

// `count` distinct addresses spread evenly over the ranges, shifted by `shift` bytes.
std::vector<uint64_t> Spread(const std::vector<Range>& ranges, bool main_only, size_t count,
                             uint64_t shift) {
  uint64_t total = 0;
  for (const Range& r : ranges) {
    if (!main_only || r.main) total += r.hi - r.lo;
  }
  std::vector<uint64_t> out;
  uint64_t step = total / count;
  if (step < 2) step = 2;
  for (const Range& r : ranges) {
    if (main_only && !r.main) continue;
    for (uint64_t a = r.lo + 1 + shift; a < r.hi && out.size() < count; a += step) out.push_back(a);
  }
  return out;
}

// Resident set size in KiB.
long RssKib() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, nullptr, 10);
  }
  fclose(f);
  return kib;
}

double Run(d9::symbolize::Symbolizer& s, const std::vector<uint64_t>& addrs, size_t* frames) {
  auto t0 = std::chrono::steady_clock::now();
  size_t n = 0;
  for (uint64_t a : addrs) n += s.resolve(a).size();
  auto t1 = std::chrono::steady_clock::now();
  *frames = n;
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

void Bench(const char* label, const std::vector<Range>& ranges, bool main_only, size_t count) {
  std::vector<uint64_t> cold = Spread(ranges, main_only, count, 0);
  std::vector<uint64_t> warm = Spread(ranges, main_only, count, 1);
  long rss0 = RssKib();
  auto t0 = std::chrono::steady_clock::now();
  d9::symbolize::Symbolizer s;
  auto t1 = std::chrono::steady_clock::now();
  size_t frames = 0;
  double cold_us = Run(s, cold, &frames);
  size_t unknown = 0;
  for (uint64_t a : cold) unknown += s.resolve(a)[0].function.rfind("[unknown]", 0) == 0;
  size_t frames_warm = 0;
  double warm_us = Run(s, warm, &frames_warm);
  size_t frames_cached = 0;
  double cached_us = Run(s, cold, &frames_cached);
  std::printf("%s: %zu addresses, %zu modules, constructor %.0f us\n", label, cold.size(),
              s.modules().size(), std::chrono::duration<double, std::micro>(t1 - t0).count());
  std::printf("  cold    %9.0f us total  %7.2f us/address  (%zu frames, %zu unknown)\n", cold_us,
              cold_us / cold.size(), frames, unknown);
  std::printf("  warm    %9.0f us total  %7.2f us/address  (new addresses, tables loaded)\n",
              warm_us, warm_us / warm.size());
  std::printf("  cached  %9.0f us total  %7.3f us/address\n", cached_us, cached_us / cold.size());
  std::printf("  resident memory +%ld KiB (file mappings, indexes, cache)\n", RssKib() - rss0);
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoul(argv[1], nullptr, 10) : 10000;
  std::vector<Range> ranges;
  dl_iterate_phdr(CollectText, &ranges);
  Bench("this executable (DWARF)", ranges, true, count);
  Bench("all loaded modules", ranges, false, count);
  return 0;
}
