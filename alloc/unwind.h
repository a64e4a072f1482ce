// Stack walking for CPU samples, from inside a SIGPROF handler.
//
// Two halves with one contract between them:
//  - ModuleMap (writer thread): keeps a snapshot of the loaded modules with their unwind
//    tables (cfi.h), rebuilt when dl_iterate_phdr's load/unload counters move, and
//    publishes it through one atomic pointer. A replaced snapshot is freed only once no
//    handler can still hold it (a count of handlers inside walk()); tables are shared
//    between snapshots and outlive every snapshot that names them.
//  - walk() (signal handler): async-signal-safe. It takes no lock, allocates nothing, calls
//    nothing but memory reads: the snapshot (d9's own memory) and the interrupted thread's
//    stack, each read checked to lie in [interrupted sp, stack top) of that thread.
//
// Frames come from the tables where a module has them, else from the frame pointer (rbp
// chain). A walk is complete when it reaches a frame whose return address is undefined
// (_start, clone: the bottom of every glibc thread). It stops early, and says so, when:
//  - code has neither unwind info nor a frame pointer chain (JIT code, hand-written
//    assembly without CFI, code in a module loaded since the last snapshot that does not
//    keep rbp as a frame pointer);
//  - a rule needs a DWARF expression other than the PLT's (e.g. stack realignment without
//    a frame pointer);
//  - the thread runs on a stack d9 does not know (sigaltstack, coroutine or fiber stacks,
//    threads that existed before d9 started): only the interrupted pc is recorded;
//  - the stack is deeper than D9_STACK_DEPTH.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "alloc/cfi.h"

namespace d9::unwind {

struct Regs {
  uint64_t pc, sp, fp;
};

// The interrupted thread's stack: [lo, hi). Zero when unknown.
struct StackBounds {
  uint64_t lo, hi;
};

struct WalkResult {
  int depth;      // frames written, leaf first
  bool complete;  // reached the outermost frame
};

// Signal handler side. Writes up to `max_depth` pcs to `out`: out[0] is the interrupted pc,
// the others return addresses.
WalkResult walk(const Regs& regs, const StackBounds& stack, uint64_t* out, int max_depth);

// Fork child: no handler of the parent's other threads is inside walk() any more.
void reset_after_fork();

// True once a snapshot of tables has been published (walk() uses frame pointers before).
bool has_tables();

// One module's executable range and table, as the handler reads it.
struct Module {
  uint64_t start, end;  // executable bytes [start, end)
  uint64_t base;        // load bias: table pcs are relative to it
  cfi::Table table;
};

struct Snapshot;

class ModuleMap {
 public:
  // In a fork child, the map adopts the tables of the snapshot in force (never freeing
  // them: they belong to the parent's abandoned map), so nothing is parsed again.
  ModuleMap();
  ~ModuleMap();
  ModuleMap(const ModuleMap&) = delete;
  ModuleMap& operator=(const ModuleMap&) = delete;

  // Rebuilds and publishes the snapshot if modules were loaded or unloaded since the last
  // call (or on the first call). Frees replaced snapshots no handler can still read.
  // Returns true when it published a new snapshot. Once `*stop` is set (the process is
  // exiting), no further table is built and nothing is published; tables built so far are
  // kept for the next call.
  bool refresh(const std::atomic<bool>* stop = nullptr);

  // Sizes of the snapshot in force (for tests and metadata).
  size_t modules() const;
  size_t rows() const;

  // One module's rows: owned, or adopted from a fork parent's snapshot (storage empty).
  struct Table {
    std::vector<cfi::Row> rows;
    std::vector<uint32_t> pages;
    cfi::Table view;
  };

 private:
  struct Key {
    uint64_t base, hdr, end;
    auto operator<=>(const Key&) const = default;
  };
  struct Scan;

  std::map<Key, std::shared_ptr<const Table>> tables_;
  std::vector<std::unique_ptr<Snapshot>> retired_;
  std::unique_ptr<Snapshot> current_;
  unsigned long long adds_ = 0, subs_ = 0;
  bool built_ = false;
};

}  // namespace d9::unwind
