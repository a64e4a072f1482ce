// The process's lifecycle: options and start-up, the state machine, the library's
// constructor and destructor, fork children, and what exec, _exit, dlclose and set*id wait
// for. The writer thread itself is in writer_thread.cc.
#include "preload/runtime.h"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>

#include "alloc/profiler.h"
#include "alloc/size_classes.h"
#include "alloc/thread_state.h"
#include "preload/cpu.h"
#include "preload/log.h"
#include "preload/own_libstdcxx.h"
#include "preload/process_state.h"
#include "preload/seal_tools_fork.h"
#include "preload/writer_thread.h"
#include "ship/worker.h"
#include "writer/segment.h"

extern char** environ;

namespace d9::runtime {

std::atomic<int> g_state{kUninit};
Options g_options;
char g_boot_id[32];

namespace {

// d9_start has run: allocations before it come from the constructors of libraries the
// loader initialises first (own_libstdcxx.h).
std::atomic<bool> g_constructed{false};

// How long exit waits for the writer to seal the last segment; _exit, which may be called
// from a signal handler, less.
constexpr int kExitWaitSecs = 5;
constexpr int kQuickExitWaitSecs = 2;

void make_boot_id() {
  // {4 lowercase letters}-{pid}, as dial9 names process directories.
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = static_cast<uint64_t>(ts.tv_nsec) * 0x9E3779B97F4A7C15ULL;
  }
  char pid[24];
  log::u64(static_cast<uint64_t>(getpid()), pid);
  for (int i = 0; i < 4; ++i) g_boot_id[i] = static_cast<char>('a' + (r >> (8 * i)) % 26);
  g_boot_id[4] = '-';
  strncpy(g_boot_id + 5, pid, sizeof(g_boot_id) - 6);
}

// A relative D9_OUTPUT is taken against the working directory at start-up, once, so a
// later chdir() of the host (or a fork child) cannot move the traces.
void make_output_absolute() {
  if (g_options.output[0] == '/') return;
  char abs[sizeof(g_options.output)];
  if (!getcwd(abs, sizeof(abs))) return;
  size_t cwd_len = strlen(abs);
  const char* rel = g_options.output;
  if (rel[0] == '.' && rel[1] == '/') rel += 2;
  if (cwd_len + 1 + strlen(rel) + 1 > sizeof(abs)) return;
  abs[cwd_len] = '/';
  strcpy(abs + cwd_len + 1, rel);
  strcpy(g_options.output, abs);
}

int start_process() {
  int expected = kUninit;
  if (!g_state.compare_exchange_strong(expected, kStarting, std::memory_order_acq_rel)) {
    return expected;  // already on/off, or another thread is starting it
  }
  if (!environ) {  // too early: libc has not set up the environment yet; retry later
    g_state.store(kUninit, std::memory_order_release);
    return kUninit;
  }
  parse_options(environ, &g_options);
  make_output_absolute();
  // The executable's name, copied now: servers that set their process title (nginx,
  // postgres, perl's $0) overwrite the argv memory it points into, and a fork child's
  // writer would read a piece of the new title.
  if (!g_options.service[0] && program_invocation_short_name) {
    strncpy(g_options.service, program_invocation_short_name, sizeof(g_options.service) - 1);
  }
  if (!g_options.enable || (g_options.sample_rate == 0 && g_options.cpu_hz == 0)) {
    g_state.store(kOff, std::memory_order_release);
    return kOff;
  }
  alloc::Settings s;
  s.sample_rate = g_options.sample_rate;
  if (g_options.has_seed) {
    s.seed = g_options.seed;
  } else if (getrandom(&s.seed, sizeof(s.seed), GRND_NONBLOCK) != sizeof(s.seed)) {
    s.seed = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ULL;
  }
  s.stack_depth = static_cast<int>(g_options.stack_depth);
  s.ring_slots = static_cast<uint32_t>(g_options.ring_slots);
  s.liveset = g_options.liveset;
  if (!alloc::setup(s)) {
    log::line("cannot map the sample ring; profiling is off");
    g_state.store(kOff, std::memory_order_release);
    return kOff;
  }
  if (g_options.liveset && !alloc::settings().liveset) {
    log::line("live set off: frees are not tracked (RLIMIT_AS is limited, or address space for ",
              "the sampled heap could not be reserved)");
  }
  make_boot_id();
  OwnFd::reserve_floor();
  g_state.store(kOn, std::memory_order_release);
  return kOn;
}

}  // namespace

// Said once: later attempts (the final drain at exit, say) find profiling already off.
void turn_off(const std::string& why) {
  if (g_state.exchange(kOff, std::memory_order_acq_rel) == kOff) return;
  log::line(why.c_str(), "; profiling is off, the program runs normally");
}

