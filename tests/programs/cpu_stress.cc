// Stress for CPU sampling (run at D9_CPU_HZ=999 by the tests and scripts/cpu_stress.sh):
// for SECONDS, at the same time,
//   - two threads dlopen/dlclose cpu_stress_dso.so in a loop and burn CPU inside it;
//   - two threads allocate and free heavily;
//   - one thread creates and joins short-lived threads (THREADS in all);
//   - the main thread forks children without exec (each burns CPU, allocates, starts a
//     thread and exits) and checks they exit cleanly;
//   - the host's own signals keep working: SIGUSR1 sent one at a time and acknowledged,
//     a periodic ITIMER_REAL (SIGALRM), and SIGPROFs sent with kill() to the host's own
//     SIGPROF handler (installed after d9 started).
// Then the host starts profiling with ITIMER_PROF, and its handler must get the ticks.
// A watchdog ends the process with status 3 if it does not finish in time (a deadlock).
//
// Usage: cpu_stress SECONDS THREADS
// Output: one line "ok key=value ..." and exit 0, or a reason and a non-zero status.
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_usr1{0}, g_alarms{0}, g_host_prof_kill{0}, g_host_prof_timer{0};
std::atomic<uint64_t> g_dlopens{0}, g_threads{0}, g_allocs{0};
std::string g_dso;
volatile uint64_t g_sink;
// dlclose runs __cxa_finalize under glibc's exit-handler lock; a child forked meanwhile
// would hang in exit() with or without d9 (glibc does not reset that lock in the child).
// So dlclose and fork exclude each other, as a correct program has to arrange; dlopen
// still races with fork (the loader's own lock may be held at the fork).
pthread_rwlock_t g_fork_guard = PTHREAD_RWLOCK_INITIALIZER;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void on_usr1(int) {
  g_usr1.fetch_add(1);
}
void on_alarm(int) {
  g_alarms.fetch_add(1);
}
void on_prof(int, siginfo_t* si, void*) {
  if (si->si_code == SI_USER) {
    g_host_prof_kill.fetch_add(1);
  } else {
    g_host_prof_timer.fetch_add(1);  // ITIMER_PROF
  }
}

uint64_t spin(uint64_t n, uint64_t x) {
  for (uint64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1;
    asm volatile("" : "+r"(x));
  }
  return x;
}

void* dlopen_loop(void*) {
  while (!g_stop.load()) {
    void* h = dlopen(g_dso.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      exit(4);
    }
    auto fn = reinterpret_cast<uint64_t (*)(uint64_t)>(dlsym(h, "dso_spin"));
    g_sink = fn(200000);
    pthread_rwlock_rdlock(&g_fork_guard);
    dlclose(h);
    pthread_rwlock_unlock(&g_fork_guard);
    g_dlopens.fetch_add(1);
  }
  return nullptr;
}

void* alloc_loop(void*) {
  uint64_t rng = 0x9E3779B97F4A7C15ULL;
  void* keep[64] = {};
  while (!g_stop.load()) {
    for (int i = 0; i < 1000; ++i) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      size_t slot = rng % 64;
      free(keep[slot]);
      keep[slot] = malloc(16 + rng % 65536);
      memset(keep[slot], 1, 16);
    }
    g_allocs.fetch_add(1000);
  }
  for (void* p : keep) free(p);
  return nullptr;
}

void* short_thread(void* arg) {
  g_sink = spin(20000, reinterpret_cast<uintptr_t>(arg));
  return nullptr;
}

uint64_t g_thread_target = 2000;

void* thread_churn(void*) {
  for (uint64_t i = 0; i < g_thread_target; ++i) {
    pthread_t t;
    if (pthread_create(&t, nullptr, short_thread, reinterpret_cast<void*>(i)) != 0) {
      fprintf(stderr, "pthread_create failed at %lu\n", static_cast<unsigned long>(i));
      exit(5);
    }
    pthread_join(t, nullptr);
    g_threads.fetch_add(1);
  }
  return nullptr;
}

// Sends SIGUSR1 to the process one at a time and waits for each to be handled.
void* usr1_sender(void*) {
  uint64_t sent = 0;
  while (!g_stop.load()) {
    kill(getpid(), SIGUSR1);
    ++sent;
    double give_up = now_s() + 5;
    while (g_usr1.load() < sent) {
      if (now_s() > give_up) {
        fprintf(stderr, "SIGUSR1 %lu lost\n", static_cast<unsigned long>(sent));
        exit(6);
      }
      sched_yield();
    }
    usleep(1000);
  }
  return nullptr;
}

