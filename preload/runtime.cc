#include "preload/runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator_stats.h"
#include "alloc/collector.h"
#include "alloc/cpu_collector.h"
#include "alloc/profiler.h"
#include "alloc/size_classes.h"
#include "alloc/stack.h"
#include "alloc/thread_state.h"
#include "preload/cpu.h"
#include "preload/log.h"
#include "preload/own_libstdcxx.h"
#include "ship/worker.h"
#include "writer/dump_request.h"
#include "writer/output_dir.h"
#include "writer/seal_tools.h"
#include "writer/segment.h"

extern char** environ;

#ifndef D9_VERSION
#define D9_VERSION "0.0.0"
#endif

namespace d9::runtime {
namespace {

enum State : int { kUninit = 0, kStarting = 1, kOn = 2, kOff = 3 };

std::atomic<int> g_state{kUninit};
// d9_start has run: allocations before it come from the constructors of libraries the
// loader initialises first (own_libstdcxx.h).
std::atomic<bool> g_constructed{false};
Options g_options;
char g_boot_id[32];

// How often the writer drains the rings.
constexpr long kDrainIntervalNs = 5 * 1000 * 1000;
constexpr long kIdleIntervalNs = 100 * 1000 * 1000;
// Encoded events reach the .active file at least this often, or once this many bytes
// wait: a write per drain cost more CPU than the encoding, and a killed process's .active
// file still misses at most the last 100 ms.
constexpr uint64_t kFlushIntervalNs = 100 * 1000 * 1000;
constexpr size_t kFlushBytes = 256 << 10;
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

// ---- writer thread -------------------------------------------------------------------

struct Writer {
  std::string dir;
  uint64_t next_index = 0;
  std::unique_ptr<Segment> segment = std::make_unique<Segment>();
  Segment* sealing = nullptr;  // a rotated segment being compressed (see seal())
  uint64_t segment_opened_ns = 0;
  uint64_t last_flush_ns = 0;
  alloc::Collector collector;
  cpu::Collector cpu;
  StringMap metadata;
  SealTools* tools = nullptr;  // loaded at the first seal that needs it
  bool tools_tried = false;
  bool warm_up_started = false;     // see warm_up_for_children()
  bool unwinder_tried = false;      // see load_unwinder_if_wanted()
  uint64_t segments_dropped = 0;    // lost to write errors (full disk, ...)
  uint64_t s3_dropped = 0;          // S3: unshipped segments deleted by retention
  uint64_t retry_after_ns = 0;      // back-off after a failed open or write
  uint64_t last_error_log_ns = 0;   // write errors are reported at most once a minute
  uint64_t last_dump_check_ns = 0;  // see serve_dump_requests()
  uint64_t last_stats_ns = 0;       // see write_allocator_stats()
};

Writer* g_writer = nullptr;  // owned by the writer thread; abandoned (never freed) on fork
// Exit waits for the writer's final seal on g_done_cv; stopping goes through a futex nudge.
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_done_cv;
std::atomic<bool> g_stop{false};
bool g_done = false;
// Work other threads ask of the writer and wait for: a seal (before exec) and a module
// snapshot (before dlclose). The requester bumps `requested` and waits until the writer
// has caught up in `done`.
struct Request {
  std::atomic<uint64_t> requested{0};
  uint64_t done = 0;  // guarded by g_mu
};
Request g_seal_request;
Request g_modules_request;
Request g_owner_request;  // hand the output over to a new user/group (before_id_change)
std::atomic<uint32_t> g_new_uid{UINT32_MAX}, g_new_gid{UINT32_MAX};
pid_t g_writer_pid = 0;  // process the writer belongs to
bool g_writer_started = false;

void init_sync() {
  pthread_mutex_init(&g_mu, nullptr);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g_done_cv, &attr);
  pthread_condattr_destroy(&attr);
  g_stop.store(false);
  g_done = false;
  for (Request* r : {&g_seal_request, &g_modules_request, &g_owner_request}) {
    r->requested.store(0);
    r->done = 0;
  }
  g_writer_pid = getpid();
}

timespec deadline_after(long ns) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += ns;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  return ts;
}

