// libearly_dso.so: allocates from its constructor. The loader runs the constructors of a
// program's libraries before libd9's own (libd9 is preloaded, so it comes first in the
// search order and is initialised last), so these allocations are sampled before d9 has
// loaded libunwind. Static initialisers of C++ libraries allocate the same way.
#include <stdlib.h>

#include "tests/programs/sites.h"

namespace {

constexpr int kBlocks = 8192;  // 8 MiB in 1 KiB blocks, kept until exit
constexpr size_t kBlockSize = 1024;
void* g_blocks[kBlocks];

}  // namespace

SITE(early) void early_site() {
  for (void*& b : g_blocks) {
    b = malloc(kBlockSize);
    use(b);
  }
}

__attribute__((constructor)) static void early_init() {
  early_site();
}

SITE_BOUNDS(early)

// Prints the site line for the test (called from main, once stdout works).
extern "C" __attribute__((visibility("default"))) void early_dso_report() {
  REPORT_SITE(early, uint64_t{kBlocks} * kBlockSize, kBlocks);
}
