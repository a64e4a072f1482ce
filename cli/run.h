// `d9 run`: runs a command with libd9.so preloaded, then summarises what it wrote.
#pragma once

#include <string>
#include <vector>

namespace d9::cli {

struct RunOptions {
  std::string rate;  // D9_SAMPLE_RATE, "" = libd9's default
  bool no_liveset = false;
  std::string cpu_hz;   // D9_CPU_HZ
  std::string output;   // D9_OUTPUT, "" = $D9_OUTPUT or ./d9-traces
  std::string library;  // "" = found beside the d9 binary or in ../lib
  bool quiet = false;   // no summary, only the trace location
  std::vector<std::string> command;
};

// libd9.so beside the running d9 binary (build tree) or in ../lib, ../lib/d9,
// ../lib/<multiarch> (installed). Empty when not found.
std::string find_libd9(std::vector<std::string>* tried);

// Runs the command and returns its exit status (128 + signal number when it was killed).
int run_profiled(const RunOptions& options);

}  // namespace d9::cli