StringMap build_metadata() {
  const Options& o = g_options;
  const char* service = o.service[0] ? o.service : program_invocation_short_name;
  StringMap m = {
      {"memory.track_liveset", alloc::settings().liveset ? "true" : "false"},
      {"cpu.profile.frequency_hz", std::to_string(cpu::frequency_hz())},
      {"boot_id", g_boot_id},
      {"service", service},
      {"libd9.version", D9_VERSION},
      {"process.pid", std::to_string(getpid())},
      {"process.available_parallelism", std::to_string(sysconf(_SC_NPROCESSORS_ONLN))},
      {"memory.stack_depth", std::to_string(o.stack_depth)},
  };
  // Never 0 (dial9-format.md §3.2): absent when allocation sampling is off.
  if (o.sample_rate) {
    m.insert(m.begin(), {"memory.sample_rate_bytes", std::to_string(o.sample_rate)});
  }
  return m;
}

// Said once: later attempts (the final drain at exit, say) find profiling already off.
void turn_off(const std::string& why) {
  if (g_state.exchange(kOff, std::memory_order_acq_rel) == kOff) return;
  log::line(why.c_str(), "; profiling is off, the program runs normally");
}

constexpr uint64_t kSecond = 1000000000ULL;

// A failed open or write (full disk, removed directory): the segment is dropped whole and
// counted, the host is unaffected, and d9 tries again a second later.
void log_rate_limited(Writer& w, const std::string& message) {
  uint64_t now = monotonic_ns();
  if (w.last_error_log_ns == 0 || now - w.last_error_log_ns > 60 * kSecond) {
    log::line(message.c_str());
    w.last_error_log_ns = now;
  }
}

void segment_failed(Writer& w) {
  log_rate_limited(w, w.segment->error() + "; segment dropped, retrying");
  uint64_t now = monotonic_ns();
  w.segment->discard();
  ++w.segments_dropped;
  w.retry_after_ns = now + kSecond;
}

// The seal tools and their symbol caches outlive a fork. A child that ends soon after it
// was forked (worker pools, prefork servers) would otherwise load them and symbolize from
// cold at its exit: 0.1-0.2 s per child with system debug info installed. The writer holds
// g_tools_mu while it uses them; fork takes it too, so a child adopts them only as they
// were between two uses. Fork waits at most 2 ms for it, not for a whole seal (0.1 s and
// more, for as long as the forking host thread would stall): such a child loads its own.
pthread_mutex_t g_tools_mu = PTHREAD_MUTEX_INITIALIZER;
bool g_tools_held_for_fork = false;
SealTools* g_tools_for_child = nullptr;  // what the next fork child's writer starts with

// d9's threads load libraries (the seal tools) under g_loader_mu, and fork holds it from
// its prepare handler to its parent and child handlers, waiting as long as a load takes: a
// fork in the middle of a dlopen leaves the child libraries half loaded (seen: "libdw.so.1:
// undefined symbol: lzma_code"). Held for the load only, unlike g_tools_mu, which a seal
// holds throughout and fork waits 2 ms for at most. Taken after g_tools_mu where both are
// (fork takes them in that order too).
pthread_mutex_t g_loader_mu = PTHREAD_MUTEX_INITIALIZER;
bool g_loader_held_for_fork = false;

std::atomic<bool> g_has_forked{false};  // this process has forked: warm the tools up

void tools_fork_prepare() {
  g_has_forked.store(true, std::memory_order_relaxed);
  g_tools_held_for_fork = false;
  g_tools_for_child = nullptr;
  // At most 2 ms: long enough for one chunk of the warm-up (warm_up_main), much shorter
  // than a seal, which the forking thread must not wait for. On the monotonic clock, as
  // pthread_mutex_clocklock is told (pthread_mutex_timedlock reads the realtime clock).
  timespec until = deadline_after(2 * 1000 * 1000);
  if (pthread_mutex_clocklock(&g_tools_mu, CLOCK_MONOTONIC, &until) == 0) {
    g_tools_held_for_fork = true;
    if (g_writer && g_writer->tools_tried) g_tools_for_child = g_writer->tools;
  }
  // A load takes a millisecond or two; the bound only keeps a fork from waiting forever
  // on a load that itself waits on the forking thread (a constructor calling
  // pthread_atfork while glibc holds its fork lock).
  timespec load_until = deadline_after(0);
  load_until.tv_sec += 2;
  g_loader_held_for_fork = pthread_mutex_clocklock(&g_loader_mu, CLOCK_MONOTONIC, &load_until) == 0;
}

