#include "preload/log.h"

#include <unistd.h>

namespace d9::log {

void write_line(const char* const* parts, int count) {
  char buf[1024] = "d9: ";
  size_t n = 4;
  for (int i = 0; i < count; ++i) {
    for (const char* p = parts[i]; p && *p && n < sizeof(buf) - 1; ++p) buf[n++] = *p;
  }
  buf[n++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, buf, n);
  (void)ignored;
}

const char* u64(uint64_t v, char* buf) {
  char tmp[21];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  for (int i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n] = 0;
  return buf;
}

}  // namespace d9::log
