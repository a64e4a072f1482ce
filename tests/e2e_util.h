// Helpers for end-to-end tests: run a program with libd9.so preloaded, then find and
// decode the segments it wrote.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "writer/trace.h"

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

// A process started in the background (servers): stdout and stderr go to `log_path`.
// The destructor kills it (SIGKILL) and reaps it if it is still running, so a failing
// test never leaves it behind.
class Spawned {
 public:
  Spawned(const std::vector<std::string>& argv, const std::vector<std::string>& env, bool preload,
          const std::string& log_path);
  ~Spawned();
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  pid_t pid() const { return pid_; }  // -1 if the spawn failed
  // True while the process has not exited (reaps it if it has).
  bool running();
  // Sends `sig` and waits up to `timeout_ms` for the exit, then SIGKILLs. Returns the exit
  // status as RunResult::exit_code does (128 + signal if killed); -1 if it never started.
  int stop(int sig, int timeout_ms);
  // Waits up to `timeout_ms` for the process to exit by itself and returns its exit status;
  // -1 if it is still running (or never started).
  int wait(int timeout_ms);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;  // exit status once reaped
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
int free_tcp_port();
// Waits until something accepts connections on 127.0.0.1:port; false after timeout_ms, or
// as soon as `server` (when given) has exited.
bool wait_for_port(int port, int timeout_ms, Spawned* server = nullptr);
// Pids of the running children of `parent` (from /proc).
std::vector<pid_t> children_of(pid_t parent);

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

// One segment with d9's live set (Libd9LiveAllocation events, written at seal: the sampled
// allocations still live then).
struct LiveAllocation {
  uint32_t tid = 0;
  uint64_t size = 0, addr = 0, alloc_ts = 0;
  std::vector<uint64_t> stack;
};
struct TraceWithLiveset {
  decode::Trace trace;
  std::vector<LiveAllocation> live;
};
TraceWithLiveset load_with_liveset(const std::string& path);
// GoogleTest expectations: frees pair with allocations on addr + alloc_timestamp_ns, exactly
// as dial9's toolkit pairs them: every FreeEvent has its AllocEvent (same size, later),
// nothing is freed twice or both freed and live, and allocs = frees + live.
void expect_exact_pairing(const TraceWithLiveset& d);

// Path of a program the suite builds (tests/programs/NAME).
std::string program(const std::string& name);
std::string libd9_path();

}  // namespace d9::test
