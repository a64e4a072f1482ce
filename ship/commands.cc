#include "ship/commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/symbolize.h"
#include "ship/client.h"

namespace d9::ship {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};

int usage(const std::string& msg) {
  fprintf(stderr, "d9: %s\nusage: d9 ship DIR... s3://bucket[/prefix] [--watch]\n", msg.c_str());
  return 2;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The pid in a boot id ("abcd-1234"), or 0.
pid_t pid_of_boot_id(const std::string& boot_id) {
  size_t dash = boot_id.rfind('-');
  if (dash == std::string::npos || dash + 1 >= boot_id.size()) return 0;
  pid_t pid = 0;
  for (size_t i = dash + 1; i < boot_id.size(); ++i) {
    if (boot_id[i] < '0' || boot_id[i] > '9' || pid > 100000000) return 0;
    pid = pid * 10 + (boot_id[i] - '0');
  }
  return pid;
}

bool process_alive(pid_t pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

struct Found {
  std::string dir;
  uint64_t index;
  std::string path;
};

// N in "trace.N.bin", "trace.N.bin.gz", "trace.N.bin.zst"; false for anything else.
bool sealed_index(const std::string& name, uint64_t* index) {
  unsigned long long n;
  int end = 0;
  if (sscanf(name.c_str(), "%*[^.].%llu.bin%n", &n, &end) != 1 || end == 0) return false;
  std::string rest = name.substr(static_cast<size_t>(end));
  if (!rest.empty() && rest != ".gz" && rest != ".zst") return false;
  *index = n;
  return true;
}

// Seals the `.active` files of processes that are gone, then lists the sealed segments,
// each process's oldest first.
std::vector<Found> scan(const std::vector<std::string>& dirs) {
  std::vector<std::string> orphans;
  std::vector<Found> found;
  for (const std::string& d : dirs) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(d, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      std::error_code ec2;
      if (!it->is_regular_file(ec2)) continue;
      std::string name = it->path().filename().string();
      std::string parent = it->path().parent_path().string();
      if (ends_with(name, ".active")) {
        if (!process_alive(pid_of_boot_id(it->path().parent_path().filename().string()))) {
          orphans.push_back(it->path().string());
        }
        continue;
      }
      uint64_t index;
      if (sealed_index(name, &index)) found.push_back({parent, index, it->path().string()});
    }
    if (ec) fprintf(stderr, "d9: %s: %s\n", d.c_str(), ec.message().c_str());
  }
  if (!orphans.empty()) {
    cli::SymbolizeOptions o;
    o.in_place = true;
    o.quiet = true;
    std::vector<cli::SymbolizeFileResult> results;
    cli::symbolize_files(orphans, o, stdout, &results);
    for (const cli::SymbolizeFileResult& r : results) {
      uint64_t index;
      std::string name = fs::path(r.output).filename().string();
      if (r.ok && !r.output.empty() && sealed_index(name, &index)) {
        found.push_back({fs::path(r.output).parent_path().string(), index, r.output});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.dir != b.dir ? a.dir < b.dir : a.index < b.index;
  });
  found.erase(std::unique(found.begin(), found.end(),
                          [](const Found& a, const Found& b) { return a.path == b.path; }),
              found.end());
  return found;
}

void sleep_interruptible(double secs) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  while (!g_interrupted.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int cmd_ship(int argc, char** argv) {
  std::vector<std::string> args;
  bool watch = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--watch") {
      watch = true;
    } else if (a == "-h" || a == "--help") {
      printf("usage: d9 ship DIR... s3://bucket[/prefix] [--watch]\n");
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option " + a + " for 'ship'");
    } else {
      args.push_back(a);
    }
  }
  Location where;
  if (args.size() < 2 || !parse_s3_url(args.back(), &where)) {
    return usage("'ship' needs DIR... and then s3://bucket[/prefix]");
  }
  args.pop_back();
  std::string error;
  std::unique_ptr<Client> client(create_client(where, &error));
  if (!client) {
    fprintf(stderr, "d9: %s\n", error.c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_interrupted.store(true); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const std::string base = "s3://" + where.bucket + "/";
  uint64_t shipped = 0, kept = 0;
  std::vector<std::string> bad;
  do {
    kept = 0;
    for (const Found& f : scan(args)) {
      if (g_interrupted.load()) break;
      if (std::find(bad.begin(), bad.end(), f.path) != bad.end()) continue;
      // Transient failures: a few tries with back-off, then the file stays for next time.
      Result r;
      double backoff = 0.5;
      for (int attempt = 0; attempt < 5 && !g_interrupted.load(); ++attempt) {
        r = client->put_segment(f.path);
        if (r.status != Status::kRetry) break;
        sleep_interruptible(backoff);
        backoff *= 2;
      }
      if (r.status == Status::kOk) {
        unlink(f.path.c_str());  // only now: the server has it, MD5 checked
        printf("%s -> %s%s (%llu bytes)\n", f.path.c_str(), base.c_str(), r.key.c_str(),
               static_cast<unsigned long long>(r.bytes));
        fflush(stdout);
        ++shipped;
        continue;
      }
      ++kept;
      if (r.status == Status::kBadFile) {
        fprintf(stderr, "d9: not shipped: %s\n", r.message.c_str());
        bad.push_back(f.path);
        continue;
      }
      fprintf(stderr, "d9: S3 bucket %s: %s; %s stays on disk\n", where.bucket.c_str(),
              r.message.c_str(), f.path.c_str());
      if (r.status == Status::kRejected) return 1;  // the next file would fare no better
    }
    if (watch) sleep_interruptible(2);
  } while (watch && !g_interrupted.load());
  fprintf(stderr, "d9: shipped %llu segments to %s%s%s\n", static_cast<unsigned long long>(shipped),
          base.c_str(), where.prefix.c_str(),
          kept ? (", " + std::to_string(kept) + " left on disk").c_str() : "");
  return kept ? 1 : 0;
}

}  // namespace d9::ship
