#include "tests/e2e_util.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

extern char** environ;

namespace d9::test {
namespace fs = std::filesystem;

std::string libd9_path() {
  return std::string(D9_BUILD_DIR) + "/libd9.so";
}
std::string program(const std::string& name) {
  return std::string(D9_BUILD_DIR) + "/tests/programs/" + name;
}

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              bool preload) {
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
  std::vector<char*> envp, args;
  for (auto& s : flat) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

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
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
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
