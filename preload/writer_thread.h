// The writer thread: drains the rings into segments, rotates, seals and retires them, and
// does what other threads ask of it (a seal before exec, ...). Internal to libd9.so.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "alloc/collector.h"
#include "alloc/cpu_collector.h"
#include "writer/encoder.h"
#include "writer/seal_tools.h"
#include "writer/segment.h"

namespace d9::runtime {

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

extern Writer* g_writer;          // owned by the writer thread; abandoned (never freed) on fork
extern std::atomic<bool> g_stop;  // the writer is asked to stop (stop_writer)

// Starts the writer thread; profiling is turned off if it cannot be started.
void start_writer();

// Stops the writer, which seals the last segment, and waits up to `wait_secs` for it.
void stop_writer(int wait_secs);

// In a fork child, before start_writer: forgets the parent's writer, which does not exist
// here, closing only the descriptors it inherited.
void abandon_parent_writer();

// Not one of d9's own threads, nor a vfork child (which shares its parent's memory and
// writer): the writer may be asked for work and waited for.
bool host_thread_of_writer_process();

// Ask the writer for work and wait up to `wait_secs` for it to be done (see ask_writer):
// a seal (before exec), a snapshot of the modules (before dlclose), or the hand-over of the
// output to a new user and group ((uid_t)-1 and (gid_t)-1: unchanged; before set*id).
void ask_writer_to_seal(int wait_secs);
void ask_writer_for_modules(int wait_secs);
void ask_writer_to_hand_over(uid_t uid, gid_t gid, int wait_secs);

// A detached thread of d9's own: it never receives the host's signals (all are blocked in
// it), and it is not started through d9's pthread_create hook, so it gets no CPU timer.
bool start_d9_thread(void* (*fn)(void*), void* arg);

// The monotonic clock `ns` from now.
timespec deadline_after(long ns);

}  // namespace d9::runtime
