#include "cli/dump.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "cli/input.h"
#include "writer/dump_request.h"

namespace d9::cli {
namespace {

bool is_dir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A boot id as libd9 makes them: four lowercase letters, '-', the pid. Returns the pid.
long boot_id_pid(const std::string& name) {
  if (name.size() < 6 || name[4] != '-') return -1;
  for (int i = 0; i < 4; ++i) {
    if (name[i] < 'a' || name[i] > 'z') return -1;
  }
  std::string pid = name.substr(5);
  return all_digits(pid) ? atol(pid.c_str()) : -1;
}

bool process_alive(long pid) {
  return pid > 0 && access(("/proc/" + std::to_string(pid)).c_str(), F_OK) == 0;
}

// The directory of the segment file the process has open (trace.N.bin.active while it
// records), from /proc/PID/fd: exact, whatever D9_OUTPUT and working directory it had.
std::string dir_from_open_files(long pid) {
  std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(fd_dir.c_str());
  if (!d) return "";
  std::string found;
  while (dirent* e = readdir(d)) {
    char target[4096];
    ssize_t n = readlink((fd_dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    std::string path = target;
    std::string name = base_name(path);
    if (name.compare(0, 6, "trace.") == 0 && name.find(".bin") != std::string::npos &&
        boot_id_pid(base_name(dir_name(path))) == pid) {
      found = dir_name(path);
      break;
    }
  }
  closedir(d);
  return found;
}

// The process's D9_OUTPUT (default ./d9-traces), from its environment and working
// directory. libd9 resolves a relative one against the working directory at start-up,
// which is most often still the current one.
std::string output_of(long pid) {
  std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream env(proc + "/environ", std::ios::binary);
  std::string var, output = "./d9-traces";
  while (std::getline(env, var, '\0')) {
    if (var.compare(0, 10, "D9_OUTPUT=") == 0 && var.size() > 10) output = var.substr(10);
  }
  if (output[0] == '/') return output;
  char cwd[4096];
  ssize_t n = readlink((proc + "/cwd").c_str(), cwd, sizeof(cwd) - 1);
  if (n <= 0) return "";
  cwd[n] = '\0';
  return std::string(cwd) + "/" + output;
}

// The newest sub-directory of `dir` that is a process directory of `pid`.
std::string find_pid_dir(const std::string& dir, long pid) {
  DIR* d = opendir(dir.c_str());
  if (!d) return "";
  std::string best;
  time_t best_time = 0;
  while (dirent* e = readdir(d)) {
    if (boot_id_pid(e->d_name) != pid) continue;
    std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (best.empty() || st.st_mtime > best_time) {
      best = path;
      best_time = st.st_mtime;
    }
  }
  closedir(d);
  return best;
}

std::vector<std::string> search_dirs(const std::string& search_dir) {
  std::vector<std::string> dirs;
  if (!search_dir.empty()) dirs.push_back(search_dir);
  if (const char* env = getenv("D9_OUTPUT"); env && *env) dirs.push_back(env);
  dirs.push_back("d9-traces");
  return dirs;
}

// The newest sealed segment in a process directory ("" if none).
std::string newest_sealed(const std::string& dir) {
  std::vector<std::string> files = collect_inputs({dir});
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (!it->ends_with(".active")) return *it;
  }
  return "";
}

}  // namespace

std::string dump_target_dir(const std::string& target, const std::string& search_dir,
                            std::string* why) {
  if (is_dir(target)) {
    if (boot_id_pid(base_name(target)) > 0) return target;
    *why = target + " is not a process's trace directory (D9_OUTPUT/{boot_id}); use --all " +
           target + " for every live process under it";
    return "";
  }
  long pid = all_digits(target) ? atol(target.c_str()) : boot_id_pid(target);
  if (pid <= 0) {
    *why = "'" + target + "' is neither a pid, a boot id nor a directory";
    return "";
  }
  if (!all_digits(target)) {  // a boot id: look for its directory
    for (const std::string& dir : search_dirs(search_dir)) {
      if (is_dir(dir + "/" + target)) return dir + "/" + target;
    }
    if (process_alive(pid)) {
      std::string out = output_of(pid);
      if (!out.empty() && is_dir(out + "/" + target)) return out + "/" + target;
    }
    *why = "no directory " + target + " under " + search_dirs(search_dir).front() +
           " (name the trace directory with --dir)";
    return "";
  }
  if (!process_alive(pid)) {
    *why = "no process " + target;
    return "";
  }
  std::string dir = dir_from_open_files(pid);
  if (dir.empty()) {
    std::vector<std::string> dirs = search_dirs(search_dir);
    std::string out = output_of(pid);
    if (!out.empty()) dirs.insert(dirs.begin(), out);
    for (const std::string& d : dirs) {
      dir = find_pid_dir(d, pid);
      if (!dir.empty()) break;
    }
  }
  if (dir.empty()) {
    *why = "process " + target +
           " has no trace directory: it is not profiled, or has recorded nothing yet";
  }
  return dir;
}

std::vector<std::string> live_process_dirs(const std::string& dir) {
  std::vector<std::string> dirs;
  long own = boot_id_pid(base_name(dir));
  if (own > 0) {
    if (process_alive(own)) dirs.push_back(dir);
    return dirs;
  }
  // One directory per live pid: an exec'd program keeps its pid under a new boot id, and
  // only the newest image is still running (the open segment file says which, else the
  // directory written last).
  std::vector<long> pids;
  DIR* d = opendir(dir.c_str());
  if (!d) return dirs;
  while (dirent* e = readdir(d)) {
    long pid = boot_id_pid(e->d_name);
    if (pid > 0 && process_alive(pid) && is_dir(dir + "/" + e->d_name)) pids.push_back(pid);
  }
  closedir(d);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  for (long pid : pids) {
    std::string open_dir = dir_from_open_files(pid);
    dirs.push_back(!open_dir.empty() && dir_name(open_dir) == dir ? open_dir
                                                                  : find_pid_dir(dir, pid));
  }
  return dirs;
}

int dump_processes(const DumpOptions& options, FILE* out) {
  std::vector<std::string> dirs;
  int failed = 0;
  for (const std::string& target : options.targets) {
    std::string why;
    std::string dir = dump_target_dir(target, options.search_dir, &why);
    if (dir.empty()) {
      fprintf(stderr, "d9: %s\n", why.c_str());
      ++failed;
    } else {
      dirs.push_back(dir);
    }
  }
  if (!options.all_dir.empty()) {
    std::vector<std::string> live = live_process_dirs(options.all_dir);
    if (live.empty()) fprintf(stderr, "d9: no live process under %s\n", options.all_dir.c_str());
    dirs.insert(dirs.end(), live.begin(), live.end());
  }
  if (dirs.empty()) return failed ? 1 : 2;
  for (const dump::Result& r : dump::request(dirs, options.timeout_ms)) {
    if (!r.answered) {
      fprintf(stderr, "d9: %s: %s\n", r.dir.c_str(), r.error.c_str());
      ++failed;
    } else if (!r.sealed_path.empty()) {
      fprintf(out, "%s\n", r.sealed_path.c_str());
    } else {
      // Nothing recorded since the last seal: that segment is the process as it is now.
      std::string last = newest_sealed(r.dir);
      if (last.empty()) {
        fprintf(stderr, "d9: %s: nothing recorded yet\n", r.dir.c_str());
        ++failed;
      } else {
        fprintf(out, "%s\n", last.c_str());
        fprintf(stderr, "d9: %s: nothing recorded since its last segment was sealed\n",
                r.dir.c_str());
      }
    }
  }
  fflush(out);
  return failed ? 1 : 0;
}

}  // namespace d9::cli
