#include "tests/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace d9::test {
namespace fs = std::filesystem;

std::string libd9_path() {
  return std::string(D9_BUILD_DIR) + "/libd9.so";
}
std::string program(const std::string& name) {
  return std::string(D9_BUILD_DIR) + "/tests/programs/" + name;
}
std::string segments_subject() {
  return program("segments_subject");
}
std::string segments_dso() {
  return program("libsegments_dso.so");
}
std::string d9_binary() {
  return std::string(D9_BUILD_DIR) + "/d9";
}

namespace {

// The environment of a child: the test's own without any D9_ variable or LD_PRELOAD, then
// `env`, then LD_PRELOAD=libd9.so when `preload`.
std::vector<std::string> child_env(const std::vector<std::string>& env, bool preload) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    // Keep the reference run clean of any d9 settings the test process itself has.
    if (key.rfind("D9_", 0) == 0 || key == "LD_PRELOAD") continue;
    vars[key] = kv.substr(eq + 1);
  }
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (preload) vars["LD_PRELOAD"] = libd9_path();
  std::vector<std::string> flat;
  for (auto& [k, v] : vars) flat.push_back(k + "=" + v);
  return flat;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              bool preload) {
  std::vector<std::string> flat = child_env(env, preload);
  std::vector<char*> envp = pointers(flat);
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> args = pointers(argv_copy);

  int out_pipe[2], err_pipe[2];
  RunResult r;
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    r.err = std::string("spawn failed: ") + strerror(rc);
    return r;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = exit_code_of(status);
  return r;
}

RunResult run_known_sites(const std::string& out_dir) {
  const char* seed = getenv("D9_TEST_SEED");
  return run({program("known_sites"), "sites"},
             {"D9_OUTPUT=" + out_dir, std::string("D9_SEED=") + (seed ? seed : "12345"),
              "D9_RING_SLOTS=65536"});
}

Shell shell(const std::string& cmd) {
  Shell r;
  std::string errfile = make_temp_dir("sh") + "/stderr";
  FILE* p = popen((cmd + " 2>" + errfile).c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r.err = read_file(errfile);
  fs::remove_all(fs::path(errfile).parent_path());
  return r;
}

Spawned::Spawned(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 bool preload, const std::string& log_path) {
  std::vector<std::string> flat = child_env(env, preload);
  std::vector<char*> envp = pointers(flat);
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> args = pointers(argv_copy);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&fa);
}

Spawned::~Spawned() {
  if (running()) stop(SIGKILL, 10000);
}

bool Spawned::running() {
  return pid_ > 0 && !reaped_ && wait(0) < 0;
}

