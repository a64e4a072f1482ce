// libd9.so's upload worker: a background thread of d9's own that ships each sealed
// segment of the process's directory to S3 (ship/client.h, loaded from libd9_ship.so at
// its first run) and deletes the file only once the server confirmed it.
//
// Never on a host thread: the writer calls segment_sealed() after each seal, which only
// records the directory and wakes the worker (starting it the first time). Transient
// failures (connection, timeout, 5xx, 429) back off exponentially with jitter up to
// kMaxBackoffSecs; any other HTTP status is said once and the files stay. At exit, finish()
// gives the worker D9_S3_EXIT_TIMEOUT to ship what is left; the rest stays on disk for
// `d9 ship`.
#pragma once

#include <cstdint>
#include <string>

namespace d9::ship {

struct WorkerHooks {
  // Starts a detached d9 thread with every signal blocked (runtime's start_d9_thread).
  bool (*start_thread)(void* (*fn)(void*), void* arg);
  // First thing on the new thread (marks it d9's own: never sampled).
  void (*on_thread_start)();
  // Around the dlopen of libd9_ship.so: fork must not split a load.
  void (*lock_loader)();
  void (*unlock_loader)();
};

struct WorkerConfig {
  std::string bucket, prefix;
  WorkerHooks hooks;
};

// Copies the variables libd9_ship.so reads (ship/client.h kEnvironment) from `envp`: at
// start-up, before the host's threads can change the environment.
void capture_environment(char* const* envp);
// Before any other call but capture_environment() (the writer's thread, at its start).
void configure(const WorkerConfig& config);
// The writer sealed a segment in `dir`: ship it (and any older one still there).
void segment_sealed(const std::string& dir);
// Retention wants to delete `path` (the oldest unshipped segment): true if it did, under the
// worker's lock, so a segment is never both uploaded and counted as dropped.
bool drop(const std::string& path);
// At exit, after the last seal: waits up to `timeout_secs` for the worker to ship the
// directory, then stops the transfer in progress.
void finish(uint64_t timeout_secs);
// In a fork child: the parent's worker thread does not exist here. The child ships its
// own directory with a worker and a connection of its own.
void after_fork_child();

}  // namespace d9::ship
