#include "ship/worker.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "preload/log.h"
#include "ship/client.h"

namespace d9::ship {
namespace {

constexpr uint64_t kSecond = 1000000000ULL;
constexpr uint64_t kFirstBackoffNs = kSecond / 2;
constexpr uint64_t kMaxBackoffSecs = 180;

// Never destroyed: exit runs static destructors before libd9.so's own (which calls
// finish()), and the worker thread runs on through them.
struct Strings {
  WorkerConfig config;
  std::string dir;        // the process's segment directory
  std::string in_flight;  // path being uploaded: retention leaves it alone
  std::vector<std::pair<std::string, std::string>> env;  // capture_environment()
};
Strings& strings() {
  static Strings* s = new Strings;
  return *s;
}
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv;     // wakes the worker
pthread_cond_t g_idle;   // the worker found nothing left to ship (finish() waits on it)
bool g_started = false;  // thread started (in this process)
uint64_t g_wakeups = 0;  // segment_sealed() calls: the worker rescans when it changes
bool g_idle_now = false;
bool g_refused = false;  // the server refused the last upload: exit does not wait for it
bool g_gone = false;     // the worker could not load the client and ended: nothing to wait for
Client* g_client = nullptr;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kSecond + static_cast<uint64_t>(ts.tv_nsec);
}

timespec at_ns(uint64_t ns) {
  return {static_cast<time_t>(ns / kSecond), static_cast<long>(ns % kSecond)};
}

void init_sync() {
  pthread_mutex_init(&g_mu, nullptr);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cv, &attr);
  pthread_cond_init(&g_idle, &attr);
  pthread_condattr_destroy(&attr);
}

// libd9_ship.so, from the directory libd9.so was loaded from.
Client* load_client(std::string* error) {
  Dl_info self;
  if (!dladdr(reinterpret_cast<void*>(&load_client), &self) || !self.dli_fname) {
    *error = "cannot find libd9.so's own path";
    return nullptr;
  }
  std::string path = self.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + kShipLibrary;
  strings().config.hooks.lock_loader();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  strings().config.hooks.unlock_loader();
  if (!lib) {
    const char* why = dlerror();
    *error = why ? why : "cannot load " + path;
    return nullptr;
  }
  auto create = reinterpret_cast<CreateClientFn>(dlsym(lib, kShipEntry));
  if (!create) {
    *error = path + " has no " + kShipEntry;
    return nullptr;
  }
  Getenv lookup = [](const char* name) {
    for (const auto& [k, v] : strings().env) {
      if (k == name) return v;
    }
    return std::string();
  };
  return create(Location{strings().config.bucket, strings().config.prefix}, lookup, error);
}

struct Sealed {
  uint64_t index;
  std::string path;
};

// Sealed segments of `dir`, oldest first (.active files are still being written, and a
// .bin being compressed is shipped as its .bin.zst / .bin.gz once that is complete).
std::vector<Sealed> sealed_in(const std::string& dir) {
  std::vector<Sealed> out;
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) names.push_back(e->d_name);
  closedir(d);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  for (const std::string& name : names) {
    unsigned long long index;
    int end = 0;
    if (sscanf(name.c_str(), "trace.%llu.bin%n", &index, &end) != 1 || end == 0) continue;
    std::string rest = name.substr(static_cast<size_t>(end));
    if (!rest.empty() && rest != ".zst" && rest != ".gz") continue;
    if (rest.empty() && (has(name + ".zst.tmp") || has(name + ".gz.tmp"))) continue;
    out.push_back({index, dir + "/" + name});
  }
  std::sort(out.begin(), out.end(),
            [](const Sealed& a, const Sealed& b) { return a.index < b.index; });
  return out;
}

uint64_t jittered(uint64_t backoff_ns) {
  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) r = static_cast<uint32_t>(now_ns());
  // Between half and all of the back-off: a fleet that lost its endpoint together does not
  // come back together.
  return backoff_ns / 2 + (backoff_ns / 2) * (r % 1024) / 1024;
}

