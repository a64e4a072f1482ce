// Subject of e2e_dump_test: a long-running process whose live heap is known, for `d9 dump`.
//
//   dump_subject hold MIB             holds MIB blocks of 1 MiB from held_site, says "ready",
//                                     then allocates and frees a little every 10 ms until
//                                     killed (at most 60 s)
//   dump_subject drop-user UID MIB    the same in a forked worker that switched to UID (as
//                                     root's workers do); the parent waits for it
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "sites.h"

SITE(held_site) void* held_site(size_t size) {
  void* p = malloc(size);
  memset(p, 1, size);
  return p;
}
SITE_BOUNDS(held_site)

// 256 KiB: at the tests' 64 KiB rate each block is sampled (p = 1 - e^-4), so every
// 10 ms brings the next segment an event.
SITE(churn_site) void churn_site() {
  void* p = malloc(256 << 10);
  use(p);
  free(p);
}
SITE_BOUNDS(churn_site)

static int hold(int mib) {
  std::vector<void*> held;
  for (int i = 0; i < mib; ++i) held.push_back(held_site(1 << 20));
  REPORT_SITE(held_site, static_cast<uint64_t>(mib) << 20, mib);
  printf("ready %d\n", static_cast<int>(getpid()));
  fflush(stdout);
  for (int i = 0; i < 6000; ++i) {
    churn_site();
    usleep(10 * 1000);
  }
  for (void* p : held) free(p);
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hold" && argc == 3) return hold(atoi(argv[2]));
  if (mode == "drop-user" && argc == 4) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      uid_t uid = static_cast<uid_t>(atoi(argv[2]));
      if (setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
      _exit(hold(atoi(argv[3])));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  fprintf(stderr, "usage: %s hold MIB | drop-user UID MIB\n", argv[0]);
  return 2;
}