void tools_fork_parent() {
  if (g_loader_held_for_fork) pthread_mutex_unlock(&g_loader_mu);
  if (g_tools_held_for_fork) pthread_mutex_unlock(&g_tools_mu);
}

void tools_fork_child() {
  g_has_forked.store(false, std::memory_order_relaxed);
  pthread_mutex_init(&g_loader_mu, nullptr);
  pthread_mutex_init(&g_tools_mu, nullptr);
  if (!g_tools_held_for_fork) g_tools_for_child = nullptr;
}

// libunwind is loaded here, by the writer, once a sample has asked for it (stack.h): not
// at start-up, where every process would wait for it, sampled or not.
void load_unwinder_if_wanted(Writer& w) {
  if (w.unwinder_tried || !stack::unwinder_wanted()) return;
  w.unwinder_tried = true;
  pthread_mutex_lock(&g_loader_mu);
  stack::load_unwinder();
  pthread_mutex_unlock(&g_loader_mu);
}

// Called with g_tools_mu held.
SealTools* seal_tools(Writer& w) {
  if (!w.tools_tried) {
    w.tools_tried = true;
    std::string why;
    pthread_mutex_lock(&g_loader_mu);
    w.tools = load_seal_tools(g_options.symbolize == Symbolize::kFull, &why);
    pthread_mutex_unlock(&g_loader_mu);
    if (!w.tools) log::line("segments are sealed without symbols or compression: ", why.c_str());
  }
  return w.tools;
}

// A detached thread of d9's own: it never receives the host's signals (all are blocked in
// it), and it is not started through d9's pthread_create hook, so it gets no CPU timer.
bool start_d9_thread(void* (*fn)(void*), void* arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  bool started = cpu::create_internal_thread(&thread, &attr, fn, arg) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return started;
}

// ---- S3 shipping (ship/worker.h): the upload worker's hooks into the runtime ----------
bool shipping() {
  return g_options.s3_bucket[0] != 0;
}

// Writer thread, at its start (in every process, fork children included).
void configure_shipping() {
  if (!shipping()) return;
  ship::WorkerHooks hooks{
      .start_thread = start_d9_thread,
      .on_thread_start = [] { tls_state.internal = 1; },  // never sample d9's own allocations
      .lock_loader = [] { pthread_mutex_lock(&g_loader_mu); },
      .unlock_loader = [] { pthread_mutex_unlock(&g_loader_mu); },
  };
  ship::configure({g_options.s3_bucket, g_options.s3_prefix, hooks});
}
// ---- end of S3 shipping ------------------------------------------------------------------

// A process that forks gets its seal tools loaded and its current addresses symbolized
// early, by a thread of its own, so that children forked from then on inherit warm caches
// (module symbol tables, DWARF unit indexes) instead of building them again at their exit:
// the same work the process would do at its own first seal, done once for all of them.
// g_tools_mu is taken per chunk of addresses, so a fork waits for one chunk at most.
struct WarmUp {
  Writer* writer;
  std::vector<uint64_t> addresses;
};

