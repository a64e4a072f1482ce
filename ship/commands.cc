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
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/input.h"
#include "cli/symbolize.h"
#include "ship/client.h"
#include "writer/container.h"

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
      // A .bin being compressed is shipped as its .bin.zst / .bin.gz once that exists.
      std::string path = it->path().string();
      if (ends_with(name, ".bin") &&
          (fs::exists(path + ".zst.tmp", ec2) || fs::exists(path + ".gz.tmp", ec2))) {
        continue;
      }
      if (sealed_index(name, &index)) found.push_back({parent, index, path});
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
        r = client->put_segment(f.path, false);
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

namespace d9::ship {
namespace {

constexpr int kParallelDownloads = 4;

// Options shared by ls and fetch; returns 0 or an exit status.
struct ReadArgs {
  std::string url, out_dir;
  Selection sel;
  bool json = false, decompress = false;
};

int parse_read_args(const char* cmd, int argc, char** argv, ReadArgs* a) {
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string v;
    auto value = [&] {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    int64_t when;
    if (arg == "--json") {
      a->json = true;
    } else if (arg == "--decompress") {
      a->decompress = true;
    } else if (arg == "--no-progress") {
    } else if (arg == "--service" && value()) {
      a->sel.service = v;
    } else if (arg == "--host" && value()) {
      a->sel.host = v;
    } else if (arg == "--process" && value()) {
      a->sel.processes.push_back(v);
    } else if ((arg == "-o" || arg == "--output") && value()) {
      a->out_dir = v;
    } else if (arg == "--sample" && value()) {
      a->sel.sample = strtoull(v.c_str(), nullptr, 10);
    } else if ((arg == "--from" || arg == "--to") && value()) {
      std::string error;
      Location unused;
      Selection s;
      if (!parse_selection_url("s3://x?" + arg.substr(2) + "=" + v, {}, &unused, &s, &error)) {
        return usage("bad " + arg + " " + v + ": Unix seconds or 2026-11-24T12:00:00Z");
      }
      when = arg == "--from" ? *s.from_secs : *s.to_secs;
      (arg == "--from" ? a->sel.from_secs : a->sel.to_secs) = when;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage("unknown option " + arg + " for '" + cmd + "' (or it needs a value)");
    } else if (a->url.empty()) {
      a->url = arg;
    } else {
      return usage(std::string("'") + cmd + "' takes one s3:// URL");
    }
  }
  if (a->url.empty()) return usage(std::string("'") + cmd + "' needs s3://bucket[/prefix]");
  return 0;
}

std::string utc(uint64_t secs, const char* fmt) {
  time_t t = static_cast<time_t>(secs);
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[64];
  strftime(b, sizeof(b), fmt, &tm);
  return b;
}

std::string human_bytes(uint64_t b) {
  char s[32];
  if (b >= 10ull << 20) {
    snprintf(s, sizeof(s), "%.1f MB", static_cast<double>(b) / 1e6);
  } else if (b >= 10ull << 10) {
    snprintf(s, sizeof(s), "%.1f kB", static_cast<double>(b) / 1e3);
  } else {
    snprintf(s, sizeof(s), "%llu B", static_cast<unsigned long long>(b));
  }
  return s;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      snprintf(b, sizeof(b), "\\u%04x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Lists what `a` selects; prints the error and returns false on failure.
bool select(const ReadArgs& a, Location* where, std::vector<SegmentObject>* objects) {
  Selection sel;
  std::string error;
  if (!parse_selection_url(a.url, a.sel, where, &sel, &error)) {
    fprintf(stderr, "d9: %s\n", error.c_str());
    return false;
  }
  std::unique_ptr<Client> client(create_client(*where, &error));
  if (!client) {
    fprintf(stderr, "d9: %s\n", error.c_str());
    return false;
  }
  Result r = list_segments(*client, *where, sel, objects);
  if (r.status != Status::kOk) {
    fprintf(stderr, "d9: cannot list s3://%s/%s: %s\n", where->bucket.c_str(),
            where->prefix.c_str(), r.message.c_str());
    return false;
  }
  return true;
}

}  // namespace

int cmd_ls(int argc, char** argv) {
  ReadArgs a;
  if (int rc = parse_read_args("ls", argc, argv, &a)) return rc;
  Location where;
  std::vector<SegmentObject> objects;
  if (!select(a, &where, &objects)) return 1;

  struct Process {
    uint64_t segments = 0, bytes = 0, first = UINT64_MAX, last = 0;
  };
  // service -> host -> boot id
  std::map<std::string, std::map<std::string, std::map<std::string, Process>>> tree;
  std::map<std::string, std::pair<uint64_t, uint64_t>> minutes;  // "date HH:MM" -> bytes, n
  std::set<std::string> dates;
  uint64_t bytes = 0, first = UINT64_MAX, last = 0;
  for (const SegmentObject& o : objects) {
    Process& p = tree[o.info.service][o.info.host][o.info.boot_id];
    ++p.segments;
    p.bytes += o.size;
    p.first = std::min(p.first, o.info.start_secs);
    p.last = std::max(p.last, o.info.start_secs);
    auto& m = minutes[utc(o.info.start_secs, "%Y-%m-%d %H:%M")];
    m.first += o.size;
    ++m.second;
    dates.insert(utc(o.info.start_secs, "%Y-%m-%d"));
    bytes += o.size;
    first = std::min(first, o.info.start_secs);
    last = std::max(last, o.info.start_secs);
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> busiest(minutes.begin(),
                                                                             minutes.end());
  std::stable_sort(busiest.begin(), busiest.end(),
                   [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
  if (busiest.size() > 5) busiest.resize(5);
  const std::string url = "s3://" + where.bucket + (where.prefix.empty() ? "" : "/" + where.prefix);

  if (a.json) {
    std::string j = "{\"url\":" + json_string(url) +
                    ",\"segments\":" + std::to_string(objects.size()) +
                    ",\"bytes\":" + std::to_string(bytes);
    if (!objects.empty()) {
      j += ",\"first_start\":" + std::to_string(first) + ",\"last_start\":" + std::to_string(last);
    }
    j += ",\"dates\":[";
    bool comma = false;
    for (const std::string& d : dates) {
      j += (comma ? "," : "") + json_string(d);
      comma = true;
    }
    j += "],\"services\":[";
    bool cs = false;
    for (const auto& [service, hosts] : tree) {
      j += std::string(cs ? "," : "") + "{\"service\":" + json_string(service) + ",\"hosts\":[";
      cs = true;
      bool ch = false;
      for (const auto& [host, procs] : hosts) {
        j += std::string(ch ? "," : "") + "{\"host\":" + json_string(host) + ",\"processes\":[";
        ch = true;
        bool cp = false;
        for (const auto& [boot, p] : procs) {
          j += std::string(cp ? "," : "") + "{\"boot_id\":" + json_string(boot) +
               ",\"segments\":" + std::to_string(p.segments) +
               ",\"bytes\":" + std::to_string(p.bytes) +
               ",\"first_start\":" + std::to_string(p.first) +
               ",\"last_start\":" + std::to_string(p.last) + "}";
          cp = true;
        }
        j += "]}";
      }
      j += "]}";
    }
    j += "],\"busiest_minutes\":[";
    bool cb = false;
    for (const auto& [minute, v] : busiest) {
      j += std::string(cb ? "," : "") + "{\"minute\":" + json_string(minute) +
           ",\"bytes\":" + std::to_string(v.first) + ",\"segments\":" + std::to_string(v.second) +
           "}";
      cb = true;
    }
    j += "]}\n";
    fputs(j.c_str(), stdout);
    return 0;
  }

  if (objects.empty()) {
    printf("%s: no segments%s\n", url.c_str(),
           a.sel.service.empty() && a.sel.host.empty() && !a.sel.from_secs && !a.sel.to_secs
               ? ""
               : " match the selection");
    return 0;
  }
  printf("%s: %zu segments, %s, %s .. %s UTC (%zu dates)\n", url.c_str(), objects.size(),
         human_bytes(bytes).c_str(), utc(first, "%Y-%m-%d %H:%M:%S").c_str(),
         utc(last, "%Y-%m-%d %H:%M:%S").c_str(), dates.size());
  for (const auto& [service, hosts] : tree) {
    size_t nproc = 0, nseg = 0;
    uint64_t sbytes = 0;
    for (const auto& [host, procs] : hosts) {
      nproc += procs.size();
      for (const auto& [boot, p] : procs) {
        nseg += p.segments;
        sbytes += p.bytes;
      }
    }
    printf("\nservice %s: %zu hosts, %zu processes, %zu segments, %s\n", service.c_str(),
           hosts.size(), nproc, nseg, human_bytes(sbytes).c_str());
    for (const auto& [host, procs] : hosts) {
      printf("  host %s\n", host.c_str());
      for (const auto& [boot, p] : procs) {
        printf("    %-16s %5llu segments %10s  %s .. %s\n", boot.c_str(),
               static_cast<unsigned long long>(p.segments), human_bytes(p.bytes).c_str(),
               utc(p.first, "%Y-%m-%d %H:%M:%S").c_str(), utc(p.last, "%H:%M:%S").c_str());
      }
    }
  }
  printf("\nbusiest minutes (UTC, by bytes):\n");
  for (const auto& [minute, v] : busiest) {
    printf("  %s  %10s  %llu segments\n", minute.c_str(), human_bytes(v.first).c_str(),
           static_cast<unsigned long long>(v.second));
  }
  return 0;
}

int cmd_fetch(int argc, char** argv) {
  ReadArgs a;
  if (int rc = parse_read_args("fetch", argc, argv, &a)) return rc;
  if (a.out_dir.empty()) return usage("'fetch' needs -o DIR");
  Location where;
  std::vector<SegmentObject> objects;
  if (!select(a, &where, &objects)) return 1;
  // Through the cache: the same object is downloaded once, then copied or decompressed.
  std::vector<std::string> cached = download(
      where, objects, [&](const SegmentObject& o) { return cache_path(where, o); },
      kParallelDownloads);
  size_t ok = 0;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (cached[i].empty()) continue;
    std::string rel = objects[i].key.substr(where.prefix.empty() ? 0 : where.prefix.size() + 1);
    fs::path out = fs::path(a.out_dir) / rel;
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (a.decompress) {
      out.replace_extension();  // .bin.gz -> .bin
      decode::RawTrace raw = decode::ReadTraceFile(cached[i]);
      FILE* f = raw.ok() ? fopen(out.c_str(), "wb") : nullptr;
      bool written = f && fwrite(raw.bytes.data(), 1, raw.bytes.size(), f) == raw.bytes.size();
      if (f) written &= fclose(f) == 0;
      if (!written) {
        fprintf(stderr, "d9: %s: %s\n", out.c_str(),
                raw.ok() ? strerror(errno) : raw.error.c_str());
        continue;
      }
    } else {
      fs::copy_file(cached[i], out, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        fprintf(stderr, "d9: %s: %s\n", out.c_str(), ec.message().c_str());
        continue;
      }
    }
    ++ok;
    printf("%s\n", out.c_str());
  }
  fprintf(stderr, "d9: fetched %zu of %zu segments into %s\n", ok, objects.size(),
          a.out_dir.c_str());
  return ok == objects.size() ? 0 : 1;
}

void use_for_s3_paths(const Selection& base) {
  cli::set_remote_inputs([base](const std::string& url, std::vector<std::string>* files) {
    ReadArgs a;
    a.url = url;
    a.sel = base;
    Location where;
    std::vector<SegmentObject> objects;
    if (!select(a, &where, &objects)) return false;
    if (objects.empty()) {
      fprintf(stderr, "d9: %s: no segments match the selection\n", url.c_str());
      return false;
    }
    std::vector<std::string> paths = download(
        where, objects, [&](const SegmentObject& o) { return cache_path(where, o); },
        kParallelDownloads);
    for (const std::string& p : paths) {
      if (!p.empty()) files->push_back(p);
    }
    return !files->empty();
  });
}

}  // namespace d9::ship