namespace {

void on_fork_child() {
  if (g_state.load(std::memory_order_acquire) != kOn) return;
  // The parent's writer thread does not exist here and its state may be mid-update:
  // abandon it (closing only the inherited descriptor) and start afresh.
  abandon_parent_writer();
  alloc::reset_after_fork();
  cpu::after_fork_child();
  make_boot_id();
  if (shipping()) ship::after_fork_child();  // S3: the child ships its own segments
  start_writer();
}

// Nothing recorded since start-up or the fork (a process that never sampled, a fork child
// that execs or exits at once): no segment was opened (the writer opens one for the first
// record) and nothing waits in the rings, so there is nothing to seal, and no round trip
// through the writer at exit, exec or _exit.
bool nothing_recorded() {
  alloc::Counters c = alloc::counters();
  const auto& cpu_ring = cpu::ring();
  return c.alloc_samples == 0 && c.frees_seen == 0 && cpu_ring.claimed() + cpu_ring.dropped() == 0;
}

__attribute__((constructor)) void d9_start() {
  g_constructed.store(true, std::memory_order_relaxed);
  ReentryGuard guard;
  if (start_process() != kOn) return;
  cpu::start(g_options.cpu_hz, static_cast<uint32_t>(g_options.ring_slots),
             alloc::settings().stack_depth);
  if (shipping()) ship::capture_environment(environ);  // S3: what libd9_ship.so will read
  pthread_atfork(tools_fork_prepare, tools_fork_parent, [] {
    ReentryGuard guard;  // d9's allocations here are not the program's
    tools_fork_child();
    on_fork_child();
  });
  start_writer();
}

__attribute__((destructor)) void d9_stop() {
  ReentryGuard guard;
  if (g_state.load(std::memory_order_acquire) == kOn && !nothing_recorded()) {
    stop_writer(kExitWaitSecs);
    if (shipping()) ship::finish(g_options.s3_exit_timeout);  // S3: ship the last segments
  }
}

}  // namespace

const Options& options() {
  return g_options;
}

void before_quick_exit() {
  if (g_state.load(std::memory_order_acquire) != kOn || nothing_recorded()) return;
  if (!host_thread_of_writer_process()) return;  // d9's thread; a vfork child
  ReentryGuard guard;
  stop_writer(kQuickExitWaitSecs);
}

void before_exec() {
  if (nothing_recorded()) return;
  ask_writer_to_seal(kExitWaitSecs);
}

void before_dlclose() {
  ask_writer_for_modules(1);
}

void before_id_change(uid_t uid, gid_t gid) {
  if (geteuid() != 0) return;  // only root can give files away
  bool new_user = uid != static_cast<uid_t>(-1) && uid != 0;
  bool new_group = gid != static_cast<gid_t>(-1) && gid != getegid();
  if (!new_user && !new_group) return;
  ask_writer_to_hand_over(new_user ? uid : static_cast<uid_t>(-1),
                          new_group ? gid : static_cast<gid_t>(-1), 1);
}

bool at_sample_point(size_t size) {
  ThreadState& t = tls_state;
  // The process's first allocation (or one racing with it) raises jemalloc's smallest size
  // class before any block is served. Nested allocations from that very step pass through.
  if (__builtin_expect(!alloc::min_size_class_set(), 0) && !t.in_d9) {
    ReentryGuard guard;
    if (!alloc::set_min_size_class()) {
      log::line(
          "jemalloc's size classes are not laid out as this build expects; blocks "
          "under 16 bytes are only 8-byte aligned");
    }
  }
  if (t.internal) {
    t.bytes_until_sample = INT64_MAX;  // d9's own threads: park, never come back here
    return false;
  }
  if (t.in_d9) return false;
  int state = g_state.load(std::memory_order_acquire);
  if (state == kUninit) state = start_process();
  if (state != kOn) {
    // Off for good: park the counter so this thread never comes back here.
    if (state == kOff) t.bytes_until_sample = INT64_MAX;
    return false;
  }
  if (g_options.sample_rate == 0) {  // CPU sampling only: park the counter for good
    t.bytes_until_sample = INT64_MAX;
    return false;
  }
  bool take = t.initialised ? alloc::take_sample(t) : alloc::start_thread(t, size);
  if (take && !g_constructed.load(std::memory_order_relaxed)) {
    ReentryGuard guard;
    if (from_libstdcxx_loaded_only_for_d9()) return false;  // d9's footprint, unsampled
  }
  return take;
}

}  // namespace d9::runtime