void* warm_up_main(void* arg) {
  tls_state.internal = 1;  // never sample d9's own allocations
  auto* job = static_cast<WarmUp*>(arg);
  constexpr size_t kChunk = 64;
  // At least one pass, even without addresses: loaded tools alone spare each child the
  // dlopen of libd9_seal.so and libdw.
  for (size_t i = 0; i == 0 || i < job->addresses.size(); i += kChunk) {
    if (g_stop.load(std::memory_order_acquire)) break;
    pthread_mutex_lock(&g_tools_mu);
    SealTools* tools = seal_tools(*job->writer);
    if (tools && i == 0) tools->refresh_modules(true);  // files read once, for every child
    size_t end = std::min(i + kChunk, job->addresses.size());
    for (size_t k = i; tools && k < end; ++k) tools->resolve(job->addresses[k]);
    pthread_mutex_unlock(&g_tools_mu);
    if (!tools) break;
  }
  delete job;
  return nullptr;
}

void warm_up_for_children(Writer& w) {
  if (w.warm_up_started || !g_has_forked.load(std::memory_order_relaxed)) return;
  w.warm_up_started = true;
  auto* job = new WarmUp{&w, {}};
  if (g_options.symbolize != Symbolize::kOff && w.segment->is_open()) {
    const auto& seen = w.segment->events().frame_addresses();
    job->addresses.assign(seen.begin(), seen.end());
  }
  if (!start_d9_thread(warm_up_main, job)) delete job;
}

// Writer, for before_id_change: gives the process's directory and files to the new owner,
// then creates the next ones as that owner (the file-system ids are per thread; the
// program's own call then changes them for every thread anyway).
void hand_over_output(Writer& w) {
  auto uid = static_cast<uid_t>(g_new_uid.load(std::memory_order_acquire));
  auto gid = static_cast<gid_t>(g_new_gid.load(std::memory_order_acquire));
  if (!make_output_dirs(w.dir)) return;  // the new owner could not create it
  if (!chown_output_dir(w.dir, uid, gid)) {
    log_rate_limited(w, "cannot hand " + w.dir + " over to the new user: " + strerror(errno));
  }
  if (gid != static_cast<gid_t>(-1)) syscall(SYS_setfsgid, gid);
  if (uid != static_cast<uid_t>(-1)) syscall(SYS_setfsuid, uid);
}

// Deletes the oldest sealed segments while this process's total exceeds D9_MAX_TOTAL_SIZE.
void enforce_retention(Writer& w) {
  uint64_t total;
  std::vector<SealedSegment> sealed = sealed_segments(w.dir, &total);
  // The newest sealed segment always stays, whatever its size.
  for (size_t i = 0; i + 1 < sealed.size() && total > g_options.max_total_size; ++i) {
    // ---- S3 (ship/worker.h): what retention deletes was never shipped. Said once.
    if (shipping()) {
      if (!ship::drop(sealed[i].path)) continue;
      if (w.s3_dropped++ == 0) {
        log::line("S3 backlog over D9_MAX_TOTAL_SIZE: the oldest unshipped segments are ",
                  "deleted (counted as s3.segments_dropped)");
      }
      total -= sealed[i].bytes;
      continue;
    }
    if (unlink(sealed[i].path.c_str()) == 0) total -= sealed[i].bytes;
  }
}

bool open_segment(Writer& w) {
  if (!make_output_dirs(w.dir)) {
    w.segment->discard();
    turn_off("cannot create output directory " + w.dir + ": " + strerror(errno));
    return false;
  }
  if (w.next_index == 0) w.next_index = next_free_index(w.dir);
  if (!w.segment->open(w.dir, "trace", w.next_index, w.metadata)) {
    segment_failed(w);
    return false;
  }
  ++w.next_index;
  w.segment_opened_ns = monotonic_ns();
  return true;
}

bool drain(Writer& w);

// ---- allocator statistics (issue 18) ----
// jemalloc's own figures into the open segment about once a second, beside the samples,
// and at every seal (`force`), so even a short run has a reading at its end.
void write_allocator_stats(Writer& w, bool force = false) {
  const uint64_t now = monotonic_ns();
  if (!w.segment->is_open() || (!force && now - w.last_stats_ns < kSecond)) return;
  w.last_stats_ns = now;
  alloc::AllocatorStats s;
  if (!alloc::read_allocator_stats(&s)) return;
  w.segment->events().allocator_stats(now, s.allocated, s.active, s.resident, s.mapped, s.retained);
  w.segment->note_events(1);
}
// ---- end of allocator statistics ----

