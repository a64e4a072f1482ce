#include "preload/cpu.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "alloc/cpu_profiler.h"
#include "alloc/jemalloc_api.h"
#include "alloc/stack.h"
#include "alloc/thread_state.h"
#include "alloc/unwind.h"
#include "preload/log.h"

// glibc's own entry points, which d9 does not interpose: the real sigaction and signal.
extern "C" int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);
extern "C" sighandler_t bsd_signal(int sig, sighandler_t handler);

namespace d9::cpu {
namespace {

enum State : int { kOff = 0, kOn = 1, kHost = 2 };
std::atomic<int> g_state{kOff};
uint64_t g_hz = 0;
long g_interval_ns = 0;
void* g_cookie = nullptr;  // si_value of d9's timers
// The host's view of SIGPROF while d9's handler holds it: what it set, or had before d9.
struct sigaction g_host;
unwind::ModuleMap* g_modules = nullptr;  // the writer's; abandoned in a fork child
// Held by the writer around its loader calls and by fork (prepare to parent/child), so
// a child never inherits the loader's lock from d9's writer.
pthread_mutex_t g_fork_mu = PTHREAD_MUTEX_INITIALIZER;
// A fork child's writer inside its first loader call since (0: not inside, or proven).
std::atomic<uint64_t> g_child_loader_call_ns{0};
bool g_in_fork_child = false;  // writer only, until its first poll takes the loader lock

// Every armed timer, so all can be deleted when the host takes SIGPROF over: one word per
// timer, (tid << 32) | kernel timer id, | kForeign for threads d9 did not start. A slot is
// emptied with an exchange; whoever gets the timer id deletes it, exactly once.
constexpr uint32_t kTimerSlots = 32768;
constexpr uint64_t kForeign = 1ULL << 31;
std::atomic<uint64_t>* g_timers = nullptr;
std::atomic<uint32_t> g_foreign{0};  // foreign timers armed, for the writer's prune
uint64_t g_last_slow_poll_ns = 0;    // once a second: /proc/self/timers, foreign timers

std::atomic<bool> g_said_no_timer{false};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t gettid_() {
  return static_cast<uint32_t>(syscall(SYS_gettid));
}

// ---- timers ------------------------------------------------------------------------

// A timer on `clock` sending SIGPROF to thread `tid` every g_interval_ns of its CPU time.
bool new_timer(uint32_t tid, clockid_t clock, int* id) {
  sigevent sev;
  memset(&sev, 0, sizeof(sev));
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev.sigev_value.sival_ptr = g_cookie;
  sev._sigev_un._tid = static_cast<pid_t>(tid);
  int kid;  // the kernel's timer_t is an int; glibc's wrapper is bypassed on purpose
  if (syscall(SYS_timer_create, clock, &sev, &kid) != 0) return false;
  itimerspec its;
  its.it_interval = {g_interval_ns / 1000000000L, g_interval_ns % 1000000000L};
  its.it_value = its.it_interval;
  if (syscall(SYS_timer_settime, kid, 0, &its, nullptr) != 0) {
    syscall(SYS_timer_delete, kid);
    return false;
  }
  *id = kid;
  return true;
}

// Enters a timer in the table; returns 1 + its slot, or 0 when the table is full.
uint32_t add_timer(uint32_t tid, int id, bool foreign) {
  uint64_t v = (uint64_t{tid} << 32) | static_cast<uint32_t>(id) | (foreign ? kForeign : 0);
  uint32_t h = (tid * 2654435761u) & (kTimerSlots - 1);
  for (uint32_t i = 0; i < kTimerSlots; ++i) {
    uint32_t s = (h + i) & (kTimerSlots - 1);
    uint64_t empty = 0;
    if (g_timers[s].compare_exchange_strong(empty, v, std::memory_order_acq_rel)) return s + 1;
  }
  return 0;
}

// Deletes the timer in `slot` unless someone else already took it out.
void drop_timer(uint32_t slot) {
  uint64_t v = g_timers[slot].exchange(0, std::memory_order_acq_rel);
  if (!v) return;
  if (v & kForeign) g_foreign.fetch_sub(1, std::memory_order_relaxed);
  syscall(SYS_timer_delete, static_cast<int>(v & (kForeign - 1)));
}

void say_no_timer() {
  if (!g_said_no_timer.exchange(true)) {
    log::line("cannot create a CPU-time timer for a thread (", strerror(errno),
              "); some threads are not CPU-sampled");
  }
}

void disarm_self(CpuThread& t) {
  if (!t.timer_slot) return;
  drop_timer(t.timer_slot - 1);
  t.timer_slot = 0;
}

// Registers the calling thread and arms its timer. The main thread's stack bounds are left
// to the writer (0.1-0.2 ms at start-up), except in a fork child, where the forking thread
// may be any thread: glibc knows its stack.
void arm_self(CpuThread& t, bool fork_child = false) {
  if (g_state.load(std::memory_order_acquire) != kOn || t.timer_slot) return;
  t.tid = gettid_();
  if (!t.stack_hi) {
    if (t.tid == static_cast<uint32_t>(getpid()) && !fork_child) {
      defer_main_stack_bounds(t);
    } else {
      set_stack_bounds(t);  // cheap, but for the main thread
    }
  }
  int id;
  if (!new_timer(t.tid, CLOCK_THREAD_CPUTIME_ID, &id)) return say_no_timer();
  t.timer_slot = add_timer(t.tid, id, false);
  if (!t.timer_slot) {
    syscall(SYS_timer_delete, id);
    errno = ENOSPC;
    return say_no_timer();
  }
  // The host may have taken SIGPROF over while this timer was being made: its sweep of
  // the table may have missed the slot.
  if (g_state.load(std::memory_order_acquire) != kOn) disarm_self(t);
}

// Threads running before d9 started: their timers use their CPU clocks by thread id
// (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)), which any thread of the process may use.
void arm_foreign_threads() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return;
  uint32_t self = gettid_();
  while (dirent* e = readdir(dir)) {
    uint32_t tid = static_cast<uint32_t>(strtoul(e->d_name, nullptr, 10));
    if (tid == 0 || tid == self) continue;
    auto clock = static_cast<clockid_t>((~uint64_t{tid} << 3) | 6);
    int id;
    if (!new_timer(tid, clock, &id)) continue;  // exited meanwhile
    if (add_timer(tid, id, true)) {
      g_foreign.fetch_add(1, std::memory_order_relaxed);
    } else {
      syscall(SYS_timer_delete, id);
    }
  }
  closedir(dir);
}

// The host profiles with SIGPROF itself: every timer goes, the host's handler becomes
// the real disposition (unless the host already put it there), and d9 stops for good.
void hand_over(const char* why, bool install_host) {
  int expected = kOn;
  if (!g_state.compare_exchange_strong(expected, kHost, std::memory_order_acq_rel)) return;
  for (uint32_t s = 0; s < kTimerSlots; ++s) {
    if (g_timers[s].load(std::memory_order_relaxed)) drop_timer(s);
  }
  if (install_host) __sigaction(SIGPROF, &g_host, nullptr);
  log::line(why, "; d9's CPU sampling is off, the program's own SIGPROF use takes precedence");
}

// Whether the host runs a POSIX timer that sends SIGPROF: /proc/self/timers lists every
// timer as "signal: SIGNO/SIVAL_PTR" then "notify: KIND/...", and d9's carry its cookie.
bool host_sigprof_timer() {
  int fd = open("/proc/self/timers", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  char line[128];
  size_t len = 0;
  bool sigprof = false, found = false;
  ssize_t n;
  while (!found && (n = read(fd, buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n && !found; ++i) {
      if (buf[i] != '\n') {
        if (len < sizeof(line) - 1) line[len++] = buf[i];
        continue;
      }
      line[len] = 0;
      len = 0;
      if (strncmp(line, "signal: ", 8) == 0) {
        char* slash = nullptr;
        sigprof = strtol(line + 8, &slash, 10) == SIGPROF && *slash == '/' &&
                  strtoull(slash + 1, nullptr, 16) != reinterpret_cast<uintptr_t>(g_cookie);
      } else if (strncmp(line, "notify: ", 8) == 0) {
        found = sigprof && strncmp(line + 8, "none", 4) != 0;
      }
    }
  }
  close(fd);
  return found;
}

// Whether the host is profiling with SIGPROF already: ITIMER_PROF or a timer of its own.
const char* host_profiling() {
  itimerval it;
  if (getitimer(ITIMER_PROF, &it) == 0 && (it.it_value.tv_sec || it.it_value.tv_usec)) {
    return "the program runs its own profiling timer (ITIMER_PROF)";
  }
  if (host_sigprof_timer()) return "the program runs its own SIGPROF timer";
  return nullptr;
}

// fork waits for a writer's loader call in progress, but not forever: if that call is
// itself waiting on the host (a lock held by the forking thread), the fork goes ahead and
// the child treats the loader's lock as suspect anyway (stack::set_loader_suspect).
bool g_fork_locked = false;
void fork_prepare() {
  timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += 100000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec += 1;
    until.tv_nsec -= 1000000000L;
  }
  g_fork_locked = pthread_mutex_timedlock(&g_fork_mu, &until) == 0;
}
void fork_parent() {
  if (g_fork_locked) pthread_mutex_unlock(&g_fork_mu);
}

// ---- the signal handler --------------------------------------------------------------

// A SIGPROF that is not d9's goes where it would have gone without d9.
void forward(int sig, siginfo_t* si, void* ctx) {
  const struct sigaction host = g_host;
  auto h = reinterpret_cast<uintptr_t>(host.sa_handler);
  if (h == reinterpret_cast<uintptr_t>(SIG_IGN)) return;
  if (h == reinterpret_cast<uintptr_t>(SIG_DFL)) {
    // Default action (terminate): restore it and send the signal again; it is delivered
    // as soon as this handler returns and unblocks it.
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    g_state.store(kHost, std::memory_order_release);
    __sigaction(sig, &dfl, nullptr);
    syscall(SYS_tgkill, getpid(), gettid_(), sig);
    return;
  }
  if (host.sa_flags & SA_RESETHAND) g_host.sa_handler = SIG_DFL;  // as the kernel would
  if (host.sa_flags & SA_SIGINFO) {
    host.sa_sigaction(sig, si, ctx);
  } else {
    host.sa_handler(sig);
  }
}

void on_sigprof(int sig, siginfo_t* si, void* ctx) {
  int saved = errno;
  if (si && si->si_code == SI_TIMER && si->si_value.sival_ptr == g_cookie) {
    // d9's own: sample (a late signal of a deleted timer is simply dropped).
    if (g_state.load(std::memory_order_relaxed) == kOn) {
      record_sample(static_cast<const ucontext_t*>(ctx), si->si_overrun);
    }
  } else {
    forward(sig, si, ctx);
  }
  errno = saved;
}

// ---- threads -----------------------------------------------------------------------

using CreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

CreateFn real_create() {
  static const auto fn = reinterpret_cast<CreateFn>(dlsym(RTLD_NEXT, "pthread_create"));
  return fn;
}

// Deletes the thread's timer however the thread ends: return, pthread_exit or
// cancellation (both unwind through this frame).
class ThreadTimer {
 public:
  ThreadTimer() { arm_self(tls_cpu); }
  ~ThreadTimer() { thread_exiting(); }
  ThreadTimer(const ThreadTimer&) = delete;
  ThreadTimer& operator=(const ThreadTimer&) = delete;
};

struct Start {
  void* (*fn)(void*);
  void* arg;
};

// Not noexcept: pthread_exit and cancellation unwind through it.
void* thread_main(void* p) {
  Start start = *static_cast<Start*>(p);
  d9_je_free(p);
  ThreadTimer timer;
  return start.fn(start.arg);
}

}  // namespace

void start(uint64_t hz, uint32_t ring_slots, int stack_depth) {
  real_create();  // resolved now, not first inside the host's pthread_create
  if (hz == 0) return;
  struct sigaction current;
  if (__sigaction(SIGPROF, nullptr, &current) != 0) return;
  if (const char* why = host_profiling()) {
    g_state.store(kHost, std::memory_order_release);
    log::line(why, "; d9's CPU sampling is off, the program's own SIGPROF use takes precedence");
    return;
  }
  g_host = current;  // a handler already there gets every SIGPROF that is not d9's

  // CPU-time timers are checked on the tick, whose length is the coarse clocks' resolution.
  timespec res{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &res);  // warms the vDSO page
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  uint64_t tick_hz = res.tv_sec == 0 && res.tv_nsec >= 1000000 ? 1000000000ULL / res.tv_nsec : 0;
  g_hz = hz;
  if (tick_hz && hz > tick_hz) {
    g_hz = tick_hz;
    char want[24], got[24];
    log::line("D9_CPU_HZ=", log::u64(hz, want), " is above the kernel tick rate that CPU-time ",
              "timers run on; sampling at ", log::u64(tick_hz, got),
              " Hz (written as cpu.profile.frequency_hz)");
  }
  g_interval_ns = static_cast<long>(1000000000ULL / g_hz);

  uint64_t cookie = 0;
  if (getrandom(&cookie, sizeof(cookie), GRND_NONBLOCK) != sizeof(cookie) || cookie == 0) {
    cookie = (static_cast<uint64_t>(getpid()) << 32) ^ now_ns() ^ 0xD9D9D9D9D9D9D9D9ULL;
  }
  g_cookie = reinterpret_cast<void*>(cookie);
  void* table = mmap(nullptr, kTimerSlots * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (table == MAP_FAILED || !setup(ring_slots, stack_depth)) {
    log::line("cannot map the CPU sample ring; CPU sampling is off");
    return;
  }
  g_timers = static_cast<std::atomic<uint64_t>*>(table);
  // The unwind tables are not built here: that takes 5-20 ms, which the program would wait
  // for at start-up, and most short-lived processes are never sampled. The writer builds
  // them after the first sample (which, like any before they are ready, follows frame
  // pointers only and is counted as truncated).
  g_modules = new unwind::ModuleMap;
  pthread_atfork(fork_prepare, fork_parent, [] { pthread_mutex_init(&g_fork_mu, nullptr); });

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigprof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (__sigaction(SIGPROF, &sa, nullptr) != 0) return;
  g_state.store(kOn, std::memory_order_release);
  arm_self(tls_cpu);
  arm_foreign_threads();
}

uint64_t frequency_hz() {
  return g_state.load(std::memory_order_acquire) == kOff ? 0 : g_hz;
}

const char* state() {
  switch (g_state.load(std::memory_order_acquire)) {
    case kOn:
      return "on";
    case kHost:
      return "host";
    default:
      return "off";
  }
}

int create_thread(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  CreateFn create = real_create();
  // Threads d9's writer starts (through the libraries it loads) are d9's: no timer.
  if (g_state.load(std::memory_order_acquire) != kOn || tls_state.internal) {
    return create(thread, attr, fn, arg);
  }
  auto* start = static_cast<Start*>(d9_je_malloc(sizeof(Start)));
  if (!start) return create(thread, attr, fn, arg);
  *start = {fn, arg};
  int rc = create(thread, attr, thread_main, start);
  if (rc != 0) d9_je_free(start);
  return rc;
}

int create_internal_thread(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                           void* arg) {
  return real_create()(thread, attr, fn, arg);
}

void thread_exiting() {
  CpuThread& t = tls_cpu;
  if (!t.timer_slot) return;
  int saved = errno;
  disarm_self(t);
  record_thread_exit();
  errno = saved;
}

int host_sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig != SIGPROF || g_state.load(std::memory_order_acquire) != kOn) {
    return __sigaction(sig, act, old);
  }
  // d9's handler holds the real disposition; the host reads and sets its own view, which
  // forward() applies to every SIGPROF that is not d9's. Many programs catch every fatal
  // signal (bash does); only once the host also starts a SIGPROF timer does d9 step aside
  // (poll()).
  struct sigaction previous = g_host;
  if (act) g_host = *act;
  if (old) *old = previous;
  return 0;
}