int Spawned::wait(int timeout_ms) {
  if (pid_ <= 0) return -1;
  if (reaped_) return status_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      reaped_ = true;  // on an error, it is not our child to wait for (or kill) any more
      status_ = r == pid_ ? exit_code_of(status) : -1;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int Spawned::stop(int sig, int timeout_ms) {
  if (!running()) return reaped_ ? status_ : -1;
  kill(pid_, sig);
  int code = wait(timeout_ms);
  if (!reaped_) {
    kill(pid_, SIGKILL);
    code = wait(60000);
  }
  return code;
}

int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool wait_for_port(int port, int timeout_ms, Spawned* server) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (fd >= 0) close(fd);
    if (ok) return true;
    if (server && !server->running()) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so parse after the last ')'.
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TraceWithLiveset load_with_liveset(const std::string& path) {
  TraceWithLiveset d;
  d.trace = decode::LoadTrace(path);
  EXPECT_TRUE(d.trace.ok()) << path << ": " << d.trace.error;
  decode::RawTrace raw = decode::ReadTraceFile(path);
  decode::ForEachEvent(raw.bytes, [&](const decode::Event& e) {
    if (e.name() != "Libd9LiveAllocation") return;
    LiveAllocation l;
    l.tid = static_cast<uint32_t>(e.Find("tid")->u64());
    l.size = e.Find("size")->u64();
    l.addr = e.Find("addr")->u64();
    l.alloc_ts = e.Find("alloc_timestamp_ns")->u64();
    for (uint64_t pc : e.Find("callchain")->stack()) l.stack.push_back(pc);
    d.live.push_back(std::move(l));
  });
  return d;
}

void expect_exact_pairing(const TraceWithLiveset& d) {
  const decode::Trace& t = d.trace;
  std::map<std::pair<uint64_t, uint64_t>, const decode::AllocEvent*> allocs;
  for (const auto& a : t.allocs) allocs[{a.addr, a.ts}] = &a;
  std::set<std::pair<uint64_t, uint64_t>> freed;
  for (const auto& f : t.frees) {
    auto it = allocs.find({f.addr, f.alloc_ts});
    ASSERT_NE(it, allocs.end()) << "free of 0x" << std::hex << f.addr << " has no alloc";
    EXPECT_EQ(f.size, it->second->size);
    EXPECT_GT(f.ts, f.alloc_ts);
    EXPECT_TRUE(freed.insert({f.addr, f.alloc_ts}).second) << "freed twice";
  }
  for (const LiveAllocation& l : d.live) {
    auto it = allocs.find({l.addr, l.alloc_ts});
    ASSERT_NE(it, allocs.end()) << "live allocation without an AllocEvent";
    EXPECT_EQ(freed.count({l.addr, l.alloc_ts}), 0u) << "live and freed";
    EXPECT_EQ(l.size, it->second->size);
  }
  EXPECT_EQ(t.allocs.size(), t.frees.size() + d.live.size());
}

std::vector<Site> parse_sites(const std::string& out) {
  std::vector<Site> sites;
  std::istringstream in(out);
  std::string word;
  while (in >> word) {
    if (word != "site") continue;
    Site s;
    in >> s.name >> s.start >> s.end >> s.bytes >> s.count;
    sites.push_back(s);
  }
  return sites;
}

const Site* site_of(const std::vector<Site>& sites, uint64_t pc) {
  for (const Site& s : sites) {
    if (pc > s.start && pc <= s.end) return &s;
  }
  return nullptr;
}

std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = std::string(D9_BUILD_DIR) + "/test-tmp";
  fs::create_directories(tmpl);
  tmpl += "/" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  if (!mkdtemp(buf.data())) return "";
  return buf.data();
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

void TempDirTest::SetUp() {
  dir_ = make_temp_dir(tag_);
  ASSERT_FALSE(dir_.empty());
}

void TempDirTest::TearDown() {
  if (!HasFailure()) remove_tree(dir_);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::string basename_of(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string capture(const std::function<void(FILE*)>& fn) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  fn(f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

double json_number(const std::string& text, const std::string& key, size_t from) {
  size_t at = text.find("\"" + key + "\":", from);
  if (at == std::string::npos) return NAN;
  return strtod(text.c_str() + at + key.size() + 3, nullptr);
}

SegmentFile load_segment(const std::string& path) {
  SegmentFile s;
  s.path = path;
  s.trace = decode::LoadTrace(path);
  s.raw = decode::ReadTraceFile(path).bytes;
  decode::ForEachEvent(s.raw, [&](const decode::Event& e) {
    for (const decode::Value& v : e.values) {
      for (uint64_t pc : v.stack()) s.callchain_addrs.insert(pc);
    }
    if (e.name() == "SegmentMetadataEvent" &&
        e.Find("entries")->string_map().Find("segment.complete")) {
      s.seal_offset = e.offset;
    }
    if (e.name() != "Libd9Module") return;
    s.modules.push_back({std::string(e.Find("path")->str()), std::string(e.Find("build_id")->str()),
                         e.Find("start")->u64(), e.Find("end")->u64(), e.Find("bias")->u64()});
  });
  for (const decode::SymbolTableEntry& e : s.trace.symbols) s.symbols[e.addr].push_back(e);
  for (auto& [addr, chain] : s.symbols) {
    std::sort(chain.begin(), chain.end(),
              [](const auto& a, const auto& b) { return a.inline_depth < b.inline_depth; });
  }
  return s;
}

const SegmentModule* SegmentFile::module_of(uint64_t addr) const {
  const SegmentModule* found = nullptr;
  for (const SegmentModule& m : modules) {
    if (addr - 1 >= m.start && addr - 1 < m.end) found = &m;  // the newest mapping wins
  }
  return found;
}

std::pair<std::string, uint64_t> SegmentFile::where(uint64_t addr) const {
  const SegmentModule* found = module_of(addr);
  if (found == nullptr) return {"", 0};
  return {fs::weakly_canonical(found->path).string(), addr - found->bias};
}

uint64_t SegmentFile::leaf_of(uint64_t size) const {
  for (const decode::AllocEvent& a : trace.allocs) {
    auto stack = trace.stack(a.stack);
    if (a.size == size && !stack.empty()) return stack[0];
  }
  return 0;
}

std::vector<std::string> find_segments(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file()) continue;
    std::string name = it->path().filename().string();
    auto ends = [&](const char* suffix) {
      size_t n = strlen(suffix);
      return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
    };
    if (ends(".bin") || ends(".bin.gz") || ends(".bin.zst") || ends(".active")) {
      out.push_back(it->path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> list_dirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace d9::test