// Closes the current segment: the live set, then the seal (which adds the counters to the
// closing metadata so every segment says how many samples were taken and dropped), then
// retention. A segment rotated out while the program runs on (`rotating`) is compressed
// with the rings drained between chunks into the next segment: compressing 32 MiB takes
// ~0.1-0.2 s, long enough for busy threads to fill the rings. Other seals (exit, exec, a
// change of owner) are the last word and drain nothing more. Returns the sealed file's
// path ("" when nothing was open, or the segment was dropped).
std::string seal(Writer& w, bool rotating = false) {
  if (!w.segment->is_open()) return "";
  write_allocator_stats(w, true);
  if (alloc::settings().liveset) w.collector.write_live_set(w.segment->events());
  alloc::Counters c = alloc::counters();
  Segment::SealOptions options;
  options.extra_metadata = {
      {"memory.alloc_samples_taken", std::to_string(c.alloc_samples)},
      {"memory.frees_seen", std::to_string(c.frees_seen)},
      {"memory.untracked_samples", std::to_string(c.untracked)},
      {"memory.live_samples", std::to_string(w.collector.live_count())},
      {"memory.unmatched_frees", std::to_string(w.collector.unmatched_frees())},
      {"d9.segments_dropped", std::to_string(w.segments_dropped)},
      {"cpu.sampling", cpu::state()}};
  if (shipping())
    options.extra_metadata.push_back({"s3.segments_dropped", std::to_string(w.s3_dropped)});
  StringMap cpu_counts = w.cpu.close_segment();
  options.extra_metadata.insert(options.extra_metadata.end(), cpu_counts.begin(), cpu_counts.end());
  options.symbolize = g_options.symbolize != Symbolize::kOff;
  if (g_options.compress == Compression::kZstd) options.compression = SealCompression::kZstd;
  if (g_options.compress == Compression::kGzip) options.compression = SealCompression::kGzip;
  // S3: sealed as the upload's body (one gzip member), not zstd to be transcoded.
  if (shipping() && options.compression) options.compression = SealCompression::kGzip;
  // Always: even unsymbolized segments carry the module map, for offline symbolization.
  pthread_mutex_lock(&g_tools_mu);
  options.tools = seal_tools(w);
  std::unique_ptr<Segment> sealed = std::move(w.segment);
  w.segment = std::make_unique<Segment>();  // opened by the next drain with records
  if (rotating) {
    w.sealing = sealed.get();
    options.between_chunks = [&w] { drain(w); };
  }
  std::string path = sealed->seal(options);
  w.sealing = nullptr;
  pthread_mutex_unlock(&g_tools_mu);
  if (!sealed->error().empty()) {
    log_rate_limited(w, sealed->error() + "; segment dropped, retrying");
    ++w.segments_dropped;
    w.retry_after_ns = monotonic_ns() + kSecond;
  } else if (!sealed->compress_error().empty()) {
    log_rate_limited(w, sealed->compress_error() + "; segment kept uncompressed");
  }
  enforce_retention(w);
  if (shipping() && sealed->error().empty()) ship::segment_sealed(w.dir);  // S3: ship it
  return path;
}

// Drains the rings into the current segment (opened on demand, so a fork child that execs
// or exits at once leaves nothing behind) and writes it out every so often. Returns whether
// there was anything to do, or still is (events not yet flushed).
bool drain(Writer& w) {
  uint64_t now = monotonic_ns();
  if (now < w.retry_after_ns) return false;  // still backing off after a write error
  bool has_records = w.collector.pending(alloc::rings(), alloc::counters());
  has_records |= w.cpu.pending(cpu::ring());
  if (has_records && !w.segment->is_open() && !open_segment(w)) return false;
  if (has_records) {
    w.collector.drain(alloc::rings(), alloc::counters(), *w.segment);
    w.cpu.drain(cpu::ring(), *w.segment);
  }
  if (w.segment->is_open() && w.segment->bytes_buffered() > 0 &&
      (w.segment->bytes_buffered() >= kFlushBytes || now - w.last_flush_ns >= kFlushIntervalNs)) {
    w.last_flush_ns = now;
    if (!w.segment->flush()) {
      segment_failed(w);
      return false;
    }
  }
  return has_records || w.segment->bytes_buffered() > 0;
}

