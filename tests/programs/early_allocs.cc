// Links libearly_dso.so, whose constructor allocates 8 MiB before libd9's constructor has
// run, then allocates as much again from main: the end-to-end test checks that both sites
// get their stacks. Prints "site NAME START END BYTES COUNT" for each.
#include <stdlib.h>

#include "tests/programs/sites.h"

extern "C" void early_dso_report();

namespace {

constexpr int kBlocks = 8192;
constexpr size_t kBlockSize = 1024;
void* g_blocks[kBlocks];

}  // namespace

SITE(late) void late_site() {
  for (void*& b : g_blocks) {
    b = malloc(kBlockSize);
    use(b);
  }
}

SITE_BOUNDS(late)

int main() {
  late_site();
  early_dso_report();
  REPORT_SITE(late, uint64_t{kBlocks} * kBlockSize, kBlocks);
  return 0;
}
