// Start-up, the writer thread, exit and fork: everything in d9's lifecycle that is not an
// interposed function itself.
//
// Start-up is lazy and idempotent: the first allocation that reaches a sample point, or
// the library constructor, whichever comes first, reads the options and maps the ring.
// The constructor (which runs once libc is ready) loads the unwinder and starts the
// writer thread; samples taken before that wait in the ring.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "preload/options.h"

namespace d9::runtime {

// Out-of-line half of the sampling decision, reached when a thread's byte counter has
// run out (or was never set). Sets up the process and the thread on first use and
// returns whether the allocation of `size` bytes is sampled.
bool at_sample_point(size_t size);

// Called by the exec family before the process image is replaced (exec runs no
// destructors): drains the rings and seals the current segment, waiting a bounded time.
// If exec fails, the next events go to the next segment. Does nothing in a vfork child,
// which shares its parent's memory and writer.
void before_exec();

// Called by _exit and _Exit, which run no destructors (so not d9's, which seals the last
// segment at exit): seals it, waiting at most 2 s. dash, Debian's /bin/sh, ends this way.
// Does nothing on d9's own threads or in a vfork child.
void before_quick_exit();

// Called by dlclose before a library is unloaded: the writer takes note of the modules
// mapped now, so the library's addresses in samples still resolve at the next seal.
// Waits a bounded time; does nothing on d9's own threads or in a vfork child.
void before_dlclose();

// Called by the set*id family before the effective user or group changes ((uid_t)-1 and
// (gid_t)-1: unchanged). When root gives them away, the writer chowns the process's output
// directory and files to the new owner and creates its next files as that owner, so a
// worker that drops privileges keeps writing its trace. Waits a bounded time.
void before_id_change(uid_t uid, gid_t gid);

// The options in force (valid once start-up has run).
const Options& options();

}  // namespace d9::runtime