// A fork child: allocations (at once, while d9 cannot yet trust the loader's lock), CPU
// and a thread under d9, then a normal exit.
int child_main() {
  for (int i = 0; i < 4000; ++i) {
    void* p = malloc(4000 + i);
    asm volatile("" : : "r"(p) : "memory");
    free(p);
  }
  g_sink = spin(30000000, 5);
  pthread_t t;
  pthread_create(&t, nullptr, short_thread, nullptr);
  pthread_join(t, nullptr);
  return 0;
}

void* watchdog(void* arg) {
  double limit = *static_cast<double*>(arg);
  double until = now_s() + limit;
  while (now_s() < until) usleep(100000);
  fprintf(stderr, "watchdog: not finished after %.0f s (deadlock?)\n", limit);
  _exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3;
  g_thread_target = argc > 2 ? strtoull(argv[2], nullptr, 10) : 2000;
  std::string self = argv[0];
  g_dso = self.substr(0, self.rfind('/') + 1) + "cpu_stress_dso.so";
  double limit = seconds * 3 + 60;
  pthread_t wd;
  pthread_create(&wd, nullptr, watchdog, &limit);

  signal(SIGUSR1, on_usr1);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, nullptr);
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGPROF, &sa, nullptr);  // the host's own handler, while d9 samples
  itimerval real{{0, 20000}, {0, 20000}};
  setitimer(ITIMER_REAL, &real, nullptr);

  pthread_t workers[7];
  pthread_create(&workers[0], nullptr, dlopen_loop, nullptr);
  pthread_create(&workers[1], nullptr, dlopen_loop, nullptr);
  pthread_create(&workers[2], nullptr, alloc_loop, nullptr);
  pthread_create(&workers[3], nullptr, alloc_loop, nullptr);
  pthread_create(&workers[4], nullptr, usr1_sender, nullptr);
  pthread_create(&workers[5], nullptr, thread_churn, nullptr);

  uint64_t forks = 0, prof_kills = 0;
  double end = now_s() + seconds;
  while (now_s() < end || g_threads.load() < g_thread_target) {
    pthread_rwlock_wrlock(&g_fork_guard);
    pid_t pid = fork();
    pthread_rwlock_unlock(&g_fork_guard);
    if (pid == 0) exit(child_main());
    int status = 0;
    double give_up = now_s() + 30;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (now_s() > give_up) {
        fprintf(stderr, "fork child %d hangs\n", pid);
        kill(pid, SIGKILL);
        return 7;
      }
      usleep(1000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork child ended with status %d\n", status);
      return 8;
    }
    ++forks;
    kill(getpid(), SIGPROF);  // not d9's: must reach the host's handler
    ++prof_kills;
    usleep(20000);
  }
  g_stop.store(true);
  for (int i = 0; i < 6; ++i) pthread_join(workers[i], nullptr);
  itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);

  double give_up = now_s() + 5;
  while (g_host_prof_kill.load() < prof_kills && now_s() < give_up) usleep(1000);
  if (g_host_prof_kill.load() != prof_kills) {
    fprintf(stderr, "host SIGPROF: sent %lu, handled %lu\n", static_cast<unsigned long>(prof_kills),
            static_cast<unsigned long>(g_host_prof_kill.load()));
    return 9;
  }
  if (g_alarms.load() == 0) {
    fprintf(stderr, "no SIGALRM\n");
    return 10;
  }

  // The host starts profiling: its handler must now get ITIMER_PROF's ticks.
  itimerval prof{{0, 10000}, {0, 10000}};
  setitimer(ITIMER_PROF, &prof, nullptr);
  give_up = now_s() + 10;
  while (g_host_prof_timer.load() < 20 && now_s() < give_up) g_sink = spin(1000000, g_sink);
  setitimer(ITIMER_PROF, &off, nullptr);
  if (g_host_prof_timer.load() < 20) {
    fprintf(stderr, "host profiling timer: %lu ticks\n",
            static_cast<unsigned long>(g_host_prof_timer.load()));
    return 11;
  }
  printf(
      "ok forks=%lu threads=%lu dlopens=%lu allocs=%lu usr1=%lu alarms=%lu prof_kills=%lu "
      "host_prof_ticks=%lu\n",
      static_cast<unsigned long>(forks), static_cast<unsigned long>(g_threads.load()),
      static_cast<unsigned long>(g_dlopens.load()), static_cast<unsigned long>(g_allocs.load()),
      static_cast<unsigned long>(g_usr1.load()), static_cast<unsigned long>(g_alarms.load()),
      static_cast<unsigned long>(prof_kills), static_cast<unsigned long>(g_host_prof_timer.load()));
  return 0;
}
