// The writer thread: drains the rings into segments, writes, rotates, seals and retires
// them, serves `d9 dump` and the requests of exit, exec, dlclose and set*id.
#include "preload/writer_thread.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator_stats.h"
#include "alloc/profiler.h"
#include "alloc/thread_state.h"
#include "preload/cpu.h"
#include "preload/log.h"
#include "preload/process_state.h"
#include "preload/seal_tools_fork.h"
#include "ship/worker.h"
#include "writer/dump_request.h"
#include "writer/output_dir.h"

#ifndef D9_VERSION
#define D9_VERSION "0.0.0"
#endif

namespace d9::runtime {

Writer* g_writer = nullptr;  // owned by the writer thread; abandoned (never freed) on fork
std::atomic<bool> g_stop{false};

namespace {

// How often the writer drains the rings.
constexpr long kDrainIntervalNs = 5 * 1000 * 1000;
constexpr long kIdleIntervalNs = 100 * 1000 * 1000;
// Encoded events reach the .active file at least this often, or once this many bytes
// wait: a write per drain cost more CPU than the encoding, and a killed process's .active
// file still misses at most the last 100 ms.
constexpr uint64_t kFlushIntervalNs = 100 * 1000 * 1000;
constexpr size_t kFlushBytes = 256 << 10;

// Exit waits for the writer's final seal on g_done_cv; stopping goes through a futex nudge.
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_done_cv;
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

}  // namespace

timespec deadline_after(long ns) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += ns;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  return ts;
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

namespace {

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

// ---- S3 shipping (ship/worker.h): the upload worker's hooks into the runtime ----------
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

}  // namespace

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

void abandon_parent_writer() {
  if (g_writer && g_writer->segment->is_open()) g_writer->segment->abandon();
  if (g_writer && g_writer->sealing != nullptr) g_writer->sealing->abandon();
  g_writer = nullptr;
  g_writer_started = false;
}

bool host_thread_of_writer_process() {
  return !tls_state.internal && getpid() == g_writer_pid;
}

namespace {

// Asks the writer for `r` and waits up to `wait_secs` for it to be done. Not from d9's own
// threads (the writer would wait for itself), nor from a vfork child, which shares its
// parent's memory and writer.
void ask_writer(Request& r, int wait_secs) {
  if (g_state.load(std::memory_order_acquire) != kOn || !g_writer_started) return;
  if (!host_thread_of_writer_process()) return;
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

void ask_writer_to_seal(int wait_secs) {
  ask_writer(g_seal_request, wait_secs);
}

void ask_writer_for_modules(int wait_secs) {
  ask_writer(g_modules_request, wait_secs);
}

void ask_writer_to_hand_over(uid_t uid, gid_t gid, int wait_secs) {
  g_new_uid.store(uid, std::memory_order_release);
  g_new_gid.store(gid, std::memory_order_release);
  ask_writer(g_owner_request, wait_secs);
}

}  // namespace d9::runtime