sighandler_t host_signal(int sig, sighandler_t handler) {
  if (sig != SIGPROF || g_state.load(std::memory_order_acquire) != kOn) {
    return bsd_signal(sig, handler);  // glibc's signal() itself, under another name
  }
  struct sigaction act, old;
  memset(&act, 0, sizeof(act));
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;  // signal() has BSD semantics in glibc
  if (host_sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

void poll(const std::atomic<bool>* stop) {
  if (!g_modules) return;
  publish_main_stack_bounds();
  pthread_mutex_lock(&g_fork_mu);
  if (g_in_fork_child) {
    // Takes the loader's lock once, cheaply, before any table work: from then on the
    // child's allocation stacks may use libunwind (and the loader) again.
    g_child_loader_call_ns.store(now_ns(), std::memory_order_release);
    dl_iterate_phdr([](dl_phdr_info*, size_t, void*) { return 1; }, nullptr);
    g_in_fork_child = false;
    g_child_loader_call_ns.store(0, std::memory_order_release);
    stack::set_loader_suspect(false);
  }
  if (g_modules->modules() != 0 || sampled_yet()) g_modules->refresh(stop);
  pthread_mutex_unlock(&g_fork_mu);
  if (g_state.load(std::memory_order_acquire) != kOn) return;
  struct sigaction current;
  if (__sigaction(SIGPROF, nullptr, &current) == 0 && current.sa_sigaction != on_sigprof) {
    return hand_over("the program replaced d9's SIGPROF handler", false);
  }
  itimerval it;
  if (getitimer(ITIMER_PROF, &it) == 0 && (it.it_value.tv_sec || it.it_value.tv_usec)) {
    return hand_over("the program started its own profiling timer (ITIMER_PROF)", true);
  }
  uint64_t now = now_ns();
  if (now - g_last_slow_poll_ns < 1000000000ULL) return;
  g_last_slow_poll_ns = now;
  if (host_sigprof_timer()) return hand_over("the program started its own SIGPROF timer", true);
  if (g_foreign.load(std::memory_order_relaxed) == 0) return;
  pid_t pid = getpid();
  for (uint32_t s = 0; s < kTimerSlots; ++s) {
    uint64_t v = g_timers[s].load(std::memory_order_relaxed);
    if (!(v & kForeign)) continue;
    auto tid = static_cast<pid_t>(v >> 32);
    if (syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH) drop_timer(s);
  }
}

void after_fork_child() {
  if (!g_modules) return;
  // Another thread may have held the loader's lock at the fork: until the child's writer
  // has taken it once, allocation stacks avoid it.
  stack::set_loader_suspect(true);
  g_in_fork_child = true;
  g_child_loader_call_ns.store(0, std::memory_order_relaxed);
  g_modules = new unwind::ModuleMap;  // the parent writer's map may be mid-update
  forget_deferred_stack_bounds();     // its thread may be gone
  if (g_state.load(std::memory_order_acquire) != kOn) return;
  // The parent's timers are not inherited, and its threads are gone.
  // Back to zero pages (a store to every slot would copy or fault in all 64 of them).
  madvise(g_timers, kTimerSlots * sizeof(uint64_t), MADV_DONTNEED);
  g_foreign.store(0, std::memory_order_relaxed);
  reset_after_fork();
  unwind::reset_after_fork();
  CpuThread& t = tls_cpu;
  t.tid = 0;
  t.timer_slot = 0;
  arm_self(t, true);
}

bool writer_stuck_in_loader() {
  uint64_t since = g_child_loader_call_ns.load(std::memory_order_acquire);
  // The call takes microseconds; a writer starved on a loaded machine can still sit in it
  // for 100 ms and more, and giving up on it then leaves the child's segment unsealed. A
  // child stuck for good costs a second at exit instead.
  return since != 0 && now_ns() - since > 1000000000ULL;
}

}  // namespace d9::cpu
