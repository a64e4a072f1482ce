// Subject of e2e_segments_test: symbols, compression, rotation, retention, fork and file
// hygiene of the segments libd9.so writes. Built -O2 -g; it links nothing of d9.
//
// Modes:
//   golden DSO unload|keep
//                    allocates through an always_inline helper inside a noinline function,
//                    then dlopens DSO (libsegments_dso.so) and calls it (it allocates the
//                    same way); with `unload` dlcloses it before exiting. Prints the source
//                    lines to expect.
//   steady SECS MARK allocates steadily (many small blocks, varied stacks) for SECS seconds,
//                    then allocates one block of MARK bytes as the last thing it does.
//   fork             forks 3 children (no exec) that allocate at their own sites and exit;
//                    the parent allocates before the forks and after the children are gone.
//   fds SELF         keeps a segment open, then runs `SELF list-fds` twice, through
//                    posix_spawn and through fork+execve, without LD_PRELOAD.
//   list-fds TAG     prints "TAG fd N -> TARGET" for each of its open descriptors.
//   exec SELF        allocates 50 blocks of 7001 bytes, then replaces itself (execv, no
//                    fork) with `SELF steady 0.2 7002`.
//   quick-exit       allocates 50 blocks of 7006 bytes, then ends with _exit(3): no exit
//                    handlers, no destructors (dash, Debian's /bin/sh, ends this way).
//   fork-exec SELF   forks two children: one allocates 50 blocks of 7003 bytes, then execs
//                    `SELF steady 0.2 7004`; the other execs `SELF steady 0.2 7005` at once,
//                    allocating nothing in between. Prints "child N PID" for each.
//   dlopen-loop DSO N ROUNDS
//                    N times: dlopen DSO, let it allocate ROUNDS blocks (segdso_churn), dlclose
//                    it; every other time a spacer mapping takes the place the library left,
//                    so it comes back at another address. Prints the checksums, the source
//                    lines to expect, and (last) how many load addresses it had.
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

extern char** environ;

namespace {

// Keeps the compiler from pairing and deleting malloc/free.
inline void use(void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

// ---- golden -------------------------------------------------------------------------------

namespace golden {

constexpr size_t kMainSize = 4242;  // distinct from every other allocation of the program
int g_helper_line = 0;
int g_call_line = 0;

__attribute__((always_inline)) inline void* inline_helper(size_t n) {
  void* p = malloc((g_helper_line = __LINE__, n));  // records the malloc's own line
  use(p);
  return p;
}

__attribute__((noinline, noclone)) void* outer_alloc(size_t n) {
  void* p = inline_helper((g_call_line = __LINE__, n));  // the helper's call line
  use(p);
  return p;
}

int run(const char* dso_path, bool unload) {
  const int kRounds = 20;
  for (int i = 0; i < kRounds; ++i) free(outer_alloc(kMainSize));
  printf("golden main %d %s %d %d\n", kRounds, __FILE__, g_call_line, g_helper_line);

  void* dso = dlopen(dso_path, RTLD_NOW | RTLD_LOCAL);
  if (!dso) {
    fprintf(stderr, "dlopen %s: %s\n", dso_path, dlerror());
    return 1;
  }
  using RunFn = void (*)(int, int*, int*);
  auto fn = reinterpret_cast<RunFn>(dlsym(dso, "segdso_run"));
  if (!fn) {
    fprintf(stderr, "dlsym segdso_run: %s\n", dlerror());
    return 1;
  }
  int helper_line = 0, call_line = 0;
  fn(kRounds, &helper_line, &call_line);
  if (unload && dlclose(dso) != 0) {
    fprintf(stderr, "dlclose: %s\n", dlerror());
    return 1;
  }
  // Proves the library is really gone from the process before the seal (or still there).
  bool still_loaded = dlopen(dso_path, RTLD_NOW | RTLD_NOLOAD) != nullptr;
  printf("golden dso %d %d %d unloaded %d\n", kRounds, call_line, helper_line, !still_loaded);
  return 0;
}

}  // namespace golden

// ---- steady -------------------------------------------------------------------------------

__attribute__((noinline)) void* steady_leaf(size_t n) {
  void* p = malloc(n);
  use(p);
  return p;
}

// A few distinct stacks: depth d adds d frames above the leaf.
__attribute__((noinline)) void* steady_depth(int d, size_t n) {
  void* p = d == 0 ? steady_leaf(n) : steady_depth(d - 1, n);
  use(p);  // not a tail call: each level keeps its frame
  return p;
}

int steady(double secs, size_t marker) {
  constexpr int kLive = 256;
  void* live[kLive] = {};
  uint64_t count = 0;
  double end = now_s() + secs;
  while (now_s() < end) {
    for (int i = 0; i < 500; ++i, ++count) {
      size_t size = 32 + (count * 2654435761u) % 4000;
      int slot = static_cast<int>(count % kLive);
      free(live[slot]);
      live[slot] = steady_depth(static_cast<int>(count % 7), size);
    }
    usleep(1000);
  }
  for (void*& p : live) free(p);
  free(steady_leaf(marker));  // the last allocation: the newest segment must hold it
  printf("steady %lu allocations\n", static_cast<unsigned long>(count));
  return 0;
}

// ---- fork ---------------------------------------------------------------------------------

constexpr size_t kParentBeforeFork = 6001;
constexpr size_t kParentAfterFork = 6000;
constexpr size_t kChildBase = 5000;  // child c allocates kChildBase + c bytes

#define CHILD_SITE(c)                                              \
  __attribute__((noinline)) void child_site_##c(int n) {           \
    for (int i = 0; i < n; ++i) free(steady_leaf(kChildBase + c)); \
    asm volatile("" ::: "memory");                                 \
  }
CHILD_SITE(0)
CHILD_SITE(1)
CHILD_SITE(2)

__attribute__((noinline)) void parent_site(size_t size, int n) {
  for (int i = 0; i < n; ++i) free(steady_leaf(size));
  asm volatile("" ::: "memory");
}

// Waits for every child; returns how many did not exit with status 0.
int wait_for(const std::vector<pid_t>& kids) {
  int failures = 0;
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures;
}

int fork_children() {
  void (*sites[3])(int) = {child_site_0, child_site_1, child_site_2};
  std::vector<pid_t> kids;
  fflush(stdout);
  for (int c = 0; c < 3; ++c) {
    // Samples still in the ring at fork time belong to the parent, not to the child.
    parent_site(kParentBeforeFork, 50);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      sites[c](100);
      exit(0);  // a normal exit: destructors run and seal the child's segment
    }
    kids.push_back(pid);
    printf("child %d %d\n", c, static_cast<int>(pid));
  }
  int failures = wait_for(kids);
  parent_site(kParentAfterFork, 100);
  printf("parent %d\n", static_cast<int>(getpid()));
  return failures == 0 ? 0 : 1;
}

