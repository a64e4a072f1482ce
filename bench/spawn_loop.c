// spawn_loop: fork + exec of /bin/true, one at a time, for scripts/bench_process.sh. What
// a profiled shell, build tool or service pays per child it spawns: the fork, the child's
// exec (d9 seals what the child recorded first), the new image's start-up and exit.
//
// Usage: spawn_loop [count]   (default 100); prints "ms_per_spawn=<wall>"
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  if (n <= 0) {
    fprintf(stderr, "usage: %s [count>0]\n", argv[0]);
    return 2;
  }
  double t0 = now_ms();
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("spawn_loop: fork");
      return 1;
    }
    if (pid == 0) {
      char* child_argv[] = {"/bin/true", NULL};
      execv(child_argv[0], child_argv);
      _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "spawn_loop: child failed\n");
      return 1;
    }
  }
  printf("ms_per_spawn=%.3f\n", (now_ms() - t0) / n);
  return 0;
}
