// Helpers for end-to-end tests: run a program with libd9.so preloaded, then find and
// decode the segments it wrote.
#pragma once

#include <string>
#include <vector>

#include "writer/decoder.h"

namespace d9::test {

struct RunResult {
  int exit_code = -1;  // exit status, or 128 + signal number
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs argv with `env` added to (and overriding) the test's own environment. Set
// preload=false for the reference run without d9.
RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              bool preload = true);

// A fresh empty directory under the build tree, removed by the caller's fixture.
std::string make_temp_dir(const std::string& tag);
void remove_tree(const std::string& path);

// Every segment file under dir (recursive): *.bin, *.bin.gz, *.bin.zst, *.active.
std::vector<std::string> find_segments(const std::string& dir);
// Sub-directories directly under dir (one per profiled process).
std::vector<std::string> list_dirs(const std::string& dir);

// Path of a program the suite builds (tests/programs/NAME).
std::string program(const std::string& name);
std::string libd9_path();

}  // namespace d9::test