// ---- drop-user -----------------------------------------------------------------------------

constexpr size_t kWorkerSize = 7007;  // only the worker allocates this size

__attribute__((noinline)) void worker_site(int n) {
  for (int i = 0; i < n; ++i) free(steady_leaf(kWorkerSize));
  asm volatile("" ::: "memory");
}

// A server's worker: forked by root, switches to `uid`:`gid` (group first, as servers do),
// then allocates across several segments, created as the new user.
int drop_user(uid_t uid, gid_t gid) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    if (setgid(gid) != 0 || setuid(uid) != 0) _exit(2);
    if (getuid() != uid || geteuid() != uid) _exit(3);
    printf("worker %d\n", static_cast<int>(getpid()));
    for (int round = 0; round < 20; ++round) {
      worker_site(200);
      usleep(20 * 1000);
    }
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("parent %d\n", static_cast<int>(getpid()));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// ---- fds ----------------------------------------------------------------------------------

int list_fds(const char* tag) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char path[320], target[4096];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0) continue;
    target[n] = 0;
    printf("%s fd %s -> %s\n", tag, e->d_name, target);
  }
  closedir(d);
  fflush(stdout);
  return 0;
}

int fds(const char* self) {
  // Samples for the writer, which opens the active segment when it drains them.
  for (int i = 0; i < 200; ++i) free(steady_leaf(300));
  usleep(200 * 1000);
  list_fds("self");

  // The children run without d9, so any trace file they hold was leaked to them.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string arg0 = self, mode = "list-fds", spawn_tag = "spawn", exec_tag = "exec";
  char* spawn_argv[] = {arg0.data(), mode.data(), spawn_tag.data(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, self, nullptr, nullptr, spawn_argv, envp.data()) != 0) return 1;
  int status = 0;
  waitpid(pid, &status, 0);

  // More samples, so the segment is open again after any seal.
  for (int i = 0; i < 200; ++i) free(steady_leaf(300));
  usleep(200 * 1000);
  list_fds("self2");
  char* exec_argv[] = {arg0.data(), mode.data(), exec_tag.data(), nullptr};
  pid = fork();
  if (pid == 0) {
    execve(self, exec_argv, envp.data());
    _exit(127);
  }
  waitpid(pid, &status, 0);
  return 0;
}

// ---- exec ---------------------------------------------------------------------------------

int exec_self(const char* self) {
  parent_site(7001, 50);
  fflush(stdout);
  std::string arg0 = self, mode = "steady", secs = "0.2", marker = "7002";
  char* argv[] = {arg0.data(), mode.data(), secs.data(), marker.data(), nullptr};
  execv(self, argv);
  perror("execv");
  return 1;
}

