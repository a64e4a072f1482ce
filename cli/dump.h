// `d9 dump`: asks running profiled processes to seal their current segment now (live set,
// module map, symbols) and prints each sealed file. See writer/dump_request.h.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace d9::cli {

struct DumpOptions {
  std::vector<std::string> targets;  // pid, boot id or a process's trace directory
  std::string all_dir;               // --all DIR: every live process under DIR
  std::string search_dir;            // --dir DIR: where to look for pids and boot ids
  int timeout_ms = 10000;
};

// The process directory a target names, or "" with `why` set.
std::string dump_target_dir(const std::string& target, const std::string& search_dir,
                            std::string* why);
// Process directories under `dir` (itself or its sub-directories) whose process is alive.
std::vector<std::string> live_process_dirs(const std::string& dir);

// Prints one line per process: the sealed file. Returns 0 when every process answered,
// 1 otherwise (2: nothing to ask).
int dump_processes(const DumpOptions& options, FILE* out);

}  // namespace d9::cli
