// A C program: links libc only, so libstdc++ is in the process only as libd9.so's own
// dependency. Allocates three blocks of telling sizes and frees them; prints nothing, so
// stdio allocates no buffer.
//
// With "unwinder" it then says whether libunwind is mapped ("libunwind mapped" or "libunwind
// not mapped"); with "unwinder wait", after waiting up to 2 s for it to be.
#define _POSIX_C_SOURCE 200809L  // nanosleep, getline

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int libunwind_mapped(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return 0;
  char* line = NULL;
  size_t cap = 0;
  int found = 0;
  while (!found && getline(&line, &cap, maps) > 0) found = strstr(line, "libunwind") != NULL;
  free(line);
  fclose(maps);
  return found;
}

int main(int argc, char** argv) {
  static const size_t kSizes[] = {1111, 2222, 3333};
  for (size_t i = 0; i < sizeof kSizes / sizeof kSizes[0]; ++i) {
    char* volatile p = malloc(kSizes[i]);
    if (p == NULL) return 1;
    memset(p, 1, kSizes[i]);
    free(p);
  }
  if (argc >= 2 && strcmp(argv[1], "unwinder") == 0) {
    int wait = argc >= 3 && strcmp(argv[2], "wait") == 0;
    struct timespec pause = {0, 10 * 1000 * 1000};
    int mapped = libunwind_mapped();
    for (int i = 0; wait && !mapped && i < 200; ++i) {
      nanosleep(&pause, NULL);
      mapped = libunwind_mapped();
    }
    printf("libunwind %s\n", mapped ? "mapped" : "not mapped");
  }
  return 0;
}