// drain(), then rotation of the segment by size or age.
bool write_pending(Writer& w) {
  bool busy = drain(w);
  if (w.segment->is_open() && w.segment->event_count() > 0 &&
      (w.segment->bytes_written() + w.segment->bytes_buffered() >= g_options.max_file_size ||
       monotonic_ns() - w.segment_opened_ns >= g_options.rotate_secs * kSecond)) {
    seal(w, true);
  }
  return busy;
}

// `d9 dump` (writer/dump_request.h): requests are files in the process's directory,
// looked for at most every 100 ms (a readdir on d9's thread, nothing on the host's).
void serve_dump_requests(Writer& w) {
  uint64_t now = monotonic_ns();
  if (now - w.last_dump_check_ns < kIdleIntervalNs) return;
  w.last_dump_check_ns = now;
  std::vector<std::string> nonces = dump::take_requests(w.dir);
  if (nonces.empty()) return;
  drain(w);
  dump::answer(w.dir, nonces, seal(w));
}

bool requests_pending() {
  for (const Request* r : {&g_seal_request, &g_modules_request, &g_owner_request}) {
    if (r->requested.load(std::memory_order_acquire) != r->done) return true;
  }
  return false;
}

// Runs `work` if another thread asked for it, then tells the waiters.
template <class Work>
void serve(Request& r, Work work) {
  uint64_t requested = r.requested.load(std::memory_order_acquire);
  if (requested == r.done) return;
  work();
  pthread_mutex_lock(&g_mu);
  r.done = requested;
  pthread_cond_broadcast(&g_done_cv);
  pthread_mutex_unlock(&g_mu);
}

void* writer_main(void*) {
  tls_state.internal = 1;  // never sample d9's own allocations
  auto* w = new Writer;
  w->tools = g_tools_for_child;  // a fork child's: its parent's, warm
  w->tools_tried = w->tools != nullptr;
  g_tools_for_child = nullptr;
  g_writer = w;
  w->dir = std::string(g_options.output) + "/" + g_boot_id;
  w->metadata = build_metadata();
  configure_shipping();
  cpu::poll(&g_stop);           // a fork child: proves the loader free for libunwind walks
  load_unwinder_if_wanted(*w);  // asked for before the writer got here

  long wait_ns = kDrainIntervalNs;
  for (;;) {
    // Read before the checks: a stop or request posted after them (they nudge) wakes the
    // wait at once. One posted before the writer first got here (a fork child asking for
    // the seal before exec, at once) is served without sleeping.
    uint32_t seen = alloc::nudges();
    if (g_stop.load(std::memory_order_acquire) || g_state.load(std::memory_order_acquire) != kOn) {
      break;
    }
    if (!requests_pending()) alloc::wait_for_work(seen, wait_ns);
    if (g_stop.load(std::memory_order_acquire)) break;
    load_unwinder_if_wanted(*w);  // first: samples walk with libgcc until it is loaded
    cpu::poll(&g_stop);
    // Idle, the writer polls less and less often, down to every 100 ms: producers nudge it
    // as their rings fill, and exit, exec and dlclose as they ask, so only the periodic
    // checks (rotation by age, a host taking SIGPROF over) can wait that long.
    wait_ns = write_pending(*w) ? kDrainIntervalNs : std::min(2 * wait_ns, kIdleIntervalNs);
    write_allocator_stats(*w);
    warm_up_for_children(*w);
    serve(g_modules_request, [&] {
      pthread_mutex_lock(&g_tools_mu);
      if (SealTools* tools = seal_tools(*w)) tools->refresh_modules(true);  // before dlclose
      pthread_mutex_unlock(&g_tools_mu);
    });
    serve(g_seal_request, [&] { seal(*w); });  // before exec: next events, next segment
    serve(g_owner_request, [&] { hand_over_output(*w); });
    serve_dump_requests(*w);
  }

  w->retry_after_ns = 0;
  write_pending(*w);
  seal(*w);
  pthread_mutex_lock(&g_mu);
  g_done = true;
  pthread_cond_broadcast(&g_done_cv);
  pthread_mutex_unlock(&g_mu);
  return nullptr;
}

