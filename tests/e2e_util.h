// Helpers for end-to-end tests: run a program with libd9.so preloaded, then find and
// decode the segments it wrote.
#pragma once

#include <cstdint>
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

// Allocation sites as the test programs print them (tests/programs/sites.h):
// "site NAME START END BYTES COUNT", START..END being the site's code range.
struct Site {
  std::string name;
  uint64_t start = 0, end = 0, bytes = 0, count = 0;
};
std::vector<Site> parse_sites(const std::string& out);
// The site whose code holds `pc` (a return address may point just past the range's last
// call), or nullptr.
const Site* site_of(const std::vector<Site>& sites, uint64_t pc);

// Path of a program the suite builds (tests/programs/NAME).
std::string program(const std::string& name);
std::string libd9_path();

}  // namespace d9::test