int fork_exec(const char* self) {
  const char* markers[2] = {"7004", "7005"};
  std::vector<pid_t> kids;
  fflush(stdout);
  for (int c = 0; c < 2; ++c) {
    // Built before the fork: the second child must not allocate before its exec.
    std::string arg0 = self, mode = "steady", secs = "0.2", marker = markers[c];
    char* argv[] = {arg0.data(), mode.data(), secs.data(), marker.data(), nullptr};
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      if (c == 0) parent_site(7003, 50);
      execv(self, argv);
      _exit(127);
    }
    kids.push_back(pid);
    printf("child %d %d\n", c, static_cast<int>(pid));
  }
  int failures = wait_for(kids);
  return failures == 0 ? 0 : 1;
}

// ---- dlopen-loop ---------------------------------------------------------------------------

// The address range the object loaded at `bias` spans (its PT_LOAD segments).
struct Span {
  uintptr_t bias = 0, start = 0, end = 0;
};
int find_span(dl_phdr_info* info, size_t, void* data) {
  auto* span = static_cast<Span*>(data);
  if (info->dlpi_addr != span->bias || info->dlpi_name[0] == 0) return 0;
  span->start = UINTPTR_MAX;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    span->start = std::min<uintptr_t>(span->start, info->dlpi_addr + ph.p_vaddr);
    span->end = std::max<uintptr_t>(span->end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  return 1;
}

int dlopen_loop(const char* dso_path, int n, int rounds) {
  using ChurnFn = uint64_t (*)(int, uint64_t);
  using RunFn = void (*)(int, int*, int*);
  std::set<uintptr_t> bases;
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    void* dso = dlopen(dso_path, RTLD_NOW | RTLD_LOCAL);
    if (!dso) {
      fprintf(stderr, "dlopen %s: %s\n", dso_path, dlerror());
      return 1;
    }
    auto churn = reinterpret_cast<ChurnFn>(dlsym(dso, "segdso_churn"));
    link_map* map = nullptr;
    if (!churn || dlinfo(dso, RTLD_DI_LINKMAP, &map) != 0) {
      fprintf(stderr, "dlsym/dlinfo: %s\n", dlerror());
      return 1;
    }
    bases.insert(map->l_addr);
    Span span;
    span.bias = map->l_addr;
    dl_iterate_phdr(find_span, &span);
    uint64_t sum = churn(rounds, static_cast<uint64_t>(i));
    total ^= sum;
    if (i < 3) printf("dlopen-loop %d checksum %016llx\n", i, static_cast<unsigned long long>(sum));
    if (i == n - 1) {  // the source lines the test expects at the allocation site
      int helper_line = 0, call_line = 0;
      reinterpret_cast<RunFn>(dlsym(dso, "segdso_run"))(0, &helper_line, &call_line);
      printf("dlopen-loop lines %d %d\n", call_line, helper_line);
    }
    if (dlclose(dso) != 0) {
      fprintf(stderr, "dlclose: %s\n", dlerror());
      return 1;
    }
    if (dlopen(dso_path, RTLD_NOW | RTLD_NOLOAD) != nullptr) {
      fprintf(stderr, "%s is still loaded after dlclose\n", dso_path);
      return 1;
    }
    // Every other time, a mapping (never unmapped) takes the place the library left, so
    // the next dlopen has to find another one. Something else may have taken it already.
    if (i % 2 == 0 && span.end > span.start) {
      uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      uintptr_t start = span.start & ~(page - 1), end = (span.end + page - 1) & ~(page - 1);
      mmap(reinterpret_cast<void*>(start), end - start, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    }
  }
  printf("dlopen-loop %d loads, %d allocations each, checksum %016llx\n", n, rounds,
         static_cast<unsigned long long>(total));
  printf("dlopen-loop load addresses %zu\n", bases.size());  // varies with the address space
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "golden" && argc == 4) return golden::run(argv[2], strcmp(argv[3], "unload") == 0);
  if (mode == "steady" && argc == 4) return steady(atof(argv[2]), strtoul(argv[3], nullptr, 10));
  if (mode == "fork") return fork_children();
  if (mode == "drop-user" && argc == 4) {
    return drop_user(static_cast<uid_t>(atoi(argv[2])), static_cast<gid_t>(atoi(argv[3])));
  }
  if (mode == "fds" && argc == 3) return fds(argv[2]);
  if (mode == "list-fds" && argc == 3) return list_fds(argv[2]);
  if (mode == "exec" && argc == 3) return exec_self(argv[2]);
  if (mode == "fork-exec" && argc == 3) return fork_exec(argv[2]);
  if (mode == "quick-exit") {
    parent_site(7006, 50);
    fflush(stdout);
    _exit(3);
  }
  if (mode == "dlopen-loop" && argc == 5) return dlopen_loop(argv[2], atoi(argv[3]), atoi(argv[4]));
  fprintf(stderr,
          "usage: %s golden DSO unload|keep | steady SECS MARK | fork | fds SELF | list-fds TAG | "
          "exec SELF | dlopen-loop DSO N ROUNDS\n",
          argv[0]);
  return 2;
}
