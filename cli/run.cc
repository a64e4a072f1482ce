#include "cli/run.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "cli/input.h"
#include "cli/profile.h"
#include "cli/report.h"

namespace d9::cli {

namespace fs = std::filesystem;

namespace {

std::set<std::string> subdirs(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2)) out.insert(it->path().filename().string());
  }
  return out;
}

}  // namespace

std::string find_libd9(std::vector<std::string>* tried) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path dir = self.parent_path();
  const fs::path candidates[] = {
      dir / "libd9.so",
      dir / ".." / "lib" / "libd9.so",
      dir / ".." / "lib" / "d9" / "libd9.so",
      dir / ".." / "lib" / "x86_64-linux-gnu" / "libd9.so",
      dir / ".." / "lib64" / "libd9.so",
  };
  for (const fs::path& c : candidates) {
    if (tried) tried->push_back(c.lexically_normal().string());
    if (fs::is_regular_file(c, ec)) return fs::absolute(c, ec).lexically_normal().string();
  }
  return {};
}

int run_profiled(const RunOptions& o) {
  std::string lib = o.library;
  if (lib.empty()) {
    std::vector<std::string> tried;
    lib = find_libd9(&tried);
    if (lib.empty()) {
      fprintf(stderr, "d9: cannot find libd9.so; looked in:\n");
      for (const std::string& t : tried) fprintf(stderr, "  %s\n", t.c_str());
      fprintf(stderr, "d9: give its path with --lib\n");
      return 127;
    }
  } else if (access(lib.c_str(), R_OK) != 0) {
    fprintf(stderr, "d9: %s: %s\n", lib.c_str(), strerror(errno));
    return 127;
  }
  std::error_code ec;
  lib = fs::absolute(lib, ec).string();

  std::string out = o.output;
  if (out.empty()) {
    const char* env = getenv("D9_OUTPUT");
    out = env && *env ? env : "d9-traces";
  }
  out = fs::absolute(out, ec).lexically_normal().string();
  std::set<std::string> before = subdirs(out);

  std::string preload = lib;
  if (const char* old = getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;

  // Like a shell, let ^C and ^\ reach the child only; d9 still prints the summary after.
  struct sigaction ignore = {}, old_int = {}, old_quit = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "d9: fork: %s\n", strerror(errno));
    return 127;
  }
  if (pid == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("D9_OUTPUT", out.c_str(), 1);
    if (!o.rate.empty()) setenv("D9_SAMPLE_RATE", o.rate.c_str(), 1);
    if (o.no_liveset) setenv("D9_LIVESET", "0", 1);
    if (!o.cpu_hz.empty()) setenv("D9_CPU_HZ", o.cpu_hz.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    fprintf(stderr, "d9: cannot run %s: %s\n", argv[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  int code =
      WIFEXITED(status) ? WEXITSTATUS(status) : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);

  std::vector<std::string> dirs;
  for (const std::string& d : subdirs(out)) {
    if (!before.count(d)) dirs.push_back((fs::path(out) / d).string());
  }
  fflush(stdout);
  if (dirs.empty()) {
    fprintf(stderr, "d9: %s exited with status %d and wrote no trace under %s\n",
            o.command[0].c_str(), code, out.c_str());
    return code;
  }
  std::vector<std::string> files = collect_inputs(dirs);
  fprintf(stderr, "\nd9: %s exited with status %d; trace written to:\n", o.command[0].c_str(),
          code);
  for (const std::string& d : dirs) fprintf(stderr, "  %s\n", d.c_str());
  if (!o.quiet && !files.empty()) {
    fprintf(stderr, "\n");
    LoadOptions lo;
    lo.progress = true;
    Profile p(lo);
    if (p.load(files)) {
      ReportOptions ro;
      ro.top = 5;
      ro.frames = 4;
      print_summary(stderr, p, ro);
    }
    fprintf(stderr, "\nmore: d9 alloc|leaks|cpu|flame|export %s\n",
            dirs.size() == 1 ? dirs[0].c_str() : out.c_str());
  }
  return code;
}

}  // namespace d9::cli
