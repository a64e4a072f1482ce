// Helpers shared by the `d9` command's tests and the end-to-end tests: run a program with
// libd9.so preloaded (or a shell command, or d9), give each test a directory, then find,
// read and decode the segments and files written.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
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

// A fresh empty directory under the build tree ("" on failure), removed by the caller.
std::string make_temp_dir(const std::string& tag);
void remove_tree(const std::string& path);

// A test with a fresh directory of its own under the build tree (dir_, named after `tag`):
// removed when the test passed, kept for a look when it failed.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override;
  void TearDown() override;
  std::string dir_;

 private:
  std::string tag_;
};

// Runs a shell command, capturing stdout (and stderr, through a file).
struct Shell {
  int status = -1;  // exit status, or 128 + signal number
  std::string out, err;
};
Shell shell(const std::string& cmd);
// The d9 command of this build.
std::string d9_binary();

// A whole file ("" or empty when it cannot be read).
std::string read_file(const std::string& path);
std::vector<uint8_t> read_bytes(const std::string& path);
// Writes `data` to `path`, making its directory first.
void write_bytes(const std::string& path, const std::vector<uint8_t>& data);
// The last component of a path.
std::string basename_of(std::string_view path);
// What `fn` writes to the FILE* it is given.
std::string capture(const std::function<void(FILE*)>& fn);
// The number after "key": in d9's JSON output, from `from` on; NaN when absent.
double json_number(const std::string& text, const std::string& key, size_t from = 0);

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

// One segment file decoded: the typed trace, the raw stream, d9's module map, every address
// in any stack-valued field of any event (allocations and the live set alike), and the
// symbol chains by address.
struct SegmentModule {
  std::string path, build_id;
  uint64_t start = 0, end = 0, bias = 0;
};
struct SegmentFile {
  std::string path;
  decode::Trace trace;
  std::vector<uint8_t> raw;  // the decompressed stream
  std::vector<SegmentModule> modules;
  std::set<uint64_t> callchain_addrs;
  std::map<uint64_t, std::vector<decode::SymbolTableEntry>> symbols;  // addr -> by depth
  uint64_t seal_offset = 0;  // where the closing metadata starts: the bytes written before

  // The module of a return address (the newest mapping wins), or nullptr.
  const SegmentModule* module_of(uint64_t addr) const;
  // (canonical module path, address - bias) for an address, or ("", 0).
  std::pair<std::string, uint64_t> where(uint64_t addr) const;
  // The leaf of the allocations of `size` bytes (one call site), or 0.
  uint64_t leaf_of(uint64_t size) const;
};
SegmentFile load_segment(const std::string& path);

// Path of a program the suite builds (tests/programs/NAME).
std::string program(const std::string& name);
std::string libd9_path();
// tests/programs' segments_subject and the library it loads.
std::string segments_subject();
std::string segments_dso();
// known_sites' "sites" workload under libd9.so, writing to `out_dir`, with the seed CI uses
// (D9_TEST_SEED=N reruns it with another; scripts/accuracy.sh sweeps many). It allocates
// ~50 GB/s, far beyond real services: a larger ring keeps a writer starved by a busy CI
// machine from dropping samples.
RunResult run_known_sites(const std::string& out_dir);

}  // namespace d9::test