void* worker_main(void*) {
  strings().config.hooks.on_thread_start();
  std::string error;
  Client* client = load_client(&error);
  pthread_mutex_lock(&g_mu);
  g_client = client;
  pthread_mutex_unlock(&g_mu);
  if (!client) {
    log::line("cannot ship segments to S3 bucket ", strings().config.bucket.c_str(), ": ",
              error.c_str(), "; they stay on disk");
    pthread_mutex_lock(&g_mu);
    g_gone = true;
    pthread_cond_broadcast(&g_idle);
    pthread_mutex_unlock(&g_mu);
    return nullptr;
  }
  uint64_t backoff = kFirstBackoffNs, retry_at = 0;
  bool rejected_said = false;
  std::vector<std::string> bad;  // files that are not segments: said once, kept
  uint64_t seen_wakeups = 0;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    // Sleeps until a new seal (or finish()), and through a back-off whatever comes; scans
    // at least every 10 s.
    for (;;) {
      uint64_t now = now_ns();
      if (retry_at > now) {
        timespec ts = at_ns(retry_at);
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        continue;
      }
      if (retry_at || g_wakeups != seen_wakeups) break;
      timespec ts = at_ns(now + 10 * kSecond);
      if (pthread_cond_timedwait(&g_cv, &g_mu, &ts) == ETIMEDOUT) break;
    }
    retry_at = 0;
    seen_wakeups = g_wakeups;
    std::string dir = strings().dir;
    pthread_mutex_unlock(&g_mu);

    bool left = false, refused = false;
    for (const Sealed& s : sealed_in(dir)) {
      if (std::find(bad.begin(), bad.end(), s.path) != bad.end()) continue;
      pthread_mutex_lock(&g_mu);
      strings().in_flight = s.path;
      bool exists = access(s.path.c_str(), F_OK) == 0;
      pthread_mutex_unlock(&g_mu);
      Result r;
      if (exists) r = client->put_segment(s.path, true);  // sealed by this process
      pthread_mutex_lock(&g_mu);
      if (exists && r.status == Status::kOk) unlink(s.path.c_str());
      if (exists) g_refused = r.status == Status::kRejected;
      strings().in_flight.clear();
      pthread_mutex_unlock(&g_mu);
      if (!exists || r.status == Status::kOk) {
        backoff = kFirstBackoffNs;
        continue;
      }
      if (r.status == Status::kBadFile) {
        log::line("not shipped to S3: ", r.message.c_str());
        bad.push_back(s.path);
        continue;
      }
      if (r.status == Status::kRejected && !rejected_said) {
        log::line("S3 bucket ", client->bucket().c_str(), " refused a segment (", r.message.c_str(),
                  "); segments stay in ", dir.c_str(), " for `d9 ship`");
        rejected_said = true;
      }
      // Tried again later: transient errors soon, refusals at the longest interval.
      if (r.status == Status::kRejected) {
        backoff = kMaxBackoffSecs * kSecond;
        refused = true;
      }
      retry_at = now_ns() + jittered(backoff);
      backoff = std::min(backoff * 2, kMaxBackoffSecs * kSecond);
      left = true;
      break;
    }
    pthread_mutex_lock(&g_mu);
    // Refused segments wait for `d9 ship`: exit need not wait for them.
    if ((!left || refused) && g_wakeups == seen_wakeups) {
      g_idle_now = true;
      pthread_cond_broadcast(&g_idle);
    }
    pthread_mutex_unlock(&g_mu);
  }
  return nullptr;
}

}  // namespace

void capture_environment(char* const* envp) {
  for (char* const* e = envp; e && *e; ++e) {
    const char* eq = strchr(*e, '=');
    if (!eq) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    for (const char* wanted : kEnvironment) {
      if (name == wanted) strings().env.emplace_back(name, eq + 1);
    }
  }
}

void configure(const WorkerConfig& config) {
  strings().config = config;
  init_sync();
}

void segment_sealed(const std::string& dir) {
  pthread_mutex_lock(&g_mu);
  strings().dir = dir;
  ++g_wakeups;
  g_idle_now = false;
  bool start = !g_started;
  g_started = true;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  if (start && !strings().config.hooks.start_thread(worker_main, nullptr)) {
    log::line("cannot start the S3 upload thread; segments stay on disk");
    pthread_mutex_lock(&g_mu);
    g_gone = true;  // nothing for finish() to wait for
    pthread_mutex_unlock(&g_mu);
  }
}

bool drop(const std::string& path) {
  pthread_mutex_lock(&g_mu);
  bool dropped = path != strings().in_flight && unlink(path.c_str()) == 0;
  pthread_mutex_unlock(&g_mu);
  return dropped;
}

void finish(uint64_t timeout_secs) {
  pthread_mutex_lock(&g_mu);
  if (!g_started) {
    pthread_mutex_unlock(&g_mu);
    return;
  }
  g_idle_now = false;
  ++g_wakeups;  // one more scan, for the segment sealed last
  pthread_cond_signal(&g_cv);
  timespec until = at_ns(now_ns() + timeout_secs * kSecond);
  while (!g_idle_now && !g_refused && !g_gone) {
    if (pthread_cond_timedwait(&g_idle, &g_mu, &until) == ETIMEDOUT) break;
  }
  // Whatever is still uploading ends now: the process is about to go.
  if (g_client) g_client->abort();
  pthread_mutex_unlock(&g_mu);
}

void after_fork_child() {
  init_sync();
  g_started = false;
  strings().dir.clear();
  g_wakeups = 0;
  g_idle_now = false;
  g_refused = false;
  g_gone = false;
  strings().in_flight.clear();
  g_client = nullptr;  // the parent's: its connection is the parent's too
}

}  // namespace d9::ship