void start_writer() {
  init_sync();
  g_writer_started = start_d9_thread(writer_main, nullptr);
  if (!g_writer_started) {
    turn_off("cannot start the writer thread");
    return;
  }
}

// Stops the writer, which seals the last segment, and waits up to `wait_secs` for it.
void stop_writer(int wait_secs) {
  if (!g_writer_started) return;
  g_stop.store(true, std::memory_order_release);
  alloc::nudge_writer();
  timespec until = deadline_after(0);
  until.tv_sec += wait_secs;
  // Bounded too: _exit may come from a signal handler that interrupted this very wait.
  if (pthread_mutex_clocklock(&g_mu, CLOCK_MONOTONIC, &until) != 0) return;
  // Checked every 100 ms: a fork child's writer blocked for good on a loader lock it
  // inherited held will never finish.
  while (!g_done && !cpu::writer_stuck_in_loader()) {
    timespec slice = deadline_after(100 * 1000 * 1000);
    bool last = slice.tv_sec > until.tv_sec ||
                (slice.tv_sec == until.tv_sec && slice.tv_nsec >= until.tv_nsec);
    if (pthread_cond_timedwait(&g_done_cv, &g_mu, last ? &until : &slice) == ETIMEDOUT && last) {
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

void on_fork_child() {
  if (g_state.load(std::memory_order_acquire) != kOn) return;
  // The parent's writer thread does not exist here and its state may be mid-update:
  // abandon it (closing only the inherited descriptor) and start afresh.
  if (g_writer && g_writer->segment->is_open()) g_writer->segment->abandon();
  if (g_writer && g_writer->sealing != nullptr) g_writer->sealing->abandon();
  g_writer = nullptr;
  alloc::reset_after_fork();
  cpu::after_fork_child();
  make_boot_id();
  g_writer_started = false;
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

namespace {

// Asks the writer for `r` and waits up to `wait_secs` for it to be done. Not from d9's own
// threads (the writer would wait for itself), nor from a vfork child, which shares its
// parent's memory and writer.
void ask_writer(Request& r, int wait_secs) {
  if (g_state.load(std::memory_order_acquire) != kOn || !g_writer_started) return;
  if (tls_state.internal || getpid() != g_writer_pid) return;
  ReentryGuard guard;
  int saved = errno;
  uint64_t ticket = r.requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  alloc::nudge_writer();
  pthread_mutex_lock(&g_mu);
  timespec until = deadline_after(0);
  until.tv_sec += wait_secs;
  while (r.done < ticket && !g_done) {
    if (pthread_cond_timedwait(&g_done_cv, &g_mu, &until) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&g_mu);
  errno = saved;
}

}  // namespace

void before_quick_exit() {
  if (g_state.load(std::memory_order_acquire) != kOn || nothing_recorded()) return;
  if (tls_state.internal || getpid() != g_writer_pid) return;  // d9's thread; a vfork child
  ReentryGuard guard;
  stop_writer(kQuickExitWaitSecs);
}

void before_exec() {
  if (nothing_recorded()) return;
  ask_writer(g_seal_request, kExitWaitSecs);
}

void before_dlclose() {
  ask_writer(g_modules_request, 1);
}

void before_id_change(uid_t uid, gid_t gid) {
  if (geteuid() != 0) return;  // only root can give files away
  bool new_user = uid != static_cast<uid_t>(-1) && uid != 0;
  bool new_group = gid != static_cast<gid_t>(-1) && gid != getegid();
  if (!new_user && !new_group) return;
  g_new_uid.store(new_user ? uid : UINT32_MAX, std::memory_order_release);
  g_new_gid.store(new_group ? gid : UINT32_MAX, std::memory_order_release);
  ask_writer(g_owner_request, 1);
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
