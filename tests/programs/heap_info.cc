// Subject of E2EHeapInfo: glibc's heap introspection as a service would use it.
// Prints "key value" lines: mallinfo2 and mallinfo fields before, while holding 64 MiB and
// after freeing it; malloc_trim's result with the resident size around it; mallctl's
// stats.allocated (when an allocator exports mallctl) next to mallinfo2's uordblks;
// malloc_info's return values. malloc_stats writes to stderr; malloc_info to stdout
// between "info-begin" and "info-end".
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

static long resident_kib() {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void print_info(const char* tag) {
  struct mallinfo2 m = mallinfo2();
  printf("%s.arena %zu\n%s.uordblks %zu\n%s.fordblks %zu\n%s.keepcost %zu\n%s.hblkhd %zu\n", tag,
         m.arena, tag, m.uordblks, tag, m.fordblks, tag, m.keepcost, tag, m.hblkhd);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  printf("%s.old_uordblks %d\n", tag, old.uordblks);
}

int main() {
  print_info("before");
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = malloc(1 << 20);
    memset(p, 1, 1 << 20);
    blocks.push_back(p);
  }
  print_info("holding");
  using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto mallctl = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    uint64_t epoch = 1;
    size_t len = sizeof(epoch);
    mallctl("epoch", &epoch, &len, &epoch, len);
    size_t allocated = 0;
    len = sizeof(allocated);
    mallctl("stats.allocated", &allocated, &len, nullptr, 0);
    printf("mallctl.allocated %zu\n", allocated);
    printf("holding.uordblks_again %zu\n", mallinfo2().uordblks);
  }
  for (void* p : blocks) free(p);
  print_info("freed");
  long rss_before = resident_kib();
  int trimmed = malloc_trim(0);
  long rss_after = resident_kib();
  printf("trim %d\nrss_before_trim_kib %ld\nrss_after_trim_kib %ld\n", trimmed, rss_before,
         rss_after);
  print_info("trimmed");
  malloc_stats();
  printf("info-begin\n");
  fflush(stdout);
  int rc = malloc_info(0, stdout);
  fflush(stdout);
  printf("info-end\ninfo %d\n", rc);
  errno = 0;
  int bad = malloc_info(1, stdout);
  printf("info_bad %d errno %d\n", bad, errno);
  return 0;
}
