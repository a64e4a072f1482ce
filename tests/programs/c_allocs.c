// A C program: links libc only, so libstdc++ is in the process only as libd9.so's own
// dependency. Allocates three blocks of telling sizes and frees them; prints nothing, so
// stdio allocates no buffer.
#include <stdlib.h>
#include <string.h>

int main(void) {
  static const size_t kSizes[] = {1111, 2222, 3333};
  for (size_t i = 0; i < sizeof kSizes / sizeof kSizes[0]; ++i) {
    char* volatile p = malloc(kSizes[i]);
    if (p == NULL) return 1;
    memset(p, 1, kSizes[i]);
    free(p);
  }
  return 0;
}
